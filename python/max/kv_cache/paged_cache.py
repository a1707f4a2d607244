"""``PagedKVCacheManager``: the pages of a model's KV cache and which requests own them.

A request is claimed, then before each step ``alloc`` makes sure its pages cover the tokens the
step adds; ``get_runtime_inputs`` gives the step's cache tensors (the cache buffer and, per
request, its cached length, page table row, the positions and cache slots of the new tokens);
``step`` commits the step's tokens as cached; ``release`` returns the pages. The page table of
every request has the same width (enough pages for ``max_seq_len``), so the graph inputs of a
decode step keep their shapes from step to step.

With prefix caching, full pages are named by their token prefix (``prefix_cache.PagePool``):
the first ``alloc`` of a request shares the pages of the longest cached prefix of its tokens
(all but its last token, whose logits the step must compute) and moves the request's
``start_idx`` past them; ``step`` names the pages it filled."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from max import driver
from max.driver._upload import upload
from max.kv_cache.prefix_cache import ROOT, PagePool, page_name, page_names
from max.nn.kv_cache import KVCacheParams


class CacheContext(Protocol):
    """What the manager reads of a request: its id, the tokens already in the cache
    (``start_idx``) and the tokens of this step (``active_length`` from ``start_idx``)."""

    request_id: Any

    @property
    def start_idx(self) -> int: ...

    @property
    def active_length(self) -> int: ...


@dataclass
class RaggedKVCacheInputs:
    """One step's cache inputs for one device, in the model graph's input order."""

    blocks: driver.Buffer
    cache_lengths: driver.Buffer
    lookup_table: driver.Buffer
    positions: driver.Buffer
    slots: driver.Buffer

    def __iter__(self):
        return iter([self.blocks, self.cache_lengths, self.lookup_table, self.positions, self.slots])


class KVCacheExhaustedError(RuntimeError):
    """The cache has no free page for a request's next tokens."""


class PagedKVCacheManager:
    """Pages of `params.page_size` tokens, `total_num_pages` of them on each device."""

    def __init__(
        self,
        params: KVCacheParams,
        session: Any = None,
        total_num_pages: int = 0,
        total_num_host_pages: int = 0,
        enable_runtime_checks: bool = False,
        *,
        max_seq_len: int | None = None,
        devices: Sequence[driver.Device] | None = None,
        enable_prefix_caching: bool | None = None,
    ) -> None:
        if total_num_pages < 1:
            raise ValueError(f"PagedKVCacheManager: total_num_pages must be at least 1, got {total_num_pages}")
        if total_num_host_pages:
            raise NotImplementedError("PagedKVCacheManager: host pages (swapping) are not supported")
        self.params = params
        self.page_size = params.page_size
        self.total_num_pages = int(total_num_pages)
        self.max_seq_len = int(max_seq_len or total_num_pages * params.page_size)
        self.max_pages_per_seq = -(-self.max_seq_len // self.page_size)
        self.enable_runtime_checks = enable_runtime_checks
        if devices is None:
            devices = [ref.to_device() for ref in params.devices]
        self.devices = list(devices)
        # Tensor-parallel devices may hold different numbers of KV heads.
        self._blocks = [driver.Buffer(params.dtype, params.blocks_shape(self.total_num_pages, i), device=d)
                        for i, d in enumerate(self.devices)]
        if enable_prefix_caching is None:
            enable_prefix_caching = bool(getattr(params, "enable_prefix_caching", False))
        self.enable_prefix_caching = bool(enable_prefix_caching)
        self._pool = PagePool(self.total_num_pages)
        self._pages: dict[Any, list[int]] = {}
        self._cached: dict[Any, int] = {}
        self._names: dict[Any, list[bytes]] = {}  # names of each request's full pages, in order
        self._claims: dict[Any, int] = {}  # a number per claim: a request claimed again gets a new one
        self._claimed = 0
        self._metrics = {"pages_allocated": 0, "pages_released": 0, "prefix_query_tokens": 0, "prefix_hit_tokens": 0}

    # -- requests ---------------------------------------------------------------------------

    def claim(self, request_id: Any, replica_idx: int = 0) -> None:
        """Starts tracking a request (no pages yet)."""
        if request_id in self._pages:
            raise ValueError(f"PagedKVCacheManager: request {request_id!r} is already claimed")
        self._pages[request_id] = []
        self._cached[request_id] = 0
        self._names[request_id] = []
        self._claimed += 1
        self._claims[request_id] = self._claimed

    def claim_id(self, request_id: Any) -> int | None:
        """A number that identifies the request's current claim (its pages since it was last
        claimed; released and claimed again, it has another), or None when it is not claimed."""
        return self._claims.get(request_id)

    def contains(self, request_id: Any, replica_idx: int = 0) -> bool:
        return request_id in self._pages

    def _need(self, ctx: CacheContext, num_steps: int) -> int:
        tokens = ctx.start_idx + ctx.active_length + num_steps - 1
        if tokens > self.max_seq_len:
            raise ValueError(
                f"request {ctx.request_id!r} needs {tokens} positions, more than max_seq_len {self.max_seq_len}"
            )
        return -(-tokens // self.page_size)

    def alloc(self, data: CacheContext, replica_idx: int = 0, num_steps: int = 1) -> None:
        """Gives the request the pages its next `num_steps` steps write."""
        if data.request_id not in self._pages:
            self.claim(data.request_id)
        pages = self._pages[data.request_id]
        window = None
        if self.enable_prefix_caching and not pages and data.start_idx == 0:
            window = (data.start_idx, data.active_idx)
            self._reuse_prefix(data)
        more = self._need(data, num_steps) - len(pages)
        if more > self._pool.num_available:
            if window is not None and pages:
                # the shared prefix goes back and the request's window with it: a failed alloc
                # leaves the request as it was (holding no pages, its prompt still to compute)
                self._metrics["prefix_hit_tokens"] -= self._cached.pop(data.request_id, 0)
                self._names.pop(data.request_id, None)
                for page in reversed(pages):
                    self._pool.give_back(page)
                pages.clear()
                data.set_token_indices(start_idx=window[0], active_idx=window[1])
                more = self._need(data, num_steps)
            raise KVCacheExhaustedError(
                f"the KV cache is full: request {data.request_id!r} needs {more} more pages of {self.page_size} "
                f"tokens, {self._pool.num_available} of {self.total_num_pages} are free"
            )
        for _ in range(max(0, more)):
            pages.append(self._pool.take())
        self._metrics["pages_allocated"] += max(0, more)

    def _reuse_prefix(self, ctx: Any) -> None:
        """Shares the cached pages of the longest prefix of `ctx`'s tokens, leaving at least its
        last token to compute, and moves its window past them (keeping the window's length)."""
        tokens = getattr(ctx, "tokens", None)
        if tokens is None or not hasattr(ctx, "set_token_indices"):
            return
        end = int(ctx.end_idx)
        self._metrics["prefix_query_tokens"] += end
        names = self._prefix_names(tokens, end)
        shared = self._pool.match(names)
        if not shared:
            return
        hit = len(shared) * self.page_size
        self._pages[ctx.request_id].extend(shared)
        self._names[ctx.request_id] = names[: len(shared)]
        self._cached[ctx.request_id] = hit
        self._metrics["prefix_hit_tokens"] += hit
        ctx.set_token_indices(start_idx=hit, active_idx=min(end, hit + max(1, int(ctx.active_length))))

    def _prefix_names(self, tokens: Any, end: int) -> list[bytes]:
        """The names of the full pages a request of `end` tokens may share: every one before the
        page of its last token (which is always computed)."""
        return page_names(tokens, self.page_size, (end - 1) // self.page_size)

    def cached_prefix_tokens(self, ctx: Any) -> int:
        """Tokens of `ctx`'s prompt whose pages the prefix cache holds (what ``alloc`` would
        share; 0 without prefix caching), leaving the cache as it is."""
        tokens = getattr(ctx, "tokens", None)
        if not self.enable_prefix_caching or tokens is None:
            return 0
        return self._pool.matched(self._prefix_names(tokens, int(ctx.end_idx))) * self.page_size

    def release(self, request_id: Any, replica_idx: int = 0) -> None:
        """Returns the request's pages."""
        pages = self._pages.pop(request_id, None)
        if pages is None:
            raise ValueError(f"PagedKVCacheManager: request {request_id!r} is not claimed")
        self._cached.pop(request_id, None)
        self._names.pop(request_id, None)
        self._claims.pop(request_id, None)
        for page in reversed(pages):
            self._pool.give_back(page)
        self._metrics["pages_released"] += len(pages)

    def step(self, batches: Sequence[Sequence[CacheContext]]) -> None:
        """Records that each request's active tokens are now in the cache."""
        for batch in batches:
            for ctx in batch:
                cached = self._cached[ctx.request_id] = ctx.start_idx + ctx.active_length
                if self.enable_prefix_caching:
                    self._name_full_pages(ctx, cached)

    def _name_full_pages(self, ctx: Any, cached: int) -> None:
        tokens = getattr(ctx, "tokens", None)
        if tokens is None:
            return
        names, pages, ps = self._names[ctx.request_id], self._pages[ctx.request_id], self.page_size
        for i in range(len(names), min(cached // ps, len(pages))):
            name = page_name(names[-1] if names else ROOT, tokens[i * ps : (i + 1) * ps])
            names.append(name)
            self._pool.name(pages[i], name)

    # -- graph inputs -----------------------------------------------------------------------

    def get_runtime_inputs(self, batches: Sequence[Sequence[CacheContext]], num_steps: int = 1) -> list[RaggedKVCacheInputs]:
        """The cache inputs of one step over `batches` (one batch per replica; one replica here)."""
        if len(batches) != 1:
            raise NotImplementedError("PagedKVCacheManager: one replica (data_parallel_degree=1) is supported")
        if num_steps < 1:
            raise ValueError(f"num_steps must be at least 1, got {num_steps}")
        for ctx in batches[0]:
            pages = self._pages.get(ctx.request_id)
            tokens = ctx.start_idx + ctx.active_length + num_steps - 1
            if pages is not None and -(-tokens // self.page_size) > len(pages):
                raise RuntimeError(f"request {ctx.request_id!r} has {len(pages)} pages of {self.page_size} tokens, "
                                   f"too few for {num_steps} steps ({tokens} positions; call alloc with num_steps)")
        arrays = self.runtime_arrays(batches[0])
        return self.runtime_inputs_from([upload(arrays, device) for device in self.devices])

    def runtime_inputs_from(self, per_device: Sequence[Sequence[driver.Buffer]]) -> list[RaggedKVCacheInputs]:
        """The cache inputs of a step whose ``runtime_arrays`` each device holds (in that order):
        for a caller that moves several steps' arrays to the devices in one copy."""
        if len(per_device) != len(self._blocks):
            raise ValueError(f"{len(per_device)} devices' arrays for a cache on {len(self._blocks)}")
        return [RaggedKVCacheInputs(blocks, *arrays) for blocks, arrays in zip(self._blocks, per_device)]

    def runtime_arrays(self, ctxs: Sequence[CacheContext]) -> list[np.ndarray]:
        """The host arrays of one step's cache inputs over `ctxs`: the cache lengths, the page
        table, and each new token's position and cache slot."""
        ctxs = list(ctxs)
        ps = self.page_size
        lengths = np.empty(len(ctxs), np.uint32)
        table = np.zeros((len(ctxs), self.max_pages_per_seq), np.uint32)
        positions: list[Any] = []  # per context: an int (one token, a decode step's) or an array
        slots: list[Any] = []
        for b, ctx in enumerate(ctxs):
            pages = self._pages.get(ctx.request_id)
            if pages is None:
                raise RuntimeError(f"request {ctx.request_id!r} was never claimed")
            start, n = ctx.start_idx, ctx.active_length
            if -(-(start + n) // ps) > len(pages):
                raise RuntimeError(f"request {ctx.request_id!r} has too few pages for this step (call alloc first)")
            lengths[b] = start
            table[b, : len(pages)] = pages
            if n == 1:
                positions.append(start)
                slots.append(pages[start // ps] * ps + start % ps)
            else:
                pos = np.arange(start, start + n, dtype=np.int64)
                positions.append(pos)
                slots.append(np.asarray(pages, np.int64)[pos // ps] * ps + pos % ps)
        return [lengths, table, _flat_u32(positions), _flat_u32(slots)]

    # -- introspection ----------------------------------------------------------------------

    def get_device_tensors(self, replica_idx: int = 0) -> list[driver.Buffer]:
        return list(self._blocks)

    def get_num_pages(self, replica_idx: int = 0) -> int:
        return self.total_num_pages

    def get_num_used_pages(self, replica_idx: int = 0) -> int:
        """Pages some request uses (cached pages that nobody uses count as free)."""
        return self.total_num_pages - self._pool.num_available

    def get_num_host_pages(self, replica_idx: int = 0) -> int:
        return 0

    def get_num_used_host_pages(self, replica_idx: int = 0) -> int:
        return 0

    @property
    def free_pages(self) -> int:
        return self._pool.num_available

    @property
    def num_cached_pages(self) -> int:
        """Named pages that no request uses, kept for prefix matches."""
        return self._pool.num_cached

    def get_req_blocks(self, request_id: Any, replica_idx: int = 0) -> list[int]:
        return list(self._pages[request_id])

    def get_pct_used_blocks_after_allocation(self, ctx: CacheContext, replica_idx: int = 0, num_steps: int = 1) -> float:
        more = max(0, self._need(ctx, num_steps) - len(self._pages.get(ctx.request_id, [])))
        return (self.get_num_used_pages() + more) / self.total_num_pages

    def get_metrics(self, replica_idx: int = 0) -> dict[str, int]:
        return dict(self._metrics, used_pages=self.get_num_used_pages(), total_pages=self.total_num_pages,
                    cached_pages=self._pool.num_cached, evicted_pages=self._pool.evictions)

    def reset_metrics(self) -> None:
        self._metrics = {k: 0 for k in self._metrics}

    def reset_prefix_cache(self) -> None:
        """Forgets every cached prefix (pages in use stay with their requests)."""
        self._pool.forget()
        for names in self._names.values():
            names.clear()

    @classmethod
    def infer_optimal_batch_size(cls, params: KVCacheParams, max_seq_len: int, available_cache_memory: int,
                                 devices: Any = None, **kwargs: Any) -> int:
        per_seq = params.estimated_memory_size(1, max_seq_len)
        return max(1, int(available_cache_memory // max(1, per_seq)))


def _flat_u32(parts: list[Any]) -> np.ndarray:
    """Ints and int arrays, in order, as one uint32 array."""
    if all(isinstance(x, int) for x in parts):
        return np.array(parts, np.uint32)
    return np.concatenate([np.atleast_1d(np.asarray(x, np.int64)) for x in parts]).astype(np.uint32)


__all__ = ["KVCacheExhaustedError", "PagedKVCacheManager", "RaggedKVCacheInputs"]

