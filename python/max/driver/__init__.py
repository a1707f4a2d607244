"""Devices, streams and buffers (``max.driver``).

The classes are implemented in Rust (``max._core.driver``); this module adds MAX's device-spec
helpers, which are plain Python.
"""

from max._core.driver import (
    CPU,
    Accelerator,
    Buffer,
    Device,
    DeviceStream,
    accelerator_api,
    accelerator_architecture_name,
    accelerator_count,
)
from max.driver.spec import (
    DeviceSpec,
    DLPackArray,
    calculate_virtual_device_count,
    calculate_virtual_device_count_from_cli,
    devices_exist,
    load_devices,
    scan_available_devices,
)

Tensor = Buffer

__all__ = [
    "CPU",
    "Accelerator",
    "Buffer",
    "DLPackArray",
    "Device",
    "DeviceSpec",
    "DeviceStream",
    "Tensor",
    "accelerator_api",
    "accelerator_architecture_name",
    "accelerator_count",
    "calculate_virtual_device_count",
    "calculate_virtual_device_count_from_cli",
    "devices_exist",
    "load_devices",
    "scan_available_devices",
]
