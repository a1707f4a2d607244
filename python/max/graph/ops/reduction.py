"""Reductions and normalisations along an axis: sum, mean, argmax, argmin (the reduced axis stays,
with size 1), softmax, logsoftmax, cumsum, top_k, argsort and layer_norm. Shapes and dtypes are
inferred and checked in Rust (crates/graph/src/ops/reduction.rs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from max.graph.ops._stage import as_tensor, stage, stage1
from max.graph.value import TensorValue


def _int(op: str, arg: str, value: Any) -> int:
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    raise TypeError(f"{op}: {arg}: expected an int, got {type(value).__name__}")


def _bool(op: str, arg: str, value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{op}: {arg}: expected a bool, got {type(value).__name__}")


def _as_public(public: str, name: str, build: Callable[[], Any]) -> Any:
    """Runs `build`, rewording errors of the internal op `name` as errors of ``ops.<public>``."""
    if public == name:
        return build()
    try:
        return build()
    except (ValueError, TypeError, IndexError) as e:
        msg = str(e)
        if msg.startswith(f"{name}:"):
            raise type(e)(public + msg[len(name) :]) from None
        raise


def _reduce(name: str, x: Any, axis: int, public: str | None = None) -> TensorValue:
    """Stages the one-axis reduction `name`; errors name the public op (``max`` for
    ``reduce_max``)."""
    op = public or name
    t = as_tensor(x, op=op, arg="x")
    attrs = {"axis": _int(op, "axis", axis)}
    return _as_public(op, name, lambda: stage1(name, [t], attrs))


def sum(x: Any, axis: int = -1) -> TensorValue:  # noqa: A001 - MAX's name
    """Sum along `axis`, which stays with size 1."""
    return _reduce("sum", x, axis)


def mean(x: Any, axis: int = -1) -> TensorValue:
    """Mean along `axis`, which stays with size 1 (integer tensors stay integer, as in MAX)."""
    return _reduce("mean", x, axis)


def argmax(x: Any, axis: int = -1) -> TensorValue:
    """int64 index of the largest element along `axis`, which stays with size 1."""
    return _reduce("argmax", x, axis)


def argmin(x: Any, axis: int = -1) -> TensorValue:
    """int64 index of the smallest element along `axis`, which stays with size 1."""
    return _reduce("argmin", x, axis)


def _normalise(name: str, value: Any, axis: int) -> TensorValue:
    t = as_tensor(value, op=name, arg="value")
    return stage1(name, [t], {"axis": _int(name, "axis", axis)})


def softmax(value: Any, axis: int = -1) -> TensorValue:
    """exp(value) normalised to sum to 1 along `axis`."""
    return _normalise("softmax", value, axis)


def logsoftmax(value: Any, axis: int = -1) -> TensorValue:
    """The log of softmax(value, axis), computed stably."""
    return _normalise("logsoftmax", value, axis)


def cumsum(x: Any, axis: int = -1, exclusive: bool = False, reverse: bool = False) -> TensorValue:
    """Running sum along `axis`; `exclusive` starts at 0 and leaves out the last element,
    `reverse` sums from the end."""
    t = as_tensor(x, op="cumsum", arg="x")
    attrs = {
        "axis": _int("cumsum", "axis", axis),
        "exclusive": _bool("cumsum", "exclusive", exclusive),
        "reverse": _bool("cumsum", "reverse", reverse),
    }
    return stage1("cumsum", [t], attrs)


def top_k(input: Any, k: int, axis: int = -1) -> tuple[TensorValue, TensorValue]:  # noqa: A002
    """The `k` largest values along `axis` and their int64 indices."""
    t = as_tensor(input, op="top_k", arg="input")
    attrs = {"k": _int("top_k", "k", k), "axis": _int("top_k", "axis", axis)}
    values, indices = stage("top_k", [t], attrs)
    return values, indices  # type: ignore[return-value]


def argsort(x: Any, ascending: bool = True) -> TensorValue:
    """int64 indices that sort the rank-1 tensor `x`."""
    t = as_tensor(x, op="argsort", arg="x")
    return stage1("argsort", [t], {"ascending": _bool("argsort", "ascending", ascending)})


def layer_norm(input: Any, gamma: Any, beta: Any, epsilon: float) -> TensorValue:  # noqa: A002
    """Normalises over the last dimension, then scales by `gamma` and shifts by `beta` (both
    shaped like that dimension). ValueError when their sizes differ from it or `epsilon` is not
    positive."""
    x = as_tensor(input, op="layer_norm", arg="input")
    g = as_tensor(gamma, like=x, op="layer_norm", arg="gamma")
    b = as_tensor(beta, like=x, op="layer_norm", arg="beta")
    if isinstance(epsilon, (bool, np.bool_)) or not isinstance(epsilon, (int, float, np.integer, np.floating)):
        raise TypeError(f"layer_norm: epsilon: expected a number, got {type(epsilon).__name__}")
    return stage1("layer_norm", [x, g, b], {"epsilon": float(epsilon)})


__all__ = [
    "argmax", "argmin", "argsort", "cumsum", "layer_norm", "logsoftmax", "mean", "softmax", "sum",
    "top_k",
]
