"""Helpers for engine tests: stage a graph from a function, run it, get numpy arrays back."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from max import driver, engine
from max.graph import DeviceRef, Graph, TensorType

_SESSIONS: dict[tuple, engine.InferenceSession] = {}


def session(device: driver.Device | None = None) -> engine.InferenceSession:
    device = device or driver.CPU()
    key = (device.label, device.id)
    if key not in _SESSIONS:
        devices = [device] if device.is_host else [driver.CPU(), device]
        _SESSIONS[key] = engine.InferenceSession(devices=devices)
    return _SESSIONS[key]


def build(fn: Callable[..., Any], *types: TensorType, name: str = "test") -> Graph:
    """A graph whose body is `fn(*inputs)`."""
    return Graph(name, fn, input_types=list(types))


def run(graph: Graph, *inputs: Any, device: driver.Device | None = None, weights: dict | None = None) -> list[np.ndarray]:
    """Compiles `graph` (for `device`, default the CPU) and runs it on `inputs`."""
    model = session(device).load(graph, weights_registry=weights)
    args = []
    for x, t in zip(inputs, model._input_types):
        if isinstance(x, np.ndarray) and t.device.is_gpu():
            x = driver.Buffer.from_numpy(np.ascontiguousarray(x)).to(device or driver.Accelerator(t.device.id))
        args.append(x)
    return [o.to_numpy() for o in model.execute(*args)]


def cpu_type(dtype, shape) -> TensorType:
    return TensorType(dtype, shape, DeviceRef.CPU())
