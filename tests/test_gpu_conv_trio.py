"""The Hopper conv2d (kernels/conv_sm90.cu) with tiles of 192 rows over three consumer
warpgroups (TRIO, 128 wide, unsplit). MAX_CONV_SM90_BM=192 forces it (and the tile width 128
unless MAX_CONV_SM90_BN says otherwise); `_conv_sm90_trio_launches()` counts it.

Checked bit for bit against float64 for exact inputs and within rounding for random ones, with
small persistent grids (the ring wrapping across tiles), M and K off the tile sizes, bf16 and
f16; for the same bits as the 128-row form with fused epilogues and each store path; and on
ResNet-50 shapes at batch 32. A forced width other than 128, or a split, keeps 128 rows.

Skips without an sm_90a GPU."""

import pytest

import test_gpu_conv_sm90 as base
from max.dtype import DType
from test_gpu_conv_pingpong import SHAPES, Trios, assert_rows_same_bits
from test_gpu_conv_sm90_more import PREFETCH, sm90  # noqa: F401

pytestmark = pytest.mark.gpu
DTYPES = base.DTYPES


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("grid", [None, "1", "2", "5"])
@pytest.mark.parametrize("cv", SHAPES + [base.ODD[6], base.ODD[19]], ids=repr)
def test_forced(sm90, rng, monkeypatch, cv, grid, dtype):
    monkeypatch.setenv("MAX_CONV_SM90_BM", "192")
    monkeypatch.setenv("MAX_CONV_SM90_SPLITK", "1")
    if grid is not None:
        monkeypatch.setenv("MAX_CONV_SM90_GRID", grid)
    with Trios() as trio:
        base.run_case(sm90, rng, cv, dtype, exact=True, with_cpu=False)
        base.run_case(sm90, rng, cv, dtype, exact=False, with_cpu=False)
    assert trio.n == 2, f"{cv}: {trio.n} launches of 192 rows, of 2"


@pytest.mark.parametrize("env", [{"MAX_CONV_SM90_BN": "64"}, {"MAX_CONV_SM90_BN": "256"},
                                 {"MAX_CONV_SM90_SPLITK": "2"}], ids=["bn64", "bn256", "split2"])
def test_other_widths_and_splits_keep_128_rows(sm90, rng, monkeypatch, env):
    monkeypatch.setenv("MAX_CONV_SM90_BM", "192")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with Trios() as trio:
        base.run_case(sm90, rng, base.ODD[5], DType.bfloat16, exact=True, with_cpu=False)
    assert trio.n == 0


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("store", [{}, {"MAX_CONV_SM90_VEC": "0"}, {"MAX_CONV_SM90_STAGED": "1"}],
                         ids=["vec_res", "frag", "staged"])
@pytest.mark.parametrize("act", ["none", "relu", "gelu", "clamp"])
def test_same_bits_as_128_rows(sm90, rng, monkeypatch, act, store, dtype):
    assert_rows_same_bits(sm90, rng, monkeypatch, act, store, dtype, "192", (("128", None), ("128", "3")), Trios)


@pytest.mark.parametrize("act", ["none", "relu", "clamp"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_fused_exact(sm90, rng, monkeypatch, dtype, act):
    monkeypatch.setenv("MAX_CONV_SM90_BM", "192")
    monkeypatch.setenv("MAX_CONV_SM90_SPLITK", "1")
    for cv in PREFETCH:
        base.run_epilogue(sm90, rng, cv, dtype, act, conv_bias=True, beta=0.5, exact=True)


@pytest.mark.parametrize("name", ["s4_1x1_512_256", "s5_1x1_1024_512", "s4_1x1_256_1024", "s4_3x3_256"])
def test_resnet50_batch32(sm90, rng, monkeypatch, name):
    monkeypatch.setenv("MAX_CONV_SM90_BM", "192")
    (cv,) = [c for c in base.resnet_shapes(32) if c.name == f"{name}_b32"]
    with Trios() as trio:
        base.run_case(sm90, rng, cv, DType.bfloat16, exact=True, with_cpu=False)
    assert trio.n == 1
