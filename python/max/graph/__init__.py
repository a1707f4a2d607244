"""Staging inference graphs (``max.graph``): types, dims, values and ops, checked in Rust as
they are added."""

from max.graph import ops
from max.graph.dim import AlgebraicDim, Dim, DimLike, StaticDim, SymbolicDim
from max.graph.graph import Graph
from max.graph.shape import Shape, ShapeLike
from max.graph.sharding import ShardingStrategy
from max.graph.type import (
    BufferType,
    ConvInputLayout,
    DeviceKind,
    DeviceRef,
    FilterLayout,
    TensorType,
    Type,
    _ChainType,
)
from max.graph.value import BufferValue, TensorValue, Value, _ChainValue
from max.graph.weight import Weight

TensorValueLike = object

__all__ = [
    "AlgebraicDim", "BufferType", "BufferValue", "ConvInputLayout", "DeviceKind", "DeviceRef", "Dim",
    "DimLike", "FilterLayout", "Graph", "Shape", "ShapeLike", "ShardingStrategy", "StaticDim", "SymbolicDim",
    "TensorType", "TensorValue", "TensorValueLike", "Type", "Value", "Weight", "ops",
]
