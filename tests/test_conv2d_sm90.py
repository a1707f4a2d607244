"""The Hopper implicit-GEMM conv2d (crates/kernels-cuda/kernels/conv_sm90.cu), reached through the
engine's conv2d (on by default on sm_90a; conv.sm90=0 turns it off): bf16 and f16, NHWC input,
RSCF filter (a graph input, or a constant), groups = 1. The tile forms and epilogue paths the
launcher chooses between are tests/test_conv2d_sm90_forms.py.

Every run checks through the launch record that the kernel ran (or, for the shapes it must
refuse, that it did not), then compares the result
- bit for bit, for inputs in {-1, 0, 1} and integer biases, with the float64 reference rounded
  once to the dtype (f32 accumulation of such products is exact, so any wrong tap, channel,
  pixel or output column shows) and with the CPU backend;
- for normal random inputs, with the float64 reference of the same rounded inputs and with the
  CPU backend, within the dtype's rounding: eps * (|ref| + sqrt(R*S*C)).
Shapes: the 23 ResNet-50 convolutions of /work/shared/bench/resnet50_conv_b32.csv at batch 2
(the 7x7 C=3 stem runs on channel-padded copies), two of them at batch 32 (several tiles per
persistent block), and odd shapes (channels and extents off the tile sizes, batch 1, dilation,
asymmetric stride and padding, K below the tile width); each tile width and small persistent
grids forced; fused epilogues; channel padding (C % 8 != 0) plain and folded; split-K with every
split count; the residual prefetch and 16-byte residual reads; the tiled A map of 1x1 convs;
launches under programmatic stream serialization. CUDA graphs are off so that every execution
goes through the launcher. Skips without an sm_90a GPU."""

import numpy as np
import pytest

from conv_sm90_util import (
    DTYPES,
    EPI_ACTS,
    EPI_SHAPES,
    GPU,
    LATE,
    ODD,
    PADDED,
    PREFETCH,
    RESNET_B2,
    STEM,
    VALUE_TYPES,
    Conv,
    assert_same_but_contraction,
    bias_act,
    bits,
    build,
    check_close,
    check_exact,
    conv_ref,
    convs,
    count,
    fused_bits,
    launched,
    resnet_shapes,
    run_case,
    run_epilogue,
    run_gpu,
)
from engine_util import session
from max import driver, tuning
from max.dtype import DType
from max.graph import Graph, TensorType, ops
from max.graph.type import ConvInputLayout, FilterLayout

pytestmark = pytest.mark.gpu
dtypes = pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)


# -- shapes


@dtypes
@pytest.mark.parametrize("cv", RESNET_B2, ids=repr)
def test_resnet50_shapes_exact(hopper, rng, cv, dtype):
    run_case(hopper, rng, cv, dtype, exact=True)


@dtypes
@pytest.mark.parametrize("cv", RESNET_B2, ids=repr)
def test_resnet50_shapes_random(hopper, rng, cv, dtype):
    run_case(hopper, rng, cv, dtype, exact=False)


@pytest.mark.parametrize("cv", [c for c in resnet_shapes(32) if c.name.startswith(("s2_3x3_64", "s4_1x1_256_1024"))],
                         ids=repr)
def test_resnet50_batch32(hopper, rng, cv):
    """Hundreds of tiles: every persistent block runs several, the ring wraps across tiles."""
    run_case(hopper, rng, cv, DType.bfloat16, exact=True, with_cpu=False)


@dtypes
@pytest.mark.parametrize("cv", ODD, ids=repr)
def test_odd_shapes(hopper, rng, cv, dtype):
    run_case(hopper, rng, cv, dtype, exact=True, batches=(cv.n, 1))
    run_case(hopper, rng, cv, dtype, exact=False)


@pytest.mark.parametrize("cv", [ODD[3], ODD[5], ODD[9], RESNET_B2[2], RESNET_B2[7]], ids=repr)
def test_without_bias_and_with_a_constant_filter(hopper, rng, cv):
    run_case(hopper, rng, cv, DType.bfloat16, exact=True, bias=False)
    run_case(hopper, rng, cv, DType.float16, exact=True, const_filter=True)


@pytest.mark.parametrize("bn", [64, 128, 256])
@pytest.mark.parametrize("grid", [None, 1, 5])
@pytest.mark.parametrize("cv", [ODD[5], ODD[7], RESNET_B2[2], RESNET_B2[6], RESNET_B2[13]], ids=repr)
def test_forced_tile_width_and_grid(hopper, rng, cv, bn, grid):
    """Each column-tile width (more column tiles than K needs included), and persistent grids of
    1 and 5 blocks: one block walks every tile, so the ring's phases wrap many times."""
    spec = {"conv.bn": bn} | ({"conv.grid": grid} if grid else {})
    with tuning.override(**spec), launched() as runs:
        run_case(hopper, rng, cv, DType.bfloat16, exact=True, with_cpu=False)
    for r in convs(runs):
        # (a cluster of two counts as one block here)
        assert r["bn"] == bn and (grid is None or r["grid"] <= grid * (1 + r["cluster"])), r


def test_opt_out(gpu, rng):
    """With conv.sm90=0 the Hopper kernel never runs."""
    cv = Conv("default_path", 2, 9, 9, 64, 64, 3, 3, 1, 1, sm90=False)
    with tuning.override(cuda_graphs="off", **{"conv.sm90": False}):
        run_case(gpu, rng, cv, DType.bfloat16, exact=True)


def test_on_by_default(hopper, rng):
    """Without conv.sm90 set the Hopper kernel takes an eligible shape."""
    assert tuning.get("conv.sm90") == "1"
    run_case(hopper, rng, Conv("default_on", 2, 9, 9, 64, 64, 3, 3, 1, 1), DType.bfloat16, exact=True)


def test_float32_keeps_the_generic_path(hopper, rng):
    cv = Conv("f32", 2, 9, 9, 64, 64, 3, 3, 1, 1, sm90=False)
    w = rng.standard_normal((3, 3, 64, 64)).astype(np.float32)
    x = rng.standard_normal((2, 9, 9, 64)).astype(np.float32)
    dev = session(hopper).load(build(cv, DType.float32, GPU, bias=False))
    g = run_gpu(dev, [x, w], hopper, cv)
    ref = conv_ref(x.astype(np.float64), w.astype(np.float64), cv)
    assert np.allclose(g, ref, rtol=1e-4, atol=1e-4)


# -- fused epilogues (engine/conv_epilogue.rs): conv2d [+ its bias] + b -> act -> [clamp] -> + beta * r


@dtypes
@pytest.mark.parametrize("act", list(EPI_ACTS))
def test_fused_epilogue_every_activation(hopper, rng, dtype, act):
    for i, cv in enumerate(EPI_SHAPES):
        run_epilogue(hopper, rng, cv, dtype, act, conv_bias=i % 2 == 0, beta=(1, 0.5)[i % 2], exact=False)


@dtypes
@pytest.mark.parametrize("act", ["none", "relu", "clamp", "relu6"])
@pytest.mark.parametrize("cv", EPI_SHAPES, ids=repr)
def test_fused_epilogue_exact(hopper, rng, cv, dtype, act):
    """Integer data: relu, clamp and beta = 0.5 keep every value exact until the one rounding."""
    run_epilogue(hopper, rng, cv, dtype, act, conv_bias=True, beta=0.5, exact=True)


# 1x1 stride-1 unpadded convs (a GEMM's shape, on the conv kernel): relu(conv + b) (+ 0.5 * r),
# the bias the conv's own or a fused add
GEMM_SHAPED = [
    Conv("1x1_64_256", 2, 14, 15, 64, 256, 1, 1),
    Conv("1x1_512_2048_m49", 1, 7, 7, 512, 2048, 1, 1),
    Conv("1x1_136_328_ragged", 1, 7, 6, 136, 328, 1, 1),
    Conv("1x1_256_128", 1, 9, 10, 256, 128, 1, 1),
    Conv("1x1_512_128", 1, 9, 10, 512, 128, 1, 1),
    Conv("1x1_1024_256", 2, 7, 9, 1024, 256, 1, 1),
    Conv("1x1_256_64", 2, 9, 9, 256, 64, 1, 1),
    Conv("1x1_2048_512", 1, 7, 7, 2048, 512, 1, 1),
    Conv("1x1_2048_64", 2, 5, 6, 2048, 64, 1, 1),
    Conv("1x1_64_256_b3", 3, 13, 11, 64, 256, 1, 1),
]


@dtypes
@pytest.mark.parametrize("cv", GEMM_SHAPED, ids=repr)
def test_1x1_bias_relu_residual(hopper, rng, cv, dtype):
    for conv_bias in (True, False):
        g, want = bias_act(hopper, rng, cv, dtype, conv_bias=conv_bias, fused_bias=not conv_bias, relu=True)
        check_exact(g, want, f"{cv} {dtype.name} conv_bias={conv_bias} relu")
        run_epilogue(hopper, rng, cv, dtype, "relu", conv_bias=conv_bias, beta=0.5, exact=True)
    run_case(hopper, rng, cv, dtype, exact=False)


# -- channel padding (C % 8 != 0): the input and the filter copied with zero channels added, plain
# (C rounded up to 8) or folded (the filter columns, and for height strides above 1 that many input
# rows, moved into the channels). conv.fold: 2 rows and columns (the default), 1 columns only, 0 none.

FOLDS = pytest.mark.parametrize("fold", [2, 1, 0], ids=["rows", "columns", "plain"])
# C = 24 needs no padding: the kernel takes it as it is (and must still be right next to C = 5).
C24 = Conv("c24_k40_unpadded", 2, 11, 13, 24, 40, 3, 3, 1, 1)


def run_padded(fn, fold, *args, **kw):
    """`fn(*args, **kw)` under conv.fold=`fold`, checking that every Hopper launch was padded
    (a padding record before each), unfolded where the fold is off."""
    with tuning.override(**{"conv.fold": fold}), launched() as runs:
        fn(*args, **kw)
    launches, padded = count(runs), count(runs, "conv_sm90_pad")
    assert launches > 0 and padded == launches, f"{padded} of {launches} launches padded"
    if fold == 0:
        assert count(runs, "conv_sm90_pad", fold_rows=1, fold_cols=1) == padded, runs
    return runs


@FOLDS
@dtypes
def test_resnet_stem_batch_1_and_2(hopper, rng, dtype, fold):
    run_padded(run_case, fold, hopper, rng, STEM, dtype, exact=True, batches=(2, 1))
    run_padded(run_case, fold, hopper, rng, STEM, dtype, exact=False, batches=(1, 2))


@FOLDS
@dtypes
@pytest.mark.parametrize("cv", PADDED, ids=repr)
def test_padded_channels(hopper, rng, cv, dtype, fold):
    run_padded(run_case, fold, hopper, rng, cv, dtype, exact=True, batches=(cv.n, 1))
    run_padded(run_case, fold, hopper, rng, cv, dtype, exact=False)


@pytest.mark.parametrize("cv", [PADDED[0], PADDED[1], PADDED[6]], ids=repr)
def test_padded_without_bias_and_with_a_constant_filter(hopper, rng, cv):
    run_padded(run_case, 2, hopper, rng, cv, DType.bfloat16, exact=True, bias=False)
    run_padded(run_case, 1, hopper, rng, cv, DType.float16, exact=True, const_filter=True)


@dtypes
def test_c24_is_not_padded(hopper, rng, dtype):
    with launched() as runs:
        run_case(hopper, rng, C24, dtype, exact=True)
        run_case(hopper, rng, C24, dtype, exact=False)
    assert count(runs) == 2 and count(runs, "conv_sm90_pad") == 0


@pytest.mark.parametrize("bn", [64, 128, 256])
def test_padded_stem_each_tile_width_and_a_small_grid(hopper, rng, bn):
    with tuning.override(**{"conv.bn": bn, "conv.grid": 3}):
        runs = run_padded(run_case, 2, hopper, rng, PADDED[0], DType.bfloat16, exact=True, with_cpu=False)
        runs += run_padded(run_case, 2, hopper, rng, PADDED[11], DType.bfloat16, exact=True, with_cpu=False)
    assert all(r["bn"] == bn and r["grid"] <= 3 for r in convs(runs)), runs


@FOLDS
@dtypes
@pytest.mark.parametrize("act", ["relu", "silu"])
def test_padded_fused_epilogue(hopper, rng, dtype, act, fold):
    def blocks():
        for i, cv in enumerate(PADDED[:4]):
            run_epilogue(hopper, rng, cv, dtype, act, conv_bias=i % 2 == 0, beta=(1, 0.5)[i % 2], exact=False)
        run_epilogue(hopper, rng, PADDED[0], dtype, "relu", conv_bias=True, beta=0.5, exact=True)
        run_epilogue(hopper, rng, PADDED[11], dtype, act, conv_bias=False, beta=1, exact=True)

    assert count(run_padded(blocks, fold)) == 6


# -- split-K (conv.splitk=n forces n splits of the reduction; f32 partials and a reduce kernel
# that applies the whole epilogue): every split count on late-layer shapes (few output tiles,
# long reductions), with each tile width, with fused epilogues and beta != 1

SPLITS = [1, 2, 3, 4, 5, 7, 8, 16, 72, 1000]


def k_steps(cv):
    """The reduction's 64-channel steps: one per tap and 64 channels (the padded stem folds to 24
    channels, at most one k-step per filter row)."""
    c = cv.c if cv.c % 8 == 0 else 24
    taps = cv.r * cv.s if cv.c % 8 == 0 else cv.r
    return taps * -(-c // 64)


def run_split(cv, split, fn, *args, **kw):
    """`fn(*args, **kw)` under conv.splitk=`split`: at most one split per k-step; a split count
    of 1 (or a clamp to 1) runs unsplit. (A padded conv's k-steps are those of its folded copy:
    fewer, so only whether it split is checked.)"""
    with tuning.override(**{"conv.splitk": split}), launched() as runs:
        fn(*args, **kw)
    want = min(split, k_steps(cv))
    got = [r["splits"] for r in convs(runs)]
    if cv.c % 8 == 0:
        assert got and all(s == want for s in got), f"{cv} split {split}: {got} splits, want {want}"
    else:
        assert got and all((s > 1) == (want > 1) and s <= want for s in got), f"{cv} split {split}: {got}"
    return runs


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("cv", LATE, ids=repr)
def test_split_k_every_count(hopper, rng, cv, split):
    run_split(cv, split, run_case, hopper, rng, cv, DType.bfloat16, exact=True)


@dtypes
@pytest.mark.parametrize("split", [2, 3, 8])
@pytest.mark.parametrize("cv", [LATE[0], LATE[2], LATE[6], LATE[7]], ids=repr)
def test_split_k_random(hopper, rng, cv, split, dtype):
    run_split(cv, split, run_case, hopper, rng, cv, dtype, exact=False)


@pytest.mark.parametrize("bn", [64, 128, 256])
@pytest.mark.parametrize("split", [2, 5])
@pytest.mark.parametrize("grid", [None, 1, 7])
@pytest.mark.parametrize("cv", [LATE[1], LATE[3], LATE[6]], ids=repr)
def test_split_k_tile_widths_and_grids(hopper, rng, cv, split, bn, grid):
    """Each tile width with splits, and persistent grids smaller than the split units."""
    with tuning.override(**{"conv.bn": bn} | ({"conv.grid": grid} if grid else {})):
        runs = run_split(cv, split, run_case, hopper, rng, cv, DType.bfloat16, exact=True, with_cpu=False)
    assert all(r["bn"] == bn for r in convs(runs)), runs


@dtypes
@pytest.mark.parametrize("act", list(EPI_ACTS))
@pytest.mark.parametrize("split", [2, 3])
def test_split_k_fused_epilogue(hopper, rng, dtype, act, split):
    """bias + activation (+ clamp) + beta * residual applied by the reduce kernel."""
    for i, cv in enumerate([LATE[0], LATE[4], LATE[6], LATE[7]]):
        run_split(cv, split, run_epilogue, hopper, rng, cv, dtype, act, i % 2 == 0, (1, 0.5, 2, -1)[i], exact=False)


@dtypes
@pytest.mark.parametrize("act", ["none", "relu", "clamp", "relu6"])
@pytest.mark.parametrize("split", [2, 4, 9])
@pytest.mark.parametrize("cv", [LATE[1], LATE[6]], ids=repr)
def test_split_k_fused_epilogue_exact(hopper, rng, cv, dtype, act, split):
    run_split(cv, split, run_epilogue, hopper, rng, cv, dtype, act, True, 0.5, exact=True)


@pytest.mark.parametrize("cv, split", [
    (Conv("s5_3x3_512_b32", 32, 7, 7, 512, 512, 3, 3, 1, 1), False),
    (Conv("s5_1x1_2048_512_b32", 32, 7, 7, 2048, 512, 1, 1, 1, 0), False),
    (Conv("s5_3x3_512_b1", 1, 7, 7, 512, 512, 3, 3, 1, 1), True),
], ids=repr)
def test_split_k_default_heuristic(hopper, rng, cv, split):
    """Without the knob the launcher picks the split itself: the late layers at batch 32 (enough
    tiles: unsplit) and at batch 1 (one row tile: split); right either way."""
    with launched() as runs:
        run_case(hopper, rng, cv, DType.bfloat16, exact=True, with_cpu=False)
    (r,) = convs(runs)
    assert (r["splits"] > 1) == split, r


# -- the residual prefetch (conv.prefetch) and the residual read as 16-byte vectors (conv.res_vec)


@dtypes
@pytest.mark.parametrize("grid", [None, 1])
@pytest.mark.parametrize("bn", [None, 64, 256])
@pytest.mark.parametrize("cv", PREFETCH, ids=repr)
def test_prefetch_on_and_off_agree(hopper, rng, cv, bn, grid, dtype):
    spec = "conv.splitk=1,conv.res_ring=0"  # the residual read from global memory
    spec += f",conv.bn={bn}" if bn else ""
    spec += f",conv.grid={grid}" if grid else ""
    seed = int(rng.integers(1 << 31))
    with launched() as runs:
        on = fused_bits(hopper, seed, cv, dtype, spec=spec + ",conv.prefetch=1")
    assert count(runs, prefetch_l2=1) == 1, runs
    with launched() as runs:
        off = fused_bits(hopper, seed, cv, dtype, spec=spec + ",conv.prefetch=0")
    assert count(runs, prefetch_l2=0) == 1, runs
    assert (on == off).all(), f"{cv}: {(on != off).sum()} elements differ with the prefetch on"


@pytest.mark.parametrize("prefetch", [1, 0])
@pytest.mark.parametrize("act", ["none", "relu", "clamp"])
@pytest.mark.parametrize("cv", PREFETCH, ids=repr)
def test_prefetch_exact(hopper, rng, cv, act, prefetch):
    with tuning.override(**{"conv.prefetch": prefetch, "conv.res_ring": False, "conv.splitk": 1}):
        run_epilogue(hopper, rng, cv, DType.bfloat16, act, conv_bias=True, beta=0.5, exact=True)
        run_epilogue(hopper, rng, cv, DType.float16, act, conv_bias=False, beta=1, exact=True)


@dtypes
@pytest.mark.parametrize("act", ["none", "relu", "gelu", "clamp"])
@pytest.mark.parametrize("bn", [None, 64, 256])
def test_residual_vectors_same_bits(hopper, rng, bn, act, dtype):
    """The residual read as 16-byte vectors on the way out (the default) gives the bits of the
    residual added in the fragments, but for a multiply-add contracted in one path only."""
    spec = "conv.splitk=1" + (f",conv.bn={bn}" if bn else "")
    for cv in PREFETCH + [PADDED[0]]:
        seed = int(rng.integers(1 << 31))
        vec = fused_bits(hopper, seed, cv, dtype, act, spec + ",conv.res_vec=1")
        frag = fused_bits(hopper, seed, cv, dtype, act, spec + ",conv.res_vec=0")
        assert_same_but_contraction(vec, frag, dtype, f"{cv} {act} residual vectors")


# -- the tiled A map (1x1, stride 1, no padding; conv.tiled_a=1)

ONE_BY_ONE = [c for c in RESNET_B2 if c.r == 1] + [ODD[2], ODD[6], ODD[21], Conv("c13_1x1_padded", 2, 9, 7, 13, 24, 1, 1, 1, 0)]


@dtypes
@pytest.mark.parametrize("cv", ONE_BY_ONE, ids=repr)
def test_tiled_a(hopper, rng, cv, dtype):
    with tuning.override(**{"conv.tiled_a": True}), launched() as runs:
        run_case(hopper, rng, cv, dtype, exact=True, batches=(cv.n, 1))
        run_case(hopper, rng, cv, dtype, exact=False)
    if cv.c % 8 == 0:  # (the padded one runs on its copy)
        # the tiled map takes the 1x1 convs of stride 1 without padding, never others
        tiled = cv.stride == (1, 1) and cv.pad == (0, 0, 0, 0)
        assert count(runs, tiled_a=int(tiled)) == count(runs) == 3, runs


@dtypes
@pytest.mark.parametrize("act", ["relu", "silu", "clamp"])
def test_tiled_a_fused_epilogue(hopper, rng, act, dtype):
    with tuning.override(**{"conv.tiled_a": True}), launched() as runs:
        for i, cv in enumerate([RESNET_B2[3], ODD[6], LATE[2]]):
            run_epilogue(hopper, rng, cv, dtype, act, conv_bias=i % 2 == 0, beta=(1, 0.5, 2)[i], exact=False)
    assert count(runs, tiled_a=1) == 3, runs


# -- programmatic stream serialization (conv.pdl, on by default): a conv may start while the
# stream's previous kernel drains and must wait before touching memory. Two chained convs (the
# second reads what the first writes), executed four times back to back without a sync between,
# give the bits of the ordinary launch, with CUDA graphs off (plain stream launches) and captured.


def chain(dtype, c):
    """x -> 3x3 conv (w1) -> 3x3 conv (w2), NHWC / RSCF, on the GPU."""
    x_t = TensorType(dtype, ("batch", 14, 14, c), GPU)
    w_t = TensorType(dtype, (3, 3, c, c), GPU)

    def conv(x, w):
        return ops.conv2d(x, w, padding=(1, 1, 1, 1), input_layout=ConvInputLayout.NHWC,
                          filter_layout=FilterLayout.RSCF)

    return Graph("conv_chain", lambda x, w1, w2: conv(conv(x, w1), w2), input_types=[x_t, w_t, w_t])


@pytest.mark.parametrize("graphs", ["off", "always"])
@dtypes
def test_chained_convs_same_bits_under_pdl(hopper, rng, dtype, graphs):
    vt = VALUE_TYPES[dtype]
    c = 64
    inputs = [rng.standard_normal((8, 14, 14, c)).astype(vt)]
    inputs += [(rng.standard_normal((3, 3, c, c)) / 24).astype(vt) for _ in range(2)]
    got = {}
    for pdl in (False, True):
        with tuning.override(cuda_graphs=graphs, **{"conv.pdl": pdl}), tuning.record_launches() as log:
            model = session(hopper).load(chain(dtype, c))
            args = [driver.Buffer.from_numpy(a).to(hopper) for a in inputs]
            results = [model.execute(*args)[0] for _ in range(4)]
            runs = [bits(r.to_numpy()) for r in results]
        launches = log.records("conv_sm90")
        if graphs == "off":
            assert len(launches) == 8, launches
        assert launches and all(r["pdl"] == pdl for r in launches), launches
        for i, r in enumerate(runs[1:], 1):
            assert (r == runs[0]).all(), f"PDL={pdl}: execution {i} differs from the first"
        got[pdl] = runs[0]
    assert (got[True] == got[False]).all(), f"{(got[True] != got[False]).sum()} elements differ under PDL"
    # and right: the float64 chain, its intermediate rounded to the dtype as the GPU's is
    cv = Conv("chain", 8, 14, 14, c, c, 3, 3, 1, 1)
    x, w1, w2 = (a.astype(np.float64) for a in inputs)
    mid = conv_ref(x, w1, cv).astype(np.float32).astype(vt).astype(np.float64)
    check_close(got[False].view(vt), conv_ref(mid, w2, cv), cv, dtype, f"{dtype.name} chain", ulps=2)
