"""The Hopper GEMM (kernels/gemm_sm90p.cu, launch/gemm_sm90p.rs) under every forced variant:
column tile 128/256, clusters of 1/2 CTAs with B multicast, split-K with its deterministic
reduction, persistent or one CTA per unit, small grids walking many units, raster groups, B as
given or transposed, the staged epilogue (MAX_GEMM_SM90_EPI=staged: C through per-warp
shared-memory tiles, taken where N % 8 == 0 under the cooperative schedule; other shapes and
ping-pong fall back to the direct stores), and
the legacy kernel. MAX_GEMM_SM90_MIN_M=1 sends every shape to it, so
odd shapes (M = 1..3, M and N past the tiles, K = 8, K not a multiple of 64, odd N) and
batches (batched B, shared B folded into rows) run through each variant, with and without the
fused bias / activation / residual epilogue, against numpy float64. Skips unless the GPU is
sm_90a."""

import math

import ml_dtypes
import numpy as np
import pytest

from engine_util import run
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops

pytestmark = pytest.mark.gpu
GPU = DeviceRef.GPU()
TOL = {DType.float16: 1.5e-2, DType.bfloat16: 5e-2}
KNOBS = (
    "LEGACY",
    "PERSISTENT",
    "CLUSTER",
    "CLUSTER_N",
    "SPLITK",
    "BN",
    "GRID",
    "GROUP_M",
    "TRANSPOSE",
    "MIN_M",
    "TAIL",
    "SCHEDULE",
    "EPI",
    "LOG",
)

VARIANTS = {
    "default": {},
    "legacy": {"LEGACY": "1"},
    "one_cta_per_unit": {"PERSISTENT": "0"},
    "c1_n256": {"CLUSTER": "1", "BN": "256", "SPLITK": "1"},
    "c2_n256": {"CLUSTER": "2", "BN": "256", "SPLITK": "1"},
    "c1_n128": {"CLUSTER": "1", "BN": "128", "SPLITK": "1"},
    "c2_n128": {"CLUSTER": "2", "BN": "128", "SPLITK": "1"},
    "c2_n256_split3": {"CLUSTER": "2", "BN": "256", "SPLITK": "3"},
    "c1_n128_split2_grid3": {"CLUSTER": "1", "BN": "128", "SPLITK": "2", "GRID": "3"},
    "c2_n128_split5_grid4_group3": {"CLUSTER": "2", "BN": "128", "SPLITK": "5", "GRID": "4", "GROUP_M": "3"},
    "c2_transposed": {"CLUSTER": "2", "TRANSPOSE": "1"},
    "c1_n128_transposed_split2": {"CLUSTER": "1", "BN": "128", "SPLITK": "2", "TRANSPOSE": "1"},
    # clusters along N sharing A (2 x 2 and 1 x 2): column tiles past the last one, split-K
    "c2x2_n256": {"CLUSTER": "2", "CLUSTER_N": "2", "BN": "256", "SPLITK": "1"},
    "c2x2_n128_split3": {"CLUSTER": "2", "CLUSTER_N": "2", "BN": "128", "SPLITK": "3"},
    "c1x2_n128_grid4": {"CLUSTER": "1", "CLUSTER_N": "2", "BN": "128", "SPLITK": "1", "GRID": "4"},
    "c2x2_transposed": {"CLUSTER": "2", "CLUSTER_N": "2", "TRANSPOSE": "1", "SPLITK": "1"},
    "c2x2_staged_grid8": {"CLUSTER": "2", "CLUSTER_N": "2", "EPI": "staged", "SPLITK": "1", "GRID": "8"},
    "c2x2_pingpong_grid4": {"SCHEDULE": "pingpong", "CLUSTER": "2", "CLUSTER_N": "2", "SPLITK": "1", "GRID": "4"},
    # ping-pong: each consumer warpgroup on its own 128 x 128 tile, alternating units; small grids
    # give every block several units, so both warpgroups work and step over each other's stages
    "pingpong": {"SCHEDULE": "pingpong"},
    "pingpong_c2": {"SCHEDULE": "pingpong", "CLUSTER": "2", "SPLITK": "1"},
    "pingpong_grid3": {"SCHEDULE": "pingpong", "CLUSTER": "1", "SPLITK": "1", "GRID": "3"},
    "pingpong_c2_split3_grid4": {"SCHEDULE": "pingpong", "CLUSTER": "2", "SPLITK": "3", "GRID": "4"},
    "pingpong_split2_grid3_transposed": {"SCHEDULE": "pingpong", "SPLITK": "2", "GRID": "3", "TRANSPOSE": "1"},
    # one block (or one cluster) walks every unit: odd and even unit counts, and a warpgroup
    # stepping over more than a ring's worth of the other's k-tiles (the turn barriers)
    "pingpong_grid1_split3": {"SCHEDULE": "pingpong", "CLUSTER": "1", "SPLITK": "3", "GRID": "1"},
    "pingpong_c2_grid2_split2": {"SCHEDULE": "pingpong", "CLUSTER": "2", "SPLITK": "2", "GRID": "2"},
    # the staged epilogue (the _st kernels, a 6-stage ring for 128-column tiles): partial tiles
    # (rows past M, 8-column pieces past N), split-K's reducing CTA; under ping-pong the knob
    # is ignored (the direct epilogue: no _st ping-pong kernels)
    "staged": {"EPI": "staged"},
    "staged_c1_n256": {"EPI": "staged", "CLUSTER": "1", "BN": "256", "SPLITK": "1"},
    "staged_c2_n128": {"EPI": "staged", "CLUSTER": "2", "BN": "128", "SPLITK": "1"},
    "staged_n128_split2": {"EPI": "staged", "CLUSTER": "1", "BN": "128", "SPLITK": "2", "GRID": "3"},
    "staged_c2_n256_split3": {"EPI": "staged", "CLUSTER": "2", "BN": "256", "SPLITK": "3"},
    "staged_transposed": {"EPI": "staged", "CLUSTER": "2", "TRANSPOSE": "1"},
    "staged_pingpong": {"EPI": "staged", "SCHEDULE": "pingpong", "CLUSTER": "1", "SPLITK": "1", "GRID": "3"},
    "staged_pingpong_c2_split3_grid4": {
        "EPI": "staged",
        "SCHEDULE": "pingpong",
        "CLUSTER": "2",
        "SPLITK": "3",
        "GRID": "4",
    },
}

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
def sm90(gpu, monkeypatch):
    """The GPU with every shape on the Hopper kernel and CUDA graphs off (the variables are read
    at each launch); skips unless it is sm_90a."""
    if gpu.architecture_name != "sm_90a":
        pytest.skip(f"the Hopper GEMM needs sm_90a, this GPU is {gpu.architecture_name}")
    for knob in KNOBS:
        monkeypatch.delenv(f"MAX_GEMM_SM90_{knob}", raising=False)
    monkeypatch.setenv("MAX_GEMM_SM90_MIN_M", "1")
    monkeypatch.setenv("MAX_CUDA_GRAPHS", "0")
    return gpu


def use(monkeypatch, variant):
    for knob, value in VARIANTS[variant].items():
        monkeypatch.setenv(f"MAX_GEMM_SM90_{knob}", value)


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
def test_plain_product(sm90, rng, monkeypatch, variant, shape):
    use(monkeypatch, variant)
    m, k, n = shape
    check(sm90, rng, DType.bfloat16, (m, k), (k, n))


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float16], ids=lambda d: d.name)
def test_epilogue(sm90, rng, monkeypatch, variant, dtype):
    use(monkeypatch, variant)
    check(sm90, rng, dtype, (257, 136), (136, 264), bias=True, act="gelu_tanh", residual=True)
    check(sm90, rng, dtype, (3, 72), (72, 77), bias=True, act="silu", residual=True)
    check(sm90, rng, dtype, (130, 64), (64, 40), bias=True, residual=False)
    check(sm90, rng, dtype, (129, 200), (200, 136), bias=False, act="relu", residual=True)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_batches(sm90, rng, monkeypatch, variant):
    use(monkeypatch, variant)
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
        "pingpong",
        "pingpong_c2_split3_grid4",
        "pingpong_split2_grid3_transposed",
        "pingpong_grid1_split3",
        "staged",
        "staged_n128_split2",
        "staged_pingpong_c2_split3_grid4",
    ],
)
def test_mid_m_long_k(sm90, rng, monkeypatch, variant):
    # the split-K shapes: few rows, long K
    use(monkeypatch, variant)
    check(sm90, rng, DType.bfloat16, (128, 4096), (4096, 520), bias=True, residual=True)
    check(sm90, rng, DType.float16, (200, 2056), (2056, 1000))


@pytest.mark.parametrize(
    "variant",
    [
        "default",
        "c2_n256_split3",
        "c2_n128_split5_grid4_group3",
        "pingpong_c2_split3_grid4",
        "staged_c2_n256_split3",
        "staged_pingpong_c2_split3_grid4",
    ],
)
def test_split_k_is_deterministic(sm90, rng, monkeypatch, variant):
    use(monkeypatch, variant)
    dtype = DType.bfloat16
    x, w = rand(rng, dtype, (256, 3000)), rand(rng, dtype, (3000, 264), 1 / 50)
    types = [TensorType(dtype, a.shape, GPU) for a in (x, w)]
    g = Graph("det", lambda x, w: x @ w, input_types=types)
    (a,) = run(g, x, w, device=sm90)
    (b,) = run(g, x, w, device=sm90)
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
        "pingpong",
        "pingpong_c2",
        "pingpong_grid3",
        "staged",
        "staged_c1_n256",
        "staged_c2_n128",
        "staged_pingpong",
    ],
)
def test_many_tiles(sm90, rng, monkeypatch, variant):
    # more units than SMs: persistent CTAs walk several units, the ring running on across them;
    # by default (132 SMs) the 81 cluster tiles leave a last wave of 15, split 4 ways over K
    if variant == "no_tail_split":
        monkeypatch.setenv("MAX_GEMM_SM90_TAIL", "0")
    else:
        use(monkeypatch, variant)
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


@pytest.mark.parametrize("variant", STAGED_VS_DIRECT)
@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float16], ids=lambda d: d.name)
def test_staged_matches_direct(sm90, rng, monkeypatch, capfd, variant, dtype):
    # the staged epilogue does the same math as the direct one: bit for bit the same C, and the
    # launch takes an _st kernel (MAX_GEMM_SM90_LOG prints its name) where N % 8 == 0
    use(monkeypatch, variant)
    monkeypatch.setenv("MAX_GEMM_SM90_LOG", "1")
    for m, k, n in [(2304, 136, 1000), (257, 520, 264), (130, 64, 40)]:
        x, w = rand(rng, dtype, (m, k)), rand(rng, dtype, (k, n), 1 / math.sqrt(k))
        b, r = rand(rng, dtype, (n,)), rand(rng, dtype, (m, n))
        types = [TensorType(dtype, a.shape, GPU) for a in (x, w, b, r)]
        g = Graph("stg", lambda x, w, b, r: r + ops.gelu(x @ w + b, approximate="tanh"), input_types=types)
        monkeypatch.setenv("MAX_GEMM_SM90_EPI", "direct")
        capfd.readouterr()
        (direct,) = run(g, x, w, b, r, device=sm90)
        assert "_st " not in capfd.readouterr().err
        monkeypatch.setenv("MAX_GEMM_SM90_EPI", "staged")
        (staged,) = run(g, x, w, b, r, device=sm90)
        err = capfd.readouterr().err
        assert "gemm_sm90p_" in err and "_st " in err, err
        assert np.array_equal(direct.view(np.uint16), staged.view(np.uint16)), f"{m}x{k}x{n}"


def test_staged_falls_back_where_n_is_odd(sm90, rng, monkeypatch, capfd):
    monkeypatch.setenv("MAX_GEMM_SM90_EPI", "staged")
    monkeypatch.setenv("MAX_GEMM_SM90_LOG", "1")
    capfd.readouterr()
    check(sm90, rng, DType.bfloat16, (300, 72), (72, 77), bias=True, residual=True)
    err = capfd.readouterr().err
    assert "gemm_sm90p_" in err and "_st " not in err, err


def test_staged_is_ignored_under_pingpong(sm90, rng, monkeypatch, capfd):
    use(monkeypatch, "staged_pingpong")
    monkeypatch.setenv("MAX_GEMM_SM90_LOG", "1")
    capfd.readouterr()
    check(sm90, rng, DType.bfloat16, (257, 136), (136, 264), bias=True, act="gelu_tanh", residual=True)
    err = capfd.readouterr().err
    assert "n128pp " in err and "_st " not in err, err
