"""What every op module uses: the graph being staged, staging an op in Rust, and turning
tensor-like arguments (values, weights, numbers, arrays, dims) into TensorValues."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from max._core.graph import check_scalar
from max.dtype import DType
from max.graph.dim import Dim
from max.graph.graph import Graph
from max.graph.type import DeviceRef, Type
from max.graph.value import BufferValue, TensorValue, Value


def current_graph() -> Graph:
    return Graph.current


def graph_of(*values: Any) -> Graph:
    """The graph the first Value belongs to, else the graph being staged."""
    for v in values:
        if isinstance(v, Value):
            return v._graph
    return Graph.current


def stage(name: str, inputs: Sequence[Value], attrs: dict[str, Any] | None = None, graph: Graph | None = None) -> list[Value]:
    """Stages op `name` on `inputs` (validated and typed in Rust); returns its results."""
    g = graph if graph is not None else graph_of(*inputs)
    for i, v in enumerate(inputs):
        if v._graph is not g:
            raise ValueError(f"{name}: input {i} belongs to graph {v._graph.name!r}, not to {g.name!r}")
    ids = g._ir.add_op(name, [v._id for v in inputs], attrs)
    return [Value._from_id(g, i) for i in ids]


def stage1(name: str, inputs: Sequence[Value], attrs: dict[str, Any] | None = None, graph: Graph | None = None) -> TensorValue:
    (out,) = stage(name, inputs, attrs, graph)
    return out  # type: ignore[return-value]


def dims_attr(shape: Iterable[Any]) -> tuple:
    if isinstance(shape, (str, bytes)):
        raise TypeError(f"a shape is a sequence of dims, got the string {shape!r}")
    return ("dims", [Dim(d)._d for d in shape])


def dtype_attr(dtype: DType) -> tuple:
    if not isinstance(dtype, DType):
        raise TypeError(f"expected a max.dtype.DType, got {dtype!r}")
    return ("dtype", dtype.value)


def device_attr(device: Any) -> tuple:
    return ("device", DeviceRef.from_device(device)._core())


def types_attr(types: Iterable[Type]) -> tuple:
    return ("types", [t._core() for t in types])


def _is_scalar(x: Any) -> bool:
    return isinstance(x, (bool, int, float, np.bool_, np.integer, np.floating)) or (
        isinstance(x, np.ndarray) and x.ndim == 0
    )


def _constant(op: str, arg: str, x: Any, dtype: Any, device: Any) -> TensorValue:
    """ops.constant for argument `arg` of `op`: its errors name them rather than constant."""
    from max.graph.ops.creation import constant

    try:
        return constant(x, dtype, device, _operand=True)  # (a float operand may round to inf)
    except (ValueError, TypeError) as e:
        msg = str(e)
        if op and msg.startswith("constant: value: "):
            raise type(e)(f"{op}: {arg}: {msg[len('constant: value: '):]}") from None
        raise


def _holds_floats(x: Any) -> bool:
    """Whether an array-like operand holds floats (or complex numbers): its numpy dtype's."""
    try:
        arr = x if isinstance(x, np.ndarray) else (np.asarray(x) if isinstance(x, (list, tuple)) else np.from_dlpack(x))
    except (TypeError, ValueError, BufferError, RuntimeError):
        return False  # (the constant's own conversion names what is wrong)
    if arr.dtype.kind in "fc":
        return True
    try:
        return DType.from_numpy(arr.dtype).is_float()  # (bfloat16 and float8 arrays)
    except ValueError:
        return False


def as_tensor(
    x: Any,
    *,
    like: TensorValue | None = None,
    graph: Graph | None = None,
    dtype: DType | None = None,
    device: Any = None,
    op: str = "",
    arg: str = "",
) -> TensorValue:
    """`x` as a TensorValue of the graph being staged.

    Python scalars and numpy values next to a tensor (`like`) are weak: they take its dtype and
    device, when the value fits (the promotion rule of crates/graph/src/promote.rs)."""
    from max.graph.ops.creation import constant, shape_to_tensor
    from max.graph.weight import Weight

    if isinstance(x, TensorValue):
        if graph is not None and x._graph is not graph:
            raise ValueError(f"{op}: {arg} belongs to graph {x._graph.name!r}, not to {graph.name!r}")
        return x
    if isinstance(x, BufferValue):
        raise TypeError(f"{op}: {arg} is a buffer; read it with ops.buffer_load first")
    if isinstance(x, Weight):
        return x._value_in(graph or Graph.current)
    if hasattr(x, "__tensorvalue__"):
        return as_tensor(x.__tensorvalue__(), like=like, graph=graph, op=op, arg=arg)
    if isinstance(x, Dim):
        with (graph or Graph.current):
            return shape_to_tensor([x]).reshape([])
    if isinstance(x, (list, tuple)) and x and all(isinstance(d, Dim) for d in x):
        with (graph or Graph.current):
            return shape_to_tensor(x)
    if like is not None:
        target, where = like.dtype, like.device
        if _is_scalar(x):
            value = x.item() if isinstance(x, (np.generic, np.ndarray)) else x
            check_scalar(op, arg, target.value, value)
            with like._graph:
                return _constant(op, arg, value, target, where)
        if isinstance(x, (np.ndarray, list, tuple)) or hasattr(x, "__dlpack__"):
            if not target.is_float() and _holds_floats(x):
                raise ValueError(f"{op}: {arg}: float values do not combine with a tensor of {target.name} "
                                 "(floats never convert to integers implicitly); cast the tensor to a float type "
                                 "first, or pass integers")
            with like._graph:
                return _constant(op, arg, x, target, where)
    if _is_scalar(x) or isinstance(x, (np.ndarray, list, tuple)) or hasattr(x, "__dlpack__"):
        with (graph or Graph.current):
            return _constant(op, arg, x, dtype, device)
    raise TypeError(f"{op}: {arg} must be a tensor value, a number, an array or a Dim, got {type(x).__name__}")
