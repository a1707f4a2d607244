"""KV-cache parameters and the cache's graph inputs (``max.nn.kv_cache``); the runtime side
(page allocation per request) is ``max.kv_cache``."""

from max.nn.kv_cache.cache_params import (
    KVCacheParams,
    KVCacheQuantizationConfig,
    KVCacheStrategy,
    PagedCacheInputSymbols,
    PagedCacheValues,
)

__all__ = [
    "KVCacheParams", "KVCacheQuantizationConfig", "KVCacheStrategy", "PagedCacheInputSymbols", "PagedCacheValues",
]
