"""hann_window: the Hann window of a static length, as a constant of the graph."""

from __future__ import annotations

from typing import Any

import numpy as np

from max.dtype import DType
from max.graph.ops.creation import constant
from max.graph.value import TensorValue


def hann_window(window_length: int, device: Any, periodic: bool = True, dtype: DType = DType.float32) -> TensorValue:
    """The Hann window ``H[n] = 1/2 (1 - cos(2 pi n / (N - 1)))``, n < `window_length`, as a
    rank-1 tensor of `dtype` on `device`: N = `window_length` for the symmetric window, one more
    with `periodic` (whose last, duplicate value is dropped: ``hann_window(L, periodic=True) ==
    hann_window(L + 1, periodic=False)[:-1]``). A length of 1 gives [1]; 0 an empty tensor."""
    if isinstance(window_length, bool) or not isinstance(window_length, (int, np.integer)):
        raise TypeError(f"hann_window: window_length must be an int, got {type(window_length).__name__}")
    n = int(window_length)
    if n < 0:
        raise ValueError(f"hann_window: window_length must not be negative, got {n}")
    if not dtype.is_float():
        raise TypeError(f"hann_window: dtype must be a floating-point type, got {dtype.name}")
    if n == 1:
        values = np.ones(1)
    else:
        denom = n if periodic else n - 1
        values = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n, dtype=np.float64) / max(denom, 1))
    return constant(values, dtype, device)


__all__ = ["hann_window"]
