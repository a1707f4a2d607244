"""The ``Weights`` protocol, ``WeightData``, and the hierarchical accessor that the file
readers share.

An accessor is a checkpoint plus a name prefix: ``weights.encoder.layer[0]`` is the accessor
with prefix ``"encoder.layer.0"``. Accessors of one checkpoint share its tensor table and its
record of allocated weights, so ``allocated_weights`` is the same from any of them."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from max import driver
from max.dtype import DType
from max.graph.dim import Dim, StaticDim
from max.graph.quantization import QuantizationEncoding
from max.graph.shape import Shape
from max.graph.type import DeviceRef
from max.graph.weight import Weight

_Self = TypeVar("_Self")


@dataclass
class WeightData:
    """A weight's data (any DLPack array; the readers give host ``max.driver.Buffer`` views of
    the mapped file) with its name, dtype, shape and quantization encoding."""

    data: Any
    name: str
    dtype: DType
    shape: Shape
    quantization_encoding: QuantizationEncoding | None = None

    @classmethod
    def from_numpy(cls, arr: np.ndarray, name: str) -> WeightData:
        """WeightData over a numpy array (shared, not copied)."""
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"WeightData.from_numpy: arr: expected a numpy array, got {type(arr).__name__}")
        return cls(arr, name, DType.from_numpy(arr.dtype), Shape(arr.shape))

    def to_buffer(self) -> driver.Buffer:
        """The data as a ``max.driver.Buffer`` (shared, not copied, when possible)."""
        if isinstance(self.data, driver.Buffer):
            return self.data
        if isinstance(self.data, np.ndarray):
            return driver.Buffer.from_numpy(self.data)
        return driver.Buffer.from_dlpack(self.data)

    def astype(self, dtype: DType) -> WeightData:
        """A converted copy (values cast to `dtype`, not bits reinterpreted)."""
        if not isinstance(dtype, DType):
            raise TypeError(f"WeightData.astype: dtype: expected a max.dtype.DType, got {dtype!r}")
        if self.quantization_encoding is not None:
            raise ValueError(
                f"WeightData.astype: dtype: {self.name!r} holds {self.quantization_encoding.value} blocks; "
                "decode them with ops.dequantize instead of casting"
            )
        if dtype == self.dtype:
            return self
        return WeightData(self.to_buffer()._cast(dtype), self.name, dtype, Shape(self.shape))

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """numpy's array protocol: ``np.asarray(weight_data)`` gives the values (a view of the
        mapped file for host data; a GGUF block tensor gives its uint8 ``[rows, bytes]``)."""
        data = self.data
        if isinstance(data, np.ndarray):
            arr = data
        elif isinstance(data, driver.Buffer):
            arr = data.__array__(copy=copy)
        else:
            arr = np.from_dlpack(data)
        if dtype is not None:
            arr = arr.astype(dtype, copy=False)
        return arr.copy() if copy else arr

    def __dlpack__(self, **kwargs: Any) -> Any:
        """DLPack export of the data (``np.from_dlpack``, ``torch.from_dlpack``)."""
        return self.to_buffer().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        """The DLPack (device type, device id) of the data."""
        return self.to_buffer().__dlpack_device__()

    def __repr__(self) -> str:
        return f"WeightData(DType.{self.dtype.name}, {list(self.shape)!r})"


@runtime_checkable
class Weights(Protocol):
    """Hierarchical access to a checkpoint's weights: ``weights.a.b[0].c`` names
    ``"a.b.0.c"``; ``allocate`` turns the named weight into a graph ``Weight`` and records its
    data for ``InferenceSession.load(weights_registry=weights.allocated_weights)``."""

    @property
    def name(self) -> str:
        """The hierarchical name built so far (``""`` at the root)."""

    def __getattr__(self, attr: str) -> Any: ...

    def __getitem__(self, idx: int | str) -> Any: ...

    def items(self: _Self) -> Iterator[tuple[str, _Self]]:
        """(relative name, accessor) for every weight under this prefix, in file order."""

    def exists(self) -> bool:
        """Whether a weight has exactly this name."""

    def data(self) -> WeightData:
        """The named weight's data with its dtype, shape and encoding; KeyError when absent."""

    def allocate(
        self,
        dtype: DType | None = None,
        shape: Iterable[int | str | Dim | np.integer] | None = None,
        quantization_encoding: QuantizationEncoding | None = None,
        device: DeviceRef = DeviceRef.CPU(),
    ) -> Weight:
        """A graph Weight for the named tensor, its data recorded in ``allocated_weights``."""

    @property
    def allocated_weights(self) -> dict[str, Any]:
        """name -> data of every weight allocated so far."""


@dataclass(frozen=True)
class _Entry:
    """What a checkpoint knows of one tensor: how MAX sees it (dtype, shape, encoding, or why
    it cannot be used) and how many elements each stored row holds."""

    name: str
    dtype: DType | None
    shape: tuple[int, ...]
    encoding: QuantizationEncoding | None = None
    # Elements per row, where it differs from the stored last dimension (block encodings).
    logical_last: int | None = None
    unusable: str | None = None


class _Checkpoint:
    """The state accessors of one checkpoint share: tensors by name (in file order), a reader
    that returns a tensor's Buffer, the allocated weights, and the root accessor (which holds
    the open files)."""

    def __init__(self, entries: list[_Entry], owner: Any, describe: str) -> None:
        self.entries = {e.name: e for e in entries}
        self.owner = owner
        self.load = owner._load
        self.describe = describe
        self.allocated: dict[str, Any] = {}

    def missing(self, name: str) -> KeyError:
        """KeyError for an unknown name, with the closest names as a hint."""
        msg = f"{name!r} is not a weight in {self.describe}."
        names = list(self.entries)
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.75)
        if close:
            return KeyError(msg + " Did you mean " + " or ".join(repr(c) for c in close) + "?")
        # No near spelling: show what exists under the longest prefix that does exist.
        parts = name.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            prefix = ".".join(parts[:cut]) + "."
            under = [n for n in names if n.startswith(prefix)]
            if under:
                shown = ", ".join(repr(n) for n in under[:5]) + (", ..." if len(under) > 5 else "")
                return KeyError(f"{msg} Weights under {prefix[:-1]!r}: {shown}")
        if names:
            return KeyError(f"{msg} It holds {len(names)} weights, such as {names[0]!r}.")
        return KeyError(f"{msg} It holds no weights.")


def _static_shape(shape: Iterable[Any], op: str) -> tuple[int, ...]:
    dims = []
    for d in Shape(shape):
        if not isinstance(d, StaticDim):
            raise ValueError(f"{op}: shape: weights have static shapes, got the dim {d}")
        dims.append(int(d))
    return tuple(dims)


class _HierarchicalWeights:
    """The accessor behind SafetensorWeights and GGUFWeights."""

    _checkpoint: _Checkpoint
    _prefix: str

    def _child(self, name: str) -> Any:
        child = object.__new__(type(self))
        child._checkpoint = self._checkpoint
        child._prefix = name
        return child

    @property
    def name(self) -> str:
        """The name built so far (``"encoder.layer.0"``); ``""`` at the root."""
        return self._prefix

    def __getattr__(self, attr: str) -> Any:
        # Private and dunder lookups (copy, pickle, IPython's _repr_*_ probing, our own
        # attributes) must not turn into weight names; such names are reachable as ["_x"].
        if attr.startswith("_"):
            raise AttributeError(attr)
        return self._child(f"{self._prefix}.{attr}" if self._prefix else attr)

    def __getitem__(self, idx: int | str) -> Any:
        if isinstance(idx, bool) or not isinstance(idx, (int, str, np.integer)):
            raise TypeError(f"weights[...]: expected an int or a str, got {type(idx).__name__}")
        part = str(int(idx)) if not isinstance(idx, str) else idx
        return self._child(f"{self._prefix}.{part}" if self._prefix else part)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._checkpoint.describe}, prefix={self._prefix!r})"

    def exists(self) -> bool:
        """Whether a weight has exactly this name."""
        return self._prefix in self._checkpoint.entries

    def items(self) -> Iterator[tuple[str, Any]]:
        """(name relative to this prefix, accessor) for every weight under the prefix, in
        file order."""
        start = f"{self._prefix}." if self._prefix else ""
        for name in self._checkpoint.entries:
            if name.startswith(start):
                yield name[len(start):], self._child(name)

    def _entry(self) -> _Entry:
        entry = self._checkpoint.entries.get(self._prefix)
        if entry is None:
            raise self._checkpoint.missing(self._prefix)
        if entry.unusable is not None:
            raise ValueError(f"{self._prefix!r} in {self._checkpoint.describe}: {entry.unusable}")
        return entry

    def _buffer(self, entry: _Entry) -> driver.Buffer:
        return self._checkpoint.load(entry.name)

    def data(self) -> WeightData:
        """The weight's data (a host Buffer viewing the mapped file) with its metadata."""
        e = self._entry()
        assert e.dtype is not None
        return WeightData(self._buffer(e), e.name, e.dtype, Shape(e.shape), e.encoding)

    def allocate(
        self,
        dtype: DType | None = None,
        shape: Iterable[int | str | Dim | np.integer] | None = None,
        quantization_encoding: QuantizationEncoding | None = None,
        device: Any = DeviceRef.CPU(),
    ) -> Weight:
        """A graph Weight for this tensor; its data joins ``allocated_weights``. A dtype,
        shape or encoding that is given must match the file (GGUF block tensors may give the
        element shape ``[rows, elements]`` as well as the stored ``[rows, bytes]``)."""
        e = self._entry()
        assert e.dtype is not None
        if dtype is not None:
            if not isinstance(dtype, DType):
                raise TypeError(f"allocate: dtype: expected a max.dtype.DType, got {dtype!r}")
            if dtype != e.dtype:
                raise ValueError(
                    f"allocate: dtype: weight {e.name!r} holds {e.dtype.name}, not {dtype.name} "
                    "(convert with data().astype(...))"
                )
        if shape is not None:
            want = _static_shape(shape, "allocate")
            allowed = [e.shape]
            if e.logical_last is not None:
                allowed.append(e.shape[:-1] + (e.logical_last,))
            if want not in allowed:
                shown = " or ".join(str(list(s)) for s in allowed)
                raise ValueError(f"allocate: shape: weight {e.name!r} has shape {shown}, not {list(want)}")
        if quantization_encoding is not None:
            if not isinstance(quantization_encoding, QuantizationEncoding):
                raise TypeError(
                    f"allocate: quantization_encoding: expected a QuantizationEncoding, got {quantization_encoding!r}"
                )
            if quantization_encoding != e.encoding:
                held = f"{e.encoding.value} blocks" if e.encoding is not None else f"plain {e.dtype.name} values"
                raise ValueError(
                    f"allocate: quantization_encoding: weight {e.name!r} holds {held}, "
                    f"not {quantization_encoding.value}"
                )
        weight = Weight(e.name, e.dtype, list(e.shape), device, e.encoding)
        self._checkpoint.allocated[e.name] = self._buffer(e)
        return weight

    @property
    def allocated_weights(self) -> dict[str, Any]:
        """name -> host Buffer of every weight allocated so far (through any accessor of this
        checkpoint), ready for ``InferenceSession.load(weights_registry=...)``."""
        return dict(self._checkpoint.allocated)


__all__ = ["WeightData", "Weights"]
