"""``ops.allreduce``: sums over devices (``allreduce.sum``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from max.graph.ops.collective import per_device
from max.graph.value import TensorValue


def sum(inputs: Iterable[Any], signal_buffers: Iterable[Any]) -> list[TensorValue]:  # noqa: A001 - MAX's name
    """The elementwise sum of the inputs (one per device, one shape and dtype), one copy on each
    input's device; every copy holds the same values."""
    return per_device("allreduce_sum", inputs, signal_buffers)


__all__ = ["sum"]
