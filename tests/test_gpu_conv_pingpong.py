"""The Hopper conv2d's ping-pong form (kernels/conv_sm90.cu, PP): the two consumer warpgroups take
alternate tiles of their block whole instead of sharing each one. MAX_CONV_SM90_PINGPONG=1 forces
it (tile widths 64 and 128), =0 forbids it; unset, the launcher takes it when every block of the
persistent grid has at least four work units. `_conv_sm90_pingpong_launches()` says which form ran.

- bit for bit against float64 for exact inputs, and within rounding for random ones, with small
  persistent grids (1, 2, 3 and 5 blocks: even and odd unit counts per block, the ring wrapping
  across the other warpgroup's units), split-K, both tile widths, bf16 and f16;
- the same bits as the cooperative form for fused epilogues (bias, activations, clamp, scaled
  residual) with each store path (fragments, 16-byte vectors, vectors with the residual, the
  staged epilogue);
- the default's choice on ResNet-50 shapes at batch 32.

Skips without an sm_90a GPU."""

import numpy as np
import pytest

import test_gpu_conv_sm90 as base
from max._core import driver as core
from max.dtype import DType
from test_gpu_conv_sm90_more import PREFETCH, assert_same_but_contraction, fused_bits, sm90  # noqa: F401

pytestmark = pytest.mark.gpu
Conv = base.Conv
DTYPES = base.DTYPES

SHAPES = [
    base.ODD[5],  # c72_k200: partial channel slices and column tiles
    base.ODD[7],  # 13x17 output, off the tile sizes
    base.ODD[20],  # M = 231
    base.RESNET_B2[1],  # 56x56 1x1 64 -> 64 (tiled A)
    base.RESNET_B2[6],  # 3x3 stride 2
    Conv("dilated_strided", 2, 17, 19, 16, 64, 3, 3, 2, (2, 1, 0, 2), 2),
]


class PingPongs:
    def __enter__(self):
        self.before = core._conv_sm90_pingpong_launches()
        return self

    def __exit__(self, *exc):
        self.n = core._conv_sm90_pingpong_launches() - self.before


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("bn, grid, split", [("64", "1", "1"), ("64", "3", "1"), ("128", "2", "1"),
                                             ("128", "5", "1"), ("64", "2", "3"), ("128", "1", "2")])
@pytest.mark.parametrize("cv", SHAPES, ids=repr)
def test_forced(sm90, rng, monkeypatch, cv, bn, grid, split, dtype):
    monkeypatch.setenv("MAX_CONV_SM90_PINGPONG", "1")
    monkeypatch.setenv("MAX_CONV_SM90_BN", bn)
    monkeypatch.setenv("MAX_CONV_SM90_GRID", grid)
    monkeypatch.setenv("MAX_CONV_SM90_SPLITK", split)
    with PingPongs() as pp:
        base.run_case(sm90, rng, cv, dtype, exact=True, with_cpu=False)
        base.run_case(sm90, rng, cv, dtype, exact=False, with_cpu=False)
    assert pp.n == 2, f"{cv}: {pp.n} ping-pong launches of 2"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("store", [{}, {"MAX_CONV_SM90_VEC": "0"}, {"MAX_CONV_SM90_RESVEC": "0"},
                                   {"MAX_CONV_SM90_STAGED": "1"}], ids=["vec_res", "frag", "vec", "staged"])
@pytest.mark.parametrize("act", ["none", "relu", "gelu", "silu", "clamp"])
def test_same_bits_as_cooperative(sm90, rng, monkeypatch, act, store, dtype):
    """The same MMAs in the same order and the same epilogue: the cooperative form's bits (but
    for a multiply-add the compiler may contract in one of the two kernels only)."""
    for cv in PREFETCH[:4]:
        for bn, grid in (("64", "2"), ("128", "3")):
            env = dict(store, MAX_CONV_SM90_SPLITK="1", MAX_CONV_SM90_BN=bn, MAX_CONV_SM90_GRID=grid)
            seed = int(rng.integers(1 << 31))
            with PingPongs() as pp:
                on = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", act, MAX_CONV_SM90_PINGPONG="1", **env)
            assert pp.n == 1
            with PingPongs() as pp:
                off = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", act, MAX_CONV_SM90_PINGPONG="0", **env)
            assert pp.n == 0
            assert_same_but_contraction(on, off, dtype, f"{cv} bn={bn} grid={grid} {act} {store}")


@pytest.mark.parametrize("act", ["relu", "clamp"])
def test_fused_exact(sm90, rng, monkeypatch, act):
    monkeypatch.setenv("MAX_CONV_SM90_PINGPONG", "1")
    monkeypatch.setenv("MAX_CONV_SM90_GRID", "3")
    for i, cv in enumerate(PREFETCH):
        monkeypatch.setenv("MAX_CONV_SM90_BN", ("64", "128")[i % 2])
        base.run_epilogue(sm90, rng, cv, DType.bfloat16, act, conv_bias=True, beta=0.5, exact=True)
        base.run_epilogue(sm90, rng, cv, DType.float16, act, conv_bias=False, beta=1, exact=True)


def test_wide_tiles_stay_cooperative(sm90, rng, monkeypatch):
    """Tiles 256 wide have no ping-pong form (2 x 128 accumulators per thread): forcing it
    changes nothing."""
    monkeypatch.setenv("MAX_CONV_SM90_PINGPONG", "1")
    monkeypatch.setenv("MAX_CONV_SM90_BN", "256")
    monkeypatch.setenv("MAX_CONV_SM90_GRID", "2")
    with PingPongs() as pp:
        base.run_case(sm90, rng, base.ODD[5], DType.bfloat16, exact=True, with_cpu=False)
    assert pp.n == 0


@pytest.mark.parametrize("name, want", [("s2_1x1_64_64", 1), ("s2_3x3_64", 1), ("s3_1x1_512_128", 0),
                                        ("s5_1x1_1024_512", 0)])
def test_default_choice(sm90, rng, name, want):
    """Unset, ping-pong runs where every block of the grid (one per SM) has four tiles or more:
    784 tiles of 128 x 64 for the 56x56 layers at batch 32; not the 392 of 28x28 512 -> 128
    (about 3 per block on an H100 or H200), nor tiles 256 wide (14x14 1024 -> 512). Exact
    either way."""
    (cv,) = [c for c in base.resnet_shapes(32) if c.name == f"{name}_b32"]
    with PingPongs() as pp:
        base.run_case(sm90, rng, cv, DType.bfloat16, exact=True, with_cpu=False)
    assert pp.n == want, f"{cv}: {pp.n} ping-pong launches, want {want}"
