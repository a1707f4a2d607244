"""``Weight``: a named tensor whose data is supplied when the graph is loaded. It joins a graph
(as an external constant) the first time it is used there."""

from __future__ import annotations

from typing import Any

from max.dtype import DType
from max.graph.dim import StaticDim
from max.graph.shape import Shape, ShapeLike
from max.graph.type import DeviceRef, TensorType


class Weight:
    """A weight: name, dtype, shape and device, plus an optional quantization encoding."""

    def __init__(
        self,
        name: str,
        dtype: DType,
        shape: ShapeLike,
        device: Any = None,
        quantization_encoding: Any = None,
        align: int | None = None,
        sharding_strategy: Any = None,
        _placeholder: bool = False,
        _has_alias: bool = False,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"Weight name must be a non-empty string, got {name!r}")
        if not isinstance(dtype, DType):
            raise TypeError(f"Weight {name!r}: dtype must be a max.dtype.DType, got {dtype!r}")
        self.name = name
        self._dtype = dtype
        self._shape = Shape(shape)
        for i, d in enumerate(self._shape):
            if not isinstance(d, StaticDim) or int(d) < 0:  # (its data comes from a file: static sizes)
                raise ValueError(f"Weight {name!r}: dim {i} of shape {list(self._shape)} must be a static size >= 0, "
                                 f"got {d}")
        if align is not None and (isinstance(align, bool) or not isinstance(align, int) or align < 1
                                  or align & (align - 1)):
            raise ValueError(f"Weight {name!r}: align must be a positive power of two, got {align!r}")
        self._device = DeviceRef.from_device(device) if device is not None else DeviceRef.CPU()
        self.quantization_encoding = quantization_encoding
        self.align = align
        self._sharding_strategy = sharding_strategy
        self.shard_idx: int | None = None
        self._parent: Weight | None = None

    @property
    def dtype(self) -> DType:
        """The element type."""
        return self._dtype

    @property
    def shape(self) -> Shape:
        """The weight's shape."""
        return self._shape

    @property
    def device(self) -> DeviceRef:
        """The device the weight's value is placed on."""
        return self._device

    @property
    def rank(self) -> int:
        """The number of dims."""
        return len(self._shape)

    @property
    def type(self) -> TensorType:
        """The weight's TensorType: dtype, shape and device."""
        return TensorType(self._dtype, self._shape, self._device)

    @property
    def original_dtype_and_shape(self) -> tuple[DType, Shape]:
        """The dtype and shape the weight was declared with."""
        return self._dtype, self._shape

    @property
    def sharding_strategy(self) -> Any:
        """How the weight is split across devices (None: not split)."""
        return self._sharding_strategy

    @sharding_strategy.setter
    def sharding_strategy(self, strategy: Any) -> None:
        self._sharding_strategy = strategy

    def shard(self, devices: Any) -> list[Weight]:
        """One piece of the weight per device of `devices`, cut as `sharding_strategy` says (a
        ``ShardingStrategy`` for that many devices). Each piece is a Weight on its device whose
        value is staged as a slice of this one (folded when the graph loads); pieces cannot be
        sharded again."""
        refs = [DeviceRef.from_device(d) for d in devices]
        strategy = self._sharding_strategy
        if strategy is None:
            raise ValueError(f"Weight {self.name!r}: set sharding_strategy before calling shard()")
        if self._parent is not None:
            raise ValueError(f"Weight {self.name!r} is already a shard; it cannot be sharded again")
        if strategy.num_devices != len(refs):
            raise ValueError(
                f"Weight {self.name!r}: the sharding strategy is for {strategy.num_devices} devices, "
                f"shard() got {len(refs)}"
            )
        shape = [int(d) for d in self._shape]
        pieces = []
        for i, ref in enumerate(refs):
            w = Weight(self.name, self._dtype, strategy.shard_shape(shape, i), ref,
                       quantization_encoding=self.quantization_encoding, align=self.align)
            w._parent = self
            w._sharding_strategy = strategy
            w.shard_idx = i
            pieces.append(w)
        return pieces

    def _value(self) -> Any:
        from max.graph.graph import Graph

        return self._value_in(Graph.current)

    def _value_in(self, g: Any) -> Any:
        """The weight's value in graph `g`: its external constant, or a shard's piece of its
        parent's."""
        if self._parent is None:
            return g.add_weight(self)
        return self._shard_value(g)

    def _shard_value(self, g: Any) -> Any:
        from max.graph import ops

        # The piece is staged once per graph: a slice of the whole weight, moved to the device.
        cache = g.__dict__.setdefault("_weight_shards", {})
        strategy = self._sharding_strategy
        shape = [int(d) for d in self._parent.shape]
        key = (id(self._parent), strategy.axis, strategy.piece(shape, self.shard_idx), str(self._device))
        if key not in cache:
            with g:
                whole = self._parent._value_in(g)
                piece = strategy.shard_value(whole, self.shard_idx)
                if piece.device != self._device:
                    piece = ops.transfer_to(piece, self._device)
            cache[key] = piece
        return cache[key]

    def __tensorvalue__(self) -> Any:
        return self._value()

    def __getattr__(self, name: str) -> Any:
        # Methods and operators of TensorValue act on the weight's value in the current graph;
        # other names are no attribute of a weight (hasattr answers without staging anything).
        from max.graph.value import TensorValue

        if name.startswith("__") or not hasattr(TensorValue, name):
            raise AttributeError(f"'Weight' object has no attribute {name!r}")
        return getattr(self._value(), name)

    def __repr__(self) -> str:
        return f"Weight({self.name!r}, {self._dtype.name}, {list(self._shape)!r}, {self._device})"


def _forward(op: str):
    def method(self: Weight, *args: Any) -> Any:
        return getattr(self._value(), op)(*args)

    method.__name__ = op
    return method


for _op in ["__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
            "__matmul__", "__rmatmul__", "__neg__", "__getitem__", "__pow__", "__floordiv__", "__mod__",
            "__lt__", "__le__", "__gt__", "__ge__", "__and__", "__or__", "__xor__", "__invert__", "__abs__"]:
    setattr(Weight, _op, _forward(_op))
