"""Convolutions (conv2d, conv2d_transpose, conv3d), pooling (avg_pool2d, max_pool2d) and fold.
Arguments are checked for their Python types here and for their values, with every shape and
dtype, in Rust (crates/graph/src/ops/conv.rs, conv_transpose.rs, pool.rs)."""

from __future__ import annotations

from typing import Any

import numpy as np

from max.graph.dim import Dim
from max.graph.ops._stage import as_tensor, dims_attr, stage1
from max.graph.ops.linalg import _promoted
from max.graph.ops.reduction import _bool, _int
from max.graph.type import ConvInputLayout, FilterLayout
from max.graph.value import TensorValue


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _ints(op: str, arg: str, value: Any, n: int) -> list[int]:
    """`n` ints from a sequence of `n`, or one int repeated."""
    if _is_int(value):
        return [int(value)] * n
    if isinstance(value, (tuple, list)):
        if len(value) != n:
            raise ValueError(f"{op}: {arg}: expected {n} values, got {len(value)} ({tuple(value)!r})")
        return [_int(op, arg, v) for v in value]
    raise TypeError(f"{op}: {arg}: expected an int or a tuple of {n} ints, got {type(value).__name__}")


def _pair_padding(op: str, value: Any) -> tuple[int, int]:
    """The docs' pooling/fold padding: an int for both dims, or (height, width); each is
    added on both sides."""
    ph, pw = _ints(op, "padding", value, 2)
    return ph, pw


def _dims(op: str, arg: str, value: Any) -> tuple:
    """Two dims (ints, names or Dims), or one repeated."""
    items = list(value) if isinstance(value, (tuple, list)) else [value, value]
    if len(items) != 2:
        raise ValueError(f"{op}: {arg}: expected 2 sizes, got {len(items)} ({tuple(items)!r})")
    try:
        return dims_attr(Dim(v) for v in items)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{op}: {arg}: {e}") from None


def _layout(op: str, arg: str, value: Any, kind: type) -> str:
    try:
        return kind(value).value
    except ValueError:
        names = ", ".join(m.value for m in kind)
        raise ValueError(f"{op}: {arg}: expected one of {names}, got {value!r}") from None


def _conv_inputs(op: str, x: Any, filter: Any, bias: Any) -> list[TensorValue]:  # noqa: A002
    t = as_tensor(x, op=op, arg="x")
    values = [t, as_tensor(filter, like=t, op=op, arg="filter")]
    names = ["x", "filter"]
    if bias is not None:
        values.append(as_tensor(bias, like=t, op=op, arg="bias"))
        names.append("bias")
    return _promoted(op, values, names)


def _conv(op: str, nd: int, x: Any, filter: Any, bias: Any, attrs: dict[str, Any]) -> TensorValue:  # noqa: A002
    inputs = _conv_inputs(op, x, filter, bias)
    attrs["stride"] = _ints(op, "stride", attrs["stride"], nd)
    attrs["dilation"] = _ints(op, "dilation", attrs["dilation"], nd)
    attrs["padding"] = _ints(op, "padding", attrs["padding"], 2 * nd)
    attrs["input_layout"] = _layout(op, "input_layout", attrs["input_layout"], ConvInputLayout)
    attrs["filter_layout"] = _layout(op, "filter_layout", attrs["filter_layout"], FilterLayout)
    if "groups" in attrs:
        attrs["groups"] = _int(op, "groups", attrs["groups"])
    return stage1(op, inputs, attrs)


def conv2d(
    x: Any,
    filter: Any,  # noqa: A002 - MAX's name
    stride: Any = (1, 1),
    dilation: Any = (1, 1),
    padding: Any = (0, 0, 0, 0),
    groups: int = 1,
    bias: Any = None,
    input_layout: ConvInputLayout = ConvInputLayout.NHWC,
    filter_layout: FilterLayout = FilterLayout.RSCF,
) -> TensorValue:
    """2-D convolution. `x` is NHWC (or NCHW), `filter` RSCF (or FCRS, CFRS), `padding` is
    (top, bottom, left, right), `bias` has shape [out_channels]. The result is
    [N, H_out, W_out, out_channels], as MAX infers it for either input layout."""
    attrs = {
        "stride": stride, "dilation": dilation, "padding": padding, "groups": groups,
        "input_layout": input_layout, "filter_layout": filter_layout,
    }
    return _conv("conv2d", 2, x, filter, bias, attrs)


def conv2d_transpose(
    x: Any,
    filter: Any,  # noqa: A002 - MAX's name
    stride: Any = (1, 1),
    dilation: Any = (1, 1),
    padding: Any = (0, 0, 0, 0),
    output_paddings: Any = (0, 0),
    bias: Any = None,
    input_layout: ConvInputLayout = ConvInputLayout.NHWC,
    filter_layout: FilterLayout = FilterLayout.RSCF,
) -> TensorValue:
    """Transposed 2-D convolution (the gradient of conv2d with respect to its input). `filter` is
    RSCF: (R, S, out_channels, in_channels), or CFRS: (in_channels, out_channels, R, S), or FCRS:
    (out_channels, in_channels, R, S). Each output size is (size - 1) * stride - pads +
    dilation * (kernel - 1) + 1 + output_padding. The result keeps the input's layout."""
    attrs = {
        "stride": stride, "dilation": dilation, "padding": padding,
        "input_layout": input_layout, "filter_layout": filter_layout,
        "output_paddings": _ints("conv2d_transpose", "output_paddings", output_paddings, 2),
    }
    return _conv("conv2d_transpose", 2, x, filter, bias, attrs)


def conv3d(
    x: Any,
    filter: Any,  # noqa: A002 - MAX's name
    stride: Any = (1, 1, 1),
    dilation: Any = (1, 1, 1),
    padding: Any = (0, 0, 0, 0, 0, 0),
    groups: int = 1,
    bias: Any = None,
    input_layout: ConvInputLayout = ConvInputLayout.NHWC,
    filter_layout: FilterLayout = FilterLayout.QRSCF,
) -> TensorValue:
    """3-D convolution. `x` is NDHWC (or NCDHW with input_layout NCHW), `filter` QRSCF (or
    FCQRS), `padding` is (front, back, top, bottom, left, right). The result is
    [N, D_out, H_out, W_out, out_channels]."""
    attrs = {
        "stride": stride, "dilation": dilation, "padding": padding, "groups": groups,
        "input_layout": input_layout, "filter_layout": filter_layout,
    }
    return _conv("conv3d", 3, x, filter, bias, attrs)


def _pool(op: str, kernel_size: Any, stride: Any, dilation: Any, padding: Any, ceil_mode: Any) -> dict:
    ph, pw = _pair_padding(op, padding)
    return {
        "kernel_size": _dims(op, "kernel_size", kernel_size),
        "stride": _ints(op, "stride", stride, 2),
        "dilation": _ints(op, "dilation", dilation, 2),
        "padding": [ph, ph, pw, pw],
        "ceil_mode": _bool(op, "ceil_mode", ceil_mode),
    }


def avg_pool2d(
    input: Any,  # noqa: A002 - MAX's name
    kernel_size: Any,
    stride: Any = 1,
    dilation: Any = 1,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_boundary: bool = True,
) -> TensorValue:
    """Average over sliding windows of an NHWC tensor. `padding` (an int, or (height, width)) is
    added on both sides; `count_boundary` counts padded elements in each average."""
    t = as_tensor(input, op="avg_pool2d", arg="input")
    attrs = _pool("avg_pool2d", kernel_size, stride, dilation, padding, ceil_mode)
    attrs["count_boundary"] = _bool("avg_pool2d", "count_boundary", count_boundary)
    return stage1("avg_pool2d", [t], attrs)


def max_pool2d(
    input: Any,  # noqa: A002 - MAX's name
    kernel_size: Any,
    stride: Any = 1,
    dilation: Any = 1,
    padding: Any = 0,
    ceil_mode: bool = False,
) -> TensorValue:
    """Maximum over sliding windows of an NHWC tensor. `padding` (an int, or (height, width)) is
    added on both sides."""
    t = as_tensor(input, op="max_pool2d", arg="input")
    return stage1("max_pool2d", [t], _pool("max_pool2d", kernel_size, stride, dilation, padding, ceil_mode))


def fold(
    input: Any,  # noqa: A002 - MAX's name
    output_size: Any,
    kernel_size: Any,
    stride: Any = 1,
    dilation: Any = 1,
    padding: Any = 0,
) -> TensorValue:
    """Sums sliding blocks [N, C * kh * kw, L] back into a [N, C, output_size[0],
    output_size[1]] tensor; L must be the number of block positions."""
    t = as_tensor(input, op="fold", arg="input")
    attrs = {
        "output_size": _dims("fold", "output_size", output_size),
        "kernel_size": _dims("fold", "kernel_size", kernel_size),
        "stride": _ints("fold", "stride", stride, 2),
        "dilation": _ints("fold", "dilation", dilation, 2),
        "padding": list(_pair_padding("fold", padding)),
    }
    return stage1("fold", [t], attrs)


__all__ = ["avg_pool2d", "conv2d", "conv2d_transpose", "conv3d", "fold", "max_pool2d"]
