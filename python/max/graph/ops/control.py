"""Control flow and side effects: cond, while_loop, print, call (which inlines a subgraph) and
assert_same_device.

Side-effecting ops are ordered by the graph's chain (``Graph._current_chain``). cond and
while_loop thread it through their blocks: a branch or loop body starts from the chain it was
given and yields the chain after its own effects, and the op's last result becomes the graph's
chain."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from max.graph.graph import Graph
from max.graph.ops._stage import as_tensor, stage, types_attr
from max.graph.type import TensorType, Type
from max.graph.value import BufferValue, TensorValue, Value


def _as_list(result: Any) -> list[Any]:
    """A callable's returned values: None is none, a value or an array is one."""
    if result is None:
        return []
    if isinstance(result, (Value, np.ndarray, str)) or hasattr(result, "__dlpack__") or not isinstance(result, Iterable):
        return [result]
    return list(result)


def _results(g: Graph, op: str, who: str, result: Any, types: list[Type]) -> list[Value]:
    """A block's returned values; numbers and arrays become constants of the expected type."""
    out = []
    for i, r in enumerate(_as_list(result)):
        if isinstance(r, Value):
            if r._graph is not g:
                raise ValueError(f"{op}: {who}: result {i} belongs to graph {r._graph.name!r}, not to {g.name!r}")
            out.append(r)
            continue
        want = types[i] if i < len(types) else None
        if isinstance(want, TensorType):
            out.append(as_tensor(r, graph=g, dtype=want.dtype, device=want.device, op=op, arg=who))
        else:
            out.append(as_tensor(r, graph=g, op=op, arg=who))
    return out


def _close(g: Graph, op: str, who: str, ids: list[int]) -> int:
    try:
        return g._ir.close_block(ids)
    except ValueError as e:
        raise ValueError(f"{op}: {who}: {e}") from None


def _block(g: Graph, op: str, who: str, arg_types: list[Any], chain: Value, build: Callable[[list[Value]], list[Value]]) -> int:
    """Builds one nested block: `build` gets the block arguments (the last one the chain when
    there are arguments) and returns the results to yield before the chain."""
    _, arg_ids = g._ir.open_block(arg_types)
    args = [Value._from_id(g, i) for i in arg_ids]
    g._current_chain = args[-1] if args else chain  # type: ignore[assignment]
    try:
        with g:
            results = build(args[:-1])
        block = _close(g, op, who, [v._id for v in results] + [g._current_chain._id])
    except BaseException:
        g._ir.discard_block()
        raise
    finally:
        g._current_chain = chain  # type: ignore[assignment]
    return block


def cond(pred: Any, out_types: Iterable[Type] | None, then_fn: Callable[[], Any], else_fn: Callable[[], Any]) -> list[TensorValue]:
    """Runs `then_fn` when the bool scalar `pred` is true, else `else_fn`; both must return
    values of `out_types` (nothing when it is None). Returns the values of the branch taken.

    Raises ValueError when a branch returns a different number or types of values."""
    p = as_tensor(pred, op="cond", arg="pred")
    g = p._graph
    types = [] if out_types is None else list(out_types)
    for i, t in enumerate(types):
        if not isinstance(t, Type):
            raise TypeError(f"cond: out_types: item {i} must be a Type, got {type(t).__name__}")
    chain = g._current_chain
    blocks = [
        _block(g, "cond", who, [], chain, lambda _, fn=fn, who=who: _results(g, "cond", who, fn(), types))
        for fn, who in ((then_fn, "then_fn"), (else_fn, "else_fn"))
    ]
    ids = g._ir.add_control("cond", [p._id, chain._id], blocks, {"out_types": types_attr(types)})
    outs = [Value._from_id(g, i) for i in ids]
    g._current_chain = outs[-1]  # type: ignore[assignment]
    return outs[:-1]  # type: ignore[return-value]


def while_loop(initial_values: Iterable[Value] | Value, predicate: Callable[..., TensorValue], body: Callable[..., Any]) -> list[TensorValue]:
    """Repeats `body` on the loop values while `predicate` of them is true, starting from
    `initial_values`; returns the final loop values.

    Raises ValueError when `initial_values` is empty and NotImplementedError for buffers."""
    init = _as_list(initial_values)
    if not init:
        raise ValueError("while_loop: initial_values: a while loop needs at least one loop value")
    for i, v in enumerate(init):
        if isinstance(v, BufferValue):
            raise NotImplementedError(f"while_loop: initial_values: item {i} is a buffer; buffers cannot be loop values")
    g = next((v._graph for v in init if isinstance(v, Value)), None) or Graph.current
    init = [as_tensor(v, graph=g, op="while_loop", arg=f"initial_values[{i}]") for i, v in enumerate(init)]
    chain = g._current_chain
    arg_types = [g._ir.value_type(v._id) for v in init] + [("chain",)]
    types = [v.type for v in init]

    def check_predicate(args: list[Value]) -> list[Value]:
        result = predicate(*args)
        if isinstance(result, (list, tuple)) and len(result) == 1:
            result = result[0]
        if not isinstance(result, TensorValue):
            raise ValueError(f"while_loop: predicate: must return one bool scalar tensor, got {type(result).__name__}")
        return _results(g, "while_loop", "predicate", result, [])

    pred_block = _block(g, "while_loop", "predicate", arg_types, chain, check_predicate)
    body_block = _block(g, "while_loop", "body", arg_types, chain, lambda args: _results(g, "while_loop", "body", body(*args), types))
    ids = g._ir.add_control("while_loop", [v._id for v in init] + [chain._id], [pred_block, body_block])
    outs = [Value._from_id(g, i) for i in ids]
    g._current_chain = outs[-1]  # type: ignore[assignment]
    return outs[:-1]  # type: ignore[return-value]


def print(value: str | TensorValue, label: str = "debug_tensor") -> None:  # noqa: A001 - MAX's name
    """Prints a tensor's value (or a string) when the graph runs, after the side effects staged
    before it."""
    if not isinstance(label, str):
        raise TypeError(f"print: label: must be a str, got {type(label).__name__}")
    if isinstance(value, str):
        g = Graph.current
        (chain,) = stage("print", [g._current_chain], {"label": label, "text": value}, graph=g)
    elif isinstance(value, TensorValue) or hasattr(value, "__tensorvalue__"):
        t = as_tensor(value, op="print", arg="value")
        g = t._graph
        (chain,) = stage("print", [g._current_chain, t], {"label": label}, graph=g)
    else:
        raise TypeError(f"print: value: must be a str or a TensorValue, got {type(value).__name__}")
    g._current_chain = chain  # type: ignore[assignment]


def call(graph: Graph, *args: Value, prefix: str = "") -> list[Value]:
    """Calls `graph` (made with ``Graph.add_subgraph``) on `args` by inlining its body here,
    after the side effects staged so far; returns its outputs. Its weights are renamed
    ``prefix + name``."""
    if not isinstance(graph, Graph):
        raise TypeError(f"call: graph: expected a Graph, got {type(graph).__name__}")
    if not isinstance(prefix, str):
        raise TypeError(f"call: prefix: must be a str, got {type(prefix).__name__}")
    caller = next((a._graph for a in args if isinstance(a, Value)), None) or Graph.current
    if graph is caller or any(graph is open_graph for open_graph in _open_graphs()):
        raise ValueError(f"call: graph: graph {graph.name!r} is still being staged and cannot call itself")
    outputs = graph._ir.outputs()
    if outputs is None:
        raise ValueError(f"call: graph: graph {graph.name!r} has no outputs yet (call its output() first)")
    if len(args) != len(graph.inputs):
        raise ValueError(f"call: args: graph {graph.name!r} takes {len(graph.inputs)} arguments, got {len(args)}")
    values = []
    for i, (a, v) in enumerate(zip(args, graph.inputs)):
        if isinstance(a, Value):
            values.append(a)
        elif isinstance(v.type, TensorType):
            values.append(as_tensor(a, graph=caller, dtype=v.type.dtype, device=v.type.device, op="call", arg=f"args[{i}]"))
        else:
            raise TypeError(f"call: args[{i}]: graph {graph.name!r} expects a buffer, got {type(a).__name__}")
    bound = []
    for name, (weight, value) in graph._weights.items():
        if prefix:
            weight = copy.copy(weight)
            weight.name = prefix + name
        bound.append((value._id, caller.add_weight(weight)._id))
    chain = caller._current_chain._id if graph._chain is not None else None
    wanted = list(outputs) + ([graph._chain._id] if graph._chain is not None else [])
    ids = caller._ir.inline(graph._ir, [v._id for v in values], bound, chain, prefix, wanted)
    if graph._chain is not None:
        caller._current_chain = Value._from_id(caller, ids[-1])  # type: ignore[assignment]
    return [Value._from_id(caller, i) for i in ids[: len(outputs)]]


def _open_graphs() -> tuple[Graph, ...]:
    from max.graph.graph import _CURRENT

    return _CURRENT.get()


def assert_same_device(*values: TensorValue | BufferValue, **named_values: TensorValue | BufferValue) -> None:
    """Raises ValueError, listing every value, when the values are not all on one device."""
    named = [(str(i), v) for i, v in enumerate(values)] + list(named_values.items())
    for name, v in named:
        if not isinstance(v, (TensorValue, BufferValue)):
            raise TypeError(f"assert_same_device: {name}: expected a TensorValue or BufferValue, got {type(v).__name__}")
    if len({v.device for _, v in named}) > 1:
        lines = "\n".join(f"    {name}: {v.type!r}" for name, v in named)
        raise ValueError(f"assert_same_device: values: input values must be on the same device\n{lines}")


__all__ = ["assert_same_device", "call", "cond", "print", "while_loop"]
