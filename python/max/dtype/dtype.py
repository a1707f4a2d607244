"""``DType``: MAX's element types, with MAX's numeric codes.

The sizes and categories come from the Rust dtype table (``max._core.dtype.table()``), which is
also what the engine uses; this file only adds the numpy and torch mappings.

numpy has no bfloat16 or float8 types. ``bfloat16`` maps to ``ml_dtypes.bfloat16`` (the
package is a dependency); the float8 types map to ``uint8``, their bits, as in MAX. Float8 data
round-trips through numpy as those bits: ``buf.to_numpy()`` gives ``uint8`` codes and
``Buffer.from_numpy(bits).view(DType.float8_e4m3fn)`` restores the type.
"""

from __future__ import annotations

import builtins
import enum
from typing import Any

import numpy as np

from max._core import dtype as _core_dtype

_TABLE = _core_dtype.table()

# ml_dtypes' type names that match a DType name exactly.
_ML_DTYPES_NAMES = (
    "bfloat16",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn",
    "float6_e2m3fn",
    "float6_e3m2fn",
)


class DType(enum.Enum):
    """The tensor data type."""

    bool = 1
    int8 = 135
    int16 = 137
    int32 = 139
    int64 = 141
    uint8 = 134
    uint16 = 136
    uint32 = 138
    uint64 = 140
    float16 = 79
    float32 = 81
    float64 = 82
    bfloat16 = 80
    float4_e2m1fn = 64
    float6_e2m3fn = 65
    float6_e3m2fn = 66
    float8_e8m0fnu = 73
    float8_e4m3fn = 75
    float8_e4m3fnuz = 76
    float8_e5m2 = 77
    float8_e5m2fnuz = 78

    def __repr__(self) -> str:
        return self.name

    def _row(self) -> dict[str, Any]:
        return _TABLE[self.name]

    @property
    def size_in_bytes(self) -> int:
        """Bytes one element occupies in memory."""
        return self._row()["size_in_bytes"]

    @property
    def size_in_bits(self) -> int:
        """Bits of information in one element (4 for float4, 6 for float6)."""
        return self._row()["size_in_bits"]

    @property
    def align(self) -> int:
        """Alignment in bytes that values of this type need."""
        return self._row()["align"]

    def is_float(self) -> builtins.bool:
        """Whether this is a floating-point type (float8 to float64, bfloat16 included)."""
        return self._row()["is_float"]

    def is_float8(self) -> builtins.bool:
        """Whether this is one of the 8-bit floating-point types."""
        return self._row()["is_float8"]

    def is_half(self) -> builtins.bool:
        """Whether this is a 16-bit floating-point type (float16 or bfloat16)."""
        return self._row()["is_half"]

    def is_integral(self) -> builtins.bool:
        """Whether this is an integer type, signed or unsigned (bool is not)."""
        return self._row()["is_integral"]

    def is_signed_integral(self) -> builtins.bool:
        """Whether this is a signed integer type."""
        return self._row()["is_signed_integral"]

    def is_unsigned_integral(self) -> builtins.bool:
        """Whether this is an unsigned integer type."""
        return self._row()["is_unsigned_integral"]

    def to_numpy(self) -> np.dtype:
        """The numpy dtype for this type (float8 types: ``uint8``, their bits)."""
        if self in _TO_NUMPY:
            return _TO_NUMPY[self]
        if self is DType.bfloat16:
            try:
                import ml_dtypes
            except ImportError as e:
                raise ValueError(
                    "unsupported DType to convert to NumPy: DType.bfloat16 needs the ml_dtypes "
                    "package (or read the bits with Buffer.view(DType.uint16))"
                ) from e
            return np.dtype(ml_dtypes.bfloat16)
        if self.is_float8():
            return np.dtype(np.uint8)
        raise ValueError(f"unsupported DType to convert to NumPy: {self}")

    @classmethod
    def from_numpy(cls, dtype: Any) -> DType:
        """The DType for a numpy dtype (or scalar type); ValueError when there is none."""
        if isinstance(dtype, str):
            raise ValueError(f"unsupported NumPy dtype: {dtype!r} (pass a numpy dtype)")
        try:
            np_dtype = np.dtype(dtype)
        except TypeError as e:
            raise ValueError(f"unsupported NumPy dtype: {dtype!r}") from e
        if np_dtype.kind in "biuf" and np_dtype.fields is None:
            found = _FROM_NUMPY.get((np_dtype.kind, np_dtype.itemsize))
            if found is not None:
                return found
        if np_dtype.name in _ML_DTYPES_NAMES:
            return cls[np_dtype.name]
        raise ValueError(f"unsupported NumPy dtype: {dtype}")

    def to_torch(self, _error: Exception | None = None) -> Any:
        """The torch dtype for this type; ValueError (or ``_error``) when torch has none."""
        import torch

        found = getattr(torch, self.name, None)
        if isinstance(found, torch.dtype):
            return found
        raise _error or ValueError(f"torch has no dtype for {self}")

    @classmethod
    def from_torch(cls, dtype: Any, _error: Exception | None = None) -> DType:
        """The DType for a torch dtype; ValueError (or ``_error``) when there is none."""
        name = str(dtype).removeprefix("torch.")
        if name in cls.__members__:
            return cls[name]
        raise _error or ValueError(f"unsupported torch dtype: {dtype}")


_TO_NUMPY = {
    DType.bool: np.dtype(np.bool_),
    DType.int8: np.dtype(np.int8),
    DType.int16: np.dtype(np.int16),
    DType.int32: np.dtype(np.int32),
    DType.int64: np.dtype(np.int64),
    DType.uint8: np.dtype(np.uint8),
    DType.uint16: np.dtype(np.uint16),
    DType.uint32: np.dtype(np.uint32),
    DType.uint64: np.dtype(np.uint64),
    DType.float16: np.dtype(np.float16),
    DType.float32: np.dtype(np.float32),
    DType.float64: np.dtype(np.float64),
}
_FROM_NUMPY = {(d.kind, d.itemsize): t for t, d in _TO_NUMPY.items()}

if {m.name for m in DType} != set(_TABLE) or any(m.value != _TABLE[m.name]["value"] for m in DType):
    raise ImportError("max.dtype.DType does not match the engine's dtype table; reinstall max")
