"""Staging convolutions, pooling and fold: output shapes from the window formula with static,
symbolic and algebraic dims, layouts, groups, bias, and the documented errors. Expected shapes
match what MAX 26.7 infers for the same calls."""

import pytest

from max.dtype import DType
from max.graph import DeviceRef, Dim, ops
from max.graph.type import ConvInputLayout, FilterLayout

from staging import F16, F32, I32, I64, T, check, fails, stage

NCHW = ConvInputLayout.NCHW


h, w, n = Dim("h"), Dim("w"), Dim("n")


# conv2d


@pytest.mark.parametrize(
    ("x", "f", "kw", "out"),
    [
        ((1, 8, 8, 3), (3, 3, 3, 16), {}, (1, 6, 6, 16)),
        ((1, 9, 7, 3), (3, 3, 3, 16), dict(stride=(2, 1), dilation=(2, 1), padding=(1, 2, 0, 0)), (1, 4, 5, 16)),
        ((2, 8, 9, 3), (3, 3, 3, 4), dict(stride=2, padding=(1, 1, 1, 1)), (2, 4, 5, 4)),
        ((1, 5, 5, 2), (5, 5, 2, 1), {}, (1, 1, 1, 1)),
        (("n", "h", "w", 3), (3, 3, 3, 16), dict(stride=(2, 2), padding=(1, 1, 1, 1)), (n, (h + 1) // 2, (w + 1) // 2, 16)),
        (("n", "h", "w", 3), (3, 3, 3, 16), dict(stride=(2, 1), dilation=(2, 1), padding=(1, 2, 0, 0)), (n, h // 2, w - 2, 16)),
        ((1, 8, 8, 3), ("r", "s", 3, 16), {}, (1, 9 - Dim("r"), 9 - Dim("s"), 16)),
        (("n", h * 2, "w", "c"), (1, 1, "c", "f"), {}, (n, h * 2, w, "f")),
    ],
)
def test_conv2d_shapes(x, f, kw, out):
    check(stage(lambda a, b: ops.conv2d(a, b, **kw), T(F32, *x), T(F32, *f)), F32, out)


def test_conv2d_layouts():
    # The result is channels-last for either input layout, as MAX infers it.
    nchw = stage(lambda a, b: ops.conv2d(a, b, input_layout=NCHW), T(F32, 1, 3, 8, 10), T(F32, 3, 3, 3, 16))
    check(nchw, F32, [1, 6, 8, 16])
    fcrs = stage(lambda a, b: ops.conv2d(a, b, filter_layout=FilterLayout.FCRS), T(F32, 1, 8, 10, 3), T(F32, 16, 3, 3, 5))
    check(fcrs, F32, [1, 6, 6, 16])
    both = stage(
        lambda a, b: ops.conv2d(a, b, input_layout=NCHW, filter_layout=FilterLayout.FCRS), T(F32, 1, 3, 8, 10), T(F32, 16, 3, 3, 5)
    )
    check(both, F32, [1, 6, 6, 16])
    cfrs = stage(lambda a, b: ops.conv2d(a, b, filter_layout=FilterLayout.CFRS), T(F32, 1, 8, 10, 3), T(F32, 3, 16, 3, 5))
    check(cfrs, F32, [1, 6, 6, 16])


def test_conv2d_groups_and_depthwise():
    check(stage(lambda a, b: ops.conv2d(a, b, groups=2), T(F32, 1, 8, 8, 4), T(F32, 3, 3, 2, 16)), F32, [1, 6, 6, 16])
    check(stage(lambda a, b: ops.conv2d(a, b, groups=4), T(F32, 1, 8, 8, 4), T(F32, 3, 3, 1, 8)), F32, [1, 6, 6, 8])
    c = Dim("c")
    check(stage(lambda a, b: ops.conv2d(a, b, groups=2), T(F32, 1, 8, 8, c * 2), T(F32, 3, 3, c, "f")), F32, [1, 6, 6, "f"])


def test_conv2d_group_errors():
    msg = fails(ValueError, "conv2d", "filter", lambda a, b: ops.conv2d(a, b, groups=2), T(F32, 1, 8, 8, 4), T(F32, 3, 3, 2, 15))
    assert "divisible" in msg
    fails(ValueError, "conv2d", "filter", lambda a, b: ops.conv2d(a, b, groups=3), T(F32, 1, 8, 8, 4), T(F32, 3, 3, 2, 15))
    fails(ValueError, "conv2d", "filter", ops.conv2d, T(F32, 1, 8, 8, 4), T(F32, 3, 3, 3, 16))
    fails(ValueError, "conv2d", "filter", ops.conv2d, T(F32, 1, 8, 8, "c"), T(F32, 3, 3, "d", 16))
    fails(ValueError, "conv2d", "groups", lambda a, b: ops.conv2d(a, b, groups=0), T(F32, 1, 8, 8, 4), T(F32, 3, 3, 2, 16))
    fails(TypeError, "conv2d", "groups", lambda a, b: ops.conv2d(a, b, groups=2.0), T(F32, 1, 8, 8, 4), T(F32, 3, 3, 2, 16))


def test_conv2d_bias():
    out = stage(lambda a, b, c: ops.conv2d(a, b, bias=c), T(F32, "n", 8, 8, 3), T(F32, 3, 3, 3, 16), T(F32, 16))
    check(out, F32, ["n", 6, 6, 16])
    out = stage(lambda a, b: ops.conv2d(a, b, bias=[0.5] * 16), T(F16, 1, 8, 8, 3), T(F16, 3, 3, 3, 16))
    check(out, F16, [1, 6, 6, 16])
    fails(ValueError, "conv2d", "bias", lambda a, b, c: ops.conv2d(a, b, bias=c), T(F32, 1, 8, 8, 3), T(F32, 3, 3, 3, 16), T(F32, 15))
    fails(ValueError, "conv2d", "bias", lambda a, b, c: ops.conv2d(a, b, bias=c), T(F32, 1, 8, 8, 3), T(F32, 3, 3, 3, 16), T(F32, 1, 16))


def test_conv2d_promotes_dtypes():
    check(stage(ops.conv2d, T(F16, 1, 8, 8, 3), T(F32, 3, 3, 3, 16)), F32, [1, 6, 6, 16])
    check(stage(ops.conv2d, T(I32, 1, 8, 8, 3), T(I64, 3, 3, 3, 16)), I64, [1, 6, 6, 16])
    out = stage(lambda a, b, c: ops.conv2d(a, b, bias=c), T(F16, 1, 8, 8, 3), T(F16, 3, 3, 3, 16), T(F32, 16))
    check(out, F32, [1, 6, 6, 16])
    fails(ValueError, "conv2d", "filter", ops.conv2d, T(DType.int8, 1, 8, 8, 3), T(DType.uint8, 3, 3, 3, 16))
    fails(
        ValueError, "conv2d", "bias", lambda a, b, c: ops.conv2d(a, b, bias=c),
        T(DType.int8, 1, 8, 8, 3), T(DType.int8, 3, 3, 3, 16), T(DType.uint8, 16),
    )


@pytest.mark.parametrize(
    ("arg", "kw", "exc"),
    [
        ("stride", dict(stride=(0, 1)), ValueError),
        ("stride", dict(stride=(1, 1, 1)), ValueError),
        ("stride", dict(stride="2"), TypeError),
        ("dilation", dict(dilation=(1, 0)), ValueError),
        ("padding", dict(padding=(-1, 0, 0, 0)), ValueError),
        ("padding", dict(padding=(1, 1)), ValueError),
        ("input_layout", dict(input_layout="NWHC"), ValueError),
        ("filter_layout", dict(filter_layout=FilterLayout.QRSCF), ValueError),
        ("filter_layout", dict(filter_layout="XYZW"), ValueError),
    ],
)
def test_conv2d_argument_errors(arg, kw, exc):
    fails(exc, "conv2d", arg, lambda a, b: ops.conv2d(a, b, **kw), T(F32, 1, 8, 8, 3), T(F32, 3, 3, 3, 16))


def test_conv2d_shape_errors():
    msg = fails(ValueError, "conv2d", "x", ops.conv2d, T(F32, 1, 2, 2, 3), T(F32, 3, 3, 3, 16))
    assert "window" in msg and "float32[1, 2, 2, 3]" in msg
    fails(ValueError, "conv2d", "x", ops.conv2d, T(F32, 8, 8, 3), T(F32, 3, 3, 3, 16))
    fails(ValueError, "conv2d", "filter", ops.conv2d, T(F32, 1, 8, 8, 3), T(F32, 3, 3, 16))
    fails(ValueError, "conv2d", "filter", ops.conv2d, T(F32, 1, 8, 8, 3), T(F32, 0, 3, 3, 16))
    fails(ValueError, "conv2d", "filter", ops.conv2d, T(F32, 1, 8, 8, 3), T(F32, 3, 3, 3, 16, device=DeviceRef.GPU()))


# conv2d_transpose


@pytest.mark.parametrize(
    ("x", "f", "kw", "out"),
    [
        ((1, 4, 4, 3), (3, 3, 8, 3), {}, (1, 6, 6, 8)),
        ((1, 4, 4, 3), (3, 3, 8, 3), dict(stride=(2, 2)), (1, 9, 9, 8)),
        ((1, 4, 5, 3), (3, 3, 8, 3), dict(stride=(2, 3), padding=(1, 0, 0, 2), dilation=(1, 2)), (1, 8, 15, 8)),
        (("n", "h", "w", 3), (3, 3, 8, 3), dict(stride=(2, 3), padding=(1, 0, 0, 2), dilation=(1, 2)), (n, h * 2, w * 3, 8)),
        ((1, 4, 4, 3), (3, 3, 8, 3), dict(stride=(2, 2), output_paddings=(1, 1)), (1, 10, 10, 8)),
        ((1, 4, 4, 3), (3, 3, 8, 3), dict(stride=(3, 1), dilation=(2, 1), output_paddings=(2, 0)), (1, 16, 6, 8)),
        ((1, 3, 4, 5), (3, 3, 8, 3), dict(input_layout=NCHW), (1, 8, 6, 7)),
        ((1, 3, 4, 5), (3, 8, 3, 3), dict(input_layout=NCHW, filter_layout=FilterLayout.CFRS), (1, 8, 6, 7)),
        ((1, 4, 4, 3), (8, 3, 3, 2), dict(filter_layout=FilterLayout.FCRS), (1, 6, 5, 8)),
    ],
)
def test_conv2d_transpose_shapes(x, f, kw, out):
    check(stage(lambda a, b: ops.conv2d_transpose(a, b, **kw), T(F32, *x), T(F32, *f)), F32, out)


def test_conv2d_transpose_bias_and_dtypes():
    out = stage(lambda a, b, c: ops.conv2d_transpose(a, b, bias=c), T(F16, 1, 4, 4, 3), T(F32, 3, 3, 8, 3), T(F32, 8))
    check(out, F32, [1, 6, 6, 8])
    fails(
        ValueError, "conv2d_transpose", "bias", lambda a, b, c: ops.conv2d_transpose(a, b, bias=c),
        T(F32, 1, 4, 4, 3), T(F32, 3, 3, 8, 3), T(F32, 3),
    )


@pytest.mark.parametrize(
    ("arg", "x", "kw"),
    [
        ("output_paddings", (1, 4, 4, 3), dict(output_paddings=(1, 0))),
        ("output_paddings", (1, 4, 4, 3), dict(dilation=(2, 2), output_paddings=(1, 1))),
        ("output_paddings", (1, 4, 4, 3), dict(stride=2, output_paddings=(2, 0))),
        ("output_paddings", (1, 4, 4, 3), dict(output_paddings=(0, 0, 0))),
        ("filter", (1, 4, 4, 4), {}),
        ("padding", (1, 1, 4, 3), dict(padding=(3, 3, 0, 0))),
        ("stride", (1, 4, 4, 3), dict(stride=(0, 1))),
        ("x", (4, 4, 3), {}),
        ("filter_layout", (1, 4, 4, 3), dict(filter_layout=FilterLayout.FCQRS)),
    ],
)
def test_conv2d_transpose_errors(arg, x, kw):
    fails(ValueError, "conv2d_transpose", arg, lambda a, b: ops.conv2d_transpose(a, b, **kw), T(F32, *x), T(F32, 3, 3, 8, 3))


# conv3d


@pytest.mark.parametrize(
    ("x", "f", "kw", "out"),
    [
        ((1, 5, 8, 8, 3), (2, 3, 3, 3, 16), {}, (1, 4, 6, 6, 16)),
        ((2, 7, 9, 11, 3), (2, 3, 3, 3, 16), dict(stride=(1, 2, 3), dilation=(2, 1, 1), padding=(0, 1, 1, 1, 1, 0)), (2, 6, 5, 4, 16)),
        (("n", "d", "h", "w", 3), (2, 3, 3, 3, 16), dict(stride=(1, 2, 2), padding=(0, 1, 1, 1, 1, 0)), (n, "d", (h + 1) // 2, w // 2, 16)),
        ((1, 5, 8, 8, 6), (2, 3, 3, 2, 9), dict(groups=3), (1, 4, 6, 6, 9)),
        ((1, 5, 8, 8, 3), (16, 3, 2, 3, 3), dict(filter_layout=FilterLayout.FCQRS), (1, 4, 6, 6, 16)),
        ((1, 3, 5, 8, 8), (2, 3, 3, 3, 16), dict(input_layout=NCHW), (1, 4, 6, 6, 16)),
    ],
)
def test_conv3d_shapes(x, f, kw, out):
    check(stage(lambda a, b: ops.conv3d(a, b, **kw), T(F32, *x), T(F32, *f)), F32, out)


def test_conv3d_bias():
    out = stage(lambda a, b, c: ops.conv3d(a, b, bias=c), T(F32, 1, 5, 8, 8, 3), T(F32, 2, 3, 3, 3, 16), T(F32, 16))
    check(out, F32, [1, 4, 6, 6, 16])
    fails(ValueError, "conv3d", "bias", lambda a, b, c: ops.conv3d(a, b, bias=c), T(F32, 1, 5, 8, 8, 3), T(F32, 2, 3, 3, 3, 16), T(F32, 2, 16))


@pytest.mark.parametrize(
    ("arg", "x", "f", "kw"),
    [
        ("padding", (1, 5, 8, 8, 3), (2, 3, 3, 3, 16), dict(padding=(0, 0, 0, 0))),
        ("stride", (1, 5, 8, 8, 3), (2, 3, 3, 3, 16), dict(stride=(1, 1))),
        ("filter_layout", (1, 5, 8, 8, 3), (2, 3, 3, 3, 16), dict(filter_layout=FilterLayout.RSCF)),
        ("x", (5, 8, 8, 3), (2, 3, 3, 3, 16), {}),
        ("filter", (1, 5, 8, 8, 6), (2, 3, 3, 2, 8), dict(groups=3)),
        ("x", (1, 1, 8, 8, 3), (2, 3, 3, 3, 16), {}),
    ],
)
def test_conv3d_errors(arg, x, f, kw):
    fails(ValueError, "conv3d", arg, lambda a, b: ops.conv3d(a, b, **kw), T(F32, *x), T(F32, *f))


# pooling


@pytest.mark.parametrize("op", [ops.avg_pool2d, ops.max_pool2d], ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    ("x", "args", "kw", "out"),
    [
        ((1, 8, 8, 3), ((2, 2),), {}, (1, 7, 7, 3)),
        ((1, 8, 8, 3), (3,), {}, (1, 6, 6, 3)),
        ((1, 8, 9, 3), ((2, 2),), dict(stride=2), (1, 4, 4, 3)),
        ((1, 8, 9, 3), ((3, 2),), dict(stride=(2, 3), dilation=(1, 2), padding=(1, 0)), (1, 4, 3, 3)),
        ((1, 8, 9, 3), ((3, 3),), dict(padding=1), (1, 8, 9, 3)),
        ((1, 7, 9, 3), ((2, 2),), dict(stride=2, ceil_mode=True), (1, 4, 5, 3)),
        ((1, 8, 9, 3), ((2, 2),), dict(stride=2, padding=1, ceil_mode=True), (1, 5, 6, 3)),
        ((1, 8, 9, 3), ((3, 3),), dict(stride=2, padding=1, dilation=2), (1, 3, 4, 3)),
        (("n", "h", "w", 3), ((3, 3),), dict(stride=2, padding=1), (n, (h + 1) // 2, (w + 1) // 2, 3)),
        (("n", "h", "w", 3), ((2, 2),), dict(stride=2, ceil_mode=True), (n, (h + 1) // 2, (w + 1) // 2, 3)),
        (("n", "h", "w", 3), ((3, 3),), dict(stride=2, ceil_mode=True), (n, h // 2, w // 2, 3)),
        ((1, 8, 8, 3), (("k", "k"),), {}, (1, 9 - Dim("k"), 9 - Dim("k"), 3)),
    ],
)
def test_pool_shapes(op, x, args, kw, out):
    check(stage(lambda a: op(a, *args, **kw), T(I32, *x)), I32, out)


def test_avg_pool2d_count_boundary():
    out = stage(lambda a: ops.avg_pool2d(a, (3, 3), padding=1, count_boundary=False), T(F32, 1, 8, 8, 3))
    check(out, F32, [1, 8, 8, 3])
    fails(TypeError, "avg_pool2d", "count_boundary", lambda a: ops.avg_pool2d(a, 2, count_boundary=None), T(F32, 1, 8, 8, 3))


@pytest.mark.parametrize("op", [ops.avg_pool2d, ops.max_pool2d], ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    ("arg", "x", "args", "kw", "exc"),
    [
        ("input", (1, 8, 8, 3), ((9, 3),), {}, ValueError),
        ("input", (8, 8, 3), ((2, 2),), {}, ValueError),
        ("kernel_size", (1, 8, 8, 3), ((0, 2),), {}, ValueError),
        ("kernel_size", (1, 8, 8, 3), ((2, 2, 2),), {}, ValueError),
        ("kernel_size", (1, 8, 8, 3), ((2.0, 2),), {}, TypeError),
        ("stride", (1, 8, 8, 3), ((2, 2),), dict(stride=0), ValueError),
        ("stride", (1, 8, 8, 3), ((2, 2),), dict(stride=(1, 2, 2)), ValueError),
        ("dilation", (1, 8, 8, 3), ((2, 2),), dict(dilation=(0, 1)), ValueError),
        ("padding", (1, 8, 8, 3), ((2, 2),), dict(padding=-1), ValueError),
        ("padding", (1, 8, 8, 3), ((2, 2),), dict(padding=(1, 0, 2)), ValueError),
        ("ceil_mode", (1, 8, 8, 3), ((2, 2),), dict(ceil_mode=1), TypeError),
    ],
)
def test_pool_errors(op, arg, x, args, kw, exc):
    fails(exc, op.__name__, arg, lambda a: op(a, *args, **kw), T(F32, *x))


# fold


@pytest.mark.parametrize(
    ("x", "args", "kw", "out"),
    [
        ((1, 12, 12), ((4, 5), (2, 2)), {}, (1, 3, 4, 5)),
        ((2, 12, 12), ((5, 6), (3, 2)), dict(stride=2, padding=1), (2, 2, 5, 6)),
        (("n", 12, 12), ((5, 6), (3, 2)), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2)), (n, 2, 5, 6)),
        ((1, 12, 12), ((4, 5), 2), {}, (1, 3, 4, 5)),
        (("n", 12, (h - 1) * (w - 1)), (("h", "w"), (2, 2)), {}, (n, 3, h, w)),
        (("n", "ck", 12), ((4, 5), (2, 2)), {}, (n, Dim("ck") // 4, 4, 5)),
        ((1, Dim("c") * 4, 12), ((4, 5), (2, 2)), {}, (1, "c", 4, 5)),
    ],
)
def test_fold_shapes(x, args, kw, out):
    check(stage(lambda a: ops.fold(a, *args, **kw), T(F32, *x)), F32, out)


@pytest.mark.parametrize(
    ("arg", "x", "args", "kw", "exc"),
    [
        ("input", (1, 12, 11), ((4, 5), (2, 2)), {}, ValueError),
        ("input", (1, 13, 12), ((4, 5), (2, 2)), {}, ValueError),
        ("input", ("n", 12, "L"), (("h", "w"), (2, 2)), {}, ValueError),
        ("input", (12, 12), ((4, 5), (2, 2)), {}, ValueError),
        ("output_size", (1, 36, 12), ((4, 5), (6, 2)), {}, ValueError),
        ("output_size", (1, 12, 12), ((4, 5, 6), (2, 2)), {}, ValueError),
        ("output_size", (1, 12, 12), ((0, 5), (2, 2)), {}, ValueError),
        ("kernel_size", (1, 12, 12), ((4, 5), (0, 2)), {}, ValueError),
        ("kernel_size", (1, 12, 12), ((4, 5), ("bad name", 2)), {}, ValueError),
        ("stride", (1, 12, 12), ((4, 5), (2, 2)), dict(stride=0), ValueError),
        ("padding", (1, 12, 12), ((4, 5), (2, 2)), dict(padding=(0, 0, 0, 0)), ValueError),
        ("dilation", (1, 12, 12), ((4, 5), (2, 2)), dict(dilation=1.5), TypeError),
    ],
)
def test_fold_errors(arg, x, args, kw, exc):
    fails(exc, "fold", arg, lambda a: ops.fold(a, *args, **kw), T(F32, *x))
