"""Shared by the Hopper conv2d tests (tests/test_conv2d_sm90*.py): the problems (the ResNet-50
convolutions and odd shapes), the float64 reference, graphs for a plain conv and a fused block
(conv2d [+ its bias] + b -> act -> [clamp] -> + beta * r), runs on the GPU that check through the
launch record that the Hopper kernel ran exactly when it must, and the comparisons: bit for bit,
within the dtype's rounding, or the same bits but for a contracted multiply-add.

A run's launch records also go to every open `launched()` block, so that a test can say which
configuration its runs took."""

import math
from contextlib import contextmanager

import numpy as np

from engine_util import session
from helpers import VALUE_TYPES
from max import driver, tuning
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops
from max.graph.type import ConvInputLayout, FilterLayout

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

# Channel padding (C % 8 != 0): the input and filter copied with zero channels added, plain or
# folded.
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
# Late ResNet-50 layers (7x7 and 14x14 outputs: few row tiles, long reductions) at small
# batches, and two odd ones (partial channel slices and column tiles; a padded stem): split-K.
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
# Fused blocks: M and K off the tile sizes, 1x1 (tiled A) and strided.
PREFETCH = [LATE[4], ODD[5], RESNET_B2[3], RESNET_B2[6], Conv("m_partial", 3, 7, 11, 64, 128, 3, 3, 1, 1)]
# PREFETCH, then K = 40 (one box, partly past K) and K = 328 (256-wide tiles: boxes past K).
RING_SHAPES = PREFETCH + [ODD[3], ODD[6]]
# Forced tile forms (plain convs).
FORM_SHAPES = [
    ODD[5],  # c72_k200: partial channel slices and column tiles
    ODD[7],  # 13x17 output, off the tile sizes
    ODD[20],  # M = 231
    RESNET_B2[1],  # 56x56 1x1 64 -> 64 (tiled A)
    RESNET_B2[6],  # 3x3 stride 2
    Conv("dilated_strided", 2, 17, 19, 16, 64, 3, 3, 2, (2, 1, 0, 2), 2),
]
# Clusters of two (an even number of column tiles), M off the tile size.
CLUSTER_SHAPES = [
    Conv("1x1_512_256", 2, 28, 28, 512, 256, 1, 1, 1, 0),  # 1568 rows: the last tile's half past M
    Conv("1x1_256_1024_m_off", 3, 11, 13, 256, 1024, 1, 1, 1, 0),  # 429 rows, 8 column tiles
    Conv("3x3_128_256", 2, 14, 14, 128, 256, 3, 3, 1, 1),
    Conv("3x3_s2_64_256", 3, 15, 17, 64, 256, 3, 3, 2, 1),
    Conv("1x1_m_below_96", 1, 9, 9, 64, 256, 1, 1, 1, 0),  # 81 rows: the second half wholly past M
]


def resnet_b32(name):
    """The ResNet-50 convolution `name` at batch 32."""
    (cv,) = [c for c in resnet_shapes(32) if c.name == f"{name}_b32"]
    return cv


# -- launch records

_OPEN: list[list[dict]] = []


@contextmanager
def launched():
    """The launch records of every run inside the block (a list, filled as they run)."""
    got: list[dict] = []
    _OPEN.append(got)
    try:
        yield got
    finally:
        _OPEN.remove(got)


def count(records, family="conv_sm90", **fields):
    """How many of `records` are of `family` with every field equal to the given value."""
    return sum(r["family"] == family and all(r[k] == v for k, v in fields.items()) for r in records)


def convs(records):
    return [r for r in records if r["family"] == "conv_sm90"]


def execute(model, inputs, gpu=None):
    args = [driver.Buffer.from_numpy(np.ascontiguousarray(a)).to(gpu) if gpu is not None else a for a in inputs]
    return [o.to_numpy() for o in model.execute(*args)]


def run_gpu(model, inputs, gpu, cv):
    """Runs the GPU model, checking that the Hopper kernel ran exactly when it must."""
    with tuning.record_launches() as log:
        (g,) = execute(model, inputs, gpu)
    records = log.records()
    launches = count(records)
    assert launches == (1 if cv.sm90 else 0), f"{cv}: {launches} launches of the Hopper conv2d"
    for block in _OPEN:
        block.extend(records)
    return g


# -- the reference and the graphs

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



# -- fused epilogues (engine/conv_epilogue.rs): conv2d [+ its bias] + b -> act -> [clamp] -> + beta * r

def sig(v):
    return 1 / (1 + np.exp(-v))


def erf(v):
    return np.vectorize(math.erf)(v)


EPI_ACTS = {  # name: (graph ops, float64 reference)
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
    (which runs it unfused, rounding each intermediate); the GPU result and the inputs
    (x, w, b, r[, the conv's bias])."""
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
    return g, inputs


def run_resnet50_3x3_block(gpu, rng):
    """The ResNet-50 28x28 3x3 128 -> 128 block at batch 32 (no conv bias, relu, + r), bf16,
    exact against float64: where the epilogue paths' defaults are checked."""
    run_epilogue(gpu, rng, resnet_b32("s3_3x3_128"), DType.bfloat16, "relu", conv_bias=False, beta=1, exact=True)


def fused_run(gpu, seed, cv, dtype, act="relu", spec=""):
    """The fused block's output bits (relu or `act`, the conv's bias, beta 0.5) under the knobs of
    `spec`, and its inputs (x, w, b, r, the conv's bias); the same inputs per seed. The residual
    prefetch is on, and the lean epilogue's packed arithmetic (which rounds relu's output before
    the residual is added) off unless `spec` says otherwise, so that every path compared does
    the same arithmetic."""
    with tuning.override("conv.prefetch=1,conv.packed=0" + (f",{spec}" if spec else "")):
        g, inputs = run_epilogue(gpu, np.random.default_rng(seed), cv, dtype, act, True, 0.5, exact=False)
    return bits(g), inputs


def fused_bits(gpu, seed, cv, dtype, act="relu", spec=""):
    return fused_run(gpu, seed, cv, dtype, act, spec)[0]


def assert_same_but_contraction(got, want, dtype, what):
    """The same bits, but for a multiply-add the compiler might contract in one path only (one
    rounding of the last step): one unit in the last place at most."""
    vt = VALUE_TYPES[dtype]
    a, b = got.view(vt).astype(np.float64), want.view(vt).astype(np.float64)
    bad = ~(np.abs(a - b) <= EPS[dtype] * np.abs(b))
    assert not bad.any(), f"{what}: {bad.sum()} elements differ, e.g. {a[bad][:4]} vs {b[bad][:4]}"


def bias_act(gpu, rng, cv, dtype, conv_bias, fused_bias, relu):
    """conv2d (+ its bias) (+ a fused bias) (relu) without a residual, for integer inputs: the
    GPU result and the float64 reference rounded once to the dtype."""
    vt = VALUE_TYPES[dtype]
    gen = lambda shape, lim=1: rng.integers(-lim, lim + 1, size=shape).astype(vt)  # noqa: E731
    x, w, cb, b = gen((cv.n, cv.h, cv.w, cv.c)), gen((cv.r, cv.s, cv.c, cv.k)), gen((cv.k,), 4), gen((cv.k,), 4)

    def fn(x, w, cb, b):
        y = ops.conv2d(x, w, stride=cv.stride, dilation=cv.dil, padding=cv.pad, bias=cb if conv_bias else None,
                       input_layout=ConvInputLayout.NHWC, filter_layout=FilterLayout.RSCF)
        if fused_bias:
            y = y + b
        return ops.relu(y) if relu else y

    inputs = [x, w, cb, b]
    types = [TensorType(dtype, a.shape, GPU) for a in inputs]
    model = session(gpu).load(Graph("conv_bias_act", fn, input_types=types))
    g = run_gpu(model, inputs, gpu, cv)
    ref = conv_ref(x.astype(np.float64), w.astype(np.float64), cv)
    if conv_bias:
        ref = ref + cb.astype(np.float64)
    if fused_bias:
        ref = ref + b.astype(np.float64)
    if relu:
        ref = np.maximum(ref, 0)
    return g, ref.astype(np.float32).astype(vt)


def plain_bits(gpu, rng, cv, dtype, spec=""):
    """The plain conv's output bits for integer inputs under the knobs of `spec`, checked exact
    against float64."""
    vt = VALUE_TYPES[dtype]
    gen = lambda shape: rng.integers(-1, 2, size=shape).astype(vt)  # noqa: E731
    x, w = gen((cv.n, cv.h, cv.w, cv.c)), gen((cv.r, cv.s, cv.c, cv.k))
    with tuning.override(spec):
        model = session(gpu).load(build(cv, dtype, GPU, bias=False))
        g = run_gpu(model, [x, w], gpu, cv)
    want = conv_ref(x.astype(np.float64), w.astype(np.float64), cv).astype(np.float32).astype(vt)
    check_exact(g, want, f"{cv} {dtype.name} {spec}")
    return bits(g)
