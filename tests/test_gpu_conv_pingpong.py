"""Two forms of the Hopper conv2d (kernels/conv_sm90.cu) beside the cooperative one:

- ping-pong (PP): the two consumer warpgroups take alternate tiles of their block whole instead
  of sharing each one. MAX_CONV_SM90_PINGPONG=1 forces it (tile widths 64 and 128), =0 forbids
  it; unset, the launcher takes it when every block of the persistent grid has at least four
  work units (`_conv_sm90_pingpong_launches()` counts it);
- tiles of 256 rows (WIDE): each consumer warpgroup computes 128 rows as two m64 halves.
  MAX_CONV_SM90_BM=256 forces it (tile widths 64 and 128, unsplit), =128 forbids it; unset,
  launch::conv_sm90::wide_tiles decides (`_conv_sm90_wide_launches()` counts it).

Each is checked bit for bit against float64 for exact inputs, and within rounding for random
ones, with small persistent grids (1, 2, 3 and 5 blocks: even and odd unit counts per block,
the ring wrapping across units), split-K, both tile widths, bf16 and f16; for the same bits as
the cooperative 128-row form with fused epilogues (bias, activations, clamp, scaled residual)
and each store path; and for the default's choice on ResNet-50 shapes at batch 32.

Skips without an sm_90a GPU."""

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


class Count:
    """How many times `counter()` advanced within the block (`.n`)."""

    def __init__(self, counter):
        self.counter = counter

    def __enter__(self):
        self.before = self.counter()
        return self

    def __exit__(self, *exc):
        self.n = self.counter() - self.before


def PingPongs():  # noqa: N802
    return Count(core._conv_sm90_pingpong_launches)


def Wides():  # noqa: N802
    return Count(core._conv_sm90_wide_launches)


def Trios():  # noqa: N802
    """Launches with tiles of 192 rows (tests/test_gpu_conv_trio.py)."""
    return Count(core._conv_sm90_trio_launches)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("bn, grid, split", [("64", "1", "1"), ("64", "3", "1"), ("128", "2", "1"),
                                             ("128", "5", "1"), ("64", "2", "3"), ("128", "1", "2")])
@pytest.mark.parametrize("cv", SHAPES, ids=repr)
def test_forced(sm90, rng, monkeypatch, cv, bn, grid, split, dtype):
    monkeypatch.setenv("MAX_CONV_SM90_PINGPONG", "1")
    monkeypatch.setenv("MAX_CONV_SM90_BM", "128")
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
            env = dict(store, MAX_CONV_SM90_SPLITK="1", MAX_CONV_SM90_BN=bn, MAX_CONV_SM90_GRID=grid,
                       MAX_CONV_SM90_BM="128")
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
    monkeypatch.setenv("MAX_CONV_SM90_BM", "128")
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


@pytest.mark.parametrize("name, want", [
    ("s2_1x1_64_64", (0, 1, 0)), ("s2_3x3_64", (0, 1, 0)), ("s3_3x3_128", (0, 0, 1)), ("s2_1x1_256_64", (0, 1, 0)),
    ("s3_1x1_256_128", (0, 0, 1)), ("s3_1x1_512_128", (0, 0, 1)), ("s4_3x3_256", (0, 0, 0)),
    ("s5_1x1_1024_512", (0, 0, 1)), ("s4_1x1_1024_256", (0, 0, 0)), ("s3_ds_256_512_s2", (0, 0, 0)),
    ("s5_3x3_512", (1, 0, 0))])
def test_default_choice(sm90, rng, name, want):
    """Unset, (ping-pong, 256-row, 192-row) launches: tiles of 192 rows over three consumer
    warpgroups where they fill the last wave and the reduction is long enough (trio_tiles:
    28x28 3x3 128 -> 128, 512 -> 128, 14x14 1024 -> 512, 56x56 256 -> 128 in 4 waves instead of
    6), else tiles of 256 rows where they measured faster (wide_tiles: 64-wide tiles, or 128-wide
    with long reductions, when the waves of bigger tiles cost less), else ping-pong where every
    block of the grid (one per SM) has four tiles or more, or one 64-wide tile of 64 k-steps or
    more (7x7 3x3 512 -> 512); none of them for half a wave of 192-row tiles (14x14 3x3 256 ->
    256, 1024 -> 256) or 4 k-steps in more waves (56x56 256 -> 512 s2). Exact either way."""
    (cv,) = [c for c in base.resnet_shapes(32) if c.name == f"{name}_b32"]
    with PingPongs() as pp, Wides() as wide, Trios() as trio:
        base.run_case(sm90, rng, cv, DType.bfloat16, exact=True, with_cpu=False)
    assert (pp.n, wide.n, trio.n) == want, f"{cv}: {pp.n} ping-pong, {wide.n} wide, {trio.n} 192-row launches"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_default_choice_with_a_residual(sm90, rng, dtype):
    """The 28x28 3x3 block relu(conv + b) + r at batch 32 takes 192 x 128 tiles (one per block), as
    the conv alone does; 14x14 256 -> 1024 (4 k-steps) keeps 128 x 128 tiles with a residual."""
    for name, want in (("s3_3x3_128", (0, 0, 1)), ("s4_1x1_256_1024", (0, 0, 0))):
        (cv,) = [c for c in base.resnet_shapes(32) if c.name == f"{name}_b32"]
        with PingPongs() as pp, Wides() as wide, Trios() as trio:
            base.run_epilogue(sm90, rng, cv, dtype, "relu", conv_bias=False, beta=1, exact=True)
        assert (pp.n, wide.n, trio.n) == want, f"{cv}: {pp.n} ping-pong, {wide.n} wide, {trio.n} 192-row"


# -- tiles of 256 rows (MAX_CONV_SM90_BM=256): each consumer warpgroup two m64 halves of its 128


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("bn, grid, split", [("64", "1", "1"), ("64", "3", "1"), ("128", None, "1"),
                                             ("128", "2", "2"), ("64", "2", "3")])
@pytest.mark.parametrize("cv", SHAPES, ids=repr)
def test_wide_tiles(sm90, rng, monkeypatch, cv, bn, grid, split, dtype):
    """Forced; split launches keep 128 rows."""
    monkeypatch.setenv("MAX_CONV_SM90_BM", "256")
    monkeypatch.setenv("MAX_CONV_SM90_BN", bn)
    monkeypatch.setenv("MAX_CONV_SM90_SPLITK", split)
    if grid is not None:
        monkeypatch.setenv("MAX_CONV_SM90_GRID", grid)
    with PingPongs() as pp, Wides() as wide:
        base.run_case(sm90, rng, cv, dtype, exact=True, with_cpu=False)
        base.run_case(sm90, rng, cv, dtype, exact=False, with_cpu=False)
    if split == "1":  # (split launches may take ping-pong instead)
        assert (pp.n, wide.n) == (0, 2), f"{cv}: {pp.n} ping-pong, {wide.n} 256-row launches of 2"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("store", [{}, {"MAX_CONV_SM90_VEC": "0"}, {"MAX_CONV_SM90_STAGED": "1"}],
                         ids=["vec_res", "frag", "staged"])
@pytest.mark.parametrize("act", ["none", "relu", "gelu", "clamp"])
def test_wide_same_bits_as_128(sm90, rng, monkeypatch, act, store, dtype):
    assert_rows_same_bits(sm90, rng, monkeypatch, act, store, dtype, "256", (("64", "2"), ("128", None)), Wides)


def assert_rows_same_bits(sm90, rng, monkeypatch, act, store, dtype, rows, widths_grids, counter):
    """The fused block on tiles of `rows` rows (one launch, as `counter` counts) gives the bits of
    128-row tiles, for each (tile width, grid) of `widths_grids` (grid None: one block per SM)."""
    for cv in PREFETCH[:4]:
        for bn, grid in widths_grids:
            env = dict(store, MAX_CONV_SM90_SPLITK="1", MAX_CONV_SM90_BN=bn, MAX_CONV_SM90_PINGPONG="0")
            if grid is not None:
                env["MAX_CONV_SM90_GRID"] = grid
            seed = int(rng.integers(1 << 31))
            with counter() as launches:
                got = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", act, MAX_CONV_SM90_BM=rows, **env)
            assert launches.n == 1, f"{cv} bn={bn}: {launches.n} launches of {rows} rows"
            narrow = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", act, MAX_CONV_SM90_BM="128", **env)
            assert_same_but_contraction(got, narrow, dtype, f"{cv} bn={bn} {act} {store} {rows} rows")


@pytest.mark.parametrize("name", ["s2_1x1_64_64", "s4_1x1_256_1024"])
def test_wide_resnet50_batch32(sm90, rng, monkeypatch, name):
    monkeypatch.setenv("MAX_CONV_SM90_BM", "256")
    (cv,) = [c for c in base.resnet_shapes(32) if c.name == f"{name}_b32"]
    with Wides() as wide:
        base.run_case(sm90, rng, cv, DType.bfloat16, exact=True, with_cpu=False)
    assert wide.n == 1
