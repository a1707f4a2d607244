"""Lifting graph functions to Tensors: ``apply(fn, args, kwargs)`` runs `fn` (a function over
graph values, e.g. ``ops.add``) on Tensors.

- No context (the default): the call is keyed by `fn`, its non-tensor arguments and its input
  tensors' dtype/shape/device; a one-op graph is compiled on the first call and run from the
  cache after (the fast path below handles Tensors and Python numbers without building anything).
- Inside a realization context (``F.functional``, ``F.lazy``, ``Module.compile``): `fn` is staged
  into the context's graph and the results are unrealized Tensors.
- Inside a user's ``Graph`` with graph values among the arguments: `fn` is staged there, real
  Tensors becoming constants; the results are graph values, as ``max.graph.ops`` would return.

A ``MutableBuffer`` argument (a KV cache) becomes a buffer input that the op writes in place;
it is accepted only when the op runs at once."""

from __future__ import annotations

from typing import Any

import numpy as np

from max import driver
from max.dtype import DType
from max.graph import Graph, TensorValue, ops
from max.graph.dim import Dim
from max.graph.graph import _CURRENT as _GRAPH_STACK
from max.graph.type import DeviceRef
from max.graph.value import BufferValue, Value
from max._eager import compiled
from max._eager.buffer import MutableBuffer, check_eager_only
from max._eager.context import CURRENT

Tensor: Any = None  # max.tensor.Tensor, set when max.tensor is imported


class _Uncacheable(Exception):
    """An argument with no stable key (the call still runs, compiled afresh)."""


_NUMBERS = (int, float, bool)
_ATOMS = (str, type(None), DType, Dim, DeviceRef, type(Ellipsis))


def _freeze(a: Any, srcs: list, flags: list) -> Any:
    """A hashable key for argument `a`; Tensors are collected into `srcs` in order."""
    t = type(a)
    if t is Tensor or t is MutableBuffer:
        srcs.append(a)
        return a._key()
    if t in _NUMBERS:
        return (t, a.hex()) if t is float else (t, a)  # (-0.0 == 0.0 and NaN != NaN: floats by their bits)
    if t is list or t is tuple:
        return (t, tuple(_freeze(x, srcs, flags) for x in a))
    if t is dict:
        return (dict, tuple((k, _freeze(v, srcs, flags)) for k, v in a.items()))
    if t is slice:
        return (slice, _freeze(a.start, srcs, flags), _freeze(a.stop, srcs, flags), _freeze(a.step, srcs, flags))
    if isinstance(a, _ATOMS):
        return (t, a)
    if isinstance(a, Value):
        flags.append(a)
        return None
    if isinstance(a, driver.Device):
        return ("device", DeviceRef.from_device(a))
    if isinstance(a, np.generic):
        return (t, a.tobytes())
    if isinstance(a, np.ndarray) and a.size <= 64:
        return ("ndarray", a.dtype.str, a.shape, a.tobytes())
    try:
        hash(a)
    except TypeError:
        raise _Uncacheable from None
    if isinstance(a, Tensor):
        srcs.append(a)
        return a._key()
    return (t, a)


def _substitute(a: Any, values: list, pos: list) -> Any:
    """`a` with each Tensor replaced by the next of `values` (the order `_freeze` found them)."""
    t = type(a)
    if isinstance(a, Tensor) or t is MutableBuffer:
        v = values[pos[0]]
        pos[0] += 1
        return v
    if t is list or t is tuple:
        return t(_substitute(x, values, pos) for x in a)
    if t is dict:
        return {k: _substitute(v, values, pos) for k, v in a.items()}
    if t is slice:
        return slice(*(_substitute(x, values, pos) for x in (a.start, a.stop, a.step)))
    return a


def _call(fn: Any, args: tuple, kwargs: dict, values: list) -> Any:
    """`fn(*args, **kwargs)` with the Tensors of args, then of kwargs, replaced by `values` in
    that order (the order `_freeze` and `_collect` found them)."""
    pos = [0]
    a = _substitute(args, values, pos)
    k = _substitute(kwargs, values, pos)
    return fn(*a, **k)


def _flatten_result(out: Any) -> tuple[list, Any]:
    if isinstance(out, Value):
        return [out], None
    if isinstance(out, (list, tuple)) and all(isinstance(o, Value) for o in out):
        return list(out), type(out)
    raise TypeError(f"an eager op must return graph values, got {type(out).__name__}")


def wrap(entry: compiled.Entry, bufs: list) -> Any:
    outs = entry.execute(bufs)
    keys = entry.out_keys
    if entry.structure is None:
        return Tensor._wrap(outs[0], keys[0])
    return entry.structure(Tensor._wrap(b, k) for b, k in zip(outs, keys))


def _name(fn: Any) -> str:
    return getattr(fn, "__name__", "op")


def apply(fn: Any, args: tuple, kwargs: dict | None = None) -> Any:
    """Runs graph function `fn` on `args`/`kwargs`, which may hold Tensors (see module doc)."""
    if not kwargs and CURRENT.get() is None:
        # Fast path: real Tensors and Python numbers only, compiled graph in the cache.
        parts: list = [fn]
        bufs = []
        for a in args:
            t = type(a)
            if t is Tensor:
                s = a.storage
                if s is None:
                    break
                bufs.append(s)
                parts.append(a._k or a._key())
            elif t is float:
                parts.append((t, a.hex()))  # (-0.0 == 0.0 and NaN != NaN: keyed by its bits)
            elif t is int or t is bool:
                parts.append((t, a))
            else:
                break
        else:
            entry = compiled._CACHE.get(tuple(parts))
            if entry is not None:
                return wrap(entry, bufs)
            if bufs:
                return _eager(fn, args, {}, bufs_srcs(args), tuple(parts))
    return _general(fn, args, kwargs or {})


def bufs_srcs(args: tuple) -> list:
    return [a for a in args if type(a) is Tensor]


def _general(fn: Any, args: tuple, kwargs: dict) -> Any:
    srcs: list = []
    graph_values: list = []
    try:
        key: Any = (fn, _freeze(args, srcs, graph_values), _freeze(kwargs, srcs, graph_values))
    except _Uncacheable:
        key = None
        srcs, graph_values = [], []
        _collect(args, srcs, graph_values)
        _collect(kwargs, srcs, graph_values)
    ctx = CURRENT.get()
    stack = _GRAPH_STACK.get()
    if graph_values or (stack and not srcs and ctx is None):
        return _in_user_graph(fn, args, kwargs, srcs, graph_values)
    if ctx is None:
        return _eager(fn, args, kwargs, srcs, key)
    return _stage(ctx, fn, args, kwargs, srcs, key)


def _collect(a: Any, srcs: list, graph_values: list) -> None:
    """The Tensors (and graph values) of `a`, in `_substitute`'s order: it walks the same
    containers (exactly list, tuple, dict and slice; a subclass such as a namedtuple is an atom
    to both, as to `_freeze`)."""
    t = type(a)
    if isinstance(a, Tensor) or t is MutableBuffer:
        srcs.append(a)
    elif isinstance(a, Value):
        graph_values.append(a)
    elif t is list or t is tuple:
        for x in a:
            _collect(x, srcs, graph_values)
    elif t is dict:
        for x in a.values():
            _collect(x, srcs, graph_values)
    elif t is slice:
        for x in (a.start, a.stop, a.step):
            _collect(x, srcs, graph_values)


def _in_user_graph(fn: Any, args: tuple, kwargs: dict, srcs: list, graph_values: list) -> Any:
    check_eager_only(srcs, _name(fn))
    graph = graph_values[0]._graph if graph_values else Graph.current
    values = []
    for s in srcs:
        st = s.state
        if st is not None and st.ctx.graph is graph:
            values.append(st.value)
            continue
        s._realize()
        with graph:
            values.append(ops.constant(s.storage, s.dtype, s.type.device))
    with graph:
        return _call(fn, args, kwargs, values)


def _eager(fn: Any, args: tuple, kwargs: dict, srcs: list, key: Any) -> Any:
    for s in srcs:
        if s.storage is None:
            s._realize()
    entry = compiled.lookup(key) if key is not None else None
    if entry is None:
        types = [s.type for s in srcs]
        g = Graph(f"eager_{_name(fn)}", input_types=types)
        with g:
            values = [v.tensor if not isinstance(v, BufferValue) else v for v in g.inputs]
            out = _call(fn, args, kwargs, values)
            flat, structure = _flatten_result(out)
            g.output(*flat)
        entry = compiled.compile_graph(g, structure)
        compiled.store(key, entry)
    return wrap(entry, [s.storage for s in srcs])


def _stage(ctx: Any, fn: Any, args: tuple, kwargs: dict, srcs: list, key: Any) -> Any:
    check_eager_only(srcs, _name(fn))
    values = [ctx.value_of(s) for s in srcs]
    with ctx.graph:
        out = _call(fn, args, kwargs, values)
    ctx.record(None if key is None else (key, tuple(v._id for v in values)))
    flat, structure = _flatten_result(out)
    tensors = [ctx.create_unrealized(v) for v in flat]
    return tensors[0] if structure is None else structure(tensors)
