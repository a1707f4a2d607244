"""The Hopper implicit-GEMM conv2d (crates/kernels-cuda/kernels/conv_sm90.cu), reached through the
engine's conv2d (on by default on sm_90a; MAX_CONV_SM90=0, read at every conv2d, turns it off): bf16 and f16, NHWC input, RSCF filter (a graph input, or a constant), groups = 1.

Every run checks through `_conv_sm90_launches()` that the kernel ran (or, for the shapes it must
refuse, that it did not), then compares the result
- bit for bit, for inputs in {-1, 0, 1} and integer biases, with the float64 reference rounded
  once to the dtype (f32 accumulation of such products is exact, so any wrong tap, channel,
  pixel or output column shows) and with the CPU backend;
- for normal random inputs, with the float64 reference of the same rounded inputs and with the
  CPU backend, within the dtype's rounding: eps * (|ref| + sqrt(R*S*C)).
Shapes: the 23 ResNet-50 convolutions of /work/shared/bench/resnet50_conv_b32.csv (inlined
below) at batch 2 (the 7x7 C=3 stem runs on channel-padded copies), two of them at batch 32 (several tiles per
persistent block), and odd shapes (channels and extents off the tile sizes, batch 1, dilation,
asymmetric stride and padding, K below the tile width), each tile width and a small persistent
grid forced through MAX_CONV_SM90_BN / MAX_CONV_SM90_GRID. CUDA graphs are off so that every
execution goes through the dispatch. Skips without an sm_90 GPU."""

import math

import numpy as np
import pytest

from engine_util import session
from helpers import VALUE_TYPES
from max import driver
from max._core import driver as core
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops
from max.graph.type import ConvInputLayout, FilterLayout

pytestmark = pytest.mark.gpu
GPU, CPU = DeviceRef.GPU(), DeviceRef.CPU()
DTYPES = [DType.bfloat16, DType.float16]
EPS = {DType.bfloat16: 2.0**-8, DType.float16: 2.0**-11}

# name, count, N, H, W, C, K, R, S, stride, pad (resnet50_conv_b32.csv)
RESNET50 = """\
stem_7x7_s2,1,32,224,224,3,64,7,7,2,3
s2_1x1_64_64,1,32,56,56,64,64,1,1,1,0
s2_3x3_64,3,32,56,56,64,64,3,3,1,1
s2_1x1_64_256,4,32,56,56,64,256,1,1,1,0
s2_1x1_256_64,2,32,56,56,256,64,1,1,1,0
s3_1x1_256_128,1,32,56,56,256,128,1,1,1,0
s3_3x3_128_s2,1,32,56,56,128,128,3,3,2,1
s3_ds_256_512_s2,1,32,56,56,256,512,1,1,2,0
s3_3x3_128,3,32,28,28,128,128,3,3,1,1
s3_1x1_128_512,4,32,28,28,128,512,1,1,1,0
s3_1x1_512_128,3,32,28,28,512,128,1,1,1,0
s4_1x1_512_256,1,32,28,28,512,256,1,1,1,0
s4_3x3_256_s2,1,32,28,28,256,256,3,3,2,1
s4_ds_512_1024_s2,1,32,28,28,512,1024,1,1,2,0
s4_3x3_256,5,32,14,14,256,256,3,3,1,1
s4_1x1_256_1024,6,32,14,14,256,1024,1,1,1,0
s4_1x1_1024_256,5,32,14,14,1024,256,1,1,1,0
s5_1x1_1024_512,1,32,14,14,1024,512,1,1,1,0
s5_3x3_512_s2,1,32,14,14,512,512,3,3,2,1
s5_ds_1024_2048_s2,1,32,14,14,1024,2048,1,1,2,0
s5_3x3_512,2,32,7,7,512,512,3,3,1,1
s5_1x1_512_2048,3,32,7,7,512,2048,1,1,1,0
s5_1x1_2048_512,2,32,7,7,2048,512,1,1,1,0
"""


class Conv:
    """One conv2d problem: x [n, h, w, c], filter RSCF [r, s, c, k], stride, dilation, padding
    (top, bottom, left, right); `sm90` says whether the Hopper kernel must take it."""

    def __init__(self, name, n, h, w, c, k, r, s, stride=1, pad=0, dil=1, sm90=True):
        self.name, self.n, self.h, self.w, self.c, self.k, self.r, self.s = name, n, h, w, c, k, r, s
        self.stride = (stride, stride) if isinstance(stride, int) else tuple(stride)
        self.dil = (dil, dil) if isinstance(dil, int) else tuple(dil)
        self.pad = (pad,) * 4 if isinstance(pad, int) else tuple(pad)
        self.sm90 = sm90

    def __repr__(self):
        return self.name

    def out_hw(self):
        sizes = []
        for i, (size, kernel) in enumerate(((self.h, self.r), (self.w, self.s))):
            room = size + self.pad[2 * i] + self.pad[2 * i + 1] - self.dil[i] * (kernel - 1) - 1
            sizes.append(room // self.stride[i] + 1)
        return tuple(sizes)


def resnet_shapes(batch):
    out = []
    for line in RESNET50.splitlines():
        name, _, _, h, w, c, k, r, s, stride, pad = line.split(",")
        h, w, c, k, r, s, stride, pad = map(int, (h, w, c, k, r, s, stride, pad))
        out.append(Conv(f"{name}_b{batch}", batch, h, w, c, k, r, s, stride, pad))
    return out


RESNET_B2 = resnet_shapes(2)
ODD = [
    Conv("stem_7x7_s2_c3_padded", 2, 31, 29, 3, 64, 7, 7, 2, 3),
    Conv("k12_falls_back", 2, 9, 9, 16, 12, 3, 3, 1, 1, sm90=False),
    Conv("1x1_s2", 2, 15, 13, 64, 64, 1, 1, 2, 0),
    Conv("c24_k40", 2, 11, 13, 24, 40, 3, 3, 1, 1),
    Conv("c8_k8", 3, 10, 9, 8, 8, 3, 3, 1, 1),
    Conv("c72_k200_partial_slices_and_columns", 2, 9, 11, 72, 200, 3, 3, 1, 1),
    Conv("c136_k328", 1, 7, 6, 136, 328, 1, 1, 1, 0),
    Conv("hw_off_tiles_13x17", 2, 13, 17, 64, 96, 3, 3, 1, 1),
    Conv("batch1", 1, 19, 23, 32, 64, 3, 3, 1, 1),
    Conv("dilation2", 2, 16, 15, 32, 64, 3, 3, 1, 2, 2),
    Conv("dilation_2x3_pad2", 2, 17, 19, 16, 32, 3, 3, 1, 2, (2, 3)),
    Conv("pad0_3x3", 2, 12, 12, 32, 32, 3, 3, 1, 0),
    Conv("pad2_5x5", 2, 12, 10, 32, 48, 5, 5, 1, 2),
    Conv("pad_asym_0_1_1_2", 2, 10, 12, 16, 24, 3, 3, 1, (0, 1, 1, 2)),
    Conv("pad_beyond_filter", 1, 6, 5, 16, 16, 3, 3, 1, 4),
    Conv("rect_filter_1x3_stride_2x1", 2, 14, 15, 32, 64, 1, 3, (2, 1), (0, 0, 1, 1)),
    Conv("rect_filter_5x2_stride_1x3", 2, 14, 15, 16, 32, 5, 2, (1, 3), (2, 2, 0, 1)),
    Conv("stride3_3x3", 2, 20, 19, 32, 32, 3, 3, 3, 1),
    Conv("stride8_1x1", 2, 33, 41, 16, 16, 1, 1, 8, 0),
    Conv("k_below_bn_k16", 2, 23, 21, 64, 16, 3, 3, 1, 1),
    Conv("m_not_128_multiple", 3, 7, 11, 64, 128, 3, 3, 1, 1),  # M = 231
    Conv("one_pixel", 1, 1, 1, 64, 64, 1, 1, 1, 0),
    Conv("window_equals_input", 2, 5, 5, 32, 64, 5, 5, 1, 0),
]


@pytest.fixture
def sm90(gpu, monkeypatch):
    """The GPU with MAX_CONV_SM90=1 and CUDA graphs off; skips unless it is sm_90a."""
    if gpu.architecture_name != "sm_90a":
        pytest.skip(f"the Hopper conv2d needs sm_90a, this GPU is {gpu.architecture_name}")
    monkeypatch.setenv("MAX_CONV_SM90", "1")
    monkeypatch.setenv("MAX_CUDA_GRAPHS", "0")
    for var in ("MAX_CONV_SM90_BN", "MAX_CONV_SM90_GRID", "MAX_CONV_SM90_SPLITK", "MAX_CONV_SM90_PREFETCH",
                "MAX_CONV_SM90_FOLD"):
        monkeypatch.delenv(var, raising=False)
    return gpu


def conv_ref(x, w, cv):
    """float64 conv2d: x [N, H, W, C], w [R, S, C, K] -> [N, P, Q, K], tap by tap."""
    (p, q), (sh, sw), (dh, dw) = cv.out_hw(), cv.stride, cv.dil
    xp = np.pad(x, [(0, 0), cv.pad[:2], cv.pad[2:], (0, 0)])
    out = np.zeros((x.shape[0], p, q, w.shape[-1]))
    for r in range(cv.r):
        for s in range(cv.s):
            patch = xp[:, r * dh : r * dh + sh * (p - 1) + 1 : sh, s * dw : s * dw + sw * (q - 1) + 1 : sw]
            out += patch @ w[r, s]
    return out


def build(cv, dtype, device, bias, const_filter=None):
    """The conv as a graph on `device` with a symbolic batch dim; the filter is an input, or a
    constant when `const_filter` is given."""
    types = [TensorType(dtype, ("batch", cv.h, cv.w, cv.c), device)]
    if const_filter is None:
        types.append(TensorType(dtype, (cv.r, cv.s, cv.c, cv.k), device))
    if bias:
        types.append(TensorType(dtype, (cv.k,), device))

    def fn(x, *rest):
        rest = list(rest)
        f = ops.constant(const_filter, dtype, device) if const_filter is not None else rest.pop(0)
        return ops.conv2d(
            x,
            f,
            stride=cv.stride,
            dilation=cv.dil,
            padding=cv.pad,
            bias=rest[0] if bias else None,
            input_layout=ConvInputLayout.NHWC,
            filter_layout=FilterLayout.RSCF,
        )

    return Graph(f"conv_{cv.name}", fn, input_types=types)


def execute(model, inputs, gpu=None):
    args = [driver.Buffer.from_numpy(np.ascontiguousarray(a)).to(gpu) if gpu is not None else a for a in inputs]
    return [o.to_numpy() for o in model.execute(*args)]


def run_gpu(model, inputs, gpu, cv):
    """Runs the GPU model, checking that the Hopper kernel ran exactly when it must."""
    before = core._conv_sm90_launches()
    (g,) = execute(model, inputs, gpu)
    launched = core._conv_sm90_launches() - before
    assert launched == (1 if cv.sm90 else 0), f"{cv}: {launched} launches of the Hopper conv2d"
    return g


def bits(a):
    return np.ascontiguousarray(a).view(np.uint16)


def check_exact(g, want, what):
    assert g.shape == want.shape, (what, g.shape, want.shape)
    bad = bits(g) != bits(want)
    if bad.any():
        at = np.argwhere(bad)[:4].tolist()
        raise AssertionError(f"{what}: {bad.sum()} of {bad.size} differ, first at {at}: got "
                             f"{g.astype(np.float64)[bad][:4]} want {want.astype(np.float64)[bad][:4]}")


def check_close(g, ref, cv, dtype, what, ulps=1):
    """|g - ref| <= ulps * eps * (|ref| + sqrt(R*S*C)) (inputs of unit variance): the output's
    rounding (half an ulp against float64; against another rounded result, which may land on
    the other side of a rounding boundary, a whole one), plus accumulation error."""
    assert g.shape == ref.shape, (what, g.shape, ref.shape)
    err = np.abs(g.astype(np.float64) - ref)
    bound = ulps * EPS[dtype] * (np.abs(ref) + math.sqrt(cv.r * cv.s * cv.c))
    bad = ~(err <= bound)
    assert not bad.any(), (f"{what}: {bad.sum()} of {bad.size} differ, worst error {err.max():.4g}, e.g. got "
                           f"{g.astype(np.float64)[bad][:4]} want {ref[bad][:4]}")


def run_case(gpu, rng, cv, dtype, exact, bias=True, batches=None, const_filter=False, with_cpu=True):
    vt = VALUE_TYPES[dtype]
    if exact:
        w = rng.integers(-1, 2, size=(cv.r, cv.s, cv.c, cv.k)).astype(vt)
        b = rng.integers(-4, 5, size=(cv.k,)).astype(vt)
    else:
        w = rng.standard_normal((cv.r, cv.s, cv.c, cv.k)).astype(vt)
        b = rng.standard_normal((cv.k,)).astype(vt)
    fixed = w if const_filter else None
    dev = session(gpu).load(build(cv, dtype, GPU, bias, fixed))
    cpu = session().load(build(cv, dtype, CPU, bias, fixed)) if with_cpu else None
    for n in batches or (cv.n,):
        shape = (n, cv.h, cv.w, cv.c)
        x = rng.integers(-1, 2, size=shape).astype(vt) if exact else rng.standard_normal(shape).astype(vt)
        inputs = [x] + ([] if const_filter else [w]) + ([b] if bias else [])
        g = run_gpu(dev, inputs, gpu, cv)
        ref = conv_ref(x.astype(np.float64), w.astype(np.float64), cv) + (b.astype(np.float64) if bias else 0)
        what = f"{cv} {dtype.name} batch {n}"
        c = execute(cpu, inputs)[0] if with_cpu else None
        if exact:
            check_exact(g, ref.astype(np.float32).astype(vt), what + " vs float64")
            if with_cpu:
                check_exact(g, c, what + " vs CPU")
        else:
            check_close(g, ref, cv, dtype, what + " vs float64")
            if with_cpu:
                check_close(g, c.astype(np.float64), cv, dtype, what + " vs CPU", ulps=2)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("cv", RESNET_B2, ids=repr)
def test_resnet50_shapes_exact(sm90, rng, cv, dtype):
    run_case(sm90, rng, cv, dtype, exact=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("cv", RESNET_B2, ids=repr)
def test_resnet50_shapes_random(sm90, rng, cv, dtype):
    run_case(sm90, rng, cv, dtype, exact=False)


@pytest.mark.parametrize("cv", [c for c in resnet_shapes(32) if c.name.startswith(("s2_3x3_64", "s4_1x1_256_1024"))],
                         ids=repr)
def test_resnet50_batch32(sm90, rng, cv):
    """Hundreds of tiles: every persistent block runs several, the ring wraps across tiles."""
    run_case(sm90, rng, cv, DType.bfloat16, exact=True, with_cpu=False)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("cv", ODD, ids=repr)
def test_odd_shapes(sm90, rng, cv, dtype):
    run_case(sm90, rng, cv, dtype, exact=True, batches=(cv.n, 1))
    run_case(sm90, rng, cv, dtype, exact=False)


@pytest.mark.parametrize("cv", [ODD[3], ODD[5], ODD[9], RESNET_B2[2], RESNET_B2[7]], ids=repr)
def test_without_bias_and_with_a_constant_filter(sm90, rng, cv):
    run_case(sm90, rng, cv, DType.bfloat16, exact=True, bias=False)
    run_case(sm90, rng, cv, DType.float16, exact=True, const_filter=True)


@pytest.mark.parametrize("bn", ["64", "128", "256"])
@pytest.mark.parametrize("grid", [None, "1", "5"])
@pytest.mark.parametrize("cv", [ODD[5], ODD[7], RESNET_B2[2], RESNET_B2[6], RESNET_B2[13]], ids=repr)
def test_forced_tile_width_and_grid(sm90, rng, monkeypatch, cv, bn, grid):
    """Each column-tile width (more column tiles than K needs included), and persistent grids of
    1 and 5 blocks: one block walks every tile, so the ring's phases wrap many times."""
    monkeypatch.setenv("MAX_CONV_SM90_BN", bn)
    if grid is not None:
        monkeypatch.setenv("MAX_CONV_SM90_GRID", grid)
    run_case(sm90, rng, cv, DType.bfloat16, exact=True, with_cpu=False)


def test_opt_out(gpu, rng, monkeypatch):
    """With MAX_CONV_SM90=0 the Hopper kernel never runs."""
    monkeypatch.setenv("MAX_CONV_SM90", "0")
    monkeypatch.setenv("MAX_CUDA_GRAPHS", "0")
    cv = Conv("default_path", 2, 9, 9, 64, 64, 3, 3, 1, 1, sm90=False)
    run_case(gpu, rng, cv, DType.bfloat16, exact=True)


def test_on_by_default(sm90, rng, monkeypatch):
    """Without MAX_CONV_SM90 set the Hopper kernel takes an eligible shape."""
    monkeypatch.delenv("MAX_CONV_SM90", raising=False)
    cv = Conv("default_on", 2, 9, 9, 64, 64, 3, 3, 1, 1)
    run_case(sm90, rng, cv, DType.bfloat16, exact=True)


def test_float32_keeps_the_generic_path(sm90, rng):
    cv = Conv("f32", 2, 9, 9, 64, 64, 3, 3, 1, 1, sm90=False)
    w = rng.standard_normal((3, 3, 64, 64)).astype(np.float32)
    x = rng.standard_normal((2, 9, 9, 64)).astype(np.float32)
    dev = session(sm90).load(build(cv, DType.float32, GPU, bias=False))
    g = run_gpu(dev, [x, w], sm90, cv)
    ref = conv_ref(x.astype(np.float64), w.astype(np.float64), cv)
    assert np.allclose(g, ref, rtol=1e-4, atol=1e-4)


# -- fused epilogues (engine/conv_epilogue.rs): conv2d [+ its bias] + b -> act -> [clamp] -> + beta * r

def sig(v):
    return 1 / (1 + np.exp(-v))


def erf(v):
    return np.vectorize(math.erf)(v)


EPI_ACTS = {  # name: (staged, float64 reference)
    "none": (lambda v: v, lambda v: v),
    "relu": (ops.relu, lambda v: np.maximum(v, 0)),
    "gelu": (ops.gelu, lambda v: 0.5 * v * (1 + erf(v / math.sqrt(2)))),
    "gelu_tanh": (lambda v: ops.gelu(v, approximate="tanh"),
                  lambda v: 0.5 * v * (1 + np.tanh(0.7978845608028654 * (v + 0.044715 * v**3)))),
    "gelu_quick": (lambda v: ops.gelu(v, approximate="quick"), lambda v: v * sig(1.702 * v)),
    "silu": (ops.silu, lambda v: v * sig(v)),
    "sigmoid": (ops.sigmoid, sig),
    "clamp": (lambda v: ops.min(ops.max(v, -4.0), 6.0), lambda v: np.clip(v, -4, 6)),
    "relu6": (lambda v: ops.min(ops.relu(v), 6.0), lambda v: np.clip(v, 0, 6)),
}
EPI_SHAPES = [ODD[3], ODD[5], ODD[16], RESNET_B2[3], RESNET_B2[6]]


def run_epilogue(gpu, rng, cv, dtype, act, conv_bias, beta, exact):
    """The fused block on the GPU (one step, on the Hopper kernel) against float64 and the CPU
    (which runs it unfused, rounding each intermediate)."""
    vt = VALUE_TYPES[dtype]
    p, q = cv.out_hw()
    taps = cv.r * cv.s * cv.c
    if exact:
        gen = lambda shape, lim=1: rng.integers(-lim, lim + 1, size=shape).astype(vt)  # noqa: E731
        x, w, b, cb, r = gen((cv.n, cv.h, cv.w, cv.c)), gen((cv.r, cv.s, cv.c, cv.k)), gen((cv.k,), 4), \
            gen((cv.k,), 4), gen((cv.n, p, q, cv.k), 4)
    else:
        gen = lambda shape, scale=1.0: (rng.standard_normal(shape) * scale).astype(vt)  # noqa: E731
        x, w, b, cb, r = gen((cv.n, cv.h, cv.w, cv.c)), gen((cv.r, cv.s, cv.c, cv.k), 1 / math.sqrt(taps)), \
            gen((cv.k,)), gen((cv.k,)), gen((cv.n, p, q, cv.k))

    def fn(x, w, b, r, *rest):
        y = ops.conv2d(x, w, stride=cv.stride, dilation=cv.dil, padding=cv.pad, bias=rest[0] if conv_bias else None)
        y = EPI_ACTS[act][0](y + b)
        return y + (r if beta == 1 else r * beta)

    inputs = [x, w, b, r] + ([cb] if conv_bias else [])
    types = lambda dev: [TensorType(dtype, a.shape, dev) for a in inputs]  # noqa: E731
    dev = session(gpu).load(Graph("conv_epi_gpu", fn, input_types=types(GPU)))
    args = [driver.Buffer.from_numpy(np.ascontiguousarray(a)).to(gpu) for a in inputs]
    report = dev._plan_report(*args)
    assert "conv[conv2d" in report, report
    g = run_gpu(dev, inputs, gpu, cv)
    (c,) = execute(session().load(Graph("conv_epi_cpu", fn, input_types=types(CPU))), inputs)
    y = conv_ref(x.astype(np.float64), w.astype(np.float64), cv) + b.astype(np.float64)
    if conv_bias:
        y = y + cb.astype(np.float64)
    ref = EPI_ACTS[act][1](y) + beta * r.astype(np.float64)
    what = f"{cv} {dtype.name} {act} conv_bias={conv_bias} beta={beta}"
    if exact:
        check_exact(g, ref.astype(np.float32).astype(vt), what + " vs float64")
    else:
        # The lean epilogue may round relu's output before adding beta * r (its packed arithmetic):
        # half an ulp of that too.
        err = np.abs(g.astype(np.float64) - ref)
        bound = EPS[dtype] * (np.abs(ref) + np.abs(EPI_ACTS[act][1](y))) + 1e-3
        assert (err <= bound).all(), f"{what}: worst error {err.max():.4g} against float64"
    # The CPU runs the chain unfused and rounds each intermediate (the conv, + b, the
    # activation, + beta * r): half an ulp of each, none amplified by the activations.
    tol = 4 * EPS[dtype] * (np.abs(y) + np.abs(beta * r.astype(np.float64)) + np.abs(ref) + 1)
    err = np.abs(g.astype(np.float64) - c.astype(np.float64))
    assert (err <= tol).all(), f"{what}: worst error {err.max():.4g} against the CPU"


def run_resnet50_3x3_block(gpu, rng):
    """The ResNet-50 28x28 3x3 128 -> 128 block at batch 32 (no conv bias, relu, + r), bf16,
    exact against float64: where the epilogue paths' defaults are checked."""
    (cv,) = [c for c in resnet_shapes(32) if c.name == "s3_3x3_128_b32"]
    run_epilogue(gpu, rng, cv, DType.bfloat16, "relu", conv_bias=False, beta=1, exact=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("act", list(EPI_ACTS))
def test_fused_epilogue_every_activation(sm90, rng, dtype, act):
    for i, cv in enumerate(EPI_SHAPES):
        run_epilogue(sm90, rng, cv, dtype, act, conv_bias=i % 2 == 0, beta=(1, 0.5)[i % 2], exact=False)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("act", ["none", "relu", "clamp", "relu6"])
@pytest.mark.parametrize("cv", EPI_SHAPES, ids=repr)
def test_fused_epilogue_exact(sm90, rng, cv, dtype, act):
    """Integer data: relu, clamp and beta = 0.5 keep every value exact until the one rounding."""
    run_epilogue(sm90, rng, cv, dtype, act, conv_bias=True, beta=0.5, exact=True)
