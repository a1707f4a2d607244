"""The Hopper conv2d's further paths (crates/kernels-cuda/src/launch/conv_sm90.rs and its pad /
split modules), against the float64 reference and the CPU backend like tests/test_gpu_conv_sm90.py
(whose helpers this reuses):

- channel padding for C % 8 != 0 (the ResNet stem's C = 3, C = 5, 12, 13, ...): the input and the
  filter are copied with zero channels added, plain (C rounded up to 8) or folded (the filter
  columns, and for height strides above 1 that many input rows, moved into the channels;
  MAX_CONV_SM90_FOLD=0 keeps the plain form, =1 folds the columns only); every level is run on
  each shape, and `_conv_sm90_path_counts()` says that the padded path ran;
- split-K (MAX_CONV_SM90_SPLITK=n forces n splits of the reduction; f32 partials and a reduce
  kernel that applies the whole epilogue): every split count on late-layer shapes (few output
  tiles, long reductions), with each tile width, with fused bias + activation + residual
  epilogues and beta != 1;
- the residual prefetch (MAX_CONV_SM90_PREFETCH=0/1) and the staged epilogue
  (MAX_CONV_SM90_STAGED=0/1): the same bits either way, and right against float64 and the CPU;
- the tiled A map of 1x1 stride-1 unpadded convs (MAX_CONV_SM90_TILED_A=1).

Skips without an sm_90a GPU."""

import numpy as np
import pytest

import test_gpu_conv_sm90 as base
from max._core import driver as core
from max.dtype import DType

pytestmark = pytest.mark.gpu
Conv = base.Conv
DTYPES = base.DTYPES
KNOBS = ("MAX_CONV_SM90_BN", "MAX_CONV_SM90_GRID", "MAX_CONV_SM90_SPLITK", "MAX_CONV_SM90_PREFETCH",
         "MAX_CONV_SM90_FOLD", "MAX_CONV_SM90_STAGED", "MAX_CONV_SM90_TILED_A", "MAX_CONV_SM90_GEMM",
         "MAX_CONV_SM90_VEC", "MAX_CONV_SM90_RESVEC", "MAX_CONV_SM90_LINE_PREFETCH", "MAX_CONV_SM90_PDL",
         "MAX_CONV_SM90_PINGPONG", "MAX_CONV_SM90_BM", "MAX_CONV_SM90_RES_RING", "MAX_CONV_SM90_LEAN",
         "MAX_CONV_SM90_CLUSTER", "MAX_CONV_SM90_TMA_OUT", "MAX_CONV_SM90_EARLY_BIAS", "MAX_CONV_SM90_TM",
         "MAX_CONV_SM90_RES_BUF")


@pytest.fixture
def sm90(gpu, monkeypatch):
    """The GPU with MAX_CONV_SM90=1, CUDA graphs off and every tuning knob unset; skips unless
    it is sm_90a."""
    if gpu.architecture_name != "sm_90a":
        pytest.skip(f"the Hopper conv2d needs sm_90a, this GPU is {gpu.architecture_name}")
    monkeypatch.setenv("MAX_CONV_SM90", "1")
    monkeypatch.setenv("MAX_CUDA_GRAPHS", "0")
    for var in KNOBS:
        monkeypatch.delenv(var, raising=False)
    return gpu


class Counted:
    """Counts the Hopper conv launches, and of them the padded and the split ones, in a block."""

    def __enter__(self):
        self.before = (core._conv_sm90_launches(), *core._conv_sm90_path_counts())
        return self

    def __exit__(self, *exc):
        after = (core._conv_sm90_launches(), *core._conv_sm90_path_counts())
        self.launches, self.padded, self.split = (a - b for a, b in zip(after, self.before))


# -- channel padding (C % 8 != 0)

STEM = Conv("stem_224_c3", 2, 224, 224, 3, 64, 7, 7, 2, 3)
PADDED = [
    Conv("stem_small_c3", 2, 31, 29, 3, 64, 7, 7, 2, 3),
    Conv("c5_k40_3x3", 2, 11, 13, 5, 40, 3, 3, 1, 1),
    Conv("c12_k40_3x3_s2", 2, 17, 16, 12, 40, 3, 3, 2, 1),
    Conv("c1_k8_5x5", 3, 12, 10, 1, 8, 5, 5, 1, 2),
    Conv("c13_k24_1x1", 2, 9, 7, 13, 24, 1, 1, 1, 0),
    Conv("c45_k64_3x3_plain_only", 2, 10, 9, 45, 64, 3, 3, 1, 1),
    Conv("c3_dilation2_asym_pad", 2, 19, 23, 3, 16, 3, 3, 2, (1, 2, 0, 3), 2),
    Conv("c7_rect_5x2_stride_1x3", 2, 14, 15, 7, 32, 5, 2, (1, 3), (2, 2, 0, 1)),
    Conv("c3_k328_many_columns", 1, 13, 12, 3, 328, 3, 3, 1, 1),
    Conv("c6_m_not_128_multiple", 3, 7, 11, 6, 128, 3, 3, 1, 1),
    # rows folded: 3 rows of a stride-3 5-row filter (the last group past the filter), an odd
    # stem-like input with asymmetric height padding, a 2x2 filter in one folded row, and rows
    # wider than one unit of the copy kernel (segments)
    Conv("c5_5x3_stride_3x2_rows", 2, 16, 13, 5, 24, 5, 3, (3, 2), (2, 1, 1, 0)),
    Conv("c3_7x7_s2_odd_pad_asym", 3, 27, 25, 3, 16, 7, 7, 2, (2, 4, 3, 3)),
    Conv("c2_2x2_s2_one_row", 2, 10, 11, 2, 8, 2, 2, 2, 0),
    Conv("c7_wide_row_segments", 1, 6, 2500, 7, 16, 3, 3, 2, 1),
    # more 8-channel groups per pixel (257) than the copy kernel has threads
    Conv("c2051_1x1_many_groups", 1, 3, 5, 2051, 16, 1, 1, 1, 0),
    # more units (rows of x') than the copy kernel's grid, so blocks take several; rows of an
    # odd number of words (2-byte loads) in segments
    Conv("c3_3x3_s2_many_units", 128, 140, 6, 3, 8, 3, 3, 2, 1),
    Conv("c7_odd_row_segments", 1, 5, 2501, 7, 16, 3, 3, 2, 1),
]
# MAX_CONV_SM90_FOLD levels: rows and columns (the default), columns only, none.
FOLDS = ["2", "1", "0"]
FOLD_IDS = ["rows", "columns", "plain"]
# C = 24 needs no padding: the kernel takes it as it is (and must still be right next to C = 5).
C24 = Conv("c24_k40_unpadded", 2, 11, 13, 24, 40, 3, 3, 1, 1)


def run_padded(gpu, rng, monkeypatch, cv, dtype, fold, **kw):
    monkeypatch.setenv("MAX_CONV_SM90_FOLD", fold)
    with Counted() as n:
        base.run_case(gpu, rng, cv, dtype, **kw)
    assert n.launches > 0 and n.padded == n.launches, f"{cv}: {n.padded} of {n.launches} launches padded"


@pytest.mark.parametrize("fold", FOLDS, ids=FOLD_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_resnet_stem_batch_1_and_2(sm90, rng, monkeypatch, dtype, fold):
    run_padded(sm90, rng, monkeypatch, STEM, dtype, fold, exact=True, batches=(2, 1))
    run_padded(sm90, rng, monkeypatch, STEM, dtype, fold, exact=False, batches=(1, 2))


@pytest.mark.parametrize("fold", FOLDS, ids=FOLD_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("cv", PADDED, ids=repr)
def test_padded_channels(sm90, rng, monkeypatch, cv, dtype, fold):
    run_padded(sm90, rng, monkeypatch, cv, dtype, fold, exact=True, batches=(cv.n, 1))
    run_padded(sm90, rng, monkeypatch, cv, dtype, fold, exact=False)


@pytest.mark.parametrize("cv", [PADDED[0], PADDED[1], PADDED[6]], ids=repr)
def test_padded_without_bias_and_with_a_constant_filter(sm90, rng, monkeypatch, cv):
    run_padded(sm90, rng, monkeypatch, cv, DType.bfloat16, "2", exact=True, bias=False)
    run_padded(sm90, rng, monkeypatch, cv, DType.float16, "1", exact=True, const_filter=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_c24_is_not_padded(sm90, rng, dtype):
    with Counted() as n:
        base.run_case(sm90, rng, C24, dtype, exact=True)
        base.run_case(sm90, rng, C24, dtype, exact=False)
    assert n.launches == 2 and n.padded == 0


@pytest.mark.parametrize("bn", ["64", "128", "256"])
def test_padded_stem_each_tile_width_and_a_small_grid(sm90, rng, monkeypatch, bn):
    monkeypatch.setenv("MAX_CONV_SM90_BN", bn)
    monkeypatch.setenv("MAX_CONV_SM90_GRID", "3")
    run_padded(sm90, rng, monkeypatch, PADDED[0], DType.bfloat16, "2", exact=True, with_cpu=False)
    run_padded(sm90, rng, monkeypatch, PADDED[11], DType.bfloat16, "2", exact=True, with_cpu=False)


@pytest.mark.parametrize("fold", FOLDS, ids=FOLD_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("act", ["relu", "silu"])
def test_padded_fused_epilogue(sm90, rng, monkeypatch, dtype, act, fold):
    monkeypatch.setenv("MAX_CONV_SM90_FOLD", fold)
    with Counted() as n:
        for i, cv in enumerate(PADDED[:4]):
            base.run_epilogue(sm90, rng, cv, dtype, act, conv_bias=i % 2 == 0, beta=(1, 0.5)[i % 2], exact=False)
        base.run_epilogue(sm90, rng, PADDED[0], dtype, "relu", conv_bias=True, beta=0.5, exact=True)
        base.run_epilogue(sm90, rng, PADDED[11], dtype, act, conv_bias=False, beta=1, exact=True)
    assert n.launches == 6 and n.padded == 6


# -- split-K

# Late ResNet-50 layers (7x7 and 14x14 outputs: few row tiles, long reductions) at small
# batches, and two odd ones (partial channel slices and column tiles; a padded stem).
LATE = [
    Conv("s5_3x3_512_b2", 2, 7, 7, 512, 512, 3, 3, 1, 1),
    Conv("s5_3x3_512_b4", 4, 7, 7, 512, 512, 3, 3, 1, 1),  # M = 196: a partial row tile
    Conv("s5_1x1_2048_512_b2", 2, 7, 7, 2048, 512, 1, 1, 1, 0),
    Conv("s5_1x1_512_2048_b1", 1, 7, 7, 512, 2048, 1, 1, 1, 0),
    Conv("s4_3x3_256_b2", 2, 14, 14, 256, 256, 3, 3, 1, 1),
    Conv("s5_3x3_512_s2_b2", 2, 14, 14, 512, 512, 3, 3, 2, 1),
    Conv("c72_k200_partial_slices_and_columns", 2, 9, 11, 72, 200, 3, 3, 1, 1),
    Conv("stem_small_c3_padded", 2, 31, 29, 3, 64, 7, 7, 2, 3),
]
SPLITS = ["1", "2", "3", "4", "5", "7", "8", "16", "72", "1000"]


def k_steps(cv):
    c = cv.c if cv.c % 8 == 0 else 24  # the padded stem folds to 24 channels, one k-step per row
    taps = cv.r * cv.s if cv.c % 8 == 0 else cv.r
    return taps * -(-c // 64)


def run_split(gpu, rng, monkeypatch, cv, split, fn, *args, **kw):
    monkeypatch.setenv("MAX_CONV_SM90_SPLITK", split)
    with Counted() as n:
        fn(gpu, rng, cv, *args, **kw)
    # At most one split per k-step; a split count of 1 (or a clamp to 1) runs unsplit.
    splits = min(int(split), k_steps(cv))
    want = n.launches if splits > 1 else 0
    assert n.launches > 0 and n.split == want, f"{cv} split {split}: {n.split} of {n.launches} launches split"


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("cv", LATE, ids=repr)
def test_split_k_every_count(sm90, rng, monkeypatch, cv, split):
    run_split(sm90, rng, monkeypatch, cv, split, base.run_case, DType.bfloat16, exact=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("split", ["2", "3", "8"])
@pytest.mark.parametrize("cv", [LATE[0], LATE[2], LATE[6], LATE[7]], ids=repr)
def test_split_k_random(sm90, rng, monkeypatch, cv, split, dtype):
    run_split(sm90, rng, monkeypatch, cv, split, base.run_case, dtype, exact=False)


@pytest.mark.parametrize("bn", ["64", "128", "256"])
@pytest.mark.parametrize("split", ["2", "5"])
@pytest.mark.parametrize("grid", [None, "1", "7"])
@pytest.mark.parametrize("cv", [LATE[1], LATE[3], LATE[6]], ids=repr)
def test_split_k_tile_widths_and_grids(sm90, rng, monkeypatch, cv, split, bn, grid):
    """Each tile width with splits, and persistent grids smaller than the split units."""
    monkeypatch.setenv("MAX_CONV_SM90_BN", bn)
    if grid is not None:
        monkeypatch.setenv("MAX_CONV_SM90_GRID", grid)
    run_split(sm90, rng, monkeypatch, cv, split, base.run_case, DType.bfloat16, exact=True, with_cpu=False)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("act", list(base.EPI_ACTS))
@pytest.mark.parametrize("split", ["2", "3"])
def test_split_k_fused_epilogue(sm90, rng, monkeypatch, dtype, act, split):
    """bias + activation (+ clamp) + beta * residual applied by the reduce kernel."""
    for i, cv in enumerate([LATE[0], LATE[4], LATE[6], LATE[7]]):
        run_split(sm90, rng, monkeypatch, cv, split, base.run_epilogue, dtype, act, i % 2 == 0, (1, 0.5, 2, -1)[i],
                  exact=False)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("act", ["none", "relu", "clamp", "relu6"])
@pytest.mark.parametrize("split", ["2", "4", "9"])
@pytest.mark.parametrize("cv", [LATE[1], LATE[6]], ids=repr)
def test_split_k_fused_epilogue_exact(sm90, rng, monkeypatch, cv, dtype, act, split):
    run_split(sm90, rng, monkeypatch, cv, split, base.run_epilogue, dtype, act, True, 0.5, exact=True)


def test_split_k_default_heuristic_is_right(sm90, rng):
    """Without the knob the launcher picks the split itself: the late layers at batch 32 (which
    it leaves unsplit) and at batch 1 (one row tile: split)."""
    for cv in (Conv("s5_3x3_512_b32", 32, 7, 7, 512, 512, 3, 3, 1, 1),
               Conv("s5_1x1_2048_512_b32", 32, 7, 7, 2048, 512, 1, 1, 1, 0),
               Conv("s5_3x3_512_b1", 1, 7, 7, 512, 512, 3, 3, 1, 1)):
        base.run_case(sm90, rng, cv, DType.bfloat16, exact=True, with_cpu=False)


# -- residual prefetch

PREFETCH = [LATE[4], base.ODD[5], base.RESNET_B2[3], base.RESNET_B2[6], Conv("m_partial", 3, 7, 11, 64, 128, 3, 3, 1, 1)]


def fused_bits(gpu, rng_seed, monkeypatch, cv, dtype, prefetch, act="relu", **env):
    """The fused block's output on the GPU with the prefetch on or off (same inputs per seed).
    The lean epilogue's packed arithmetic (which rounds relu's output before the residual is
    added) stays off unless MAX_CONV_SM90_PACKED is given, so that every path compared here
    does the same arithmetic."""
    return fused_run(gpu, rng_seed, monkeypatch, cv, dtype, prefetch, act, **env)[0]


def fused_run(gpu, rng_seed, monkeypatch, cv, dtype, prefetch, act="relu", **env):
    """fused_bits, and the block's inputs (x, w, b, r, the conv's bias)."""
    monkeypatch.setenv("MAX_CONV_SM90_PREFETCH", prefetch)
    monkeypatch.setenv("MAX_CONV_SM90_PACKED", env.pop("MAX_CONV_SM90_PACKED", "0"))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    out = {}
    orig = base.run_gpu

    def grab(model, inputs, g, c):
        out["g"], out["inputs"] = orig(model, inputs, g, c), inputs
        return out["g"]

    monkeypatch.setattr(base, "run_gpu", grab)
    try:
        base.run_epilogue(gpu, np.random.default_rng(rng_seed), cv, dtype, act, True, 0.5, exact=False)
    finally:
        monkeypatch.setattr(base, "run_gpu", orig)
    return base.bits(out["g"]), out["inputs"]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("grid", [None, "1"])
@pytest.mark.parametrize("bn", [None, "64", "256"])
@pytest.mark.parametrize("cv", PREFETCH, ids=repr)
def test_prefetch_on_and_off_agree(sm90, rng, monkeypatch, cv, bn, grid, dtype):
    env = {"MAX_CONV_SM90_SPLITK": "1", "MAX_CONV_SM90_RES_RING": "0"}  # the residual read from global memory
    if bn is not None:
        env["MAX_CONV_SM90_BN"] = bn
    if grid is not None:
        env["MAX_CONV_SM90_GRID"] = grid
    seed = int(rng.integers(1 << 31))
    on = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", **env)
    off = fused_bits(sm90, seed, monkeypatch, cv, dtype, "0", **env)
    assert (on == off).all(), f"{cv}: {(on != off).sum()} elements differ with the prefetch on"


@pytest.mark.parametrize("prefetch", ["0", "1"])
@pytest.mark.parametrize("act", ["none", "relu", "clamp"])
@pytest.mark.parametrize("cv", PREFETCH, ids=repr)
def test_prefetch_exact(sm90, rng, monkeypatch, cv, act, prefetch):
    monkeypatch.setenv("MAX_CONV_SM90_PREFETCH", prefetch)
    monkeypatch.setenv("MAX_CONV_SM90_RES_RING", "0")
    monkeypatch.setenv("MAX_CONV_SM90_SPLITK", "1")
    base.run_epilogue(sm90, rng, cv, DType.bfloat16, act, conv_bias=True, beta=0.5, exact=True)
    base.run_epilogue(sm90, rng, cv, DType.float16, act, conv_bias=False, beta=1, exact=True)


# -- the staged epilogue

def assert_same_but_contraction(got, want, dtype, what):
    """The same bits, but for a multiply-add the compiler might contract in one path only (one
    rounding of the last step): one unit in the last place at most."""
    vt = base.VALUE_TYPES[dtype]
    a, b = got.view(vt).astype(np.float64), want.view(vt).astype(np.float64)
    bad = ~(np.abs(a - b) <= base.EPS[dtype] * np.abs(b))
    assert not bad.any(), f"{what}: {bad.sum()} elements differ, e.g. {a[bad][:4]} vs {b[bad][:4]}"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("act", ["none", "relu", "gelu", "silu", "clamp"])
@pytest.mark.parametrize("bn", [None, "256"])
def test_staged_epilogue_same_bits(sm90, rng, monkeypatch, bn, act, dtype):
    """The staged epilogue does the register epilogue's arithmetic in the same order: the same
    results, to the last bit but for a possibly contracted multiply-add."""
    env = {"MAX_CONV_SM90_SPLITK": "1"}
    if bn is not None:
        env["MAX_CONV_SM90_BN"] = bn
    for cv in PREFETCH[:3] + [PADDED[0]]:
        seed = int(rng.integers(1 << 31))
        staged = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", act, MAX_CONV_SM90_STAGED="1", **env)
        plain = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", act, MAX_CONV_SM90_STAGED="0", **env)
        assert_same_but_contraction(staged, plain, dtype, f"{cv} {act} staged")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("act", ["none", "relu", "gelu", "clamp"])
@pytest.mark.parametrize("bn", [None, "64", "256"])
def test_residual_vectors_same_bits(sm90, rng, monkeypatch, bn, act, dtype):
    """The residual read as 16-byte vectors on the way out (the default) gives the bits of the
    residual added in the fragments, but for a multiply-add contracted in one path only."""
    env = {"MAX_CONV_SM90_SPLITK": "1"}
    if bn is not None:
        env["MAX_CONV_SM90_BN"] = bn
    for cv in PREFETCH + [PADDED[0]]:
        seed = int(rng.integers(1 << 31))
        vec = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", act, MAX_CONV_SM90_RESVEC="1", **env)
        frag = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", act, MAX_CONV_SM90_RESVEC="0", **env)
        assert_same_but_contraction(vec, frag, dtype, f"{cv} {act} residual vectors")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("cv", base.RESNET_B2 + base.ODD[:8], ids=repr)
def test_staged_epilogue_plain_conv(sm90, rng, monkeypatch, cv, dtype):
    monkeypatch.setenv("MAX_CONV_SM90_STAGED", "1")
    base.run_case(sm90, rng, cv, dtype, exact=True)
    base.run_case(sm90, rng, cv, dtype, exact=False, bias=False)


# -- the tiled A map (1x1, stride 1, no padding)

ONE_BY_ONE = [c for c in base.RESNET_B2 if c.r == 1] + [base.ODD[2], base.ODD[6], base.ODD[21],
                                                       Conv("c13_1x1_padded", 2, 9, 7, 13, 24, 1, 1, 1, 0)]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("cv", ONE_BY_ONE, ids=repr)
def test_tiled_a(sm90, rng, monkeypatch, cv, dtype):
    monkeypatch.setenv("MAX_CONV_SM90_TILED_A", "1")
    base.run_case(sm90, rng, cv, dtype, exact=True, batches=(cv.n, 1))
    base.run_case(sm90, rng, cv, dtype, exact=False)


@pytest.mark.parametrize("staged", ["0", "1"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("act", ["relu", "silu", "clamp"])
def test_tiled_a_fused_epilogue(sm90, rng, monkeypatch, act, dtype, staged):
    monkeypatch.setenv("MAX_CONV_SM90_TILED_A", "1")
    monkeypatch.setenv("MAX_CONV_SM90_STAGED", staged)
    for i, cv in enumerate([base.RESNET_B2[3], base.ODD[6], LATE[2]]):
        base.run_epilogue(sm90, rng, cv, dtype, act, conv_bias=i % 2 == 0, beta=(1, 0.5, 2)[i], exact=False)
