"""Communication between the devices of a tensor-parallel model: ``Signals`` (the signal
buffers every collective op takes, one per device) and ``Allreduce`` (a layer that sums one
value per device).

MAX's peer-to-peer kernels keep 513 MiB of scratch in each signal buffer. Here the GPU
collectives run over NCCL, which keeps its own, except the allreduce of up to 1 MiB (the
``collective.p2p`` knob, on by default; kernels/allreduce_p2p.cu), which pushes each device's tensor into every
device's signal buffer: ``NUM_BYTES`` holds its counters, flags and receive slots for up to 8
devices (24 MiB and 64 KiB). A signal buffer must start zeroed (``Signals.buffers`` does it) and
serve one group of devices (a buffer seen with another group sends that call to NCCL)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from max import driver
from max.dtype import DType
from max.graph import BufferType, DeviceRef, TensorValue, ops
from max.nn.layer import Module


class Signals:
    """The signal buffers of `devices` (graph devices, in the order the collectives list
    their values)."""

    NUM_BYTES = 65536 + 2 * 8 * (3 << 19)

    def __init__(self, devices: Iterable[Any]) -> None:
        self.devices: list[DeviceRef] = [DeviceRef.from_device(d) for d in devices]
        if not self.devices:
            raise ValueError("Signals: expected at least one device")

    def buffers(self) -> list[driver.Buffer]:
        """One zeroed uint8 buffer of ``NUM_BYTES`` per device, ready when this returns."""
        out = []
        for ref in self.devices:
            device = ref.to_device()
            buf = driver.Buffer.zeros([self.NUM_BYTES], DType.uint8, device=device)
            out.append(buf)
        for buf in out:
            buf.device.synchronize()
        return out

    def input_types(self) -> list[BufferType]:
        """The graph input types of the buffers: uint8 ``[NUM_BYTES]`` on each device."""
        return [BufferType(DType.uint8, [self.NUM_BYTES], ref) for ref in self.devices]

    def __repr__(self) -> str:
        return f"Signals({', '.join(str(d) for d in self.devices)})"


class Allreduce(Module):
    """Sums one value per device; every device gets the sum (``ops.allreduce.sum``)."""

    def __init__(self, num_accelerators: int) -> None:
        super().__init__()
        if num_accelerators < 1:
            raise ValueError(f"Allreduce: num_accelerators must be positive, got {num_accelerators}")
        self.num_accelerators = int(num_accelerators)

    @property
    def devices(self) -> list[driver.Accelerator]:
        """The accelerators taking part, GPUs 0 to num_accelerators - 1."""
        return [driver.Accelerator(i) for i in range(self.num_accelerators)]

    def __call__(self, inputs: Sequence[TensorValue], signal_buffers: Sequence[Any]) -> list[TensorValue]:
        if len(inputs) != self.num_accelerators:
            raise ValueError(f"Allreduce: expected {self.num_accelerators} inputs, got {len(inputs)}")
        return ops.allreduce.sum(inputs, signal_buffers)


__all__ = ["Allreduce", "Signals"]
