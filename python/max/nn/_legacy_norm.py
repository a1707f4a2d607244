"""Normalisation layers: ``RMSNorm`` (with Gemma's ``weight_offset`` and cast order options),
``GemmaRMSNorm`` and ``LayerNorm``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from max.dtype import DType
from max.graph import DeviceRef, TensorValue, Weight, ops
from max.nn import kernels
from max.nn._util import as_dtype, on_device_of
from max.nn.layer import Module


class RMSNorm(Module):
    """``x / sqrt(mean(x**2) + eps) * (weight + weight_offset)`` over the last dim. The weight
    is placed on the device of the first input it normalises."""

    def __init__(
        self,
        dim: int,
        dtype: DType,
        eps: float = 1e-6,
        weight_offset: float = 0.0,
        multiply_before_cast: bool = True,
    ) -> None:
        super().__init__()
        self.dim = int(dim)
        self.dtype = dtype
        self.eps = float(eps)
        self.weight_offset = float(weight_offset)
        self.multiply_before_cast = bool(multiply_before_cast)
        self.weight = Weight("weight", dtype, (self.dim,), DeviceRef.CPU())

    def __call__(self, x: TensorValue) -> TensorValue:
        w = as_dtype(on_device_of(self.weight, x), x.dtype)
        return kernels.rms_norm(x, w, self.eps, self.weight_offset, self.multiply_before_cast)


class GemmaRMSNorm(RMSNorm):
    """Gemma's RMSNorm: ``x * (1 + weight)``, multiplied before the cast."""

    def __init__(self, dim: int, dtype: DType, eps: float = 1e-6) -> None:
        super().__init__(dim, dtype, eps, weight_offset=1.0, multiply_before_cast=True)


class LayerNorm(Module):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last dim."""

    def __init__(
        self,
        dims: int,
        devices: Sequence[DeviceRef] = (),
        dtype: DType = DType.float32,
        eps: float = 1e-5,
        use_bias: bool = True,
    ) -> None:
        super().__init__()
        device = devices[0] if devices else DeviceRef.CPU()
        self.dims = int(dims)
        self.eps = float(eps)
        self.weight = Weight("weight", dtype, (self.dims,), device)
        self.bias = Weight("bias", dtype, (self.dims,), device) if use_bias else None

    def __call__(self, x: TensorValue) -> TensorValue:
        w = as_dtype(on_device_of(self.weight, x), x.dtype)
        if self.bias is not None:
            b = as_dtype(on_device_of(self.bias, x), x.dtype)
        else:
            b = ops.constant(np.zeros(self.dims, np.float32), x.dtype, x.device)
        return ops.layer_norm(x, w, b, self.eps)


__all__ = ["GemmaRMSNorm", "LayerNorm", "RMSNorm"]
