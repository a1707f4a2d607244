"""Compiled eager graphs and their cache.

An eager op (or a fused ``F.functional`` region) is a small graph, compiled once per key and
run again on new buffers. The key says everything the graph depends on: the Python function
staged, its non-tensor arguments, and each input tensor's dtype, shape and device. The entry keeps
the Rust model's ``execute`` bound, so a cache hit costs one dict lookup and one call."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from max import driver
from max.graph import Graph
from max.graph.dim import StaticDim
from max.graph.type import DeviceRef, TensorType

MAX_ENTRIES = 4096

_CACHE: OrderedDict[Any, Entry] = OrderedDict()
_SESSIONS: dict[tuple, Any] = {}
STATS = {"compiled": 0, "hits": 0}


def shape_key(shape: Any) -> tuple:
    """A hashable shape: ints for static dims, names/expressions as text otherwise."""
    return tuple(int(d) if isinstance(d, (int, StaticDim)) else str(d) for d in shape)


def type_key(t: TensorType) -> tuple:
    return (t.dtype, shape_key(t.shape), t.device)


def _session(devices: tuple[DeviceRef, ...]) -> Any:
    """One session per set of GPUs touched. Its models use the shared CPU worker pool of one
    thread per core: with a one-thread pool every call wakes the sleeping worker (about 80 us a
    call against 15 us for a 1024-element op on two cores), as each run hops to a pool thread."""
    from max.engine import InferenceSession

    key = devices
    s = _SESSIONS.get(key)
    if s is None:
        devs = [driver.CPU()] + [d.to_device() for d in devices if d.is_gpu()]
        s = InferenceSession(devices=devs)
        _SESSIONS[key] = s
    return s


class Entry:
    """A compiled graph: ``run(buffers)`` executes it; ``out_keys`` are the outputs' type keys
    (None where a dim is only known at run time); ``structure`` rebuilds the Python result."""

    __slots__ = ("execute", "out_keys", "structure", "model", "graph")

    def __init__(self, model: Any, graph: Graph, structure: Any) -> None:
        self.model = model
        self.graph = graph
        self.execute = model._core.execute
        self.structure = structure
        keys = []
        for t in graph.output_types:
            k = type_key(t)
            keys.append(k if all(isinstance(d, int) for d in k[1]) else None)
        self.out_keys = keys


def compile_graph(graph: Graph, structure: Any, weights: dict | None = None) -> Entry:
    """Compiles a staged graph (its outputs set) on a session for the devices it touches."""
    types = list(graph._input_types) + graph.output_types + [w.type for w, _ in graph._weights.values()]
    devices = tuple(sorted({t.device for t in types if t.device.is_gpu()}, key=lambda d: d.id))
    model = _session(devices).load(graph, weights_registry=weights)
    STATS["compiled"] += 1
    return Entry(model, graph, structure)


def lookup(key: Any) -> Entry | None:
    entry = _CACHE.get(key)
    if entry is not None:
        STATS["hits"] += 1
    return entry


def store(key: Any, entry: Entry) -> None:
    if key is None:
        return
    _CACHE[key] = entry
    if len(_CACHE) > MAX_ENTRIES:
        _CACHE.popitem(last=False)


def clear() -> None:
    """Forgets every compiled eager graph (tests use it to count compilations)."""
    _CACHE.clear()
    STATS["compiled"] = 0
    STATS["hits"] = 0
