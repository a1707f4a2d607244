"""The Hopper conv2d (kernels/conv_sm90.cu) loading the lean epilogue's residual into a
shared-memory buffer of its own, one full barrier per 64-row block ("Residual buffer" in the
kernel's header), instead of into ring slots after the tile's k-steps: the launcher's default
where the lean entry stores by TMA and the buffer fits (every lean form but the 256-wide one);
MAX_CONV_SM90_RES_BUF=0 keeps the ring slots; `_conv_sm90_res_buf_launches()` counts it.

Checked: the same results as the ring slots on every lean form that takes it (cooperative 64 and
128 wide, 192 rows, 192 rows in clusters of two) with persistent grids of one block or one
cluster (the buffer reused across tiles: written by the epilogue, stored from by TMA, then
refilled for the next tile) and of one per SM, M and K off the tile sizes (boxes partly or wholly
past M and K, row blocks wholly past M); exact against float64 with beta 0.5 and 1; that the
256-wide form, the staged stores (MAX_CONV_SM90_TMA_OUT=0), launches without a residual and the
full entry never take it; and that the ResNet-50 3x3 block at batch 32 takes it by default.

Skips without an sm_90a GPU."""

import pytest

import test_gpu_conv_sm90 as base
from max._core import driver as core
from max.dtype import DType
from test_gpu_conv_cluster import Clusters
from test_gpu_conv_lean import LEAN_FORMS, bias_act, setenv
from test_gpu_conv_pingpong import Count
from test_gpu_conv_res_ring import SHAPES
from test_gpu_conv_sm90_more import fused_bits, sm90  # noqa: F401
from test_gpu_conv_tma_out import FORMS as TMA_OUT_FORMS
from test_gpu_conv_tma_out import form_env, shapes_of

pytestmark = pytest.mark.gpu
DTYPES = base.DTYPES
# The TMA-store forms whose buffer fits (not 256 wide).
FORMS = {k: v for k, v in TMA_OUT_FORMS.items() if k != "coop256"}


def ResBufs():  # noqa: N802
    return Count(core._conv_sm90_res_buf_launches)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("grid", [None, "small"])
@pytest.mark.parametrize("form", list(FORMS))
def test_same_bits_as_ring_slots(sm90, rng, monkeypatch, form, grid, dtype):
    env = form_env(form, grid)
    for i, cv in enumerate(shapes_of(form)):
        seed = int(rng.integers(1 << 31))
        act = ("relu", "none")[i % 2]
        with ResBufs() as bufs, Clusters() as clusters:
            got = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", act, MAX_CONV_SM90_RES_BUF="1", **env)
        assert bufs.n == 1, f"{cv} {form}: {bufs.n} residual-buffer launches, of 1"
        assert clusters.n == (form == "trio_c2"), f"{cv} {form}: {clusters.n} clustered launches"
        with ResBufs() as bufs:
            want = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", act, MAX_CONV_SM90_RES_BUF="0", **env)
        assert bufs.n == 0
        # The same arithmetic on the same values: only where the residual waits changes.
        assert got.tobytes() == want.tobytes(), f"{cv} {form} {act} grid={grid}: bits differ"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("form", list(FORMS))
def test_exact(sm90, rng, monkeypatch, form, dtype):
    setenv(monkeypatch, dict(FORMS[form], MAX_CONV_SM90_SPLITK="1"))
    runs = 0
    with ResBufs() as bufs, Clusters() as clusters:
        for i, cv in enumerate(shapes_of(form)):
            base.run_epilogue(sm90, rng, cv, dtype, ("relu", "none")[i % 2], conv_bias=i % 2 == 0,
                              beta=(0.5, 1)[i % 2], exact=True)
            runs += 1
    assert bufs.n == runs
    assert clusters.n == (runs if form == "trio_c2" else 0)


@pytest.mark.parametrize("case", ["coop256", "staged_stores", "no_residual", "full_entry"])
def test_not_taken(sm90, rng, monkeypatch, case):
    env = dict(LEAN_FORMS["coop128"], MAX_CONV_SM90_SPLITK="1")
    if case == "coop256":
        env = dict(LEAN_FORMS["coop256"], MAX_CONV_SM90_SPLITK="1")
    elif case == "staged_stores":
        env["MAX_CONV_SM90_TMA_OUT"] = "0"
    elif case == "full_entry":
        env["MAX_CONV_SM90_LEAN"] = "0"
    setenv(monkeypatch, env)
    with ResBufs() as bufs:
        for cv in SHAPES[:3]:
            if case == "no_residual":
                g, want = bias_act(sm90, rng, cv, DType.bfloat16, conv_bias=True, fused_bias=True, relu=True)
                base.check_exact(g, want, f"{cv} bias relu")
            else:
                base.run_epilogue(sm90, rng, cv, DType.float16, "relu", conv_bias=True, beta=0.5, exact=True)
    assert bufs.n == 0


def test_default_on_the_resnet50_3x3_block(sm90, rng):
    with ResBufs() as bufs:
        base.run_resnet50_3x3_block(sm90, rng)
    assert bufs.n == 1
