"""Random test data for every dtype, as numpy arrays of the dtype's bits or values."""

import ml_dtypes
import numpy as np

from max.dtype import DType

# numpy (or ml_dtypes) types that hold each DType's values.
VALUE_TYPES = {
    DType.bool: np.bool_,
    DType.int8: np.int8,
    DType.int16: np.int16,
    DType.int32: np.int32,
    DType.int64: np.int64,
    DType.uint8: np.uint8,
    DType.uint16: np.uint16,
    DType.uint32: np.uint32,
    DType.uint64: np.uint64,
    DType.float16: np.float16,
    DType.float32: np.float32,
    DType.float64: np.float64,
    DType.bfloat16: ml_dtypes.bfloat16,
    DType.float8_e4m3fn: ml_dtypes.float8_e4m3fn,
    DType.float8_e5m2: ml_dtypes.float8_e5m2,
}

# The dtypes Buffer._cast and the cast kernels convert between.
CAST_DTYPES = list(VALUE_TYPES)

BITS_TYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def random_bits(rng, dtype: DType, shape) -> np.ndarray:
    """Uniformly random bit patterns for `dtype` (bool: 0/1), as unsigned ints of its width."""
    bits = BITS_TYPES[dtype.size_in_bytes]
    if dtype is DType.bool:
        return rng.integers(0, 2, size=shape).astype(np.uint8)
    info = np.iinfo(bits)
    return rng.integers(0, info.max, size=shape, dtype=bits, endpoint=True)


def random_values(rng, dtype: DType, shape) -> np.ndarray:
    """Random finite values spread over a useful range for `dtype`."""
    t = VALUE_TYPES[dtype]
    if dtype is DType.bool:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.is_integral():
        info = np.iinfo(t)
        return rng.integers(info.min, info.max, size=shape, dtype=t, endpoint=True)
    mag = {DType.float8_e4m3fn: 400.0, DType.float8_e5m2: 5e4, DType.float16: 6e4}.get(dtype, 1e6)
    v = rng.standard_normal(shape) * rng.choice([1e-3, 1.0, mag / 8], size=shape)
    return np.clip(v, -mag, mag).astype(t)
