"""The inverse real FFT, ``ops.irfft``, and its ``Normalization`` (in this module, as in MAX).

``irfft(x, n)`` turns the non-negative frequencies of a Hermitian spectrum along `axis` into the
`n` real samples they are the ``rfft`` of, as ``numpy.fft.irfft`` does, on the CPU and the GPU.
Checked and typed in Rust (crates/graph/src/ops/fft.rs) as it is staged."""

from __future__ import annotations

from enum import Enum
from typing import Any

import numpy as np

from max.graph.ops._stage import as_tensor, stage1
from max.graph.value import TensorValue


class Normalization(Enum):
    """How the inverse transform is scaled: ``BACKWARD`` divides by n (numpy's default),
    ``ORTHO`` by sqrt(n), ``FORWARD`` not at all. A member equals its string value."""

    BACKWARD = "backward"
    ORTHO = "ortho"
    FORWARD = "forward"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self.value == other
        if isinstance(other, Normalization):
            return self.value == other.value
        return False

    __hash__ = Enum.__hash__


def _int(arg: str, value: Any) -> int:
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    raise TypeError(f"irfft: {arg}: expected an int, got {type(value).__name__}")


def irfft(
    input_tensor: Any,
    n: int | None = None,
    axis: int = -1,
    normalization: Normalization | str = Normalization.BACKWARD,
    input_is_complex: bool = False,
    buffer_size_mb: int = 512,
) -> TensorValue:
    """The inverse real FFT of `input_tensor` along `axis`.

    The first ``n // 2 + 1`` values along the axis are used (the input is truncated, or padded
    with zeros); `n` defaults to ``2 * (m - 1)`` for an axis of `m` values, which must then be
    static. With `input_is_complex` the last dimension is 2 (real and imaginary parts side by
    side) and is not counted by `axis`; otherwise the input holds real parts. `normalization`:
    "backward" divides by n, "ortho" by sqrt(n), "forward" not at all. The result has the
    input's dtype (float16, bfloat16, float32 or float64) and shape, less the complex pair, with
    the axis replaced by `n`. `buffer_size_mb` is accepted for MAX's signature: the engine sizes
    its intermediate storage itself."""
    x = as_tensor(input_tensor, op="irfft", arg="input_tensor")
    if isinstance(normalization, Normalization):
        norm = normalization.value
    elif isinstance(normalization, str):
        norm = normalization
    else:
        raise TypeError(f"irfft: normalization: expected a Normalization or a string, got {type(normalization).__name__}")
    if not isinstance(input_is_complex, (bool, np.bool_)):
        raise TypeError(f"irfft: input_is_complex: expected a bool, got {type(input_is_complex).__name__}")
    _int("buffer_size_mb", buffer_size_mb)
    attrs = {
        "axis": _int("axis", axis),
        "n": None if n is None else _int("n", n),
        "normalization": norm,
        "input_is_complex": bool(input_is_complex),
    }
    return stage1("irfft", [x], attrs)


__all__ = ["irfft"]
