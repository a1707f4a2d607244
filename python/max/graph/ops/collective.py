"""Collectives: one value per device in, one result per device out (``allgather``,
``distributed_broadcast``; ``allreduce.sum`` and ``reducescatter.sum`` live in their own
modules, as MAX names them). Each takes the signal buffers of the devices taking part
(``max.nn.comm.Signals``), one per device, in device order. The op is checked and typed in Rust
(crates/graph/src/ops/collective.rs) as it is staged.

A list of CPU values stands for as many devices (simulated devices): the collective then runs
on the host, which is how models split over devices are tested without GPUs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from max.graph.ops._stage import as_tensor, graph_of, stage
from max.graph.value import BufferValue, TensorValue, Value


def _signals(op: str, signal_buffers: Iterable[Any]) -> list[BufferValue]:
    out = []
    for i, s in enumerate(signal_buffers):
        if hasattr(s, "__buffervalue__"):
            s = s.__buffervalue__()
        if isinstance(s, Value) and not isinstance(s, BufferValue):
            try:
                s = s.buffer
            except TypeError:
                pass
        if not isinstance(s, BufferValue):
            raise TypeError(f"{op}: signal_buffers[{i}]: expected a BufferValue, got {type(s).__name__}")
        out.append(s)
    return out


def _tensors(op: str, inputs: Iterable[Any]) -> list[TensorValue]:
    values = list(inputs)
    if not values:
        raise ValueError(f"{op}: inputs: expected one value per device, got none")
    g = graph_of(*values)
    return [as_tensor(v, graph=g, op=op, arg=f"inputs[{i}]") for i, v in enumerate(values)]


def per_device(op: str, inputs: Iterable[Any], signal_buffers: Iterable[Any],
               attrs: dict[str, Any] | None = None) -> list[TensorValue]:
    """Stages collective `op` over `inputs` (one per device) and their signal buffers."""
    xs = _tensors(op, inputs)
    sigs = _signals(op, signal_buffers)
    if len(sigs) != len(xs):
        raise ValueError(f"{op}: signal_buffers: expected one per input ({len(xs)}), got {len(sigs)}")
    return stage(op, [*xs, *sigs], attrs)  # type: ignore[return-value]


def allgather(inputs: Iterable[Any], signal_buffers: Iterable[Any], axis: int = 0) -> list[TensorValue]:
    """The inputs (one per device, the same shape off `axis`) concatenated along `axis`, one
    copy on each input's device."""
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"allgather: axis: expected an int, got {type(axis).__name__}")
    return per_device("allgather", inputs, signal_buffers, {"axis": axis})


def distributed_broadcast(input: Any, signal_buffers: Iterable[Any]) -> list[TensorValue]:
    """`input` copied to the device of every signal buffer (at least 2; the input's device must
    be one of them); one result per signal buffer, in order."""
    sigs = _signals("distributed_broadcast", signal_buffers)
    g = graph_of(input, *sigs)
    x = as_tensor(input, graph=g, op="distributed_broadcast", arg="input")
    return stage("distributed_broadcast", [x, *sigs])  # type: ignore[return-value]


__all__ = ["allgather", "distributed_broadcast"]
