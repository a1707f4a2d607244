"""Indexing ops: gather and gather_nd read by index; scatter, scatter_nd and masked_scatter
write by index; nonzero lists the coordinates of non-zero elements."""

from __future__ import annotations

from typing import Any

import numpy as np

from max.graph.ops._stage import as_tensor, dims_attr, graph_of, stage1
from max.graph.value import TensorValue


def _int(op: str, arg: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{op}: {arg}: must be an int, got {type(value).__name__}")
    return int(value)


def _indices(op: str, indices: Any, like: TensorValue) -> TensorValue:
    """Index tensors default to int64 on the device of the tensor they index."""
    return as_tensor(indices, graph=like._graph, device=like.device, op=op, arg="indices")


def gather(input: Any, indices: Any, axis: int) -> TensorValue:  # noqa: A002 - MAX's name
    """Selects slices of `input` along `axis` by index: the result has shape
    ``input.shape[:axis] + indices.shape + input.shape[axis + 1:]``."""
    axis = _int("gather", "axis", axis)
    x = as_tensor(input, graph=graph_of(input, indices), op="gather", arg="input")
    return stage1("gather", [x, _indices("gather", indices, x)], {"axis": axis})


def gather_nd(input: Any, indices: Any, batch_dims: int = 0) -> TensorValue:  # noqa: A002
    """Selects by N-dimensional index: the last dimension of `indices` (static) holds index
    vectors into the dimensions of `input` that follow its first `batch_dims`."""
    batch_dims = _int("gather_nd", "batch_dims", batch_dims)
    x = as_tensor(input, graph=graph_of(input, indices), op="gather_nd", arg="input")
    return stage1("gather_nd", [x, _indices("gather_nd", indices, x)], {"batch_dims": batch_dims})


def scatter(input: Any, updates: Any, indices: Any, axis: int = -1) -> TensorValue:  # noqa: A002
    """`input` with ``updates[i]`` written at position ``indices[i]`` along `axis` (the other
    coordinates of ``i`` kept)."""
    axis = _int("scatter", "axis", axis)
    x = as_tensor(input, graph=graph_of(input, updates, indices), op="scatter", arg="input")
    u = as_tensor(updates, like=x, op="scatter", arg="updates")
    return stage1("scatter", [x, u, _indices("scatter", indices, x)], {"axis": axis})


def scatter_nd(input: Any, updates: Any, indices: Any) -> TensorValue:  # noqa: A002
    """`input` with the slices of `updates` written at the index vectors in the last dimension
    of `indices` (``[num_updates, k]`` addresses the first k dimensions)."""
    x = as_tensor(input, graph=graph_of(input, updates, indices), op="scatter_nd", arg="input")
    u = as_tensor(updates, like=x, op="scatter_nd", arg="updates")
    return stage1("scatter_nd", [x, u, _indices("scatter_nd", indices, x)])


def masked_scatter(input: Any, mask: Any, updates: Any, out_dim: Any) -> TensorValue:  # noqa: A002
    """`input` with the elements of `updates`, in order, written where `mask` (broadcast to
    the input's shape) is true; `out_dim` names the number of true elements."""
    x = as_tensor(input, graph=graph_of(input, mask, updates), op="masked_scatter", arg="input")
    m = as_tensor(mask, graph=x._graph, device=x.device, op="masked_scatter", arg="mask")
    u = as_tensor(updates, like=x, op="masked_scatter", arg="updates")
    return stage1("masked_scatter", [x, m, u], {"out_dim": dims_attr([out_dim])})


def nonzero(x: Any, out_dim: Any) -> TensorValue:
    """The int64 coordinates ``[out_dim, rank]`` of the non-zero elements of `x`, in row-major
    order; `out_dim` names their number."""
    t = as_tensor(x, op="nonzero", arg="x")
    return stage1("nonzero", [t], {"out_dim": dims_attr([out_dim])})


__all__ = ["gather", "gather_nd", "masked_scatter", "nonzero", "scatter", "scatter_nd"]
