"""The Hopper conv2d (kernels/conv_sm90.cu) with its fused residual loaded by TMA into the ring
after each tile's k-steps and read from there by the epilogue (the default where the tile form
allows it; MAX_CONV_SM90_RES_RING=0 reads the residual from global memory instead;
`_conv_sm90_res_ring_launches()` counts it).

Checked for the bits of the global reads on every tile form that takes it (cooperative 64, 128
and 256 wide, ping-pong 64 wide, 256 rows 64 wide, 192 rows), with persistent grids of one
block (the ring wrapping across tiles) and one per SM, M and K off the tile sizes (boxes partly
and wholly past K); exact against float64; and that the forms holding 128 accumulators in two
halves never take it, nor split launches; and that the ResNet-50 3x3 block at batch 32 takes it
by default.

Skips without an sm_90a GPU."""

import pytest

import test_gpu_conv_sm90 as base
from max._core import driver as core
from max.dtype import DType
from test_gpu_conv_pingpong import Count
from test_gpu_conv_sm90_more import PREFETCH, assert_same_but_contraction, fused_bits, sm90  # noqa: F401

pytestmark = pytest.mark.gpu
DTYPES = base.DTYPES
# PREFETCH, then K = 40 (one box, partly past K) and K = 328 (256-wide tiles: boxes past K).
SHAPES = PREFETCH + [base.ODD[3], base.ODD[6]]
FORMS = {
    "coop64": {"MAX_CONV_SM90_BN": "64", "MAX_CONV_SM90_BM": "128", "MAX_CONV_SM90_PINGPONG": "0"},
    "coop128": {"MAX_CONV_SM90_BN": "128", "MAX_CONV_SM90_BM": "128", "MAX_CONV_SM90_PINGPONG": "0"},
    "coop256": {"MAX_CONV_SM90_BN": "256", "MAX_CONV_SM90_BM": "128"},
    "pp64": {"MAX_CONV_SM90_BN": "64", "MAX_CONV_SM90_BM": "128", "MAX_CONV_SM90_PINGPONG": "1"},
    "wide64": {"MAX_CONV_SM90_BN": "64", "MAX_CONV_SM90_BM": "256"},
    "trio": {"MAX_CONV_SM90_BM": "192"},
}
TWO_HALVES_128 = {
    "pp128": {"MAX_CONV_SM90_BN": "128", "MAX_CONV_SM90_BM": "128", "MAX_CONV_SM90_PINGPONG": "1"},
    "wide128": {"MAX_CONV_SM90_BN": "128", "MAX_CONV_SM90_BM": "256"},
}


def Rings():  # noqa: N802
    return Count(core._conv_sm90_res_ring_launches)


def ring_and_global(gpu, rng, monkeypatch, cv, dtype, act, env):
    """The fused block's bits with the residual in the ring and read from global memory (same
    inputs), and how many launches took the ring in the first."""
    seed = int(rng.integers(1 << 31))
    env = dict(env, MAX_CONV_SM90_SPLITK="1")
    with Rings() as rings:
        ring = fused_bits(gpu, seed, monkeypatch, cv, dtype, "1", act, MAX_CONV_SM90_RES_RING="1", **env)
    glob = fused_bits(gpu, seed, monkeypatch, cv, dtype, "1", act, MAX_CONV_SM90_RES_RING="0", **env)
    return ring, glob, rings.n


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("grid", [None, "1"])
@pytest.mark.parametrize("form", list(FORMS))
def test_same_bits_as_global_reads(sm90, rng, monkeypatch, form, grid, dtype):
    env = dict(FORMS[form])
    if grid is not None:
        env["MAX_CONV_SM90_GRID"] = grid
    for cv in SHAPES:
        ring, glob, n = ring_and_global(sm90, rng, monkeypatch, cv, dtype, "relu", env)
        assert n == 1, f"{cv} {form}: {n} launches with the residual in the ring, of 1"
        assert_same_but_contraction(ring, glob, dtype, f"{cv} {form} grid={grid} ring")


@pytest.mark.parametrize("act", ["none", "gelu", "clamp"])
@pytest.mark.parametrize("grid", ["3", None])
def test_trio_activations(sm90, rng, monkeypatch, act, grid):
    env = dict(FORMS["trio"])
    if grid is not None:
        env["MAX_CONV_SM90_GRID"] = grid
    for cv in SHAPES[:5]:
        ring, glob, n = ring_and_global(sm90, rng, monkeypatch, cv, DType.bfloat16, act, env)
        assert n == 1
        assert_same_but_contraction(ring, glob, DType.bfloat16, f"{cv} trio {act} ring")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("form", ["coop128", "pp64", "trio", "coop256"])
def test_exact(sm90, rng, monkeypatch, form, dtype):
    for k, v in dict(FORMS[form], MAX_CONV_SM90_RES_RING="1", MAX_CONV_SM90_SPLITK="1").items():
        monkeypatch.setenv(k, v)
    with Rings() as rings:
        for cv in SHAPES:
            base.run_epilogue(sm90, rng, cv, dtype, "relu", conv_bias=True, beta=0.5, exact=True)
    assert rings.n == len(SHAPES)


@pytest.mark.parametrize("form", list(TWO_HALVES_128))
def test_two_halves_of_128_read_global(sm90, rng, monkeypatch, form):
    for k, v in dict(TWO_HALVES_128[form], MAX_CONV_SM90_RES_RING="1", MAX_CONV_SM90_SPLITK="1").items():
        monkeypatch.setenv(k, v)
    with Rings() as rings:
        base.run_epilogue(sm90, rng, SHAPES[0], DType.bfloat16, "relu", conv_bias=True, beta=0.5, exact=True)
    assert rings.n == 0


def test_split_reads_global(sm90, rng, monkeypatch):
    monkeypatch.setenv("MAX_CONV_SM90_RES_RING", "1")
    monkeypatch.setenv("MAX_CONV_SM90_SPLITK", "3")
    with Rings() as rings:
        base.run_epilogue(sm90, rng, SHAPES[0], DType.float16, "relu", conv_bias=True, beta=0.5, exact=True)
    assert rings.n == 0


def test_default_on_the_resnet50_3x3_block(sm90, rng):
    with Rings() as rings:
        base.run_resnet50_3x3_block(sm90, rng)
    assert rings.n == 1
