"""``max.nn.rope``: rotary position embeddings as eager modules. ``weight`` is the table
``[max_sequence_length, dim]`` of (cos, sin) pairs per position (``freqs`` builds it);
``RotaryEmbedding`` rotates adjacent pairs of ``x [batch, seq, heads, head_dim]``,
``TransposedRotaryEmbedding`` dim i with dim i + head_dim/2. The rotation is the graph layers'
kernel function (``kernels.rope``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from max.dtype import DType
from max.graph import ops
from max.graph.dim import Dim
from max.nn import _dual, kernels
from max.nn import rotary_embedding as _legacy
from max.nn.module import Module
from max.tensor import Tensor
from max._eager.dispatch import apply


def freqs(dim: int, max_sequence_length: int, theta: float = 10000.0) -> Tensor:
    """The (cos, sin) table for `dim`-wide heads: row p holds ``cos(p w_i), sin(p w_i)`` for
    ``w_i = theta ** (-2i / dim)``, computed in float64 and stored as float32."""
    inv = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    angles = np.outer(np.arange(max_sequence_length, dtype=np.float64), inv)
    table = np.stack([np.cos(angles), np.sin(angles)], axis=-1).reshape(max_sequence_length, dim)
    return Tensor.constant(table, dtype=DType.float32)


def _rotate(x: Any, table: Any, start_pos: Any, interleaved: bool) -> Any:
    batch, seq, heads, head_dim = x.shape
    pos = ops.range(start_pos, start_pos + seq, 1, out_dim=seq, dtype=DType.int64, device=x.device)
    pos = ops.broadcast_to(ops.unsqueeze(pos, 0), [batch, seq]).reshape([batch * seq]).cast(DType.uint32)
    flat = x.reshape([batch * seq, heads, head_dim])
    table = table if table.dtype == DType.float32 else ops.cast(table, DType.float32)
    out = kernels.rope(flat, table, pos, interleaved=interleaved)
    return out.reshape([batch, seq, heads, head_dim])


class RotaryEmbedding(Module):
    """RoPE over interleaved (real, imaginary) pairs of the last dim."""

    _interleaved = True

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        first = args[0] if args else kwargs.get("weight")
        if first is not None and not isinstance(first, Tensor):
            return _legacy.RotaryEmbedding(*args, **kwargs)
        return object.__new__(cls)

    def __init__(self, weight: Tensor) -> None:
        self.weight = weight

    @property
    def dim(self) -> int:
        """The rotated size of each head (the table's second dim)."""
        return int(self.weight.shape[1])

    @property
    def max_sequence_length(self) -> int:
        """The number of positions the table covers."""
        return int(self.weight.shape[0])

    def forward(self, x: Any, start_pos: int | str | Dim | None = 0) -> Any:
        """`x` ([batch, seq_len, heads, head_dim]) rotated by its positions from `start_pos`
        (None: 0; a string names a symbolic dim, as a ``Dim``)."""
        if start_pos is None:
            start_pos = 0
        elif isinstance(start_pos, str):
            start_pos = Dim(start_pos)
        if x.rank != 4:
            raise ValueError(f"{type(self).__name__}: x must be [batch, seq_len, heads, head_dim], got {list(x.shape)}")
        if isinstance(start_pos, (int, np.integer)) and not isinstance(start_pos, bool) and start_pos < 0:
            raise ValueError(f"{type(self).__name__}: start_pos must not be negative, got {start_pos}")
        fn = _rotate_interleaved if self._interleaved else _rotate_halves
        return apply(fn, (x, self.weight, start_pos))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dim={self.dim}, max_sequence_length={self.max_sequence_length})"


class TransposedRotaryEmbedding(RotaryEmbedding):
    """RoPE where the first half of head_dim holds the real parts and the second the imaginary."""

    _interleaved = False


def _rotate_interleaved(x: Any, table: Any, start_pos: Any) -> Any:
    return _rotate(x, table, start_pos, True)


def _rotate_halves(x: Any, table: Any, start_pos: Any) -> Any:
    return _rotate(x, table, start_pos, False)


__all__ = ["RotaryEmbedding", "TransposedRotaryEmbedding", "freqs"]
