"""Value types (``max.graph.type``): tensors, buffers, devices and layouts."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from max.dtype import DType
from max.graph.dim import Dim, StaticDim
from max.graph.shape import Shape, ShapeLike


class DeviceKind(str, enum.Enum):
    """A device type."""

    CPU = "cpu"
    GPU = "gpu"

    def __str__(self) -> str:
        return self.value

    @staticmethod
    def from_string(txt: str) -> DeviceKind:
        """The DeviceKind named by `txt` (``"cpu"`` or ``"gpu"``)."""
        return DeviceKind(txt)


@dataclass(frozen=True)
class DeviceRef:
    """A symbolic device: a kind and an id (``gpu:0``)."""

    device_type: DeviceKind
    id: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "device_type", DeviceKind(self.device_type))
        if not isinstance(self.id, int) or isinstance(self.id, bool):
            raise TypeError(f"DeviceRef id must be an int, got {self.id!r}")
        if self.id < 0:
            raise ValueError(f"DeviceRef id must be >= 0, got {self.id}")

    @staticmethod
    def CPU(id: int = 0) -> DeviceRef:  # noqa: N802 - MAX's name
        """A reference to the host CPU."""
        return DeviceRef(DeviceKind.CPU, id)

    @staticmethod
    def GPU(id: int = 0) -> DeviceRef:  # noqa: N802 - MAX's name
        """A reference to GPU `id` (default 0)."""
        return DeviceRef(DeviceKind.GPU, id)

    @staticmethod
    def from_device(device: Any) -> DeviceRef:
        """The DeviceRef for a driver device (or a DeviceRef, returned as is)."""
        if isinstance(device, DeviceRef):
            return device
        from max import driver

        if isinstance(device, driver.Device):
            return DeviceRef(DeviceKind.CPU if device.is_host else DeviceKind.GPU, device.id)
        raise TypeError(f"expected a max.driver.Device or a DeviceRef, got {type(device).__name__}")

    def is_cpu(self) -> bool:
        """Whether this refers to the host CPU."""
        return self.device_type is DeviceKind.CPU

    def is_gpu(self) -> bool:
        """Whether this refers to a GPU."""
        return self.device_type is DeviceKind.GPU

    def to_device(self) -> Any:
        """The concrete driver device this refers to."""
        from max import driver

        return driver.CPU() if self.is_cpu() else driver.Accelerator(self.id)

    def _core(self) -> tuple[str, int]:
        return (self.device_type.value, self.id)

    def __str__(self) -> str:
        return f"{self.device_type.value}:{self.id}"

    def __repr__(self) -> str:
        return str(self)


def _device_arg(device: Any) -> DeviceRef:
    if device is None:
        return DeviceRef.CPU()
    return DeviceRef.from_device(device)


class Type:
    """Any type a graph value can have."""

    def _core(self) -> tuple:
        raise NotImplementedError


class _ChainType(Type):
    """Orders side effects (buffer ops, print); carries no data."""

    def _core(self) -> tuple:
        return ("chain",)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ChainType)

    def __hash__(self) -> int:
        return hash("chain")

    def __repr__(self) -> str:
        return "_ChainType()"


class FilterLayout(str, enum.Enum):
    """How a convolution filter's dims are ordered (R, S: spatial; C: input channels; F: output channels)."""
    RSCF = "RSCF"
    QRSCF = "QRSCF"
    FCRS = "FCRS"
    FCQRS = "FCQRS"
    CFRS = "CFRS"


class ConvInputLayout(str, enum.Enum):
    """How a convolution input's dims are ordered: NHWC (channels last, the default) or NCHW."""
    NHWC = "NHWC"
    NCHW = "NCHW"


@dataclass(eq=False)
class _ShapedType(Type):
    dtype: DType
    shape: Shape
    device: DeviceRef = field(default_factory=DeviceRef.CPU)

    def __init__(self, dtype: DType, shape: ShapeLike, device: Any = None, _layout: FilterLayout | None = None) -> None:
        if not isinstance(dtype, DType):
            raise TypeError(f"{type(self).__name__}: dtype must be a max.dtype.DType, got {dtype!r}")
        self.dtype = dtype
        if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
            raise TypeError(f"{type(self).__name__}: shape must be a sequence of dims, got {shape!r}")
        self.shape = shape if isinstance(shape, Shape) else Shape(shape)
        for i, d in enumerate(self.shape):
            if isinstance(d, StaticDim) and int(d) < 0:
                dims = ", ".join(str(x) for x in self.shape)
                raise ValueError(f"{type(self).__name__}: shape [{dims}]: dim {i} is {int(d)}; sizes are >= 0")
        self.device = _device_arg(device)
        self._layout = _layout

    @property
    def rank(self) -> int:
        return len(self.shape)

    def _kind(self) -> str:
        raise NotImplementedError

    def _core(self) -> tuple:
        return (self._kind(), self.dtype.value, [d._d for d in self.shape], self.device._core())

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and other.dtype == self.dtype  # type: ignore[attr-defined]
            and list(other.shape) == list(self.shape)  # type: ignore[attr-defined]
            and other.device == self.device  # type: ignore[attr-defined]
        )

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.dtype, tuple(self.shape), self.device))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dtype={self.dtype.name}, shape={list(self.shape)!r}, device={self.device})"


class TensorType(_ShapedType):
    """The type of a tensor value: a dtype, a shape of Dims, and a device. It holds no data."""

    def _kind(self) -> str:
        return "tensor"

    def as_buffer(self) -> BufferType:
        """The BufferType with this type's dtype, shape and device."""
        return BufferType(self.dtype, self.shape, self.device)


class BufferType(_ShapedType):
    """The type of a mutable tensor that buffer ops update in place."""

    def _kind(self) -> str:
        return "buffer"

    def as_tensor(self) -> TensorType:
        """The TensorType with this type's dtype, shape and device."""
        return TensorType(self.dtype, self.shape, self.device)


def _from_core(t: tuple) -> Type:
    """A Type from the Rust form (kind, dtype code, [Dim], (device kind, id))."""
    if t[0] == "chain":
        return _ChainType()
    from max.graph.dim import _wrap

    cls = TensorType if t[0] == "tensor" else BufferType
    obj = cls.__new__(cls)
    obj.dtype = DType(t[1])
    obj.shape = Shape.__new__(Shape)
    list.extend(obj.shape, (_wrap(d) for d in t[2]))
    obj.device = DeviceRef(DeviceKind(t[3][0]), t[3][1])
    obj._layout = None
    return obj


__all__ = [
    "BufferType",
    "ConvInputLayout",
    "DeviceKind",
    "DeviceRef",
    "Dim",
    "FilterLayout",
    "TensorType",
    "Type",
]
