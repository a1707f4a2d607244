"""``max.tensor``: the eager ``Tensor``.

A Tensor is either real (``storage``: a driver Buffer) or unrealized (``state``: a graph value
in a realization context). Operators and methods run through ``max.functional``; with no
context active each op runs at once as a small cached compiled graph (see max/_eager)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from max import driver
from max.dtype import DType
from max.graph import ops
from max.graph.shape import Shape
from max.graph.ops.creation import check_fits
from max.graph.type import DeviceRef, TensorType
from max._eager import compiled, creation, dispatch
from max._eager import graph_fns as _g
from max._eager.context import (
    RealizationContext,
    RealizationState,
    StagingContext,
    current as current_realization_context,
    realization_context,
)
from max._eager.creation import default_device, default_dtype, defaults, defaults_like
from max._eager.fmt import format_tensor, host_array

_apply = dispatch.apply


class Tensor:
    """A multi-dimensional array with eager execution and automatic compilation."""

    __slots__ = {
        "storage": "The driver Buffer of a real tensor (None while unrealized).",
        "state": "The RealizationState of an unrealized tensor (None once real).",
        "_k": None,
        "__weakref__": None,
    }
    __array_ufunc__ = None  # `ndarray op Tensor` comes to the Tensor's reflected operator

    def __init__(self, *, storage: driver.Buffer | None = None, state: RealizationState | None = None) -> None:
        if (storage is None) == (state is None):
            raise TypeError("Tensor(): give exactly one of storage= (a Buffer) or state= (a RealizationState)")
        self.storage = storage
        self.state = state
        self._k = None

    # --- type information --------------------------------------------------------------------

    def _key(self) -> tuple:
        k = self._k
        if k is None:
            s = self.storage
            if s is None or self.state is not None:
                return compiled.type_key(self.type)
            k = (s.dtype, tuple(s.shape), DeviceRef.from_device(s.device))
            self._k = k
        return k

    @property
    def type(self) -> TensorType:
        """The tensor's TensorType: dtype, shape and device."""
        if self.state is not None:
            t = self.state.value.type
            return t.as_tensor() if hasattr(t, "as_tensor") else t
        s = self.storage
        return TensorType(s.dtype, s.shape, DeviceRef.from_device(s.device))

    @property
    def dtype(self) -> DType:
        """The element type."""
        return self.storage.dtype if self.state is None else self.state.value.dtype

    @property
    def shape(self) -> Shape:
        """The shape, as a graph Shape of static dims."""
        return Shape(self.storage.shape) if self.state is None else Shape(self.type.shape)

    @property
    def rank(self) -> int:
        """The number of dimensions."""
        return len(self.storage.shape) if self.state is None else self.state.value.rank

    @property
    def device(self) -> driver.Device:
        """The device holding the data (or that will hold it, for an unrealized tensor)."""
        return self.storage.device if self.state is None else self.type.device.to_device()

    def num_elements(self) -> int:
        """The number of elements (the product of the shape)."""
        n = 1
        for d in self.shape:
            n *= int(d)
        return n

    # --- realization -------------------------------------------------------------------------

    @property
    def real(self) -> bool:
        """Whether the values exist yet (False while the tensor is a value of a graph being built)."""
        return self.state is None

    def _realize(self) -> Tensor:
        if self.state is not None:
            ctx = self.state.ctx
            if isinstance(ctx, StagingContext):
                ctx.realize(self)
            else:
                ctx.realize()
            if self.state is not None:
                raise RuntimeError("the tensor's realization context did not realize it")
        return self

    @property
    def realize(self) -> Tensor:
        """Forces the tensor to realize (also awaitable: ``await t.realize``)."""
        return self._realize()

    def __await__(self):
        self._realize()
        return self
        yield  # noqa: unreachable - makes this a generator, as __await__ must be

    @property
    def driver_tensor(self) -> driver.Buffer:
        """The ``max.driver.Buffer`` holding the values; TypeError while unrealized."""
        if self.state is not None:
            raise TypeError("the tensor is unrealized; realize it first (t.realize)")
        return self.storage

    # --- construction ------------------------------------------------------------------------

    @classmethod
    def _wrap(cls, buf: driver.Buffer, key: Any = None) -> Tensor:
        t = object.__new__(cls)
        t.storage = buf
        t.state = None
        t._k = key
        return t

    @classmethod
    def constant(cls, value: Any, *, dtype: DType | None = None, device: Any = None) -> Tensor:
        """A tensor from a number, a nested list or an array (its values copied)."""
        if isinstance(value, Tensor):
            d, dev = defaults(dtype or value.dtype, device or value.device)
            return value.cast(d).to(dev)
        dtype, device = defaults(dtype, device)
        arr = creation.host_values(value)
        check_fits(arr, dtype, "Tensor.constant: value")
        return cls(storage=creation.buffer(arr, dtype, device))

    @classmethod
    def from_dlpack(cls, array: Any) -> Tensor:
        """A tensor sharing the memory of a DLPack array (numpy, torch, ...)."""
        if isinstance(array, Tensor):
            return array
        if isinstance(array, driver.Buffer):
            return cls(storage=array)
        return cls(storage=driver.Buffer.from_dlpack(array))

    @classmethod
    def from_numpy(cls, array: np.ndarray) -> Tensor:
        """A tensor holding a copy of `array`'s values (dtype and shape from the array)."""
        return cls(storage=driver.Buffer.from_numpy(np.array(array, order="C", copy=True)))  # (0-d stays 0-d)

    @classmethod
    def from_graph_value(cls, value: Any) -> Tensor:
        """An unrealized tensor for a graph value of the current realization context."""
        ctx = current_realization_context()
        if ctx is None:
            raise TypeError("Tensor.from_graph_value needs a realization context (e.g. inside Module.compile)")
        return ctx.create_unrealized(value)

    @classmethod
    def full(cls, shape: Iterable[Any], value: Any, *, dtype: DType | None = None, device: Any = None) -> Tensor:
        """A tensor of `shape` filled with `value` (dtype and device default to the current defaults)."""
        dtype, device = defaults(dtype, device)
        dims = creation.static_shape(shape, "full")
        check_fits(np.asarray(value), dtype, "Tensor.full: value")
        return creation.make(dims, dtype, device, lambda: creation.filled(dims, value, dtype), fresh=True)

    @classmethod
    def zeros(cls, shape: Iterable[Any], *, dtype: DType | None = None, device: Any = None) -> Tensor:
        """A tensor of `shape` filled with zeros."""
        return cls.full(shape, 0, dtype=dtype, device=device)

    @classmethod
    def ones(cls, shape: Iterable[Any], *, dtype: DType | None = None, device: Any = None) -> Tensor:
        """A tensor of `shape` filled with ones."""
        return cls.full(shape, 1, dtype=dtype, device=device)

    @classmethod
    def full_like(cls, input: Tensor | TensorType, value: Any) -> Tensor:
        """A tensor with `input`'s shape, dtype and device, filled with `value`."""
        return cls.full(input.shape, value, dtype=input.dtype, device=creation.as_device(input.device))

    @classmethod
    def zeros_like(cls, input: Tensor | TensorType) -> Tensor:
        """Zeros with `input`'s shape, dtype and device."""
        return cls.full_like(input, 0)

    @classmethod
    def ones_like(cls, input: Tensor | TensorType) -> Tensor:
        """Ones with `input`'s shape, dtype and device."""
        return cls.full_like(input, 1)

    @classmethod
    def arange(cls, start: Any = 0, stop: Any = None, step: Any = 1, *, dtype: DType | None = None,
               device: Any = None) -> Tensor:
        """Evenly spaced values in [start, stop), like range() and numpy.arange."""
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("Tensor.arange: step must be non-zero")
        dtype, device = defaults(dtype, device)
        vals = creation.arange(start, stop, step, dtype)
        if vals.size:
            check_fits(vals[[0, -1]], dtype, "Tensor.arange: values")
        return creation.make(vals.shape, dtype, device, lambda: vals)

    @classmethod
    def range_like(cls, type: TensorType) -> Tensor:
        """Indices along the last dim, broadcast to `type`'s shape."""
        dims = creation.static_shape(type.shape, "range_like")
        device = creation.as_device(type.device)
        row = np.arange(dims[-1] if dims else 1)
        return creation.make(dims, type.dtype, device, lambda: np.broadcast_to(row, dims))

    # --- conversion --------------------------------------------------------------------------

    def to(self, device: Any) -> Tensor:
        """The tensor on `device` (itself when it is there already)."""
        device = creation.as_device(device)
        if self.state is None:
            if self.storage.device == device:
                return self
            return Tensor(storage=self.storage.to(device))
        return _apply(ops.transfer_to, (self, DeviceRef.from_device(device)))

    def cast(self, dtype: DType) -> Tensor:
        """The values converted to `dtype` (itself when it already has that dtype)."""
        return self if dtype == self.dtype else _apply(ops.cast, (self, dtype))

    def item(self) -> Any:
        """The single element as a Python bool, int or float (TypeError for more than one)."""
        if self.num_elements() != 1:
            raise TypeError(f"Tensor.item: the tensor has {self.num_elements()} elements (shape {list(self.shape)}), not 1")
        self._realize()
        return host_array(self).reshape(-1)[0].item()

    def to_numpy(self) -> np.ndarray:
        """The values as a numpy array (realizing the tensor first)."""
        self._realize()
        return host_array(self)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self.to_numpy()
        return arr.astype(dtype) if dtype is not None else (arr.copy() if copy else arr)

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        self._realize()
        return self.storage.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> Any:
        self._realize()
        return self.storage.__dlpack_device__()

    def __repr__(self) -> str:
        self._realize()
        return format_tensor(self)

    __str__ = __repr__

    def __bool__(self) -> bool:
        if self.num_elements() != 1:
            raise TypeError(f"the truth value of a tensor of {self.num_elements()} elements (shape "
                            f"{[int(d) for d in self.shape]}) is ambiguous: reduce it first (e.g. with .max() or .min())")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __len__(self) -> int:
        if self.rank == 0:
            raise TypeError("len() of a rank-0 tensor")
        return int(self.shape[0])

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    __hash__ = object.__hash__

    # --- operators ---------------------------------------------------------------------------

    def __add__(self, o: Any) -> Tensor:
        return _apply(_g.add, (self, o))

    def __radd__(self, o: Any) -> Tensor:
        return _apply(_g.add, (o, self))

    def __sub__(self, o: Any) -> Tensor:
        return _apply(_g.sub, (self, o))

    def __rsub__(self, o: Any) -> Tensor:
        return _apply(_g.sub, (o, self))

    def __mul__(self, o: Any) -> Tensor:
        return _apply(_g.mul, (self, o))

    def __rmul__(self, o: Any) -> Tensor:
        return _apply(_g.mul, (o, self))

    def __truediv__(self, o: Any) -> Tensor:
        return _apply(_g.div, (self, o))

    def __rtruediv__(self, o: Any) -> Tensor:
        return _apply(_g.div, (o, self))

    def __floordiv__(self, o: Any) -> Tensor:
        return _apply(_g.floordiv, (self, o))

    def __rfloordiv__(self, o: Any) -> Tensor:
        return _apply(_g.floordiv, (o, self))

    def __mod__(self, o: Any) -> Tensor:
        return _apply(_g.mod, (self, o))

    def __rmod__(self, o: Any) -> Tensor:
        return _apply(_g.mod, (o, self))

    def __pow__(self, o: Any) -> Tensor:
        return _apply(_g.pow, (self, o))

    def __rpow__(self, o: Any) -> Tensor:
        return _apply(_g.pow, (o, self))

    def __matmul__(self, o: Any) -> Tensor:
        return _apply(_g.matmul, (self, o))

    def __rmatmul__(self, o: Any) -> Tensor:
        return _apply(_g.matmul, (o, self))

    def __neg__(self) -> Tensor:
        return _apply(ops.negate, (self,))

    def __pos__(self) -> Tensor:
        return self

    def __abs__(self) -> Tensor:
        return _apply(ops.abs, (self,))

    def __invert__(self) -> Tensor:
        return _apply(ops.logical_not, (self,))

    def __and__(self, o: Any) -> Tensor:
        return _apply(_g.logical_and, (self, o))

    def __rand__(self, o: Any) -> Tensor:
        return _apply(_g.logical_and, (o, self))

    def __or__(self, o: Any) -> Tensor:
        return _apply(_g.logical_or, (self, o))

    def __ror__(self, o: Any) -> Tensor:
        return _apply(_g.logical_or, (o, self))

    def __xor__(self, o: Any) -> Tensor:
        return _apply(_g.logical_xor, (self, o))

    def __rxor__(self, o: Any) -> Tensor:
        return _apply(_g.logical_xor, (o, self))

    def __eq__(self, o: Any) -> Tensor:  # type: ignore[override]
        return _apply(_g.equal, (self, o))

    def __ne__(self, o: Any) -> Tensor:  # type: ignore[override]
        return _apply(_g.not_equal, (self, o))

    def __gt__(self, o: Any) -> Tensor:
        return _apply(_g.greater, (self, o))

    def __ge__(self, o: Any) -> Tensor:
        return _apply(_g.greater_equal, (self, o))

    def __lt__(self, o: Any) -> Tensor:
        return _apply(_g.greater, (o, self))

    def __le__(self, o: Any) -> Tensor:
        return _apply(_g.greater_equal, (o, self))

    def __getitem__(self, index: Any) -> Tensor:
        return _apply(_g.getitem, (self, index))

    # --- methods -----------------------------------------------------------------------------

    @property
    def T(self) -> Tensor:  # noqa: N802 - MAX's name
        """The tensor with its last two dims swapped."""
        return self.transpose(-1, -2)

    def transpose(self, dim1: int, dim2: int) -> Tensor:
        """The tensor with dims `dim1` and `dim2` swapped."""
        return _apply(ops.transpose, (self, dim1, dim2))

    def permute(self, *dims: Any, **kwargs: Any) -> Tensor:
        """Reorders the dims: ``permute([0, 2, 1])``, ``permute(dims=[0, 2, 1])`` or ``permute(0, 2, 1)``."""
        if kwargs:
            if set(kwargs) != {"dims"} or dims:
                raise TypeError(f"Tensor.permute takes the dims (or dims=[...]), got {dims} and {sorted(kwargs)}")
            dims = (kwargs["dims"],)
        order = list(dims[0]) if len(dims) == 1 and isinstance(dims[0], (list, tuple)) else list(dims)
        return _apply(ops.permute, (self, order))

    def reshape(self, shape: Iterable[Any]) -> Tensor:
        """The same elements in row-major order with a new `shape` (one dim may be -1)."""
        return _apply(ops.reshape, (self, list(shape)))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Dims `start_dim` to `end_dim` (inclusive) merged into one."""
        return _apply(ops.flatten, (self, start_dim, end_dim))

    def broadcast_to(self, shape: Iterable[Any]) -> Tensor:
        """The tensor broadcast to `shape` (size-1 dims repeat; new dims are added in front)."""
        return _apply(ops.broadcast_to, (self, list(shape)))

    def squeeze(self, axis: int) -> Tensor:
        """The tensor without dim `axis`, which must have size 1."""
        return _apply(ops.squeeze, (self, axis))

    def unsqueeze(self, axis: int) -> Tensor:
        """The tensor with a new size-1 dim at `axis`."""
        return _apply(ops.unsqueeze, (self, axis))

    def split(self, split_size_or_sections: int | list[int], axis: int = 0) -> list[Tensor]:
        """Pieces along `axis`: of size `split_size_or_sections` each, or of the listed sizes."""
        return F.split(self, split_size_or_sections, axis)

    def clip(self, *, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002 - MAX's names
        """Values limited to [`min`, `max`] (either bound may be None)."""
        return F.clip(self, min=min, max=max)

    def sum(self, axis: int | None = -1) -> Tensor:
        """Sum along `axis`, kept with size 1 (``None``: over every element, shape [1])."""
        return F.sum(self, axis)

    def mean(self, axis: int | None = -1) -> Tensor:
        """Mean along `axis`, kept with size 1 (``None``: over every element, shape [1])."""
        return F.mean(self, axis)

    def max(self, axis: int | None = -1) -> Tensor:
        """Maximum along `axis`, kept with size 1 (``None``: over every element, shape [1])."""
        return F.max(self, axis=axis)

    def min(self, axis: int | None = -1) -> Tensor:
        """Minimum along `axis`, kept with size 1 (``None``: over every element, shape [1])."""
        return F.min(self, axis=axis)

    def argmax(self, axis: int | None = -1) -> Tensor:
        """int64 index of the largest value along `axis`, kept with size 1."""
        return F.argmax(self, axis)

    def argmin(self, axis: int | None = -1) -> Tensor:
        """int64 index of the smallest value along `axis`, kept with size 1."""
        return F.argmin(self, axis)


dispatch.Tensor = Tensor

from max import functional as F  # noqa: E402 - functional builds on Tensor

__all__ = [
    "RealizationContext", "RealizationState", "Tensor", "TensorType", "current_realization_context",
    "default_device", "default_dtype", "defaults", "defaults_like", "realization_context",
]
