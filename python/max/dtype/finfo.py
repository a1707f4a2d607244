"""``finfo``: numerical limits of every float DType, numpy cannot describe them all
(bfloat16, float8, float6, float4). Modelled on ``torch.finfo``."""

from __future__ import annotations

from max.dtype.dtype import DType

# eps, max, tiny (smallest normal); min is -max except for the unsigned float8_e8m0fnu.
_LIMITS = {
    DType.float16: (2.0**-10, 65504.0, 2.0**-14),
    DType.bfloat16: (2.0**-7, (2 - 2.0**-7) * 2.0**127, 2.0**-126),
    DType.float32: (2.0**-23, (2 - 2.0**-23) * 2.0**127, 2.0**-126),
    DType.float64: (2.0**-52, (2 - 2.0**-52) * 2.0**1023, 2.0**-1022),
    DType.float8_e4m3fn: (2.0**-3, 448.0, 2.0**-6),
    DType.float8_e4m3fnuz: (2.0**-3, 240.0, 2.0**-7),
    DType.float8_e5m2: (2.0**-2, 57344.0, 2.0**-14),
    DType.float8_e5m2fnuz: (2.0**-2, 57344.0, 2.0**-15),
    DType.float8_e8m0fnu: (1.0, 2.0**127, 2.0**-127),
    DType.float6_e2m3fn: (2.0**-3, 7.5, 1.0),
    DType.float6_e3m2fn: (2.0**-2, 28.0, 2.0**-2),
    DType.float4_e2m1fn: (2.0**-1, 6.0, 1.0),
}


class finfo:
    """Numerical properties of a floating-point DType: bits, eps, max, min, tiny."""

    bits: int
    eps: float
    max: float
    min: float
    tiny: float
    dtype: DType

    def __init__(self, dtype: DType) -> None:
        if not isinstance(dtype, DType) or dtype not in _LIMITS:
            raise TypeError(f"finfo needs a floating-point max.dtype.DType, got {dtype!r}")
        self.dtype = dtype
        self.bits = dtype.size_in_bits
        self.eps, self.max, self.tiny = _LIMITS[dtype]
        self.min = self.tiny if dtype is DType.float8_e8m0fnu else -self.max

    @property
    def smallest_normal(self) -> float:
        """Alias for ``tiny`` (``torch.finfo`` compatibility)."""
        return self.tiny

    def __repr__(self) -> str:
        return (
            f"finfo(dtype={self.dtype.name}, bits={self.bits}, eps={self.eps}, "
            f"min={self.min}, max={self.max}, tiny={self.tiny})"
        )
