"""Making tensors from host data: default dtype/device, and host buffers of any dtype
(numpy lacks bfloat16 and float8, so those are made in int64 or float64 and cast by the engine,
which rounds once).
Under ``F.lazy()`` filled tensors are deferred: their memory is only made if they are used."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from max import driver
from max.dtype import DType
from max.graph.type import DeviceRef, TensorType
from max._eager.context import CURRENT, StagingContext
from max.graph.ops.creation import nested_array

_DTYPE: contextvars.ContextVar[DType | None] = contextvars.ContextVar("max_default_dtype", default=None)
_DEVICE: contextvars.ContextVar[Any] = contextvars.ContextVar("max_default_device", default=None)
_ACCEL: list = []


def _default_accelerator_or_cpu() -> driver.Device:
    if not _ACCEL:
        _ACCEL.append(driver.Accelerator() if driver.accelerator_count() else driver.CPU())
    return _ACCEL[0]


def as_device(device: Any) -> driver.Device:
    if isinstance(device, DeviceRef):
        return device.to_device()
    if isinstance(device, driver.Device):
        return device
    raise TypeError(f"expected a max.driver.Device or DeviceRef, got {device!r}")


def defaults(dtype: DType | None = None, device: Any = None) -> tuple[DType, driver.Device]:
    """The dtype and device for a new tensor: the given ones, else the context's defaults, else
    an accelerator if there is one (bfloat16 there) or the CPU (float32)."""
    if device is None:
        device = _DEVICE.get()
    device = _default_accelerator_or_cpu() if device is None else as_device(device)
    if dtype is None:
        dtype = _DTYPE.get()
    if dtype is None:
        dtype = DType.float32 if device.is_host else DType.bfloat16
    if not isinstance(dtype, DType):
        raise TypeError(f"expected a max.dtype.DType, got {dtype!r}")
    return dtype, device


@contextlib.contextmanager
def default_device(device: Any) -> Iterator[None]:
    """Within the ``with`` block, new tensors are created on `device` unless told otherwise."""
    token = _DEVICE.set(as_device(device))
    try:
        yield
    finally:
        _DEVICE.reset(token)


@contextlib.contextmanager
def default_dtype(dtype: DType) -> Iterator[None]:
    """Within the ``with`` block, new tensors have `dtype` unless told otherwise."""
    token = _DTYPE.set(dtype)
    try:
        yield
    finally:
        _DTYPE.reset(token)


@contextlib.contextmanager
def defaults_like(like: Any) -> Iterator[None]:
    """Within the ``with`` block, new tensors take `like`'s dtype and device by default."""
    device = like.device
    t1, t2 = _DTYPE.set(like.dtype), _DEVICE.set(as_device(device))
    try:
        yield
    finally:
        _DEVICE.reset(t2)
        _DTYPE.reset(t1)


def numpy_dtype(dtype: DType) -> np.dtype | None:
    """The numpy dtype holding `dtype`'s values, or None (float8 and narrower floats, whose
    numpy form is their bits as unsigned integers)."""
    try:
        nd = np.dtype(dtype.to_numpy())
    except (TypeError, ValueError, KeyError, AttributeError):
        return None
    return None if dtype.is_float() and nd.kind in "iu" else nd


def host_values(value: Any) -> np.ndarray:
    """Any array-like (nested lists, numbers, numpy, DLPack arrays) as a numpy array."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "__dlpack__") and not isinstance(value, (list, tuple)):
        try:
            return np.from_dlpack(value)
        except (BufferError, TypeError, RuntimeError):
            return np.asarray(value)
    return nested_array(value, "Tensor.constant: value")


def buffer(arr: np.ndarray, dtype: DType, device: driver.Device, fresh: bool = False) -> driver.Buffer:
    """A new Buffer of `dtype` on `device` holding `arr`'s values: a copy, unless `fresh` says
    that `arr` is a temporary nobody else holds (then, of the right dtype, it is taken over)."""
    np_dt = numpy_dtype(dtype)
    if np_dt is not None and (arr.dtype == np_dt or not _rounds_twice(dtype)):
        taken = fresh and arr.dtype == np_dt and arr.flags.c_contiguous and arr.flags.writeable
        buf = driver.Buffer.from_numpy(arr if taken else np.array(arr, dtype=np_dt, order="C", copy=True))
    else:
        # the engine's cast from the values as they are (ints, or floats widened exactly):
        # ml_dtypes rounds a float64 or an int to bfloat16 through float32, twice
        wide = arr if arr.dtype.kind in "iu" else arr.astype(np.float64)
        buf = driver.Buffer.from_numpy(np.ascontiguousarray(wide))._cast(dtype)
    return buf if device.is_host else buf.to(device)


def _rounds_twice(dtype: DType) -> bool:
    """Whether numpy (ml_dtypes) conversions to `dtype` may round twice: bfloat16 and float8."""
    return dtype.is_float() and dtype not in (DType.float16, DType.float32, DType.float64)


def static_shape(shape: Any, op: str) -> tuple[int, ...]:
    from max.graph.dim import Dim, StaticDim

    dims = []
    for d in shape:
        dim = d if isinstance(d, Dim) else Dim(d)
        if not isinstance(dim, StaticDim):
            raise ValueError(f"Tensor.{op}: shape {list(shape)} has a symbolic dim {dim}; eager tensors need static shapes")
        dims.append(int(dim))
    return tuple(dims)


def make(shape: tuple[int, ...], dtype: DType, device: driver.Device, values: Callable[[], np.ndarray],
         fresh: bool = False) -> Any:
    """A tensor from host values made by `values()` (`fresh`: a new array each call, which the
    tensor may take over); deferred under ``F.lazy()``."""
    from max.tensor import Tensor

    ctx = CURRENT.get()
    if isinstance(ctx, StagingContext) and not ctx.realize_on_exit:
        ttype = TensorType(dtype, shape, DeviceRef.from_device(device))
        return ctx.deferred_source(ttype, lambda: buffer(values(), dtype, device, fresh))
    return Tensor(storage=buffer(values(), dtype, device, fresh))


def filled(shape: tuple[int, ...], value: Any, dtype: DType) -> np.ndarray:
    """A host array of `shape` filled with `value`, in `dtype`'s numpy form where it has one
    (no wider temporary), else float32 (which the driver casts); bfloat16 and float8 values are
    rounded once by the engine's cast first (numpy's conversions would round twice)."""
    np_dt = numpy_dtype(dtype)
    if np_dt is None or _rounds_twice(dtype):
        value = _rounded(value, dtype)  # (then exact in float32 and bfloat16: no second rounding)
    return np.full(shape, value, dtype=np_dt or np.float32)


def _rounded(value: Any, dtype: DType) -> Any:
    """`value` rounded once to float `dtype` by the engine's cast, as a float64 (exact)."""
    whole = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if whole and -2**63 <= value < 2**64:
        src = np.array([value], np.int64 if value < 2**63 else np.uint64)
    else:
        try:
            src = np.array([value], np.float64)
        except (TypeError, ValueError, OverflowError):
            return value  # (np.full names what is wrong with it)
    return driver.Buffer.from_numpy(src)._cast(dtype)._cast(DType.float64).to_numpy()[0]


def arange(start: Any, stop: Any, step: Any, dtype: DType) -> np.ndarray:
    """numpy.arange's values for `dtype`: exact (in int64 or uint64) for an integral dtype and
    integer bounds (float64 holds integers exactly only up to 2**53), else in float64."""
    ints = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (start, stop, step))
    if ints and dtype.is_integral():
        lo, hi = min(int(start), int(stop)), max(int(start), int(stop))
        for wide in (np.int64, np.uint64):  # (the caller checks that the values fit `dtype`)
            if np.iinfo(wide).min <= lo and hi <= np.iinfo(wide).max:
                return np.arange(start, stop, step, dtype=wide)
    return np.arange(start, stop, step, dtype=np.float64)
