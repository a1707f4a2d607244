"""resize: images in NCHW resized along H and W with bicubic interpolation, as two products by
constant interpolation matrices (one per axis: the separable kernel's weights, built on the
host for the static sizes)."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any

import numpy as np

from max.dtype import DType
from max.graph.dim import Dim, StaticDim
from max.graph.ops._stage import as_tensor
from max.graph.ops.creation import cast, constant
from max.graph.ops.linalg import matmul
from max.graph.value import TensorValue


class InterpolationMode(enum.Enum):
    """Interpolation modes of `resize` (BICUBIC is the one implemented)."""

    BICUBIC = "bicubic"
    BILINEAR = "bilinear"
    NEAREST = "nearest"


_A = -0.75  # the cubic convolution kernel's parameter (Keys; torch's and OpenCV's choice)


def _cubic_weights(t: float) -> list[float]:
    """The four taps' weights of a point `t` (0 <= t < 1) past its left neighbour."""

    def near(x: float) -> float:  # |x| <= 1
        return ((_A + 2) * x - (_A + 3)) * x * x + 1

    def far(x: float) -> float:  # 1 < |x| < 2
        return ((_A * x - 5 * _A) * x + 8 * _A) * x - 4 * _A

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _bicubic_matrix(n_in: int, n_out: int) -> np.ndarray:
    """[n_out, n_in]: output pixel i as a weighted sum of input pixels, half-pixel centres
    (source ``(i + 1/2) n_in / n_out - 1/2``), taps past the border clamped to the edge pixel:
    ``torch.nn.functional.interpolate(mode="bicubic", align_corners=False)``'s weights."""
    m = np.zeros((n_out, n_in), np.float64)
    scale = n_in / n_out
    for i in range(n_out):
        src = (i + 0.5) * scale - 0.5
        left = int(np.floor(src))
        for k, w in enumerate(_cubic_weights(src - left)):
            m[i, min(max(left - 1 + k, 0), n_in - 1)] += w
    return m


def _static(d: Any, what: str) -> int:
    dim = Dim(d)
    if not isinstance(dim, StaticDim):
        raise NotImplementedError(f"resize: {what} must be static, got {dim}")
    return int(dim)


def resize(input: Any, shape: Iterable[Any], interpolation: InterpolationMode = InterpolationMode.BILINEAR) -> TensorValue:  # noqa: A002
    """`input` [N, C, H, W] resized to `shape` (N, C, H_out, W_out; N and C unchanged) with
    `interpolation` (only BICUBIC is implemented; the others raise NotImplementedError, as MAX
    does): bicubic interpolation with half-pixel centres and edge pixels repeated past the
    border, computed in float32 for 16-bit inputs. H, W and the new sizes must be static."""
    x = as_tensor(input, op="resize", arg="input")
    if isinstance(shape, (int, np.integer)):
        raise NotImplementedError("resize: a single integer size is not supported; give (N, C, H, W)")
    dims = list(shape)
    if x.rank != 4:
        raise ValueError(f"resize: input must have rank 4 (NCHW), got rank {x.rank}")
    if len(dims) != 4:
        raise ValueError(f"resize: shape must have 4 elements (N, C, H, W), got {len(dims)}")
    if not isinstance(interpolation, InterpolationMode):
        raise ValueError(f"resize: interpolation must be an InterpolationMode, got {interpolation!r}")
    if interpolation is not InterpolationMode.BICUBIC:
        raise NotImplementedError(f"resize: only InterpolationMode.BICUBIC is implemented, got {interpolation}")
    if not x.dtype.is_float():
        raise TypeError(f"resize: input must be a floating-point tensor, got {x.dtype.name}")
    for axis, name in ((0, "N"), (1, "C")):
        if Dim(dims[axis]) != x.shape[axis]:
            raise ValueError(f"resize: {name} must stay {x.shape[axis]}, got {dims[axis]}")
    h_in, w_in = _static(x.shape[2], "the input's height"), _static(x.shape[3], "the input's width")
    h_out, w_out = _static(dims[2], "the new height"), _static(dims[3], "the new width")
    for name, v in (("height", h_out), ("width", w_out)):
        if v <= 0:
            raise ValueError(f"resize: the new {name} must be positive, got {v}")
    if h_in == 0 or w_in == 0:
        raise ValueError(f"resize: the input must not be empty, got shape {[int(d) for d in x.shape]}")
    work = x.dtype if x.dtype in (DType.float32, DType.float64) else DType.float32
    y = cast(x, work) if work != x.dtype else x
    if h_out != h_in:
        y = matmul(constant(_bicubic_matrix(h_in, h_out), work, x.device), y)
    if w_out != w_in:
        y = matmul(y, constant(_bicubic_matrix(w_in, w_out).T.copy(), work, x.device))
    return cast(y, x.dtype) if work != x.dtype else y


__all__ = ["InterpolationMode", "resize"]
