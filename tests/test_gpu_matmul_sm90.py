"""The Hopper GEMM (kernels/gemm_sm90p.cu, launch/gemm_sm90p.rs) under every forced variant:
column tile 128/256, clusters of 1/2 CTAs with B multicast, split-K with its deterministic
reduction, persistent or one CTA per unit, small grids walking many units, raster groups, B as
given or transposed, the staged epilogue (the default, and gemm.epilogue=staged: C through
per-warp shared-memory tiles, taken where N % 8 == 0; other shapes fall back to the direct
stores) and the direct one (gemm.epilogue=direct), and
the stream-K tail of persistent grids.
gemm.min_m=1 sends every shape to it, so odd shapes (M = 1..3, M and N past the tiles, K = 8,
K not a multiple of 64, odd N) and batches (batched B, shared B folded into rows) run through
each variant, with and without the fused bias / activation / residual epilogue, against numpy
float64; the launch record says that each launch took the variant's form. Skips unless the
GPU is sm_90a."""

import math

from contextlib import contextmanager

import ml_dtypes
import numpy as np
import pytest

from engine_util import run
from max import tuning
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops

pytestmark = pytest.mark.gpu
GPU = DeviceRef.GPU()
TOL = {DType.float16: 1.5e-2, DType.bfloat16: 5e-2}
VARIANTS = {
    "default": "",
    "one_cta_per_unit": "gemm.persistent=0",
    "c1_n256": "gemm.cluster=1,gemm.bn=256,gemm.splitk=1",
    "c2_n256": "gemm.cluster=2,gemm.bn=256,gemm.splitk=1",
    "c1_n128": "gemm.cluster=1,gemm.bn=128,gemm.splitk=1",
    "c2_n128": "gemm.cluster=2,gemm.bn=128,gemm.splitk=1",
    "c2_n256_split3": "gemm.cluster=2,gemm.bn=256,gemm.splitk=3",
    "c1_n128_split2_grid3": "gemm.cluster=1,gemm.bn=128,gemm.splitk=2,gemm.grid=3",
    "c2_n128_split5_grid4_group3": "gemm.cluster=2,gemm.bn=128,gemm.splitk=5,gemm.grid=4,gemm.group_m=3",
    "c2_transposed": "gemm.cluster=2,gemm.transpose=1",
    "c1_n128_transposed_split2": "gemm.cluster=1,gemm.bn=128,gemm.splitk=2,gemm.transpose=1",
    # clusters along N sharing A (2 x 2 and 1 x 2): column tiles past the last one, split-K
    "c2x2_n256": "gemm.cluster=2,gemm.cluster_n=2,gemm.bn=256,gemm.splitk=1",
    "c2x2_n128_split3": "gemm.cluster=2,gemm.cluster_n=2,gemm.bn=128,gemm.splitk=3",
    "c1x2_n128_grid4": "gemm.cluster=1,gemm.cluster_n=2,gemm.bn=128,gemm.splitk=1,gemm.grid=4",
    "c2x2_transposed": "gemm.cluster=2,gemm.cluster_n=2,gemm.transpose=1,gemm.splitk=1",
    "c2x2_staged_grid8": "gemm.cluster=2,gemm.cluster_n=2,gemm.epilogue=staged,gemm.splitk=1,gemm.grid=8",
    "c2x2_grid4": "gemm.cluster=2,gemm.cluster_n=2,gemm.splitk=1,gemm.grid=4",
    # small grids give every block several units, the ring running on across them
    "c2_unsplit": "gemm.cluster=2,gemm.splitk=1",
    "c1_grid3": "gemm.cluster=1,gemm.splitk=1,gemm.grid=3",
    "c2_split3_grid4": "gemm.cluster=2,gemm.splitk=3,gemm.grid=4",
    "split2_grid3_transposed": "gemm.splitk=2,gemm.grid=3,gemm.transpose=1",
    # one block (or one cluster) walks every unit: odd and even unit counts
    "c1_grid1_split3": "gemm.cluster=1,gemm.splitk=3,gemm.grid=1",
    "c2_grid2_split2": "gemm.cluster=2,gemm.splitk=2,gemm.grid=2",
    # the staged epilogue (the _st kernels, a 6-stage ring for 128-column tiles): partial tiles
    # (rows past M, 8-column pieces past N), split-K's reducing CTA
    "staged": "gemm.epilogue=staged",
    "staged_c1_n256": "gemm.epilogue=staged,gemm.cluster=1,gemm.bn=256,gemm.splitk=1",
    "staged_c2_n128": "gemm.epilogue=staged,gemm.cluster=2,gemm.bn=128,gemm.splitk=1",
    "staged_n128_split2": "gemm.epilogue=staged,gemm.cluster=1,gemm.bn=128,gemm.splitk=2,gemm.grid=3",
    "staged_c2_n256_split3": "gemm.epilogue=staged,gemm.cluster=2,gemm.bn=256,gemm.splitk=3",
    "staged_transposed": "gemm.epilogue=staged,gemm.cluster=2,gemm.transpose=1",
    "staged_c1_grid3": "gemm.epilogue=staged,gemm.cluster=1,gemm.splitk=1,gemm.grid=3",
    "staged_c2_split3_grid4": "gemm.epilogue=staged,gemm.cluster=2,gemm.splitk=3,gemm.grid=4",
    # the direct stores from the fragments (the default takes the staged epilogue where it can)
    "direct": "gemm.epilogue=direct",
    "direct_c2_split3_grid4": "gemm.epilogue=direct,gemm.cluster=2,gemm.splitk=3,gemm.grid=4",
}
# Not a variant of every test: the tail of the last wave left whole.
SPECS = dict(VARIANTS, no_tail_split="gemm.tail=0")

# (M, K, N): M = 1..3, K = 8 and K % 64 != 0, M and N past the tile edges (and past the last
# 64-column box), odd N (B transposed, element-wise epilogue), a cluster pair with one real tile.
SHAPES = [
    (1, 64, 8),
    (2, 8, 24),
    (3, 136, 40),
    (130, 200, 264),
    (257, 520, 1000),
    (300, 72, 77),
    (129, 1032, 136),
    (384, 256, 520),
]


def as_np(d):
    return ml_dtypes.bfloat16 if d is DType.bfloat16 else d.to_numpy()


def rand(rng, dtype, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(as_np(dtype))


@pytest.fixture
def sm90(hopper):
    """The Hopper GPU with every shape on the Hopper kernel (and CUDA graphs off)."""
    with tuning.override(**{"gemm.min_m": 1}):
        yield hopper


def knobs(spec):
    return dict(item.split("=") for item in spec.split(",") if item)


def forced_fields(spec):
    """The launch record's fields that the knobs of `spec` fix whatever the shape: a forced tile
    width, clusters (unless clusters along N, which narrow N may trim, are asked for too),
    persistence, B transposed, the direct epilogue."""
    k = knobs(spec)
    want = {}
    if "gemm.bn" in k:
        want["bn"] = int(k["gemm.bn"])
    if "gemm.cluster" in k and "gemm.cluster_n" not in k:
        want["cluster"] = int(k["gemm.cluster"])
    if "gemm.persistent" in k:
        want["persistent"] = int(k["gemm.persistent"])
    if k.get("gemm.transpose") == "1":
        want["n_major"] = 0
    if k.get("gemm.epilogue") == "direct":
        want["staged"] = 0
    return want


@contextmanager
def use(variant):
    """The knobs of `variant` over the block, then a check that the block launched the Hopper
    GEMM, each launch in the form the knobs force."""
    with tuning.override(SPECS[variant]), tuning.record_launches() as log:
        yield log
    launches = log.records("gemm_sm90p")
    assert launches, f"{variant}: the Hopper GEMM never ran"
    want = forced_fields(SPECS[variant])
    for r in launches:
        assert all(r[k] == v for k, v in want.items()), f"{variant}: want {want}, launched {r}"


def gelu_tanh(v):
    return 0.5 * v * (1 + np.tanh(0.7978845608028654 * (v + 0.044715 * v**3)))


def check(gpu, rng, dtype, xshape, wshape, bias=False, act=None, residual=False):
    """x @ w (+ bias) (-> act) (+ residual) on the GPU against numpy float64."""
    n = wshape[-1]
    x, w = rand(rng, dtype, xshape), rand(rng, dtype, wshape, 1 / math.sqrt(wshape[-2]))
    oshape = np.broadcast_shapes(xshape[:-2], wshape[:-2]) + (xshape[-2], n)
    inputs = [x, w]
    if bias:
        inputs.append(rand(rng, dtype, (n,)))
    if residual:
        inputs.append(rand(rng, dtype, oshape))

    def fn(x, w, *rest):
        rest = list(rest)
        y = x @ w
        if bias:
            y = y + rest.pop(0)
        if act == "gelu_tanh":
            y = ops.gelu(y, approximate="tanh")
        elif act == "silu":
            y = ops.silu(y)
        elif act == "relu":
            y = ops.relu(y)
        if residual:
            y = rest.pop(0) + y
        return y

    types = [TensorType(dtype, a.shape, GPU) for a in inputs]
    (got,) = run(Graph("sm90", fn, input_types=types), *inputs, device=gpu)
    f = [a.astype(np.float64) for a in inputs]
    ref = np.matmul(f[0], f[1])
    rest = f[2:]
    if bias:
        ref = ref + rest.pop(0)
    if act == "gelu_tanh":
        ref = gelu_tanh(ref)
    elif act == "silu":
        ref = ref / (1 + np.exp(-ref))
    elif act == "relu":
        ref = np.maximum(ref, 0)
    if residual:
        ref = ref + rest.pop(0)
    assert got.shape == ref.shape
    tol = TOL[dtype]
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=tol, atol=tol)
    return got


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_plain_product(sm90, rng, variant, shape):
    m, k, n = shape
    with use(variant):
        check(sm90, rng, DType.bfloat16, (m, k), (k, n))


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float16], ids=lambda d: d.name)
def test_epilogue(sm90, rng, variant, dtype):
    with use(variant):
        check(sm90, rng, dtype, (257, 136), (136, 264), bias=True, act="gelu_tanh", residual=True)
        check(sm90, rng, dtype, (3, 72), (72, 77), bias=True, act="silu", residual=True)
        check(sm90, rng, dtype, (130, 64), (64, 40), bias=True, residual=False)
        check(sm90, rng, dtype, (129, 200), (200, 136), bias=False, act="relu", residual=True)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_batches(sm90, rng, variant):
    with use(variant):
        # both batched (the maps' batch dimension), with B as given and transposed (odd N)
        check(sm90, rng, DType.bfloat16, (3, 67, 136), (3, 136, 72), bias=True, residual=True)
        check(sm90, rng, DType.float16, (2, 130, 64), (2, 64, 77))
        # A batched, B shared (broadcast): folded into the rows of one product
        check(sm90, rng, DType.bfloat16, (4, 33, 64), (64, 96), bias=True, act="relu", residual=True)
        check(sm90, rng, DType.bfloat16, (2, 3, 1, 200), (1, 200, 264))


@pytest.mark.parametrize(
    "variant",
    [
        "default",
        "c2_n256_split3",
        "c1_n128_split2_grid3",
        "c2_split3_grid4",
        "split2_grid3_transposed",
        "c1_grid1_split3",
        "staged",
        "staged_n128_split2",
        "staged_c2_split3_grid4",
    ],
)
def test_mid_m_long_k(sm90, rng, variant):
    # the split-K shapes: few rows, long K
    with use(variant):
        check(sm90, rng, DType.bfloat16, (128, 4096), (4096, 520), bias=True, residual=True)
        check(sm90, rng, DType.float16, (200, 2056), (2056, 1000))


@pytest.mark.parametrize(
    "variant",
    [
        "default",
        "c2_n256_split3",
        "c2_n128_split5_grid4_group3",
        "c2_split3_grid4",
        "staged_c2_n256_split3",
        "staged_c2_split3_grid4",
    ],
)
def test_split_k_is_deterministic(sm90, rng, variant):
    dtype = DType.bfloat16
    x, w = rand(rng, dtype, (256, 3000)), rand(rng, dtype, (3000, 264), 1 / 50)
    types = [TensorType(dtype, a.shape, GPU) for a in (x, w)]
    g = Graph("det", lambda x, w: x @ w, input_types=types)
    with use(variant) as log:
        (a,) = run(g, x, w, device=sm90)
        (b,) = run(g, x, w, device=sm90)
    if "gemm.splitk" in knobs(SPECS[variant]):
        # 47 k-tiles: a forced count of 3 or 5 splits them
        assert all(r["splits"] > 1 for r in log.records("gemm_sm90p")), log.records("gemm_sm90p")
    assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
    ref = x.astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_allclose(a.astype(np.float64), ref, rtol=5e-2, atol=5e-2)


@pytest.mark.parametrize(
    "variant",
    [
        "default",
        "c1_n256",
        "c2_n256",
        "one_cta_per_unit",
        "no_tail_split",
        "c2_n128",
        "c2_unsplit",
        "c1_grid3",
        "staged",
        "staged_c1_n256",
        "staged_c2_n128",
        "staged_c1_grid3",
    ],
)
def test_many_tiles(sm90, rng, variant):
    # more units than SMs: persistent CTAs walk several units, the ring running on across them;
    # by default (132 SMs) the 81 cluster tiles leave a last wave of 15, split 4 ways over K
    with use(variant):
        check(sm90, rng, DType.bfloat16, (2304, 1024), (1024, 2056), bias=True, residual=True)
        check(sm90, rng, DType.float16, (2, 1100, 520), (2, 520, 2050), act="silu")


STAGED_VS_DIRECT = [
    "staged",
    "staged_c1_n256",
    "staged_c2_n128",
    "staged_n128_split2",
    "staged_c2_n256_split3",
    "staged_transposed",
]


def launches_of(g, inputs, gpu, spec):
    """The result of `g` under the knobs of `spec`, and its Hopper GEMM launches."""
    with tuning.override(spec), tuning.record_launches() as log:
        (out,) = run(g, *inputs, device=gpu)
    launches = log.records("gemm_sm90p")
    assert launches, f"{spec}: the Hopper GEMM never ran"
    return out, launches


@pytest.mark.parametrize("variant", STAGED_VS_DIRECT)
@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float16], ids=lambda d: d.name)
def test_staged_matches_direct(sm90, rng, variant, dtype):
    # the staged epilogue does the same math as the direct one: bit for bit the same C, and the
    # launch takes an _st kernel where N % 8 == 0
    for m, k, n in [(2304, 136, 1000), (257, 520, 264), (130, 64, 40)]:
        x, w = rand(rng, dtype, (m, k)), rand(rng, dtype, (k, n), 1 / math.sqrt(k))
        b, r = rand(rng, dtype, (n,)), rand(rng, dtype, (m, n))
        types = [TensorType(dtype, a.shape, GPU) for a in (x, w, b, r)]
        g = Graph("stg", lambda x, w, b, r: r + ops.gelu(x @ w + b, approximate="tanh"), input_types=types)
        direct, launches = launches_of(g, (x, w, b, r), sm90, VARIANTS[variant] + ",gemm.epilogue=direct")
        assert all(not rec["staged"] and "_st" not in rec["kernel"] for rec in launches), launches
        staged, launches = launches_of(g, (x, w, b, r), sm90, VARIANTS[variant])
        assert all(rec["staged"] and rec["kernel"].endswith("_st") for rec in launches), launches
        assert np.array_equal(direct.view(np.uint16), staged.view(np.uint16)), f"{m}x{k}x{n}"


def test_staged_falls_back_where_n_is_odd(sm90, rng):
    with tuning.override("gemm.epilogue=staged"), tuning.record_launches() as log:
        check(sm90, rng, DType.bfloat16, (300, 72), (72, 77), bias=True, residual=True)
    launches = log.records("gemm_sm90p")
    assert launches and all(not r["staged"] and "_st" not in r["kernel"] for r in launches), launches


# -- the stream-K tail (persistent grids): the tiles of a last, partial wave cut into equal
# k-ranges, one per cluster, whose pieces meet in a workspace and are added in range order.
# Small grids make the partial wave with few tiles; the launch record's sk_len says that the
# plan took stream-K. Each case: numpy float64 reference, bit-identical on a second run, and
# against the same product with the tail left whole (gemm.tail=0).

# (knobs, (M, K, N)), each chosen to leave a partial last wave:
STREAM_K = {
    # 5 clusters of 2, 12 cluster tiles: 2 left, 64 k-tiles as 5 ranges of 13 (3 pieces a tile)
    "c2_grid10": ("gemm.cluster=2,gemm.bn=256,gemm.grid=10", (1000, 2048, 600)),
    # 7 CTAs, 18 tiles of 128 columns: 4 left, 256 k-tiles as 7 ranges of 37
    "c1_n128_grid7": ("gemm.cluster=1,gemm.bn=128,gemm.grid=7", (300, 4096, 700)),
    "c1_n128_grid7_transposed": ("gemm.cluster=1,gemm.bn=128,gemm.grid=7,gemm.transpose=1", (300, 4096, 700)),
    "c2_grid10_staged": ("gemm.cluster=2,gemm.bn=256,gemm.grid=10,gemm.epilogue=staged", (1000, 2048, 600)),
    "c2_grid6": ("gemm.cluster=2,gemm.grid=6", (1000, 2048, 600)),
    # K not a multiple of 64, rows and columns past the tile edges (and a cluster's second row
    # tile past the last one)
    "c2_grid10_ragged": ("gemm.cluster=2,gemm.bn=256,gemm.grid=10", (777, 3000, 520)),
    # 2 x 2 clusters (A shared along N too): 7 x 5 tiles as 4 x 3 cluster tiles (the last row
    # and column past the edge) on 5 clusters: 2 left, 47 k-tiles as ranges of 19
    "c2x2_grid20": ("gemm.cluster=2,gemm.cluster_n=2,gemm.bn=256,gemm.grid=20", (777, 3000, 1100)),
    # 1 x 2: 3 x 6 tiles as 3 x 3 cluster tiles on 2 clusters: 1 left, 64 k-tiles as 2 ranges
    "c1x2_n128_grid4": ("gemm.cluster=1,gemm.cluster_n=2,gemm.bn=128,gemm.grid=4", (300, 4096, 700)),
}


@pytest.mark.parametrize("case", list(STREAM_K))
@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float16], ids=lambda d: d.name)
def test_stream_k_tail(sm90, rng, case, dtype):
    spec, (m, k, n) = STREAM_K[case]
    # one split (not split-K over every tile, which the few tiles would otherwise get), the tail
    # split allowed, the direct epilogue unless the case stages it
    spec = "gemm.splitk=1,gemm.tail=1,gemm.epilogue=direct," + spec
    x, w = rand(rng, dtype, (m, k)), rand(rng, dtype, (k, n), 1 / math.sqrt(k))
    b, r = rand(rng, dtype, (n,)), rand(rng, dtype, (m, n))
    types = [TensorType(dtype, a.shape, GPU) for a in (x, w, b, r)]
    g = Graph("sk", lambda x, w, b, r: r + ops.relu(x @ w + b), input_types=types)
    got, launches = launches_of(g, (x, w, b, r), sm90, spec)
    rec = launches[0]
    assert rec["sk_len"] >= 1, launches
    # the variant's kernel ran: staged (_st), B transposed to Bt (_t_: forced,
    # or N % 8 != 0, which TMA cannot stride as it is)
    forced = knobs(spec)
    name = rec["kernel"]
    assert (forced["gemm.epilogue"] == "staged") == name.endswith("_st"), name
    assert ("gemm.transpose" in forced or n % 8 != 0) == ("_t_" in name), name
    again, _ = launches_of(g, (x, w, b, r), sm90, spec)
    assert np.array_equal(got.view(np.uint16), again.view(np.uint16))
    f = [a.astype(np.float64) for a in (x, w, b, r)]
    ref = np.maximum(f[0] @ f[1] + f[2], 0) + f[3]
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=TOL[dtype], atol=TOL[dtype])
    whole, launches = launches_of(g, (x, w, b, r), sm90, spec + ",gemm.tail=0")
    assert all(rec["sk_len"] == 0 for rec in launches), launches
    np.testing.assert_allclose(got.astype(np.float64), whole.astype(np.float64), rtol=TOL[dtype], atol=TOL[dtype])
