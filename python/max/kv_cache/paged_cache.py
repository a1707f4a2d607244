"""``PagedKVCacheManager``: the pages of a model's KV cache and which requests own them.

A request is claimed, then before each step ``alloc`` makes sure its pages cover the tokens the
step adds; ``get_runtime_inputs`` gives the step's cache tensors (the cache buffer and, per
request, its cached length, page table row, the positions and cache slots of the new tokens);
``step`` commits the step's tokens as cached; ``release`` returns the pages. The page table of
every request has the same width (enough pages for ``max_seq_len``), so the graph inputs of a
decode step keep their shapes from step to step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from max import driver
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
        shape = params.blocks_shape(self.total_num_pages)
        self._blocks = [driver.Buffer(params.dtype, shape, device=d) for d in self.devices]
        self._free: list[int] = list(range(self.total_num_pages - 1, -1, -1))
        self._pages: dict[Any, list[int]] = {}
        self._cached: dict[Any, int] = {}
        self._metrics = {"pages_allocated": 0, "pages_released": 0}

    # -- requests ---------------------------------------------------------------------------

    def claim(self, request_id: Any, replica_idx: int = 0) -> None:
        """Starts tracking a request (no pages yet)."""
        if request_id in self._pages:
            raise ValueError(f"PagedKVCacheManager: request {request_id!r} is already claimed")
        self._pages[request_id] = []
        self._cached[request_id] = 0

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
        more = self._need(data, num_steps) - len(pages)
        if more > len(self._free):
            raise KVCacheExhaustedError(
                f"the KV cache is full: request {data.request_id!r} needs {more} more pages of {self.page_size} "
                f"tokens, {len(self._free)} of {self.total_num_pages} are free"
            )
        for _ in range(max(0, more)):
            pages.append(self._free.pop())
        self._metrics["pages_allocated"] += max(0, more)

    def release(self, request_id: Any, replica_idx: int = 0) -> None:
        """Returns the request's pages."""
        pages = self._pages.pop(request_id, None)
        if pages is None:
            raise ValueError(f"PagedKVCacheManager: request {request_id!r} is not claimed")
        self._cached.pop(request_id, None)
        self._free.extend(reversed(pages))
        self._metrics["pages_released"] += len(pages)

    def step(self, batches: Sequence[Sequence[CacheContext]]) -> None:
        """Records that each request's active tokens are now in the cache."""
        for batch in batches:
            for ctx in batch:
                self._cached[ctx.request_id] = ctx.start_idx + ctx.active_length

    # -- graph inputs -----------------------------------------------------------------------

    def get_runtime_inputs(self, batches: Sequence[Sequence[CacheContext]], num_steps: int = 1) -> list[RaggedKVCacheInputs]:
        """The cache inputs of one step over `batches` (one batch per replica; one replica here)."""
        if len(batches) != 1:
            raise NotImplementedError("PagedKVCacheManager: one replica (data_parallel_degree=1) is supported")
        ctxs = list(batches[0])
        ps = self.page_size
        lengths = np.empty(len(ctxs), np.uint32)
        table = np.zeros((len(ctxs), self.max_pages_per_seq), np.uint32)
        positions, slots = [], []
        for b, ctx in enumerate(ctxs):
            pages = self._pages.get(ctx.request_id)
            if pages is None:
                raise RuntimeError(f"request {ctx.request_id!r} was never claimed")
            start, n = ctx.start_idx, ctx.active_length
            if -(-(start + n) // ps) > len(pages):
                raise RuntimeError(f"request {ctx.request_id!r} has too few pages for this step (call alloc first)")
            lengths[b] = start
            table[b, : len(pages)] = pages
            pos = np.arange(start, start + n, dtype=np.int64)
            positions.append(pos)
            slots.append(np.asarray(pages, np.int64)[pos // ps] * ps + pos % ps)
        pos_all = np.concatenate(positions).astype(np.uint32) if positions else np.zeros(0, np.uint32)
        slot_all = np.concatenate(slots).astype(np.uint32) if slots else np.zeros(0, np.uint32)
        out = []
        for blocks, device in zip(self._blocks, self.devices):
            def put(a: np.ndarray) -> driver.Buffer:
                buf = driver.Buffer.from_numpy(a)
                return buf if device.is_host else buf.to(device)

            out.append(RaggedKVCacheInputs(blocks, put(lengths), put(table), put(pos_all), put(slot_all)))
        return out

    # -- introspection ----------------------------------------------------------------------

    def get_device_tensors(self, replica_idx: int = 0) -> list[driver.Buffer]:
        return list(self._blocks)

    def get_num_pages(self, replica_idx: int = 0) -> int:
        return self.total_num_pages

    def get_num_used_pages(self, replica_idx: int = 0) -> int:
        return self.total_num_pages - len(self._free)

    def get_num_host_pages(self, replica_idx: int = 0) -> int:
        return 0

    def get_num_used_host_pages(self, replica_idx: int = 0) -> int:
        return 0

    @property
    def free_pages(self) -> int:
        return len(self._free)

    def get_req_blocks(self, request_id: Any, replica_idx: int = 0) -> list[int]:
        return list(self._pages[request_id])

    def get_pct_used_blocks_after_allocation(self, ctx: CacheContext, replica_idx: int = 0, num_steps: int = 1) -> float:
        more = max(0, self._need(ctx, num_steps) - len(self._pages.get(ctx.request_id, [])))
        return (self.get_num_used_pages() + more) / self.total_num_pages

    def get_metrics(self, replica_idx: int = 0) -> dict[str, int]:
        return dict(self._metrics, used_pages=self.get_num_used_pages(), total_pages=self.total_num_pages)

    def reset_metrics(self) -> None:
        self._metrics = {k: 0 for k in self._metrics}

    def reset_prefix_cache(self) -> None:
        """No prefix cache is kept yet; nothing to drop."""

    @classmethod
    def infer_optimal_batch_size(cls, params: KVCacheParams, max_seq_len: int, available_cache_memory: int,
                                 devices: Any = None, **kwargs: Any) -> int:
        per_seq = params.estimated_memory_size(1, max_seq_len)
        return max(1, int(available_cache_memory // max(1, per_seq)))


__all__ = ["KVCacheExhaustedError", "PagedKVCacheManager", "RaggedKVCacheInputs"]
