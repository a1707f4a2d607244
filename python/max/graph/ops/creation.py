"""Ops that make tensors: constants, external constants (weights), ranges, shapes as
tensors, casts and rebinds."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from max.dtype import DType
from max.graph.dim import Dim, StaticDim
from max.graph.shape import Shape
from max.graph.ops._stage import as_tensor, device_attr, dims_attr, dtype_attr, stage1, types_attr
from max.graph.type import DeviceRef, FilterLayout, TensorType
from max.graph.value import TensorValue

_INT_RANGE = {d: (np.iinfo(d.to_numpy()).min, np.iinfo(d.to_numpy()).max) for d in DType if d.is_integral()}


def _host_array(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "__dlpack__") and not isinstance(value, (list, tuple)):
        from max import driver

        buf = value if isinstance(value, driver.Buffer) else driver.Buffer.from_dlpack(value)
        return buf.to(driver.CPU()).to_numpy() if not buf.dtype.is_float8() else buf.to_numpy()
    return nested_array(value, "constant: value")


def nested_array(value: Any, who: str) -> np.ndarray:
    """np.asarray(value), a ragged nested list being a ValueError naming `who`."""
    try:
        return np.asarray(value)
    except ValueError:
        raise ValueError(f"{who}: nested lists must be rectangular (every row of a level the same length)") from None


def _python_ints(value: Any) -> bool:
    """Whether `value` is a Python int or a (nested) list or tuple of only Python ints."""
    if isinstance(value, (list, tuple)):
        return all(_python_ints(v) for v in value)
    return isinstance(value, int) and not isinstance(value, bool)


def _default_dtype(value: Any, arr: np.ndarray) -> DType:
    # (numpy scalars keep their type, as arrays do)
    if isinstance(value, Shape):
        return DType.int64  # (a shape's dims, an empty one's too)
    python_like = not isinstance(value, (np.ndarray, np.generic)) and not hasattr(value, "__dlpack__")
    if python_like and arr.dtype.kind == "u" and _python_ints(value):
        return DType.int64  # (numpy holds a Python int past int64 as uint64: range-checked)
    if python_like and arr.dtype.kind == "f":
        return DType.float32
    if python_like and arr.dtype.kind in "iu":
        return DType.int64
    try:
        return DType.from_numpy(arr.dtype)
    except ValueError:
        raise TypeError(f"constant: value: numpy dtype {arr.dtype} has no max.dtype.DType") from None


def _float_type(dtype: DType) -> Any:
    """The numpy (or ml_dtypes) type holding a float `dtype`'s values, or None."""
    if dtype in (DType.float16, DType.float32, DType.float64):
        return dtype.to_numpy()
    import ml_dtypes

    return getattr(ml_dtypes, dtype.name, None)


def _check_float_fits(arr: np.ndarray, dtype: DType, who: str) -> None:
    """ValueError unless every finite value of `arr` stays finite when rounded to float `dtype`
    (as MAX documents for constants: a value that does not fit is an error, not inf); complex
    values only with a zero imaginary part."""
    if arr.dtype.kind == "c":
        if np.any(arr.imag != 0):
            raise ValueError(f"{who}: complex values cannot be loaded as {dtype.name}")
        arr = arr.real
    target = _float_type(dtype)
    if target is None or arr.dtype == target:
        return
    with np.errstate(over="ignore", invalid="ignore"):
        wide = arr.astype(np.float64).reshape(-1)
        finite = wide[np.isfinite(wide)]
        bad = finite[~np.isfinite(finite.astype(target).astype(np.float64))]
    if bad.size:
        from max.dtype import finfo

        raise ValueError(f"{who}: {bad[0].item()!r} does not fit in {dtype.name} "
                         f"(largest finite value {finfo(dtype).max!r})")


def check_fits(arr: np.ndarray, dtype: DType, who: str, floats: bool = True) -> None:
    """ValueError (naming `who`) unless every value of `arr` is exactly representable in an
    integral `dtype`: integers within its range, floats finite and integral; bool takes 0 and 1
    (or bools). Float dtypes take any value that stays finite when rounded to them (inf and NaN
    too; any value at all without `floats`: an operand beside a tensor rounds as numpy's weak
    scalars do). Non-numeric values (None) are a TypeError."""
    if arr.dtype == object:
        odd = [v for v in arr.reshape(-1).tolist() if not isinstance(v, (bool, int, float, complex, np.number))]
        raise TypeError(f"{who}: values must be numbers, got {odd[0]!r}" if odd else f"{who}: values must be numbers")
    if dtype.is_float() and arr.size:
        return _check_float_fits(arr, dtype, who) if floats else None
    if dtype is DType.bool and arr.size and arr.dtype != np.bool_:
        flat = arr.reshape(-1)
        bad = flat[(flat != 0) & (flat != 1)]
        if bad.size:
            raise ValueError(f"{who}: {bad[0].item()!r} does not fit in bool (0, 1, True or False)")
        return
    if not dtype.is_integral() or not arr.size:
        return
    lo, hi = _INT_RANGE[dtype]
    try:
        floating = DType.from_numpy(arr.dtype).is_float()  # (bfloat16 and float8 arrays too)
    except ValueError:
        floating = arr.dtype.kind in "fc"
    if floating:
        if arr.dtype.kind == "c":
            if np.any(arr.imag != 0):
                raise ValueError(f"{who}: complex values cannot be loaded as {dtype.name}")
            arr = arr.real
        wide = arr.astype(np.float64)
        if not np.all(np.isfinite(wide)) or np.any(wide != np.trunc(wide)):
            raise ValueError(f"{who}: non-integral values cannot be loaded as {dtype.name}")
        vmin, vmax = int(wide.min()), int(wide.max())  # (integral: exact as Python ints)
    else:
        vmin, vmax = int(arr.min()), int(arr.max())
    if vmin < lo or vmax > hi:
        bad = vmin if vmin < lo else vmax
        raise ValueError(f"{who}: {bad} does not fit in {dtype.name} (range {lo}..{hi})")


def _encode(arr: np.ndarray, dtype: DType, floats: bool = True) -> bytes:
    """The array's elements as `dtype`, little-endian, with the engine's cast rules."""
    from max import driver

    src_dtype = DType.from_numpy(arr.dtype)
    check_fits(arr, dtype, "constant: value", floats)
    buf = driver.Buffer.from_numpy(np.ascontiguousarray(arr))
    if src_dtype != dtype:
        buf = buf._cast(dtype)
    if dtype is DType.bool:
        return buf.view(DType.uint8).to_numpy().tobytes()
    return buf.view(DType.uint8, [buf.num_elements * dtype.size_in_bytes]).to_numpy().tobytes()


def _wide_ints(flat: list, shape: tuple, value: Any, dtype: DType | None) -> np.ndarray:
    """Python ints that numpy holds as objects (2**64 and more) or rounds to float64 (a list
    mixing ints past int64 with others), exactly: as float64 for a float `dtype`, else as
    `dtype` (int64 by default) when each fits, or the range error of the first that does not.
    Anything else held as objects (but static dims, as their ints) is a TypeError."""
    flat = [int(v) if isinstance(v, StaticDim) else v for v in flat]
    if not flat or not all(isinstance(v, int) and not isinstance(v, bool) for v in flat):
        raise TypeError(f"constant: value must be numeric, got {type(value).__name__}")
    if isinstance(dtype, DType) and dtype.is_float():
        try:
            return np.array(flat, dtype=np.float64).reshape(shape)
        except OverflowError:
            raise ValueError(f"constant: value: {max(flat, key=abs)} does not fit in {dtype.name}") from None
    target = dtype if isinstance(dtype, DType) and dtype.is_integral() else DType.int64
    lo, hi = _INT_RANGE[target]
    bad = next((v for v in flat if not lo <= v <= hi), None)
    if bad is not None:
        raise ValueError(f"constant: value: {bad} does not fit in {target.name} (range {lo}..{hi})")
    return np.array(flat, dtype=target.to_numpy()).reshape(shape)


def constant(value: Any, dtype: DType | None = None, device: Any = None, *, _operand: bool = False) -> TensorValue:
    """A tensor holding `value` (a number, nested list, numpy array or DLPack array), loaded
    as `dtype` (default: the value's own type; Python floats give float32, ints int64).
    Values that do not fit `dtype` are an error (integers out of its range, finite floats that
    would round to inf); floats are rounded to it."""
    if dtype is not None and not isinstance(dtype, DType):
        raise TypeError(f"constant: dtype must be a max.dtype.DType, got {dtype!r}")
    arr = _host_array(value)
    if arr.dtype == object or (arr.size and arr.dtype.kind == "f" and _python_ints(value)):
        flat = np.array(value, dtype=object).reshape(-1).tolist() if arr.dtype.kind == "f" else arr.reshape(-1).tolist()
        arr = _wide_ints(flat, arr.shape, value, dtype)
    if dtype is None:
        dtype = _default_dtype(value, arr)
    if not isinstance(dtype, DType):
        raise TypeError(f"constant: dtype must be a max.dtype.DType, got {dtype!r}")
    data = _encode(arr, dtype, floats=not _operand)
    attrs = {
        "data": ("data", data),
        "dtype": dtype_attr(dtype),
        "shape": dims_attr(arr.shape),
        "device": device_attr(device if device is not None else DeviceRef.CPU()),
    }
    return stage1("constant", [], attrs)


def constant_external(name: str, type: TensorType, align: int | None = None) -> TensorValue:  # noqa: A002
    """A tensor supplied at load time by name (a weight)."""
    if not isinstance(type, TensorType):
        raise TypeError(f"constant_external: type must be a TensorType, got {type!r}")
    return stage1("constant_external", [], {"name": name, "type": types_attr([type]), "align": align})


def shape_to_tensor(shape: Iterable[Any]) -> TensorValue:
    """The dims of `shape` as an int64 tensor (symbolic dims are read at run time)."""
    return stage1("shape_to_tensor", [], {"shape": dims_attr(shape)})


def cast(x: Any, dtype: DType) -> TensorValue:
    """`x` converted elementwise to `dtype`."""
    return stage1("cast", [as_tensor(x, op="cast", arg="x")], {"dtype": dtype_attr(dtype)})


def rebind(x: Any, shape: Iterable[Any], message: str = "", layout: FilterLayout | None = None) -> TensorValue:
    """`x` with its shape asserted (at run time) to be `shape`."""
    from max.graph.ops.layout import _dims

    t = as_tensor(x, op="rebind", arg="x")
    if isinstance(shape, Iterable) and not isinstance(shape, (str, bytes)):
        shape = list(shape)
    dims = _dims("rebind", "shape", shape)
    negative = [d.value for d in dims[1] if d.value is not None and d.value < 0]
    if negative:
        raise ValueError(f"rebind: shape: static dimensions must be non-negative, got {negative[0]} in {shape}")
    return stage1("rebind", [t], {"shape": dims, "message": message})


def _range_length(start: Any, stop: Any, step: Any) -> Dim | None:
    def num(v: Any) -> Any:
        if isinstance(v, StaticDim):
            return int(v)
        if isinstance(v, (bool, int, float, np.integer, np.floating)):
            return v.item() if isinstance(v, np.generic) else v
        return None

    a, b, s = num(start), num(stop), num(step)
    if a is not None and b is not None and s is not None:
        if s == 0:
            raise ValueError("range: step must be non-zero")
        if (b - a) * s < 0:
            raise ValueError(f"range: stop - start ({b} - {a}) must be zero or have the sign of step ({s})")
        if all(isinstance(v, int) and not isinstance(v, bool) for v in (a, b, s)):
            return Dim(max(0, -((a - b) // s)))  # exact ceil((b - a) / s) for ints of any size
        return Dim(max(0, math.ceil((b - a) / s)))
    if isinstance(s, int) and s > 0 and isinstance(stop, (Dim, int)) and isinstance(start, (Dim, int)):
        return (Dim(stop) - Dim(start) + (s - 1)) // s
    return None


def range(  # noqa: A001 - MAX's name
    start: Any, stop: Any, step: Any = 1, out_dim: Any = None, *, dtype: DType, device: Any
) -> TensorValue:
    """`start`, `start + step`, ... up to (not including) `stop`, as a rank-1 tensor."""
    length = Dim(out_dim) if out_dim is not None else _range_length(start, stop, step)
    if out_dim is not None and isinstance(length, StaticDim):
        known = _range_length(start, stop, step)
        if isinstance(known, StaticDim) and int(known) != int(length):
            raise ValueError(f"range: out_dim is {int(length)}, but start, stop and step give {int(known)} elements")
    if length is None:
        raise ValueError("range: out_dim is required when start, stop or step is only known at run time")
    where = DeviceRef.from_device(device)
    args = []
    for name, v in (("start", start), ("stop", stop), ("step", step)):
        if isinstance(v, TensorValue):
            args.append(v)
        elif isinstance(v, Dim):
            args.append(as_tensor(v, op="range", arg=name).cast(dtype) if dtype is not DType.int64 else as_tensor(v, op="range", arg=name))
        else:
            args.append(constant(v, dtype, where))
    attrs = {"dtype": dtype_attr(dtype), "device": device_attr(where), "out_dim": dims_attr([length])}
    return stage1("range", args, attrs)


__all__ = ["cast", "constant", "constant_external", "range", "rebind", "shape_to_tensor"]
