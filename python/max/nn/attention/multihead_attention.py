"""``MultiheadAttention``: attention without a cache over padded ``[batch, seq, hidden]``
inputs (encoders such as BERT), with an optional additive or boolean padding mask."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from max.dtype import DType
from max.graph import DeviceRef, TensorValue, ops
from max.nn.layer import Module
from max.nn.linear import Linear


class MultiheadAttention(Module):
    """``softmax(q k^T * scale + mask) v`` over every position, heads of ``hidden_size /
    num_attention_heads``; q/k/v and output projections with optional biases."""

    def __init__(
        self,
        num_attention_heads: int,
        hidden_size: int,
        devices: Sequence[DeviceRef] | None = None,
        dtype: DType = DType.float32,
        scale: float | None = None,
        qkv_has_bias: bool = False,
        o_proj_has_bias: bool = False,
        stacked_qkv: bool = False,
    ) -> None:
        super().__init__()
        self.n_heads = int(num_attention_heads)
        self.hidden_size = int(hidden_size)
        if self.hidden_size % self.n_heads:
            raise ValueError(f"MultiheadAttention: hidden_size {hidden_size} is not a multiple of {num_attention_heads} heads")
        self.head_dim = self.hidden_size // self.n_heads
        self.scale = float(scale) if scale is not None else 1.0 / math.sqrt(self.head_dim)
        device = (devices or [DeviceRef.CPU()])[0]
        self.stacked_qkv = stacked_qkv
        if stacked_qkv:
            self.qkv_proj = Linear(hidden_size, 3 * hidden_size, dtype, device, has_bias=qkv_has_bias)
        else:
            self.q_proj = Linear(hidden_size, hidden_size, dtype, device, has_bias=qkv_has_bias)
            self.k_proj = Linear(hidden_size, hidden_size, dtype, device, has_bias=qkv_has_bias)
            self.v_proj = Linear(hidden_size, hidden_size, dtype, device, has_bias=qkv_has_bias)
        self.o_proj = Linear(hidden_size, hidden_size, dtype, device, has_bias=o_proj_has_bias)

    def _heads(self, t: TensorValue) -> TensorValue:
        b, s = t.shape[0], t.shape[1]
        return t.reshape([b, s, self.n_heads, self.head_dim]).permute([0, 2, 1, 3])

    def __call__(self, x: TensorValue, attention_mask: TensorValue | None = None, **kwargs: Any) -> TensorValue:
        """`x` is ``[batch, seq, hidden]``; `attention_mask` is a bool or integer ``[batch, seq]``
        (1/True keeps a key, 0/False masks it) or an additive float mask broadcastable to
        ``[batch, heads, seq, seq]`` (a rank-2 float mask is ``[seq, seq]``, as a causal one)."""
        if x.rank != 3:
            raise ValueError(f"MultiheadAttention: expected x of shape [batch, seq, hidden], got {x.shape}")
        if self.stacked_qkv:
            qkv = self.qkv_proj(x)
            h = self.hidden_size
            q, k, v = qkv[..., :h], qkv[..., h : 2 * h], qkv[..., 2 * h :]
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q, k, v = self._heads(q), self._heads(k), self._heads(v)
        scores = (q @ k.permute([0, 1, 3, 2])).cast(DType.float32) * self.scale
        if attention_mask is not None:
            if attention_mask.rank == 2 and not attention_mask.dtype.is_float():
                keep = attention_mask if attention_mask.dtype == DType.bool else attention_mask.cast(DType.bool)
                add = ops.where(keep, 0.0, ops.constant(np.float32(-1e30), DType.float32, x.device))
                scores = scores + ops.unsqueeze(ops.unsqueeze(add, 1), 1)
            else:
                scores = scores + attention_mask.cast(DType.float32)
        out = ops.softmax(scores).cast(x.dtype) @ v
        b, s = x.shape[0], x.shape[1]
        out = out.permute([0, 2, 1, 3]).reshape([b, s, self.hidden_size])
        return self.o_proj(out)


__all__ = ["MultiheadAttention"]
