"""Functional ops that are compositions of graph ops (``max.functional`` lifts them to Tensors
like any graph op): reductions over all elements (``axis=None``), ``split`` by chunk size,
``clip``, ``hann_window`` and ``complex_mul``. Each takes and returns graph values."""

from __future__ import annotations

from typing import Any

from max.dtype import DType
from max.graph import TensorValue, ops
from max.graph.dim import StaticDim


def _flat(x: TensorValue, axis: int | None) -> tuple[TensorValue, int]:
    if axis is None:
        return ops.reshape(x, [-1]), 0
    return x, axis


def _as_number(v: TensorValue, dtype: DType) -> TensorValue:
    """A bool tensor as `dtype` (True 1, False 0), for sums and means that count, as numpy's do."""
    return ops.cast(v, dtype) if v.dtype == DType.bool else v


def sum(x: Any, axis: int | None = -1) -> TensorValue:  # noqa: A001 - MAX's name
    """Sum along `axis` (kept, size 1); `axis=None` sums every element into shape [1]. A bool
    tensor's sum counts its True values (int64)."""
    v, a = _flat(x, axis)
    return ops.sum(_as_number(v, DType.int64), a)


def mean(x: Any, axis: int | None = -1) -> TensorValue:
    """Mean along `axis`, which stays with size 1; ``axis=None`` averages every element into
    shape [1]. A bool tensor's mean is the fraction of True values (float32)."""
    v, a = _flat(x, axis)
    return ops.mean(_as_number(v, DType.float32), a)


def cumsum(x: Any, axis: int = -1, exclusive: bool = False, reverse: bool = False) -> TensorValue:
    """ops.cumsum; a bool tensor's running sum counts its True values (int64)."""
    from max.graph.ops._stage import as_tensor

    t = as_tensor(x, op="cumsum", arg="x")
    return ops.cumsum(_as_number(t, DType.int64), axis, exclusive=exclusive, reverse=reverse)


def argmax(x: Any, axis: int | None = -1) -> TensorValue:
    """int64 index of the largest element along `axis` (kept with size 1); ``axis=None`` indexes the flattened tensor."""
    v, a = _flat(x, axis)
    return ops.argmax(v, a)


def argmin(x: Any, axis: int | None = -1) -> TensorValue:
    """int64 index of the smallest element along `axis` (kept with size 1); ``axis=None`` indexes the flattened tensor."""
    v, a = _flat(x, axis)
    return ops.argmin(v, a)


def max(x: Any, y: Any = None, /, axis: int | None = -1) -> TensorValue:  # noqa: A001 - MAX's name
    """Elementwise maximum of `x` and `y`, or the maximum of `x` along `axis` (None: all)."""
    if y is not None:
        return ops.max(x, y)
    v, a = _flat(x, axis)
    return ops.max(v, axis=a)


def min(x: Any, y: Any = None, /, axis: int | None = -1) -> TensorValue:  # noqa: A001 - MAX's name
    """Elementwise minimum of two tensors, or the minimum of one along `axis` (kept with size 1; ``None``: over every element)."""
    if y is not None:
        return ops.min(x, y)
    v, a = _flat(x, axis)
    return ops.min(v, axis=a)


def split(x: TensorValue, split_size_or_sections: int | list[int], axis: int = 0) -> list[TensorValue]:
    """Pieces of `x` along `axis`: of the given sizes (a list), or of one size (an int; the
    last piece holds what is left)."""
    if isinstance(split_size_or_sections, int):
        size = split_size_or_sections
        rank = x.rank
        if isinstance(axis, bool) or not isinstance(axis, int) or rank == 0 or not -rank <= axis < rank:
            raise IndexError(f"split: axis {axis!r} is out of range for a tensor of rank {rank}")
        dim = x.shape[axis]
        if not isinstance(dim, StaticDim):
            raise ValueError(f"split: axis {axis} of shape {list(x.shape)} is symbolic; give the sizes as a list")
        if size <= 0:
            raise ValueError(f"split: the chunk size must be positive, got {size}")
        total = int(dim)
        sizes = [size] * (total // size) + ([total % size] if total % size else [])
        return ops.split(x, sizes, axis)
    return ops.split(x, list(split_size_or_sections), axis)


def clip(x: TensorValue, min: Any = None, max: Any = None) -> TensorValue:  # noqa: A002
    """`x` with values below `min` raised to it and values above `max` lowered to it."""
    from max.graph.ops._stage import as_tensor

    if min is not None:
        x = ops.max(x, as_tensor(min, like=x, op="clip", arg="min"))
    if max is not None:
        x = ops.min(x, as_tensor(max, like=x, op="clip", arg="max"))
    return x


def hann_window(window_length: int, device: Any, periodic: bool = True, dtype: DType = DType.float32) -> TensorValue:
    """ops.hann_window: ``0.5 - 0.5 cos(2 pi n / N)`` for n < window_length; N is window_length
    (periodic) or window_length - 1 (symmetric); length 1 gives [1], 0 an empty tensor."""
    return ops.hann_window(window_length, device, periodic=periodic, dtype=dtype)


def complex_mul(lhs: TensorValue, rhs: TensorValue) -> TensorValue:
    """Complex product of tensors whose last dim of 2 holds (real, imag)."""
    a, b = lhs[..., 0], lhs[..., 1]
    c, d = rhs[..., 0], rhs[..., 1]
    return ops.stack([a * c - b * d, a * d + b * c], axis=-1)


def _describe(v: TensorValue) -> str:
    return f"{v.dtype.name}{[int(d) if isinstance(d, StaticDim) else str(d) for d in v.shape]} on {v.device}"


def strict(op: Any) -> Any:
    """`op` (a binary graph op) refusing two tensors of different dtypes or devices: eager code
    casts or moves explicitly (Python numbers still take the tensor's dtype)."""

    def checked(lhs: Any, rhs: Any) -> TensorValue:
        if isinstance(lhs, TensorValue) and isinstance(rhs, TensorValue):
            if lhs.dtype != rhs.dtype or lhs.device != rhs.device:
                what = "dtypes" if lhs.dtype != rhs.dtype else "devices"
                raise TypeError(
                    f"{op.__name__}: the operands' {what} differ ({_describe(lhs)} and {_describe(rhs)}); "
                    "cast with .cast(dtype) or move with .to(device) first"
                )
        return op(lhs, rhs)

    checked.__name__ = op.__name__
    checked.__doc__ = op.__doc__
    return checked


add = strict(ops.add)
sub = strict(ops.sub)
mul = strict(ops.mul)
div = strict(ops.div)
mod = strict(ops.mod)
pow = strict(ops.pow)  # noqa: A001
equal = strict(ops.equal)
not_equal = strict(ops.not_equal)
greater = strict(ops.greater)
greater_equal = strict(ops.greater_equal)
logical_and = strict(ops.logical_and)
logical_or = strict(ops.logical_or)
logical_xor = strict(ops.logical_xor)
matmul = strict(ops.matmul)


def floordiv(lhs: Any, rhs: Any) -> TensorValue:
    return strict(_floordiv)(lhs, rhs)


def _floordiv(lhs: Any, rhs: Any) -> TensorValue:
    return lhs // rhs if isinstance(lhs, TensorValue) else rhs.__rfloordiv__(lhs)


def getitem(x: TensorValue, index: Any) -> TensorValue:
    return x[index]
