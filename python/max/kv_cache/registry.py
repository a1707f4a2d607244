"""``max.kv_cache.registry``, the module path MAX documents for making cache managers and sizing
the cache: the functions of ``max.kv_cache``."""

from max.kv_cache import estimate_kv_cache_size, infer_optimal_batch_size, load_kv_manager

__all__ = ["estimate_kv_cache_size", "infer_optimal_batch_size", "load_kv_manager"]
