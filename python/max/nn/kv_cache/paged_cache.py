"""``PagedKVCache``: the paged KV cache of eager models, with the page bookkeeping the serving
code does for graph models. It holds one blocks buffer ``[pages, 2, layers, page_size, kv_heads,
head_dim]`` (``KVCacheParams.blocks_shape``) that the eager attention writes in place, and
hands out the per-step index tensors a forward pass reads (``CacheStep``): the same values, in
the same layout, as a graph model's cache inputs (``PagedCacheInputSymbols``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from max import driver
from max.dtype import DType
from max.nn.kv_cache.cache_params import KVCacheParams
from max.tensor import Tensor
from max._eager.buffer import MutableBuffer


@dataclass
class CacheStep:
    """The cache inputs of one forward pass over a ragged batch. Index tensors are uint32 on the
    cache's device: `input_row_offsets` ``[batch + 1]`` (where each sequence's new rows start),
    `cache_lengths` ``[batch]`` (tokens cached before this step), `lookup_table` ``[batch,
    max_pages]`` (each sequence's pages), `positions` and `slots` ``[tokens]`` (each new token's
    position and ``page * page_size + offset``)."""

    blocks: MutableBuffer
    input_row_offsets: Tensor
    cache_lengths: Tensor
    lookup_table: Tensor
    positions: Tensor
    slots: Tensor

    def arrays(self) -> dict[str, np.ndarray]:
        """The index tensors as host arrays (to feed a graph model the same step)."""
        names = ("input_row_offsets", "cache_lengths", "lookup_table", "positions", "slots")
        return {n: getattr(self, n).to_numpy() for n in names}


class PagedKVCache:
    """Pages of `params.page_size` tokens, `num_pages` of them, on `device`; sequences are
    numbered from 0 in the order ``add_sequence`` creates them."""

    def __init__(self, params: KVCacheParams, num_pages: int, device: driver.Device | None = None) -> None:
        if num_pages < 1:
            raise ValueError(f"PagedKVCache: num_pages must be positive, got {num_pages}")
        self.params = params
        self.device = device if device is not None else driver.CPU()
        self.blocks = MutableBuffer.zeros(params.blocks_shape(num_pages), params.dtype, self.device)
        self._free = list(range(num_pages))
        self._pages: list[list[int]] = []
        self._lengths: list[int] = []

    @property
    def lengths(self) -> list[int]:
        """Tokens cached per sequence."""
        return list(self._lengths)

    def add_sequence(self) -> int:
        self._pages.append([])
        self._lengths.append(0)
        return len(self._lengths) - 1

    def step(self, new_tokens: Sequence[int], sequences: Sequence[int] | None = None) -> CacheStep:
        """The inputs of a forward pass that appends ``new_tokens[i]`` tokens to sequence
        ``sequences[i]`` (default: every sequence, in order). Pages are taken for the new tokens
        and the lengths advance now: the step's `cache_lengths` are the lengths before it."""
        seqs = list(range(len(self._lengths))) if sequences is None else list(sequences)
        if len(seqs) != len(new_tokens) or not seqs:
            raise ValueError(f"PagedKVCache.step: {len(new_tokens)} token counts for {len(seqs)} sequences")
        for s in seqs:
            if not 0 <= s < len(self._lengths):
                raise IndexError(f"PagedKVCache.step: no sequence {s} (there are {len(self._lengths)})")
        ps = self.params.page_size
        need = sum(max(0, -(-(self._lengths[s] + n) // ps) - len(self._pages[s])) for s, n in zip(seqs, new_tokens))
        if need > len(self._free):
            raise RuntimeError(f"PagedKVCache.step: {need} pages needed, {len(self._free)} free")
        before = [self._lengths[s] for s in seqs]
        positions, slots = [], []
        for s, n in zip(seqs, new_tokens):
            if n < 1:
                raise ValueError(f"PagedKVCache.step: sequence {s} gets {n} tokens; each needs at least one")
            pages = self._pages[s]
            for pos in range(self._lengths[s], self._lengths[s] + n):
                if pos // ps == len(pages):
                    pages.append(self._free.pop(0))
                positions.append(pos)
                slots.append(pages[pos // ps] * ps + pos % ps)
            self._lengths[s] += n
        width = max(len(self._pages[s]) for s in seqs)
        table = np.zeros((len(seqs), width), np.uint32)
        for i, s in enumerate(seqs):
            table[i, : len(self._pages[s])] = self._pages[s]
        offsets = np.concatenate([[0], np.cumsum(new_tokens)])
        return CacheStep(
            blocks=self.blocks,
            input_row_offsets=self._index(offsets),
            cache_lengths=self._index(before),
            lookup_table=self._index(table),
            positions=self._index(positions),
            slots=self._index(slots),
        )

    def _index(self, values: Any) -> Tensor:
        return Tensor.constant(np.asarray(values, np.uint32), dtype=DType.uint32, device=self.device)

    def __repr__(self) -> str:
        return (f"PagedKVCache({len(self._lengths)} sequences, {len(self._free)} of "
                f"{int(self.blocks.shape[0])} pages free, {self.device})")


__all__ = ["CacheStep", "PagedKVCache"]
