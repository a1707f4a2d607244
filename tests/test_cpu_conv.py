"""The conv ops on the CPU through InferenceSession, against the float64 numpy references of
tests/conv_util.py: conv2d, conv3d, conv2d_transpose, avg_pool2d, max_pool2d and fold, with every layout, stride, dilation, padding, groups, bias, the dtypes
staging accepts, and a symbolic batch dim run at two sizes."""

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
from engine_util import build, cpu_type, session
from helpers import VALUE_TYPES
from max.dtype import DType
from max.graph import ops
from max.graph.type import FilterLayout


# -- conv2d -----------------------------------------------------------------------------------


def run_conv2d(rng, dtype, xs, fs, kw, input_layout=NHWC, filter_layout="RSCF", bias=False, batches=None):
    w = random(rng, dtype, fs)
    wl = np.ascontiguousarray(w.transpose(FILTER_PERM[filter_layout]))
    types = [cpu_type(dtype, ("batch", *((xs[3], *xs[1:3]) if input_layout == NCHW else xs[1:]))), cpu_type(dtype, wl.shape)]
    if bias:
        types.append(cpu_type(dtype, (fs[3],)))
    g = build(
        lambda x, f, *b: ops.conv2d(
            x, f, bias=b[0] if b else None, input_layout=input_layout, filter_layout=FilterLayout(filter_layout), **kw
        ),
        *types,
    )
    model = session().load(g)
    st = kw.get("stride", 1)
    dl = kw.get("dilation", 1)
    args = dict(
        stride=(st, st) if isinstance(st, int) else st,
        dil=(dl, dl) if isinstance(dl, int) else dl,
        pad=kw.get("padding", (0, 0, 0, 0)),
        groups=kw.get("groups", 1),
    )
    for batch in batches or (xs[0], 1):
        x = random(rng, dtype, (batch, *xs[1:]))
        b = random(rng, dtype, (fs[3],)) if bias else None
        inputs = [to_nchw(x) if input_layout == NCHW else x, wl] + ([b] if bias else [])
        (out,) = [o.to_numpy() for o in model.execute(*inputs)]
        ref = conv_ref(f64(x), f64(w), **args)
        scale = conv_ref(np.abs(f64(x)), np.abs(f64(w)), **args)
        if bias:
            ref, scale = ref + f64(b), scale + np.abs(f64(b))
        assert out.shape == ref.shape
        compare(out, ref, scale, dtype)


@pytest.mark.parametrize("dtype", FLOATS + INTS + [DType.bool], ids=ids)
@pytest.mark.parametrize(("xs", "fs", "kw"), CONV2D, ids=ids)
def test_conv2d(rng, dtype, xs, fs, kw):
    run_conv2d(rng, dtype, xs, fs, kw)


@pytest.mark.parametrize("input_layout", [NHWC, NCHW], ids=ids)
@pytest.mark.parametrize("filter_layout", ["RSCF", "FCRS", "CFRS"])
@pytest.mark.parametrize(("xs", "fs", "kw"), [CONV2D[1], CONV2D[4], CONV2D[6]], ids=ids)
def test_conv2d_layouts_and_bias(rng, input_layout, filter_layout, xs, fs, kw):
    for dtype in (DType.float32, DType.bfloat16, DType.int32):
        run_conv2d(rng, dtype, xs, fs, kw, input_layout, filter_layout, bias=True)


@pytest.mark.parametrize(
    ("xs", "fs", "kw"),
    [
        ((4, 32, 30, 16), (3, 3, 16, 32), dict(padding=(1, 1, 1, 1))),  # blocks in parallel
        ((1, 4, 4, 1024), (1, 1, 1024, 256), {}),  # one block, a parallel GEMM
        ((1, 8, 8, 384), (3, 3, 384, 64), dict(padding=(1, 1, 1, 1))),  # K > the block budget
        ((2, 40, 36, 32), (3, 3, 1, 32), dict(groups=32, stride=2, padding=(1, 1, 1, 1))),  # depthwise, parallel
        ((1, 30, 30, 12), (3, 3, 4, 24), dict(groups=3, padding=(1, 1, 1, 1))),
    ],
    ids=ids,
)
def test_conv2d_large(rng, xs, fs, kw):
    run_conv2d(rng, DType.float32, xs, fs, kw, bias=True, batches=(xs[0], xs[0] + 1))


# -- conv3d -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + [DType.int32, DType.uint8], ids=ids)
@pytest.mark.parametrize("layouts", [(NHWC, "QRSCF"), (NCHW, "FCQRS"), (NHWC, "FCQRS"), (NCHW, "QRSCF")], ids=ids)
@pytest.mark.parametrize(("xs", "fs", "kw"), CONV3D, ids=ids)
def test_conv3d(rng, dtype, layouts, xs, fs, kw):
    input_layout, filter_layout = layouts
    w = random(rng, dtype, fs)
    wl = np.ascontiguousarray(w.transpose(FILTER_PERM[filter_layout]))
    xshape = (xs[4], *xs[1:4]) if input_layout == NCHW else xs[1:]
    g = build(
        lambda x, f, b: ops.conv3d(x, f, bias=b, input_layout=input_layout, filter_layout=FilterLayout(filter_layout), **kw),
        cpu_type(dtype, ("batch", *xshape)), cpu_type(dtype, wl.shape), cpu_type(dtype, (fs[4],)),
    )
    model = session().load(g)
    trip = lambda v, d: (v, v, v) if isinstance(v, int) else v  # noqa: E731
    args = dict(stride=trip(kw.get("stride", 1), 0), dil=trip(kw.get("dilation", 1), 0), pad=kw.get("padding", (0,) * 6), groups=kw.get("groups", 1))
    for batch in (xs[0], 3):
        x, b = random(rng, dtype, (batch, *xs[1:])), random(rng, dtype, (fs[4],))
        (out,) = [o.to_numpy() for o in model.execute(to_nchw(x) if input_layout == NCHW else x, wl, b)]
        ref = conv_ref(f64(x), f64(w), **args) + f64(b)
        scale = conv_ref(np.abs(f64(x)), np.abs(f64(w)), **args) + np.abs(f64(b))
        compare(out, ref, scale, dtype)


# -- conv2d_transpose -------------------------------------------------------------------------


def run_conv_t(rng, dtype, xs, fs, kw, input_layout=NHWC, filter_layout="RSCF", batches=None):
    w = random(rng, dtype, fs)
    wl = np.ascontiguousarray(w.transpose(T_FILTER_PERM[filter_layout]))
    xshape = (xs[3], *xs[1:3]) if input_layout == NCHW else xs[1:]
    g = build(
        lambda x, f, b: ops.conv2d_transpose(
            x, f, bias=b, input_layout=input_layout, filter_layout=FilterLayout(filter_layout), **kw
        ),
        cpu_type(dtype, ("batch", *xshape)), cpu_type(dtype, wl.shape), cpu_type(dtype, (fs[2],)),
    )
    model = session().load(g)
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    args = dict(
        stride=pair(kw.get("stride", 1)), dil=pair(kw.get("dilation", 1)),
        pad=kw.get("padding", (0, 0, 0, 0)), out_pad=kw.get("output_paddings", (0, 0)),
    )
    for batch in batches or (xs[0], 1):
        x, b = random(rng, dtype, (batch, *xs[1:])), random(rng, dtype, (fs[2],))
        (out,) = [o.to_numpy() for o in model.execute(to_nchw(x) if input_layout == NCHW else x, wl, b)]
        ref = conv_t_ref(f64(x), f64(w), **args) + f64(b)
        scale = conv_t_ref(np.abs(f64(x)), np.abs(f64(w)), **args) + np.abs(f64(b))
        if input_layout == NCHW:
            ref, scale = to_nchw(ref), to_nchw(scale)
        assert out.shape == ref.shape
        compare(out, ref, scale, dtype)


@pytest.mark.parametrize("dtype", FLOATS + INTS + [DType.bool], ids=ids)
@pytest.mark.parametrize(("xs", "fs", "kw"), CONV_T, ids=ids)
def test_conv2d_transpose(rng, dtype, xs, fs, kw):
    run_conv_t(rng, dtype, xs, fs, kw)


@pytest.mark.parametrize("input_layout", [NHWC, NCHW], ids=ids)
@pytest.mark.parametrize("filter_layout", ["RSCF", "CFRS", "FCRS"])
@pytest.mark.parametrize(("xs", "fs", "kw"), [CONV_T[1], CONV_T[2]], ids=ids)
def test_conv2d_transpose_layouts(rng, input_layout, filter_layout, xs, fs, kw):
    for dtype in (DType.float32, DType.float16, DType.int64):
        run_conv_t(rng, dtype, xs, fs, kw, input_layout, filter_layout)


@pytest.mark.parametrize(
    ("xs", "fs", "kw"),
    [
        ((4, 20, 18, 16), (3, 3, 8, 16), dict(stride=2, padding=(1, 1, 1, 1), output_paddings=(1, 1))),
        ((1, 40, 36, 32), (4, 4, 16, 32), dict(stride=2, padding=(1, 1, 1, 1))),
    ],
    ids=ids,
)
def test_conv2d_transpose_large(rng, xs, fs, kw):
    run_conv_t(rng, DType.float32, xs, fs, kw, batches=(xs[0], xs[0] + 1))


# -- pooling ----------------------------------------------------------------------------------


def run_pool(rng, dtype, mode, xs, kw, count_boundary=True):
    if mode == "max":
        g = build(lambda x: ops.max_pool2d(x, **kw), cpu_type(dtype, ("batch", *xs[1:])))
    else:
        g = build(lambda x: ops.avg_pool2d(x, count_boundary=count_boundary, **kw), cpu_type(dtype, ("batch", *xs[1:])))
    model = session().load(g)
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    args = dict(k=kw["kernel_size"], stride=pair(kw.get("stride", 1)), dil=pair(kw.get("dilation", 1)), pad=pair(kw.get("padding", 0)), ceil=kw.get("ceil_mode", False))
    for batch in (xs[0], 1):
        x = random(rng, dtype, (batch, *xs[1:]))
        (out,) = [o.to_numpy() for o in model.execute(x)]
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
        else:
            np.testing.assert_array_equal(out, np.trunc(ref).astype(VALUE_TYPES[dtype]))


@pytest.mark.parametrize("dtype", FLOATS + INTS + [DType.bool], ids=ids)
@pytest.mark.parametrize(("xs", "kw"), POOLS, ids=ids)
def test_max_pool2d(rng, dtype, xs, kw):
    run_pool(rng, dtype, "max", xs, kw)


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=ids)
@pytest.mark.parametrize("count_boundary", [True, False], ids=ids)
@pytest.mark.parametrize(("xs", "kw"), POOLS, ids=ids)
def test_avg_pool2d(rng, dtype, count_boundary, xs, kw):
    run_pool(rng, dtype, "avg", xs, kw, count_boundary)


def test_pool_large(rng):
    run_pool(rng, DType.float32, "max", (4, 64, 60, 16), dict(kernel_size=(3, 3), stride=2, padding=1))
    run_pool(rng, DType.float32, "avg", (4, 64, 60, 16), dict(kernel_size=(3, 3), stride=2, padding=1), False)


def test_max_pool_propagates_nan():
    g = build(lambda x: ops.max_pool2d(x, (2, 2)), cpu_type(DType.float32, (1, 2, 3, 1)))
    x = np.array([1, np.nan, 2, 0, 5, 3], np.float32).reshape(1, 2, 3, 1)
    (out,) = [o.to_numpy() for o in session().load(g).execute(x)]
    np.testing.assert_array_equal(out.ravel(), [np.nan, np.nan])


# -- fold -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + INTS + [DType.bool], ids=ids)
@pytest.mark.parametrize(("c", "size", "kw"), FOLDS, ids=ids)
def test_fold(rng, dtype, c, size, kw):
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    args = dict(k=kw["kernel_size"], stride=pair(kw.get("stride", 1)), dil=pair(kw.get("dilation", 1)), pad=pair(kw.get("padding", 0)))
    grid = [(size[i] + 2 * args["pad"][i] - args["dil"][i] * (args["k"][i] - 1) - 1) // args["stride"][i] + 1 for i in range(2)]
    ckk, blocks = c * args["k"][0] * args["k"][1], grid[0] * grid[1]
    g = build(lambda x: ops.fold(x, size, **kw), cpu_type(dtype, ("batch", ckk, blocks)))
    model = session().load(g)
    for batch in (2, 1):
        x = random(rng, dtype, (batch, ckk, blocks))
        (out,) = [o.to_numpy() for o in model.execute(x)]
        ref = fold_ref(f64(x), size, **args)
        assert out.shape == (batch, c, *size)
        compare(out, ref, fold_ref(np.abs(f64(x)), size, **args), dtype)


def test_fold_large(rng):
    size, kw = (40, 44), dict(kernel_size=(3, 3), stride=1, padding=1)
    g = build(lambda x: ops.fold(x, size, **kw), cpu_type(DType.float32, (2, 8 * 9, 40 * 44)))
    x = random(rng, DType.float32, (2, 72, 1760))
    (out,) = [o.to_numpy() for o in session().load(g).execute(x)]
    args = dict(k=(3, 3), stride=(1, 1), dil=(1, 1), pad=(1, 1))
    compare(out, fold_ref(f64(x), size, **args), fold_ref(np.abs(f64(x)), size, **args), DType.float32)
