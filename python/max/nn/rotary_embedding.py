"""Rotary position embeddings: the frequency tables (``freqs_cis``: per position, ``(cos, sin)``
pairs side by side) of ``RotaryEmbedding`` and its Llama-3 and LongRoPE scaled variants,
applied by the ``rope`` graph op (``max.nn.kernels.rope``) in attention, or by ``__call__`` on
padded ``[batch, seq, heads, head_dim]`` tensors."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorValue, ops
from max.nn.layer import Module


def cos_sin_table(n: int, inv_freqs: Any, scale: float = 1.0) -> np.ndarray:
    """``[n, 2 * pairs]`` float32: ``scale * (cos, sin)`` of ``position * inv_freqs(positions)``
    (``[pairs]``, or ``[len(positions), pairs]``) for positions 0..n-1, computed in float64 a
    block of positions at a time (a long context costs its float32 table, not several float64
    copies of it)."""
    pairs = np.asarray(inv_freqs(np.zeros(0))).shape[-1]
    out = np.empty((n, 2 * pairs), np.float32)
    for start in range(0, n, 1 << 16):
        positions = np.arange(start, min(n, start + (1 << 16)), dtype=np.float64)
        angles = positions[:, None] * np.asarray(inv_freqs(positions))
        out[start : start + positions.size, 0::2] = scale * np.cos(angles)
        out[start : start + positions.size, 1::2] = scale * np.sin(angles)
    return out


@dataclass
class Llama3RopeScalingParams:
    """Llama 3.1's frequency scaling: long wavelengths divided by `factor`, short ones kept,
    a smooth blend between ``orig_max_position / low_freq_factor`` and
    ``orig_max_position / high_freq_factor``."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    orig_max_position: int


class RotaryEmbedding(Module):
    """Rotary embeddings with base `theta` for heads of `head_dim` (default ``dim // n_heads``)
    over `max_seq_len` positions. `interleaved`: rotate adjacent pairs (GGUF Llama); otherwise
    dim i with dim i + head_dim/2 (Hugging Face). `rotary_dim` < head_dim rotates only the
    first dims (partial rotary), and `scaling_factor` divides every frequency (linear scaling)."""

    def __init__(
        self,
        dim: int,
        n_heads: int,
        theta: float,
        max_seq_len: int,
        head_dim: int | None = None,
        _freqs_cis: Any = None,
        interleaved: bool = True,
        *,
        rotary_dim: int | None = None,
        scaling_factor: float = 1.0,
    ) -> None:
        super().__init__()
        self.dim, self.n_heads = int(dim), int(n_heads)
        self.theta = float(theta)
        self.max_seq_len = int(max_seq_len)
        self.head_dim = int(head_dim) if head_dim is not None else self.dim // self.n_heads
        self.rotary_dim = int(rotary_dim) if rotary_dim is not None else self.head_dim
        if self.rotary_dim % 2 or self.rotary_dim > self.head_dim:
            raise ValueError(f"RotaryEmbedding: rotary_dim {self.rotary_dim} must be even and at most {self.head_dim}")
        self.interleaved = bool(interleaved)
        self.scaling_factor = float(scaling_factor)
        self._freqs_cis = _freqs_cis
        self._constants: dict[tuple[int, str], TensorValue] = {}

    def compute_inv_freqs(self) -> np.ndarray:
        """The rotation frequency of each pair of dims, float64 ``[rotary_dim / 2]``."""
        exponents = np.arange(0, self.rotary_dim, 2, dtype=np.float64) / self.rotary_dim
        return 1.0 / (self.theta**exponents) / self.scaling_factor

    def freqs_cis_base(self) -> np.ndarray:
        """``[max_seq_len, rotary_dim]`` float32: per position, ``(cos, sin)`` of each pair's angle."""
        if self._freqs_cis is not None:
            return np.asarray(self._freqs_cis, np.float32)
        inv = self.compute_inv_freqs()
        return cos_sin_table(self.max_seq_len, lambda positions: inv)

    def freqs_cis_on(self, device: DeviceRef) -> TensorValue:
        """The table as a constant of the graph being staged, on `device` (once per graph)."""
        g = Graph.current
        key = (id(g), str(device))
        cached = self._constants.get(key)
        if cached is None or cached._graph is not g:
            cached = ops.constant(self.freqs_cis_base(), DType.float32, device)
            self._constants[key] = cached
        return cached

    @property
    def freqs_cis(self) -> TensorValue:
        """The table on the CPU, as a constant of the graph being staged."""
        return self.freqs_cis_on(DeviceRef.CPU())

    def __call__(self, x: TensorValue, start_pos: int = 0, seq_len: Any = None) -> TensorValue:
        """Rotates padded ``x [batch, seq, heads, head_dim]``: row ``s`` of every sequence at
        position ``start_pos + s``."""
        from max.nn import kernels

        if x.rank != 4:
            raise ValueError(f"RotaryEmbedding: expected x of shape [batch, seq, heads, head_dim], got {x.shape}")
        if not isinstance(start_pos, int):
            raise TypeError("RotaryEmbedding: start_pos must be an int here; ragged batches pass positions to ops")
        batch, seq, heads, head_dim = x.shape
        pos = ops.range(start_pos, start_pos + seq, 1, out_dim=seq, dtype=DType.int64, device=x.device)
        pos = (ops.unsqueeze(pos, 0) + ops.broadcast_to(ops.constant(0, DType.int64, x.device), [batch, 1]))
        flat = x.reshape([batch * seq, heads, head_dim])
        out = kernels.rope(flat, self.freqs_cis_on(x.device), pos.reshape([batch * seq]).cast(DType.uint32),
                           interleaved=self.interleaved)
        return out.reshape([batch, seq, heads, head_dim])


class Llama3RotaryEmbedding(RotaryEmbedding):
    """RotaryEmbedding with Llama 3.1's frequency scaling (`scaling_params`)."""

    def __init__(
        self,
        dim: int,
        n_heads: int,
        theta: float,
        max_seq_len: int,
        head_dim: int | None = None,
        _freqs_cis: Any = None,
        interleaved: bool = True,
        scaling_params: Llama3RopeScalingParams | None = None,
    ) -> None:
        super().__init__(dim, n_heads, theta, max_seq_len, head_dim, _freqs_cis, interleaved)
        self.scaling_params = scaling_params

    def compute_inv_freqs(self) -> np.ndarray:
        inv = super().compute_inv_freqs()
        p = self.scaling_params
        if p is None:
            return inv
        low_wavelen = p.orig_max_position / p.low_freq_factor
        high_wavelen = p.orig_max_position / p.high_freq_factor
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > low_wavelen, inv / p.factor, inv)
        smooth = (p.orig_max_position / wavelen - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor)
        blended = (1 - smooth) * scaled / p.factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return np.where(medium, blended, scaled)


@dataclass
class LongRoPEScalingParams:
    """LongRoPE (Phi-3.5, Phi-4-mini): the frequency of pair i is divided by ``short_factor[i]``
    at positions below `original_max_position` and by ``long_factor[i]`` from there on; cos and
    sin are multiplied by `attention_factor`, by default ``sqrt(1 + ln(s) / ln(original_max_position))``
    with ``s = max_position_embeddings / original_max_position`` (1 when s <= 1)."""

    short_factor: list[float]
    long_factor: list[float]
    original_max_position: int
    max_position_embeddings: int
    attention_factor: float | None = None

    def scale(self) -> float:
        """The factor cos and sin are multiplied by."""
        if self.attention_factor is not None:
            return float(self.attention_factor)
        s = self.max_position_embeddings / self.original_max_position
        return 1.0 if s <= 1.0 else math.sqrt(1.0 + math.log(s) / math.log(self.original_max_position))


class LongRoPERotaryEmbedding(RotaryEmbedding):
    """RotaryEmbedding with LongRoPE (`scaling_params`). One set of factors rotates every
    position, chosen by the context the table serves (as llama.cpp chooses by its context size):
    the long factors when `max_seq_len` exceeds the original context, else the short ones. A
    sequence's cached keys so keep their rotation as it grows, and q.k depends on distance
    only. (Hugging Face picks per call by the sequence's length: the same values whenever the
    sequence and the context fall on the same side of the original context.)"""

    def __init__(
        self,
        dim: int,
        n_heads: int,
        theta: float,
        max_seq_len: int,
        head_dim: int | None = None,
        _freqs_cis: Any = None,
        interleaved: bool = False,
        *,
        rotary_dim: int | None = None,
        scaling_params: LongRoPEScalingParams,
    ) -> None:
        super().__init__(dim, n_heads, theta, max_seq_len, head_dim, _freqs_cis, interleaved, rotary_dim=rotary_dim)
        p = scaling_params
        pairs = self.rotary_dim // 2
        for name, factors in (("short_factor", p.short_factor), ("long_factor", p.long_factor)):
            if len(factors) != pairs:
                raise ValueError(f"LongRoPE: {name} has {len(factors)} values, the rotary dims need {pairs}")
            if not all(math.isfinite(float(f)) and float(f) > 0 for f in factors):
                raise ValueError(f"LongRoPE: {name} must be positive numbers")
        if p.original_max_position <= 0:
            raise ValueError("LongRoPE: original_max_position must be positive")
        self.scaling_params = p

    def _inv_freqs(self, factors: list[float]) -> np.ndarray:
        return super().compute_inv_freqs() / np.asarray(factors, np.float64)

    def compute_inv_freqs(self) -> np.ndarray:
        """The frequencies of this table's context: long factors past the original context."""
        p = self.scaling_params
        return self._inv_freqs(p.long_factor if self.max_seq_len > p.original_max_position else p.short_factor)

    def freqs_cis_base(self) -> np.ndarray:
        if self._freqs_cis is not None:
            return np.asarray(self._freqs_cis, np.float32)
        inv = self.compute_inv_freqs()
        return cos_sin_table(self.max_seq_len, lambda positions: inv, self.scaling_params.scale())


__all__ = ["Llama3RopeScalingParams", "Llama3RotaryEmbedding", "LongRoPERotaryEmbedding", "LongRoPEScalingParams",
           "RotaryEmbedding", "cos_sin_table"]
