"""Device specifications: which devices a program wants, before any is opened."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from max._core.driver import CPU, Accelerator, Device, accelerator_count


@runtime_checkable
class DLPackArray(Protocol):
    """Anything that speaks DLPack (numpy arrays, torch tensors, Buffers)."""

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...

    def __dlpack_device__(self) -> tuple[int, int]: ...


@dataclass(frozen=True)
class DeviceSpec:
    """A device's id and type ('cpu' or 'gpu')."""

    id: int
    device_type: Literal["cpu", "gpu"] = "cpu"

    def __post_init__(self) -> None:
        if self.device_type not in ("cpu", "gpu"):
            raise ValueError(f"device_type must be 'cpu' or 'gpu', got {self.device_type!r}")

    @staticmethod
    def cpu(id: int = -1) -> DeviceSpec:
        """The spec of the host CPU (`id` is ignored, as there is one)."""
        return DeviceSpec(id, "cpu")

    @staticmethod
    def accelerator(id: int = 0) -> DeviceSpec:
        """The spec of GPU `id` (default 0)."""
        return DeviceSpec(id, "gpu")


def load_devices(device_specs: Sequence[DeviceSpec]) -> list[Device]:
    """Opens the devices the specs name."""
    return [CPU(s.id) if s.device_type == "cpu" else Accelerator(s.id) for s in device_specs]


def scan_available_devices() -> list[DeviceSpec]:
    """Every accelerator, or the CPU when there is none."""
    n = accelerator_count()
    return [DeviceSpec.accelerator(i) for i in range(n)] if n else [DeviceSpec.cpu()]


def devices_exist(devices: list[DeviceSpec]) -> bool:
    """Whether every spec names a device this machine has."""
    n = accelerator_count()
    return all(s.device_type == "cpu" or 0 <= s.id < n for s in devices)


def calculate_virtual_device_count(*device_spec_lists: list[DeviceSpec]) -> int:
    """Largest GPU id named, plus one; 1 when no GPU is named."""
    ids = [s.id for specs in device_spec_lists for s in specs if s.device_type == "gpu"]
    return max(ids) + 1 if ids else 1


def calculate_virtual_device_count_from_cli(*device_inputs: str | list[int]) -> int:
    """As calculate_virtual_device_count, from raw inputs such as "gpu:0,1,2" or [0, 1, 2]."""
    ids: list[int] = []
    for item in device_inputs:
        if isinstance(item, str):
            kind, _, rest = item.partition(":")
            if kind.strip() == "gpu":
                ids += [int(x) for x in rest.split(",") if x.strip()] or [0]
        else:
            ids += [int(x) for x in item]
    return max(ids) + 1 if ids else 1
