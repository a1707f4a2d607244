"""Graph values (``max.graph.Value``, ``TensorValue``, ``BufferValue``): typed edges of the
graph. A value knows its graph and its id there; its type comes from Rust on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from max.dtype import DType
from max.graph.type import BufferType, DeviceKind, DeviceRef, TensorType, Type, _from_core

if TYPE_CHECKING:
    from max.graph.graph import Graph
    from max.graph.shape import Shape


class Value:
    """A symbolic value of a graph: an op result, a graph input, or a block argument."""

    __slots__ = ("_graph", "_id", "_type")

    def __init__(self, value: Any) -> None:
        raise TypeError("Values are made by staging ops; use TensorValue(x) to convert x to a tensor")

    @staticmethod
    def _from_id(graph: Graph, vid: int) -> Value:
        kind = graph._ir.value_summary(vid)[0]
        cls = TensorValue if kind == "tensor" else BufferValue if kind == "buffer" else _ChainValue
        v = object.__new__(cls)
        v._graph = graph
        v._id = vid
        v._type = None
        return v

    @property
    def type(self) -> Type:
        """The value's graph type (TensorType, BufferType, or an opaque/chain type)."""
        if self._type is None:
            self._type = _from_core(self._graph._ir.value_type(self._id))
        return self._type

    @property
    def tensor(self) -> TensorValue:
        """This value as a TensorValue; TypeError when it is not a tensor."""
        if isinstance(self, TensorValue):
            return self
        raise TypeError(f"value is not a tensor: {self!r}")

    @property
    def buffer(self) -> BufferValue:
        """This value as a BufferValue; TypeError when it is not a buffer."""
        if isinstance(self, BufferValue):
            return self
        raise TypeError(f"value is not a buffer: {self!r}")

    @property
    def opaque(self) -> Any:
        """The value as an opaque value; TypeError for any other kind."""
        raise TypeError(f"value is not opaque: {self!r}")

    def _summary(self) -> tuple:
        return self._graph._ir.value_summary(self._id)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.type!r})"

    __hash__ = object.__hash__


class _ChainValue(Value):
    """Orders side-effecting ops."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "_ChainValue()"


class _ShapedValue(Value):
    __slots__ = ()

    @property
    def dtype(self) -> DType:
        return DType(self._summary()[1])

    @property
    def rank(self) -> int:
        return self._summary()[2]

    @property
    def device(self) -> DeviceRef:
        kind, i = self._summary()[3]
        return DeviceRef(DeviceKind(kind), i)

    @property
    def shape(self) -> Shape:
        return self.type.shape  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        t = self.type
        return f"{type(self).__name__}(dtype={t.dtype.name}, shape={list(t.shape)!r}, device={t.device})"  # type: ignore[attr-defined]


class TensorValue(_ShapedValue):
    """A value-semantic tensor in a graph, with numpy-like operators and methods."""

    __slots__ = ()
    # numpy must hand `array @ value` (and other operators) to this class, not loop over it.
    __array_ufunc__ = None

    def __new__(cls, value: Any) -> TensorValue:
        from max.graph.ops._stage import as_tensor

        return as_tensor(value, op="TensorValue", arg="value")

    def __init__(self, value: Any) -> None:
        pass

    @property
    def type(self) -> TensorType:
        """The value's TensorType: dtype, shape and device."""
        return super().type  # type: ignore[return-value]

    @property
    def T(self) -> TensorValue:  # noqa: N802 - MAX's name
        """The tensor with its last two dimensions swapped."""
        from max.graph import ops

        if self.rank < 2:
            raise IndexError(f"T swaps the last two dims; a tensor of rank {self.rank} ({self.type}) has fewer")
        return ops.transpose(self, -1, -2)

    def argmax(self, axis: int = -1) -> TensorValue:
        """int64 index of the largest element along `axis`, kept with size 1 (``ops.argmax``)."""
        from max.graph import ops

        return ops.argmax(self, axis)

    def broadcast_to(self, shape: Any) -> TensorValue:
        """The value broadcast to `shape` (``ops.broadcast_to``)."""
        from max.graph import ops

        return ops.broadcast_to(self, shape)

    def cast(self, dtype: DType) -> TensorValue:
        """The values converted to `dtype` (``ops.cast``)."""
        from max.graph import ops

        return ops.cast(self, dtype)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> TensorValue:
        """Dims `start_dim` to `end_dim` merged into one (``ops.flatten``)."""
        from max.graph import ops

        return ops.flatten(self, start_dim, end_dim)

    def max(self, axis: int = -1) -> TensorValue:
        """Maximum along `axis`, kept with size 1 (``ops.max``)."""
        from max.graph import ops

        return ops.max(self, axis=axis)

    def min(self, axis: int = -1) -> TensorValue:
        """Minimum along `axis`, kept with size 1 (``ops.min``)."""
        from max.graph import ops

        return ops.min(self, axis=axis)

    def mean(self, axis: int = -1) -> TensorValue:
        """Mean along `axis`, kept with size 1 (``ops.mean``)."""
        from max.graph import ops

        return ops.mean(self, axis)

    def var(self, axis: int = -1) -> TensorValue:
        """Population variance (no Bessel correction) along `axis`, keeping the axis."""
        from max.graph import ops

        centred = self - ops.mean(self, axis)
        return ops.mean(centred * centred, axis)

    def stdev(self, axis: int = -1) -> TensorValue:
        """Standard deviation along `axis` (the square root of ``var``), kept with size 1."""
        from max.graph import ops

        return ops.sqrt(self.var(axis))

    def permute(self, dims: list[int]) -> TensorValue:
        """The dims reordered as `dims` lists them (``ops.permute``)."""
        from max.graph import ops

        return ops.permute(self, dims)

    def print(self, label: str = "debug_tensor") -> None:
        """Prints the value with `label` when the model runs (``ops.print``)."""
        from max.graph import ops

        ops.print(self, label)

    def rebind(self, shape: Any, message: str = "") -> TensorValue:
        """The value with `shape` asserted at run time (``ops.rebind``); `message` names a mismatch."""
        from max.graph import ops

        return ops.rebind(self, shape, message)

    def reshape(self, shape: Any) -> TensorValue:
        """The same elements with a new `shape` (``ops.reshape``)."""
        from max.graph import ops

        return ops.reshape(self, shape)

    def to(self, device: Any) -> TensorValue:
        """The value moved to `device` (``ops.transfer_to``)."""
        from max.graph import ops

        return ops.transfer_to(self, device)

    def transpose(self, dim_1: int, dim_2: int) -> TensorValue:
        """The value with dims `dim_1` and `dim_2` swapped (``ops.transpose``)."""
        from max.graph import ops

        return ops.transpose(self, dim_1, dim_2)

    def __getitem__(self, index: Any) -> TensorValue:
        from max.graph import ops

        return ops.slice_tensor(self, index if isinstance(index, tuple) else (index,))

    def __len__(self) -> int:
        if self.rank == 0:
            raise TypeError("len() of a rank-0 tensor")
        return int(self.shape[0])

    def __iter__(self):
        raise TypeError("TensorValue is not iterable; index it or use ops.split/ops.chunk")

    def __bool__(self) -> bool:
        raise TypeError("the truth value of a TensorValue is not known while staging; use ops.cond or ops.where")

    def _binary(self, name: str, other: Any, reverse: bool = False) -> TensorValue:
        from max.graph.ops.elementwise import _binary

        return _binary(name, other, self) if reverse else _binary(name, self, other)

    def __add__(self, o: Any) -> TensorValue:
        return self._binary("add", o)

    def __radd__(self, o: Any) -> TensorValue:
        return self._binary("add", o, True)

    def __sub__(self, o: Any) -> TensorValue:
        return self._binary("sub", o)

    def __rsub__(self, o: Any) -> TensorValue:
        return self._binary("sub", o, True)

    def __mul__(self, o: Any) -> TensorValue:
        return self._binary("mul", o)

    def __rmul__(self, o: Any) -> TensorValue:
        return self._binary("mul", o, True)

    def __truediv__(self, o: Any) -> TensorValue:
        return self._binary("div", o)

    def __rtruediv__(self, o: Any) -> TensorValue:
        return self._binary("div", o, True)

    def __floordiv__(self, o: Any) -> TensorValue:
        return self._binary("floordiv", o)

    def __rfloordiv__(self, o: Any) -> TensorValue:
        return self._binary("floordiv", o, True)

    def __mod__(self, o: Any) -> TensorValue:
        return self._binary("mod", o)

    def __rmod__(self, o: Any) -> TensorValue:
        return self._binary("mod", o, True)

    def __pow__(self, o: Any) -> TensorValue:
        return self._binary("pow", o)

    def __rpow__(self, o: Any) -> TensorValue:
        return self._binary("pow", o, True)

    def __matmul__(self, o: Any) -> TensorValue:
        from max.graph import ops

        return ops.matmul(self, o)

    def __rmatmul__(self, o: Any) -> TensorValue:
        from max.graph import ops

        return ops.matmul(o, self)

    def __neg__(self) -> TensorValue:
        from max.graph import ops

        return ops.negate(self)

    def __abs__(self) -> TensorValue:
        from max.graph import ops

        return ops.abs(self)

    def __invert__(self) -> TensorValue:
        from max.graph import ops

        return ops.logical_not(self)

    def __and__(self, o: Any) -> TensorValue:
        return self._binary("logical_and", o)

    def __rand__(self, o: Any) -> TensorValue:
        return self._binary("logical_and", o, True)

    def __or__(self, o: Any) -> TensorValue:
        return self._binary("logical_or", o)

    def __ror__(self, o: Any) -> TensorValue:
        return self._binary("logical_or", o, True)

    def __xor__(self, o: Any) -> TensorValue:
        return self._binary("logical_xor", o)

    def __rxor__(self, o: Any) -> TensorValue:
        return self._binary("logical_xor", o, True)

    def __eq__(self, o: Any) -> TensorValue:  # type: ignore[override]
        return self._binary("equal", o)

    def __ne__(self, o: Any) -> TensorValue:  # type: ignore[override]
        return self._binary("not_equal", o)

    def __gt__(self, o: Any) -> TensorValue:
        return self._binary("greater", o)

    def __ge__(self, o: Any) -> TensorValue:
        return self._binary("greater_equal", o)

    def __lt__(self, o: Any) -> TensorValue:
        return self._binary("greater", o, True)

    def __le__(self, o: Any) -> TensorValue:
        return self._binary("greater_equal", o, True)

    __hash__ = object.__hash__


class BufferValue(_ShapedValue):
    """A mutable tensor in a graph, read and written by the buffer ops."""

    __slots__ = ()

    def __new__(cls, value: Any) -> BufferValue:
        if isinstance(value, BufferValue):
            return value
        if isinstance(value, Value):
            return value.buffer
        raise TypeError(f"BufferValue expects a buffer value, got {type(value).__name__}")

    def __init__(self, value: Any) -> None:
        pass

    @property
    def type(self) -> BufferType:
        """The value's BufferType: dtype, shape and device."""
        return super().type  # type: ignore[return-value]

    def print(self, label: str = "debug_buffer") -> None:
        """Prints the buffer's contents with `label` when the model runs."""
        from max.graph import ops

        ops.print(ops.buffer_load(self), label)

    def __getitem__(self, index: Any) -> TensorValue:
        from max.graph import ops

        return ops.buffer_load(self)[index]

    def __setitem__(self, index: Any, value: Any) -> None:
        from max.graph import ops

        ops.buffer_store_slice(self, value, index if isinstance(index, tuple) else (index,))
