"""Small helpers of the layers: adopting a device for device-less weights, activations by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from max.graph import DeviceRef, Graph, TensorValue, Weight, ops


def on_device_of(weight: Weight, x: TensorValue) -> TensorValue:
    """The weight's value in the graph being staged, placed on x's device: a weight that is not in
    the graph yet takes that device (norm weights have none of their own in MAX's API); one that
    is already elsewhere is transferred."""
    g = Graph.current
    if weight.name not in g._weights and weight.device != x.device:
        weight._device = x.device  # type: ignore[attr-defined]
    value = g.add_weight(weight)
    if value.device != x.device:
        value = ops.transfer_to(value, x.device)
    return value


def as_dtype(x: TensorValue, dtype: Any) -> TensorValue:
    return x if x.dtype == dtype else x.cast(dtype)


_ACTIVATIONS: dict[str, Callable[[TensorValue], TensorValue]] = {
    "silu": ops.silu,
    "gelu": ops.gelu,
    "gelu_tanh": lambda x: ops.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: ops.gelu(x, approximate="tanh"),
    "relu": ops.relu,
    "tanh": ops.tanh,
    "sigmoid": ops.sigmoid,
}


def activation(name: str) -> Callable[[TensorValue], TensorValue]:
    """The activation function named `name` (silu, gelu, gelu_tanh, relu, tanh, sigmoid)."""
    try:
        return _ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unsupported activation function {name!r} (supported: {', '.join(_ACTIVATIONS)})") from None


def device_ref(device: Any) -> DeviceRef:
    return device if isinstance(device, DeviceRef) else DeviceRef.from_device(device)
