"""The runtime side of the paged KV cache (``max.kv_cache``): page allocation per request and the
cache inputs of each step. ``load_kv_manager`` sizes a cache for a model and a memory budget."""

from __future__ import annotations

from typing import Any

from max.kv_cache.paged_cache import KVCacheExhaustedError, PagedKVCacheManager, RaggedKVCacheInputs
from max.nn.kv_cache import KVCacheParams, KVCacheStrategy


def estimate_kv_cache_size(params: KVCacheParams, max_batch_size: int, max_seq_len: int,
                           available_cache_memory: int | None = None, **kwargs: Any) -> int:
    """Bytes of cache that `max_batch_size` sequences of `max_seq_len` tokens need (at most
    `available_cache_memory`)."""
    need = params.estimated_memory_size(max_batch_size, max_seq_len)
    return need if available_cache_memory is None else min(need, int(available_cache_memory))


def load_kv_manager(params: KVCacheParams, max_batch_size: int | None, max_seq_len: int, session: Any = None,
                    available_cache_memory: int | None = None, **kwargs: Any) -> PagedKVCacheManager:
    """A manager whose pages hold `max_batch_size` sequences of `max_seq_len` tokens, or what
    fits in `available_cache_memory` bytes, whichever is less (at least one sequence)."""
    batch = max_batch_size or 1
    want = estimate_kv_cache_size(params, batch, max_seq_len)
    budget = want if available_cache_memory is None else min(want, int(available_cache_memory))
    pages = max(budget // params.bytes_per_block, -(-max_seq_len // params.page_size))
    return PagedKVCacheManager(params, session, int(pages), max_seq_len=max_seq_len, **kwargs)


def infer_optimal_batch_size(params: KVCacheParams, max_seq_len: int, available_cache_memory: int,
                             devices: Any = None, **kwargs: Any) -> int:
    """How many sequences of `max_seq_len` tokens fit `available_cache_memory` bytes of cache."""
    return PagedKVCacheManager.infer_optimal_batch_size(params, max_seq_len, available_cache_memory, devices)


__all__ = [
    "KVCacheExhaustedError", "KVCacheParams", "KVCacheStrategy", "PagedKVCacheManager", "RaggedKVCacheInputs",
    "estimate_kv_cache_size", "infer_optimal_batch_size", "load_kv_manager",
]
