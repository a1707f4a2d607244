"""The conv ops on each device: conv2d, conv3d, conv2d_transpose, max_pool2d, avg_pool2d and
fold, against the float64 numpy references of tests/conv_util.py, with every layout, stride,
dilation, padding, groups, bias and the dtypes staging accepts, on a symbolic batch dim run at
two sizes. Integer results are exact; float results lie within the dtype's rounding of the sum
of absolute terms (the GEMM-based paths sum in other orders: tensor cores, K splits, so the
bound allows 4x that). GPU only: pooling, fold and depthwise convolutions are bit-identical to
the host's (same order of operations), and the im2col chunks and transposed-conv bands."""

import numpy as np
import pytest

from conv_util import (
    CONV2D,
    CONV3D,
    CONV_T,
    FILTER_PERM,
    FLOATS,
    FOLDS,
    INTS,
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
from engine_util import session
from helpers import VALUE_TYPES
from max import driver
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops
from max.graph.type import FilterLayout


def load(fn, types, device):
    """`fn` compiled for `device`; `types` are (dtype, shape) per input, a str dim symbolic."""
    where = DeviceRef.from_device(device)
    return session(device).load(Graph("conv", fn, input_types=[TensorType(d, s, where) for d, s in types]))


def execute(model, inputs, device):
    args = [driver.Buffer.from_numpy(np.ascontiguousarray(x)).to(device) for x in inputs]
    return [o.to_numpy() for o in model.execute(*args)]


def loose(scale, ref):
    """A `scale` for compare() that allows 4x the rounding of one summation order."""
    return 4 * scale + 3 * np.abs(ref)


def pair(v, n=2):
    return (v,) * n if isinstance(v, int) else tuple(v)


def same_bits(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    bad = np.asarray(a).view(np.uint8) != np.asarray(b).view(np.uint8)
    assert not bad.any(), f"{bad.sum()} bytes differ from the host's"


# -- conv2d / conv3d --------------------------------------------------------------------------

MORE_CONV2D = CONV2D + [
    ((2, 31, 29, 3), (7, 7, 3, 40), dict(stride=2, padding=(3, 3, 3, 3))),  # a stem: 7x7/2, C=3, F=40
    ((1, 17, 15, 16), (3, 3, 16, 32), dict(padding=(1, 1, 1, 1))),  # K, F multiples of 8: tensor cores
    ((3, 9, 7, 16), (1, 1, 16, 24), {}),  # 1x1, aligned: the GEMM reads x itself
    ((2, 10, 9, 8), (3, 3, 4, 16), dict(groups=2, padding=(1, 1, 1, 1))),
]


def run_conv(device, rng, dtype, xs, fs, kw, nd=2, input_layout=NHWC, filter_layout=None, bias=True, batches=None):
    """conv2d (nd=2) or conv3d; x is generated channels-last ([N, *S, C]) and the filter as
    [*K, C/groups, F], then laid out as asked. Returns the last inputs and output."""
    filter_layout = filter_layout or ("RSCF" if nd == 2 else "QRSCF")
    w = random(rng, dtype, fs)
    wl = np.ascontiguousarray(w.transpose(FILTER_PERM[filter_layout]))
    xshape = (xs[-1], *xs[1:-1]) if input_layout == NCHW else xs[1:]
    types = [(dtype, ("batch", *xshape)), (dtype, wl.shape)] + ([(dtype, (fs[-1],))] if bias else [])
    op = ops.conv2d if nd == 2 else ops.conv3d

    def fn(x, f, *b):
        return op(x, f, bias=b[0] if b else None, input_layout=input_layout, filter_layout=FilterLayout(filter_layout), **kw)

    model = load(fn, types, device)
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
        (out,) = execute(model, inputs, device)
        ref = conv_ref(f64(x), f64(w), **args)
        scale = conv_ref(np.abs(f64(x)), np.abs(f64(w)), **args)
        if bias:
            ref, scale = ref + f64(b), scale + np.abs(f64(b))
        assert out.shape == ref.shape
        compare(out, ref, loose(scale, ref) if dtype.is_float() else scale, dtype)
    return inputs, out


@pytest.mark.parametrize("dtype", FLOATS + INTS + [DType.bool], ids=ids)
@pytest.mark.parametrize(("xs", "fs", "kw"), MORE_CONV2D, ids=ids)
def test_conv2d(device, rng, dtype, xs, fs, kw):
    run_conv(device, rng, dtype, xs, fs, kw, bias=dtype.is_float())  # with and without bias


@pytest.mark.parametrize("input_layout", [NHWC, NCHW], ids=ids)
@pytest.mark.parametrize("filter_layout", ["RSCF", "FCRS", "CFRS"])
@pytest.mark.parametrize(("xs", "fs", "kw"), [CONV2D[1], CONV2D[4], CONV2D[6], MORE_CONV2D[-1]], ids=ids)
def test_conv2d_layouts_and_bias(device, rng, input_layout, filter_layout, xs, fs, kw):
    for dtype in (DType.float32, DType.bfloat16, DType.float16, DType.int32):
        run_conv(device, rng, dtype, xs, fs, kw, input_layout=input_layout, filter_layout=filter_layout)


@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16, DType.float16], ids=ids)
@pytest.mark.parametrize(
    ("xs", "fs", "kw"),
    [
        ((4, 32, 30, 16), (3, 3, 16, 32), dict(padding=(1, 1, 1, 1))),  # blocks in parallel; M >= 256: the Hopper GEMM
        ((1, 4, 4, 1024), (1, 1, 1024, 256), {}),  # one block, a parallel GEMM; 1x1, long K
        ((2, 16, 16, 64), (1, 1, 64, 128), {}),  # 1x1 with M >= 256
        ((1, 8, 8, 384), (3, 3, 384, 64), dict(padding=(1, 1, 1, 1))),  # K > the host's block budget
        ((2, 40, 36, 32), (3, 3, 1, 32), dict(groups=32, stride=2, padding=(1, 1, 1, 1))),  # depthwise
        ((1, 30, 30, 12), (3, 3, 4, 24), dict(groups=3, padding=(1, 1, 1, 1))),  # batched groups
    ],
    ids=ids,
)
def test_conv2d_large(device, rng, dtype, xs, fs, kw):
    run_conv(device, rng, dtype, xs, fs, kw, batches=(xs[0], xs[0] + 1))


@pytest.mark.parametrize("dtype", FLOATS + [DType.int32, DType.uint8], ids=ids)
@pytest.mark.parametrize("layouts", [(NHWC, "QRSCF"), (NCHW, "FCQRS"), (NHWC, "FCQRS"), (NCHW, "QRSCF")], ids=ids)
@pytest.mark.parametrize(("xs", "fs", "kw"), CONV3D, ids=ids)
def test_conv3d(device, rng, dtype, layouts, xs, fs, kw):
    input_layout, filter_layout = layouts
    run_conv(device, rng, dtype, xs, fs, kw, nd=3, input_layout=input_layout, filter_layout=filter_layout, batches=(xs[0], 3))


# -- conv2d_transpose -------------------------------------------------------------------------


def run_conv_t(device, rng, dtype, xs, fs, kw, input_layout=NHWC, filter_layout="RSCF", batches=None):
    w = random(rng, dtype, fs)
    wl = np.ascontiguousarray(w.transpose(T_FILTER_PERM[filter_layout]))
    xshape = (xs[3], *xs[1:3]) if input_layout == NCHW else xs[1:]
    types = [(dtype, ("batch", *xshape)), (dtype, wl.shape), (dtype, (fs[2],))]

    def fn(x, f, b):
        return ops.conv2d_transpose(x, f, bias=b, input_layout=input_layout, filter_layout=FilterLayout(filter_layout), **kw)

    model = load(fn, types, device)
    args = dict(
        stride=pair(kw.get("stride", 1)),
        dil=pair(kw.get("dilation", 1)),
        pad=kw.get("padding", (0, 0, 0, 0)),
        out_pad=kw.get("output_paddings", (0, 0)),
    )
    for batch in batches or (xs[0], 1):
        x, b = random(rng, dtype, (batch, *xs[1:])), random(rng, dtype, (fs[2],))
        (out,) = execute(model, [to_nchw(x) if input_layout == NCHW else x, wl, b], device)
        ref = conv_t_ref(f64(x), f64(w), **args) + f64(b)
        scale = conv_t_ref(np.abs(f64(x)), np.abs(f64(w)), **args) + np.abs(f64(b))
        if input_layout == NCHW:
            ref, scale = to_nchw(ref), to_nchw(scale)
        assert out.shape == ref.shape
        compare(out, ref, loose(scale, ref) if dtype.is_float() else scale, dtype)


@pytest.mark.parametrize("dtype", FLOATS + INTS + [DType.bool], ids=ids)
@pytest.mark.parametrize(("xs", "fs", "kw"), CONV_T, ids=ids)
def test_conv2d_transpose(device, rng, dtype, xs, fs, kw):
    run_conv_t(device, rng, dtype, xs, fs, kw)


@pytest.mark.parametrize("input_layout", [NHWC, NCHW], ids=ids)
@pytest.mark.parametrize("filter_layout", ["RSCF", "CFRS", "FCRS"])
@pytest.mark.parametrize(("xs", "fs", "kw"), [CONV_T[1], CONV_T[2], CONV_T[5]], ids=ids)
def test_conv2d_transpose_layouts(device, rng, input_layout, filter_layout, xs, fs, kw):
    for dtype in (DType.float32, DType.float16, DType.bfloat16, DType.int64):
        run_conv_t(device, rng, dtype, xs, fs, kw, input_layout, filter_layout)


@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16, DType.float16], ids=ids)
@pytest.mark.parametrize(
    ("xs", "fs", "kw"),
    [
        ((4, 20, 18, 16), (3, 3, 8, 16), dict(stride=2, padding=(1, 1, 1, 1), output_paddings=(1, 1))),
        ((1, 40, 36, 32), (4, 4, 16, 32), dict(stride=2, padding=(1, 1, 1, 1))),
    ],
    ids=ids,
)
def test_conv2d_transpose_large(device, rng, dtype, xs, fs, kw):
    run_conv_t(device, rng, dtype, xs, fs, kw, batches=(xs[0], xs[0] + 1))


# -- pooling and fold -------------------------------------------------------------------------


def pool_model(dtype, mode, xs, kw, count_boundary, device):
    if mode == "max":
        fn = lambda x: ops.max_pool2d(x, **kw)  # noqa: E731
    else:
        fn = lambda x: ops.avg_pool2d(x, count_boundary=count_boundary, **kw)  # noqa: E731
    return load(fn, [(dtype, ("batch", *xs[1:]))], device)


def run_pool(device, rng, dtype, mode, xs, kw, count_boundary=True):
    model = pool_model(dtype, mode, xs, kw, count_boundary, device)
    args = dict(
        k=kw["kernel_size"],
        stride=pair(kw.get("stride", 1)),
        dil=pair(kw.get("dilation", 1)),
        pad=pair(kw.get("padding", 0)),
        ceil=kw.get("ceil_mode", False),
    )
    for batch in (xs[0], 1):
        x = random(rng, dtype, (batch, *xs[1:]))
        (out,) = execute(model, [x], device)
        ref = pool_ref(f64(x), mode=mode, count_boundary=count_boundary, **args)
        if mode == "max" or dtype.is_float():
            scale = np.abs(ref) if mode == "max" else pool_ref(np.abs(f64(x)), mode=mode, count_boundary=count_boundary, **args)
            if dtype is DType.bool:
                np.testing.assert_array_equal(out, ref > 0)
            elif dtype.is_integral():
                np.testing.assert_array_equal(out, ref.astype(VALUE_TYPES[dtype]))
            else:
                compare(out, ref, scale, dtype)
        elif dtype is DType.bool:
            np.testing.assert_array_equal(out, np.trunc(ref) != 0)
        else:  # an integer average truncates
            np.testing.assert_array_equal(out, np.trunc(ref).astype(VALUE_TYPES[dtype]))


@pytest.mark.parametrize("dtype", FLOATS + INTS + [DType.bool], ids=ids)
@pytest.mark.parametrize(("xs", "kw"), POOLS, ids=ids)
def test_max_pool2d(device, rng, dtype, xs, kw):
    run_pool(device, rng, dtype, "max", xs, kw)


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=ids)
@pytest.mark.parametrize("count_boundary", [True, False], ids=ids)
@pytest.mark.parametrize(("xs", "kw"), POOLS, ids=ids)
def test_avg_pool2d(device, rng, dtype, count_boundary, xs, kw):
    run_pool(device, rng, dtype, "avg", xs, kw, count_boundary)


@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16], ids=ids)
def test_pool_large(device, rng, dtype):
    run_pool(device, rng, dtype, "max", (4, 64, 60, 16), dict(kernel_size=(3, 3), stride=2, padding=1))
    run_pool(device, rng, dtype, "avg", (4, 64, 60, 16), dict(kernel_size=(3, 3), stride=2, padding=1), False)
    # more than 2^20 outputs, many GPU blocks
    run_pool(device, rng, dtype, "max", (8, 130, 129, 64), dict(kernel_size=(3, 3), stride=2, padding=1))
    run_pool(device, rng, dtype, "avg", (2, 1030, 1030, 3), dict(kernel_size=(2, 2), stride=1, ceil_mode=True))


def test_max_pool_propagates_nan(device):
    model = load(lambda x: ops.max_pool2d(x, (2, 2)), [(DType.float32, (1, 2, 3, 1))], device)
    x = np.array([1, np.nan, 2, 0, 5, 3], np.float32).reshape(1, 2, 3, 1)
    (out,) = execute(model, [x], device)
    np.testing.assert_array_equal(out.ravel(), [np.nan, np.nan])


def fold_case(c, size, kw):
    args = dict(k=kw["kernel_size"], stride=pair(kw.get("stride", 1)), dil=pair(kw.get("dilation", 1)), pad=pair(kw.get("padding", 0)))
    grid = [(size[i] + 2 * args["pad"][i] - args["dil"][i] * (args["k"][i] - 1) - 1) // args["stride"][i] + 1 for i in range(2)]
    return args, c * args["k"][0] * args["k"][1], grid[0] * grid[1]


def run_fold(device, rng, dtype, c, size, kw, batches=(2, 1)):
    args, ckk, blocks = fold_case(c, size, kw)
    model = load(lambda x: ops.fold(x, size, **kw), [(dtype, ("batch", ckk, blocks))], device)
    for batch in batches:
        x = random(rng, dtype, (batch, ckk, blocks))
        (out,) = execute(model, [x], device)
        assert out.shape == (batch, c, *size)
        compare(out, fold_ref(f64(x), size, **args), fold_ref(np.abs(f64(x)), size, **args), dtype)


@pytest.mark.parametrize("dtype", FLOATS + INTS + [DType.bool], ids=ids)
@pytest.mark.parametrize(("c", "size", "kw"), FOLDS, ids=ids)
def test_fold(device, rng, dtype, c, size, kw):
    run_fold(device, rng, dtype, c, size, kw)


def test_fold_large(device, rng):
    run_fold(device, rng, DType.float32, 8, (40, 44), dict(kernel_size=(3, 3), stride=1, padding=1))
    run_fold(device, rng, DType.bfloat16, 64, (130, 127), dict(kernel_size=(2, 2), stride=2), batches=(3,))


# -- GPU only ---------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16, DType.float16, DType.int8, DType.uint64], ids=ids)
def test_gpu_pool_fold_and_depthwise_match_the_host_bit_for_bit(gpu, rng, dtype):
    host = driver.CPU()
    for xs, kw in POOLS:
        for mode, cb in [("max", True), ("avg", True), ("avg", False)]:
            x = random(rng, dtype, xs)
            (want,) = execute(pool_model(dtype, mode, xs, kw, cb, host), [x], host)
            (got,) = execute(pool_model(dtype, mode, xs, kw, cb, gpu), [x], gpu)
            same_bits(got, want)
    for c, size, kw in FOLDS:
        _, ckk, blocks = fold_case(c, size, kw)
        x = random(rng, dtype, (2, ckk, blocks))
        fold = lambda v: ops.fold(v, size, **kw)  # noqa: E731
        (want,) = execute(load(fold, [(dtype, x.shape)], host), [x], host)
        (got,) = execute(load(fold, [(dtype, x.shape)], gpu), [x], gpu)
        same_bits(got, want)
    xs, fs, kw = (2, 40, 36, 32), (3, 3, 1, 32), dict(groups=32, stride=2, padding=(1, 1, 1, 1))
    inputs, want = run_conv(host, rng, dtype, xs, fs, kw, batches=(2,))
    model = load(lambda x, f, b: ops.conv2d(x, f, bias=b, **kw), [(dtype, xs), (dtype, inputs[1].shape), (dtype, (32,))], gpu)
    (got,) = execute(model, inputs, gpu)
    same_bits(got, want)


@pytest.mark.gpu
def test_gpu_conv2d_in_chunks(gpu, rng):
    """About a million output positions: the im2col scratch (256 MB) takes two chunks, the
    second starting inside an image."""
    run_conv(gpu, rng, DType.bfloat16, (4, 512, 512, 16), (3, 3, 16, 16), dict(padding=(1, 1, 1, 1)), batches=(4,))


@pytest.mark.gpu
@pytest.mark.parametrize("input_layout", [NHWC, NCHW], ids=ids)
def test_gpu_conv2d_transpose_in_bands(gpu, rng, input_layout):
    """An image whose GEMM rows exceed the scratch budget: bands of output rows, each from the
    input rows that reach it."""
    run_conv_t(gpu, rng, DType.float32, (1, 520, 300, 32), (3, 3, 64, 32), {}, input_layout=input_layout, batches=(1,))
