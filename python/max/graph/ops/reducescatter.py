"""``ops.reducescatter``: a sum over devices, cut into one piece per device
(``reducescatter.sum``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from max.graph.ops.collective import per_device
from max.graph.value import TensorValue


def sum(inputs: Iterable[Any], signal_buffers: Iterable[Any], axis: int = 0) -> list[TensorValue]:  # noqa: A001
    """The elementwise sum of the inputs (one per device, one shape) cut along `axis` into equal
    pieces, piece ``i`` on input ``i``'s device."""
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"reducescatter.sum: axis: expected an int, got {type(axis).__name__}")
    return per_device("reducescatter_sum", inputs, signal_buffers, {"axis": axis})


__all__ = ["sum"]
