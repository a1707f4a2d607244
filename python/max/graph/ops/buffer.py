"""Buffer ops: create a mutable buffer, load it into a tensor, store a tensor into all of it
or into a slice. Loads and stores are ordered by the graph's chain."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from max.graph.dim import Dim
from max.graph.graph import Graph
from max.graph.ops._stage import as_tensor, dims_attr, stage, types_attr
from max.graph.type import BufferType
from max.graph.value import BufferValue, TensorValue, Value


def _buffer(op: str, arg: str, value: Any) -> BufferValue:
    if isinstance(value, BufferValue):
        return value
    if hasattr(value, "__buffervalue__"):
        return _buffer(op, arg, value.__buffervalue__())
    raise TypeError(f"{op}: {arg}: expected a BufferValue, got {type(value).__name__}")


def _chained(g: Graph, name: str, inputs: list[Value], attrs: dict[str, Any] | None = None) -> list[Value]:
    """Stages a side-effecting op after the graph's chain; its last result is the new chain."""
    *results, chain = stage(name, [g._current_chain, *inputs], attrs, graph=g)
    g._current_chain = chain  # type: ignore[assignment]
    return results


def buffer_create(type: BufferType) -> BufferValue:  # noqa: A002 - MAX's name
    """A new buffer of the given type."""
    if not isinstance(type, BufferType):
        raise TypeError(f"buffer_create: type: expected a BufferType, got {type!r}")
    (b,) = stage("buffer_create", [], {"type": types_attr([type])}, graph=Graph.current)
    return b  # type: ignore[return-value]


def buffer_load(x: BufferValue) -> TensorValue:
    """A tensor holding the buffer's current contents (a copy)."""
    b = _buffer("buffer_load", "x", x)
    (t,) = _chained(b._graph, "buffer_load", [b])
    return t  # type: ignore[return-value]


def buffer_store(destination: BufferValue, source: Any) -> None:
    """Copies `source` (of the destination's dtype and shape) into the buffer."""
    d = _buffer("buffer_store", "destination", destination)
    s = as_tensor(source, like=d, op="buffer_store", arg="source")  # type: ignore[arg-type]
    _chained(d._graph, "buffer_store", [d, s])


def _bound(value: Any) -> Dim | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, Dim)):
        raise TypeError(f"buffer_store_slice: indices: slice bounds must be ints or Dims, got {type(value).__name__}")
    return Dim(value)


def _encode(indices: Any) -> tuple[dict[str, Any], list[TensorValue]]:
    """The index encoding that crates/graph/src/ops/buffer.rs documents."""
    if not isinstance(indices, Sequence) or isinstance(indices, str):
        indices = [indices]
    kinds, bounds, flags, outs, tensors = [], [], [], [], []
    zero = Dim(0)
    for i, index in enumerate(indices):
        out = zero
        flag = 0
        b = [zero, zero, zero]
        if index is Ellipsis:
            kind = 3
        elif isinstance(index, TensorValue):
            kind = 2
            tensors.append(index)
        elif isinstance(index, (slice, tuple)):
            if isinstance(index, tuple):
                if len(index) != 2 or not isinstance(index[0], slice):
                    raise TypeError(f"buffer_store_slice: indices: item {i} must be (slice, out_dim), got {index!r}")
                index, out_dim = index
                out = Dim(out_dim)
                flag |= 8
            kind = 1
            for k, v in enumerate((index.start, index.stop, index.step)):
                d = _bound(v)
                if d is None:
                    flag |= 1 << k
                else:
                    b[k] = d
        elif isinstance(index, (int, np.integer)) and not isinstance(index, bool):
            kind = 0
            b[0] = Dim(int(index))
        elif index is None:
            raise ValueError(f"buffer_store_slice: indices: item {i} is None; a new axis cannot be stored into")
        else:
            raise TypeError(f"buffer_store_slice: indices: item {i} must be an int, slice, (slice, out_dim), TensorValue or ..., got {type(index).__name__}")
        kinds.append(kind)
        bounds.extend(b)
        flags.append(flag)
        outs.append(out)
    attrs = {"index_kinds": kinds, "index_bounds": dims_attr(bounds), "index_flags": flags, "index_out_dims": dims_attr(outs)}
    return attrs, tensors


def buffer_store_slice(destination: BufferValue, source: Any, indices: Sequence[Any]) -> None:
    """Copies `source` into ``destination[indices]`` (numpy-style indices: ints, slices,
    ``(slice, out_dim)``, scalar index tensors and one ``...``); `source` must have the
    slice's shape."""
    d = _buffer("buffer_store_slice", "destination", destination)
    s = as_tensor(source, like=d, op="buffer_store_slice", arg="source")  # type: ignore[arg-type]
    attrs, tensors = _encode(indices)
    for t in tensors:
        if t._graph is not d._graph:
            raise ValueError(f"buffer_store_slice: indices: an index tensor belongs to graph {t._graph.name!r}, not to {d._graph.name!r}")
    _chained(d._graph, "buffer_store_slice", [d, s, *tensors], attrs)


__all__ = ["buffer_create", "buffer_load", "buffer_store", "buffer_store_slice"]
