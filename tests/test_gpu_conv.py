"""The conv ops on the GPU: conv2d, conv3d, conv2d_transpose, max_pool2d, avg_pool2d and fold,
each staged twice (CPU and GPU inputs) and run on both backends, against each other and against
the float64 numpy references of tests/conv_util.py. Pooling, fold and depthwise
convolutions are bit-identical to the CPU (same order of operations); integer results are
exact; the GEMM-based float paths agree within the dtype's rounding. Every graph has a symbolic
batch dim, run at two sizes. Every test skips without a GPU."""

import numpy as np
import pytest

from engine_util import session
from max import driver
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops
from max.graph.type import FilterLayout
from conv_util import (
    CONV2D,
    CONV3D,
    CONV_T,
    FILTER_PERM,
    FLOATS,
    FOLDS,
    NCHW,
    NHWC,
    POOLS,
    T_FILTER_PERM,
    compare,
    conv_ref,
    conv_t_ref,
    f64,
    fold_ref,
    ids,
    pool_ref,
    random,
    to_nchw,
)

pytestmark = pytest.mark.gpu
GPU, CPU = DeviceRef.GPU(), DeviceRef.CPU()
INTS = [DType.int8, DType.int32, DType.int64, DType.uint8, DType.uint64]


def models(fn, types, gpu):
    """`fn` staged with CPU inputs and with GPU inputs; both loaded."""
    cpu = session().load(Graph("cpu", fn, input_types=[TensorType(d, s, CPU) for d, s in types]))
    dev = session(gpu).load(Graph("gpu", fn, input_types=[TensorType(d, s, GPU) for d, s in types]))
    return cpu, dev


def execute(model, inputs, gpu=None):
    args = [driver.Buffer.from_numpy(np.ascontiguousarray(x)).to(gpu) if gpu is not None else x for x in inputs]
    return [o.to_numpy() for o in model.execute(*args)]


def loose(scale, ref):
    """A `scale` for compare() that allows 4x the CPU tests' rounding (other summation orders)."""
    return 4 * scale + 3 * np.abs(ref)


def same_bits(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    bad = np.asarray(a).view(np.uint8) != np.asarray(b).view(np.uint8)
    assert not bad.any(), f"{bad.sum()} bytes differ from the CPU's"


def check(g, c, ref, scale, dtype, exact=False):
    """GPU result `g` against the CPU's `c` and the float64 reference."""
    assert g.shape == ref.shape == c.shape
    if exact or not dtype.is_float():
        same_bits(g, c)
    else:
        compare(g, f64(c), loose(scale, f64(c)), dtype)
    compare(g, ref, loose(scale, ref) if dtype.is_float() else scale, dtype)


def pair(v, n=2):
    return (v,) * n if isinstance(v, int) else tuple(v)


# -- conv2d / conv3d --------------------------------------------------------------------------

GPU_CONV2D = CONV2D + [
    ((2, 31, 29, 3), (7, 7, 3, 40), dict(stride=2, padding=(3, 3, 3, 3))),  # a stem: 7x7/2, C=3, F=40
    ((1, 17, 15, 16), (3, 3, 16, 32), dict(padding=(1, 1, 1, 1))),  # K, F multiples of 8: tensor cores
    ((3, 9, 7, 16), (1, 1, 16, 24), {}),  # 1x1, aligned: the GEMM reads x itself
    ((2, 10, 9, 8), (3, 3, 4, 16), dict(groups=2, padding=(1, 1, 1, 1))),
]


def is_depthwise(fs, kw):
    return fs[-2] == 1 and kw.get("groups", 1) > 1


def run_conv(gpu, rng, dtype, xs, fs, kw, nd=2, input_layout=NHWC, filter_layout=None, bias=True, batches=None):
    """conv2d (nd=2) or conv3d on both backends; x is generated channels-last ([N, *S, C]) and
    the filter as [*K, C/groups, F], then laid out as asked."""
    filter_layout = filter_layout or ("RSCF" if nd == 2 else "QRSCF")
    w = random(rng, dtype, fs)
    wl = np.ascontiguousarray(w.transpose(FILTER_PERM[filter_layout]))
    xshape = (xs[-1], *xs[1:-1]) if input_layout == NCHW else xs[1:]
    types = [(dtype, ("batch", *xshape)), (dtype, wl.shape)] + ([(dtype, (fs[-1],))] if bias else [])
    op = ops.conv2d if nd == 2 else ops.conv3d

    def fn(x, f, *b):
        return op(x, f, bias=b[0] if b else None, input_layout=input_layout, filter_layout=FilterLayout(filter_layout), **kw)

    cpu, dev = models(fn, types, gpu)
    args = dict(
        stride=pair(kw.get("stride", 1), nd),
        dil=pair(kw.get("dilation", 1), nd),
        pad=kw.get("padding", (0,) * (2 * nd)),
        groups=kw.get("groups", 1),
    )
    for batch in batches or (xs[0], 1):
        x = random(rng, dtype, (batch, *xs[1:]))
        b = random(rng, dtype, (fs[-1],)) if bias else None
        inputs = [np.ascontiguousarray(np.moveaxis(x, -1, 1)) if input_layout == NCHW else x, wl] + ([b] if bias else [])
        (c,) = execute(cpu, inputs)
        (g,) = execute(dev, inputs, gpu)
        ref = conv_ref(f64(x), f64(w), **args)
        scale = conv_ref(np.abs(f64(x)), np.abs(f64(w)), **args)
        if bias:
            ref, scale = ref + f64(b), scale + np.abs(f64(b))
        check(g, c, ref, scale, dtype, exact=is_depthwise(fs, kw))


@pytest.mark.parametrize("dtype", FLOATS + [DType.int32, DType.uint8, DType.bool], ids=ids)
@pytest.mark.parametrize(("xs", "fs", "kw"), GPU_CONV2D, ids=ids)
def test_conv2d(gpu, rng, dtype, xs, fs, kw):
    run_conv(gpu, rng, dtype, xs, fs, kw, bias=dtype is not DType.bool)


@pytest.mark.parametrize("input_layout", [NHWC, NCHW], ids=ids)
@pytest.mark.parametrize("filter_layout", ["RSCF", "FCRS", "CFRS"])
@pytest.mark.parametrize(("xs", "fs", "kw"), [CONV2D[1], CONV2D[4], CONV2D[6], GPU_CONV2D[-1]], ids=ids)
def test_conv2d_layouts_and_bias(gpu, rng, input_layout, filter_layout, xs, fs, kw):
    for dtype in (DType.float32, DType.bfloat16, DType.float16, DType.int32):
        run_conv(gpu, rng, dtype, xs, fs, kw, input_layout=input_layout, filter_layout=filter_layout)


@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16, DType.float16], ids=ids)
@pytest.mark.parametrize(
    ("xs", "fs", "kw"),
    [
        ((4, 32, 30, 16), (3, 3, 16, 32), dict(padding=(1, 1, 1, 1))),  # M >= 256: the Hopper GEMM
        ((1, 4, 4, 1024), (1, 1, 1024, 256), {}),  # 1x1, long K
        ((2, 16, 16, 64), (1, 1, 64, 128), {}),  # 1x1 with M >= 256
        ((1, 8, 8, 384), (3, 3, 384, 64), dict(padding=(1, 1, 1, 1))),
        ((2, 40, 36, 32), (3, 3, 1, 32), dict(groups=32, stride=2, padding=(1, 1, 1, 1))),  # depthwise
        ((1, 30, 30, 12), (3, 3, 4, 24), dict(groups=3, padding=(1, 1, 1, 1))),  # batched groups
    ],
    ids=ids,
)
def test_conv2d_large(gpu, rng, dtype, xs, fs, kw):
    run_conv(gpu, rng, dtype, xs, fs, kw, batches=(xs[0], xs[0] + 1))


def test_conv2d_in_chunks(gpu, rng):
    """About a million output positions: the im2col scratch (256 MB) takes two chunks, the
    second starting inside an image."""
    run_conv(gpu, rng, DType.bfloat16, (4, 512, 512, 16), (3, 3, 16, 16), dict(padding=(1, 1, 1, 1)), batches=(4,))


@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16, DType.float64, DType.int32], ids=ids)
@pytest.mark.parametrize("layouts", [(NHWC, "QRSCF"), (NCHW, "FCQRS"), (NHWC, "FCQRS"), (NCHW, "QRSCF")], ids=ids)
@pytest.mark.parametrize(("xs", "fs", "kw"), CONV3D, ids=ids)
def test_conv3d(gpu, rng, dtype, layouts, xs, fs, kw):
    input_layout, filter_layout = layouts
    run_conv(gpu, rng, dtype, xs, fs, kw, nd=3, input_layout=input_layout, filter_layout=filter_layout, batches=(xs[0], 3))


# -- conv2d_transpose -------------------------------------------------------------------------


def run_conv_t(gpu, rng, dtype, xs, fs, kw, input_layout=NHWC, filter_layout="RSCF", batches=None):
    w = random(rng, dtype, fs)
    wl = np.ascontiguousarray(w.transpose(T_FILTER_PERM[filter_layout]))
    xshape = (xs[3], *xs[1:3]) if input_layout == NCHW else xs[1:]
    types = [(dtype, ("batch", *xshape)), (dtype, wl.shape), (dtype, (fs[2],))]

    def fn(x, f, b):
        return ops.conv2d_transpose(x, f, bias=b, input_layout=input_layout, filter_layout=FilterLayout(filter_layout), **kw)

    cpu, dev = models(fn, types, gpu)
    args = dict(
        stride=pair(kw.get("stride", 1)),
        dil=pair(kw.get("dilation", 1)),
        pad=kw.get("padding", (0, 0, 0, 0)),
        out_pad=kw.get("output_paddings", (0, 0)),
    )
    for batch in batches or (xs[0], 1):
        x, b = random(rng, dtype, (batch, *xs[1:])), random(rng, dtype, (fs[2],))
        inputs = [to_nchw(x) if input_layout == NCHW else x, wl, b]
        (c,) = execute(cpu, inputs)
        (g,) = execute(dev, inputs, gpu)
        ref = conv_t_ref(f64(x), f64(w), **args) + f64(b)
        scale = conv_t_ref(np.abs(f64(x)), np.abs(f64(w)), **args) + np.abs(f64(b))
        if input_layout == NCHW:
            ref, scale = to_nchw(ref), to_nchw(scale)
        check(g, c, ref, scale, dtype)


@pytest.mark.parametrize("dtype", FLOATS + [DType.int32, DType.int64, DType.uint8, DType.bool], ids=ids)
@pytest.mark.parametrize(("xs", "fs", "kw"), CONV_T, ids=ids)
def test_conv2d_transpose(gpu, rng, dtype, xs, fs, kw):
    run_conv_t(gpu, rng, dtype, xs, fs, kw)


@pytest.mark.parametrize("input_layout", [NHWC, NCHW], ids=ids)
@pytest.mark.parametrize("filter_layout", ["RSCF", "CFRS", "FCRS"])
@pytest.mark.parametrize(("xs", "fs", "kw"), [CONV_T[1], CONV_T[2], CONV_T[5]], ids=ids)
def test_conv2d_transpose_layouts(gpu, rng, input_layout, filter_layout, xs, fs, kw):
    for dtype in (DType.float32, DType.float16, DType.bfloat16, DType.int64):
        run_conv_t(gpu, rng, dtype, xs, fs, kw, input_layout, filter_layout)


@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16, DType.float16], ids=ids)
@pytest.mark.parametrize(
    ("xs", "fs", "kw"),
    [
        ((4, 20, 18, 16), (3, 3, 8, 16), dict(stride=2, padding=(1, 1, 1, 1), output_paddings=(1, 1))),
        ((1, 40, 36, 32), (4, 4, 16, 32), dict(stride=2, padding=(1, 1, 1, 1))),
    ],
    ids=ids,
)
def test_conv2d_transpose_large(gpu, rng, dtype, xs, fs, kw):
    run_conv_t(gpu, rng, dtype, xs, fs, kw, batches=(xs[0], xs[0] + 1))


@pytest.mark.parametrize("input_layout", [NHWC, NCHW], ids=ids)
def test_conv2d_transpose_in_bands(gpu, rng, input_layout):
    """An image whose GEMM rows exceed the scratch budget: bands of output rows, each from the
    input rows that reach it."""
    run_conv_t(gpu, rng, DType.float32, (1, 520, 300, 32), (3, 3, 64, 32), {}, input_layout=input_layout, batches=(1,))


# -- pooling and fold -------------------------------------------------------------------------


def run_pool(gpu, rng, dtype, mode, xs, kw, count_boundary=True):
    if mode == "max":
        fn = lambda x: ops.max_pool2d(x, **kw)  # noqa: E731
    else:
        fn = lambda x: ops.avg_pool2d(x, count_boundary=count_boundary, **kw)  # noqa: E731
    cpu, dev = models(fn, [(dtype, ("batch", *xs[1:]))], gpu)
    args = dict(
        k=kw["kernel_size"],
        stride=pair(kw.get("stride", 1)),
        dil=pair(kw.get("dilation", 1)),
        pad=pair(kw.get("padding", 0)),
        ceil=kw.get("ceil_mode", False),
    )
    for batch in (xs[0], 1):
        x = random(rng, dtype, (batch, *xs[1:]))
        (c,) = execute(cpu, [x])
        (g,) = execute(dev, [x], gpu)
        same_bits(g, c)
        if dtype.is_float():
            ref = pool_ref(f64(x), mode=mode, count_boundary=count_boundary, **args)
            scale = np.abs(ref) if mode == "max" else pool_ref(np.abs(f64(x)), mode=mode, count_boundary=count_boundary, **args)
            compare(g, ref, scale, dtype)


@pytest.mark.parametrize("dtype", FLOATS + INTS + [DType.bool], ids=ids)
@pytest.mark.parametrize(("xs", "kw"), POOLS, ids=ids)
def test_max_pool2d(gpu, rng, dtype, xs, kw):
    run_pool(gpu, rng, dtype, "max", xs, kw)


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=ids)
@pytest.mark.parametrize("count_boundary", [True, False], ids=ids)
@pytest.mark.parametrize(("xs", "kw"), POOLS, ids=ids)
def test_avg_pool2d(gpu, rng, dtype, count_boundary, xs, kw):
    run_pool(gpu, rng, dtype, "avg", xs, kw, count_boundary)


@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16], ids=ids)
def test_pool_large(gpu, rng, dtype):
    run_pool(gpu, rng, dtype, "max", (4, 64, 60, 16), dict(kernel_size=(3, 3), stride=2, padding=1))
    run_pool(gpu, rng, dtype, "avg", (4, 64, 60, 16), dict(kernel_size=(3, 3), stride=2, padding=1), False)
    # more than 2^20 outputs, many blocks
    run_pool(gpu, rng, dtype, "max", (8, 130, 129, 64), dict(kernel_size=(3, 3), stride=2, padding=1))
    run_pool(gpu, rng, dtype, "avg", (2, 1030, 1030, 3), dict(kernel_size=(2, 2), stride=1, ceil_mode=True))


def test_max_pool_propagates_nan(gpu):
    cpu, dev = models(lambda x: ops.max_pool2d(x, (2, 2)), [(DType.float32, (1, 2, 3, 1))], gpu)
    x = np.array([1, np.nan, 2, 0, 5, 3], np.float32).reshape(1, 2, 3, 1)
    (g,) = execute(dev, [x], gpu)
    np.testing.assert_array_equal(g.ravel(), [np.nan, np.nan])


def run_fold(gpu, rng, dtype, c, size, kw, batches=(2, 1)):
    args = dict(k=kw["kernel_size"], stride=pair(kw.get("stride", 1)), dil=pair(kw.get("dilation", 1)), pad=pair(kw.get("padding", 0)))
    grid = [(size[i] + 2 * args["pad"][i] - args["dil"][i] * (args["k"][i] - 1) - 1) // args["stride"][i] + 1 for i in range(2)]
    ckk, blocks = c * args["k"][0] * args["k"][1], grid[0] * grid[1]
    cpu, dev = models(lambda x: ops.fold(x, size, **kw), [(dtype, ("batch", ckk, blocks))], gpu)
    for batch in batches:
        x = random(rng, dtype, (batch, ckk, blocks))
        (c_out,) = execute(cpu, [x])
        (g,) = execute(dev, [x], gpu)
        assert g.shape == (batch, c, *size)
        same_bits(g, c_out)
        compare(g, fold_ref(f64(x), size, **args), fold_ref(np.abs(f64(x)), size, **args), dtype)


@pytest.mark.parametrize("dtype", FLOATS + INTS + [DType.bool], ids=ids)
@pytest.mark.parametrize(("c", "size", "kw"), FOLDS, ids=ids)
def test_fold(gpu, rng, dtype, c, size, kw):
    run_fold(gpu, rng, dtype, c, size, kw)


def test_fold_large(gpu, rng):
    run_fold(gpu, rng, DType.float32, 8, (40, 44), dict(kernel_size=(3, 3), stride=1, padding=1))
    run_fold(gpu, rng, DType.bfloat16, 64, (130, 127), dict(kernel_size=(2, 2), stride=2), batches=(3,))
