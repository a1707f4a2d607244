"""Random tensors in a graph (``max.graph.ops.random``), generated on the tensor's device.

A graph draws from its seed, set with ``set_seed``: a number (the same values on every run) or
a scalar int64 value, such as a graph input of ``SeedType`` (new values per run, one compiled
model). Each draw uses that seed and the graph's next stream, so the draws of one graph differ
from each other and repeat with the seed. Values depend only on the seed, the draw's order in the
graph and the element's index, not on the device: uniform values are the same bits on the CPU
and the GPU, normal values agree within a few ulps (crates/runtime/src/cpu/random/values.rs has
the recipe)."""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from max.dtype import DType
from max.graph.graph import Graph
from max.graph.ops._stage import device_attr, dims_attr, dtype_attr, stage1
from max.graph.type import DeviceRef, TensorType
from max.graph.value import TensorValue

SeedType = TensorType(DType.int64, [], device=DeviceRef.CPU())
"""The type of a seed: a scalar int64 tensor on the CPU (a graph input of this type lets each
run draw new values)."""

_INT64 = (-(2**63), 2**63)


class _Seed:
    """A graph's seed value and the stream of its next draw."""

    __slots__ = ("value", "stream")

    def __init__(self, value: TensorValue) -> None:
        self.value = value
        self.stream = 0


_SEEDS: weakref.WeakKeyDictionary[Graph, _Seed] = weakref.WeakKeyDictionary()


def _seed_value(seed: Any) -> TensorValue:
    from max.graph.ops.creation import constant

    if isinstance(seed, TensorValue):
        if seed.dtype not in (DType.int64, DType.uint64):
            raise TypeError(f"set_seed: seed must be int64 (or uint64), got {seed.dtype}")
        if len(seed.shape) > 1 or (len(seed.shape) == 1 and seed.shape[0] != 1):
            raise ValueError(f"set_seed: seed must be a scalar, got shape {list(seed.shape)}")
        return seed
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"set_seed: seed must be an int or a scalar int64 tensor value, got {type(seed).__name__}")
    if not _INT64[0] <= int(seed) < _INT64[1]:
        raise ValueError(f"set_seed: seed {seed} does not fit in int64")
    return constant(int(seed), DType.int64, DeviceRef.CPU())


def set_seed(seed: TensorValue | int = 0) -> None:
    """Sets the seed of the graph being staged; draws after it start again from its first stream.

    Args:
        seed: An int (the same values on every run) or a scalar int64 tensor value of the graph,
            such as an input of type ``SeedType`` (new values per run without recompiling).

    Raises:
        TypeError: If the seed is not an integer or an int64 tensor value.
        ValueError: If it does not fit in int64 or is not a scalar.
    """
    graph = Graph.current
    _SEEDS[graph] = _Seed(_seed_value(seed))


def seed() -> TensorValue:
    """The seed value of the graph being staged (as ``set_seed`` set it).

    Raises:
        RuntimeError: If the graph has no seed yet.
    """
    return _state(Graph.current).value


def _state(graph: Graph) -> _Seed:
    state = _SEEDS.get(graph)
    if state is None:
        raise RuntimeError("No seed set! Set with `ops.random.set_seed`.")
    return state


def _like(op: str, like: Any) -> TensorType:
    if isinstance(like, TensorValue):
        like = like.type
    if not isinstance(like, TensorType):
        raise TypeError(f"{op}: like must be a TensorType, got {type(like).__name__}")
    return like


def _number(op: str, arg: str, x: Any) -> float:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        if isinstance(x, np.ndarray) and x.ndim == 0:
            return float(x)
        raise TypeError(f"{op}: {arg} must be a number, got {type(x).__name__}")
    return float(x)


def draw(name: str, seed: TensorValue, like: TensorType, attrs: dict[str, Any], stream: int = 0) -> TensorValue:
    """Stages the random op `name` (``random_uniform`` or ``random_normal``) with an explicit
    seed value and stream: the op under ``uniform`` and ``gaussian``, and under ``max.random``."""
    full = {
        **attrs,
        "dtype": dtype_attr(like.dtype),
        "shape": dims_attr(like.shape),
        "device": device_attr(like.device),
        "stream": stream,
    }
    return stage1(name, [seed], full, graph=seed._graph)


def _next(op: str, like: Any, attrs: dict[str, Any]) -> TensorValue:
    like = _like(op, like)
    graph = Graph.current
    state = _state(graph)
    out = draw(f"random_{op}", state.value, like, attrs, state.stream)
    state.stream += 1
    return out


def gaussian(like: TensorType, mean: float = 0.0, std: float = 1.0) -> TensorValue:
    """A tensor of `like`'s type with values from the normal distribution N(mean, std**2).

    Args:
        like: The result's type (dtype, shape with static or symbolic dims, device).
        mean: The distribution's mean.
        std: Its standard deviation, positive.

    Raises:
        RuntimeError: If the graph has no seed (``set_seed``).
        ValueError: If std is not positive or the values do not fit the dtype.
    """
    attrs = {"mean": _number("gaussian", "mean", mean), "std": _number("gaussian", "std", std)}
    return _next("normal", like, attrs)


normal = gaussian


def uniform(like: TensorType, range: tuple[float, float] = (0, 1)) -> TensorValue:  # noqa: A002 - MAX's name
    """A tensor of `like`'s type with values uniform in ``[range[0], range[1])``; the upper bound
    is never returned, also after rounding to the dtype.

    Args:
        like: The result's type (dtype, shape with static or symbolic dims, device).
        range: The (min, max) bounds; min inclusive, max exclusive.

    Raises:
        RuntimeError: If the graph has no seed (``set_seed``).
        ValueError: If min >= max or the range holds no value of the dtype.
    """
    bounds = tuple(range)
    if len(bounds) != 2:
        raise ValueError(f"uniform: range must be (min, max), got {range!r}")
    attrs = {"low": _number("uniform", "range", bounds[0]), "high": _number("uniform", "range", bounds[1])}
    return _next("uniform", like, attrs)


__all__ = ["SeedType", "gaussian", "normal", "seed", "set_seed", "uniform"]
