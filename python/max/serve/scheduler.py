"""The continuous-batching scheduler: which requests run in the next model step.

Requests wait in arrival order and run in admission order. Every step takes, in this order:
each running request with one pending token (a decode), then the pending prompt tokens of
running requests and of newly admitted ones, in chunks, until the step's token budget
(``max_batch_input_tokens``) is spent. A request joins the running set when its first chunk's
KV pages can be allocated (with prefix caching, the pages of a cached prefix are shared and
its chunk starts after them) and ``max_batch_size`` allows; it leaves when it finishes or is
cancelled, and its pages are released at once. When a decode needs a page and none is free,
the most recently admitted request holding pages of the same cache (with data-parallel
replicas, the same replica) is preempted: its pages are released and it goes back to the head of
the queue, to be recomputed (prompt and generated tokens) when pages free up.

The scheduler runs on the model thread only; it is not thread-safe."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from max.kv_cache import KVCacheExhaustedError
from max.pipelines.lib.context import TextContext


@dataclass
class SchedulerStats:
    preemptions: int = 0
    steps: int = 0
    scheduled_tokens: int = 0
    queue_waits: list[float] = field(default_factory=list)  # seconds, drained by the worker


class Scheduler:
    """Chooses each step's batch from the waiting and running requests."""

    def __init__(self, kv_manager: Any, max_batch_size: int, max_batch_input_tokens: int,
                 enable_chunked_prefill: bool = True) -> None:
        self.kv = kv_manager
        self.max_batch_size = int(max_batch_size)
        self.max_batch_input_tokens = int(max_batch_input_tokens)
        self.chunked = bool(enable_chunked_prefill)
        self.waiting: deque[TextContext] = deque()
        self.running: dict[str, TextContext] = {}  # in admission order
        self.stats = SchedulerStats()
        self._arrived: dict[str, float] = {}

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, ctx: TextContext) -> None:
        self.waiting.append(ctx)
        self._arrived[ctx.request_id] = time.perf_counter()

    def remove(self, request_id: str) -> TextContext | None:
        """Drops a request wherever it is and releases its pages; the context, or None."""
        ctx = self.running.pop(request_id, None)
        if ctx is not None:
            self._release(ctx)
            return ctx
        for i, ctx in enumerate(self.waiting):
            if ctx.request_id == request_id:
                del self.waiting[i]
                self._arrived.pop(request_id, None)
                self._release(ctx)
                return ctx
        return None

    def _release(self, ctx: TextContext) -> None:
        if self.kv.contains(ctx.request_id):
            self.kv.release(ctx.request_id)

    # -- one step ---------------------------------------------------------------------------

    def schedule(self) -> list[TextContext]:
        """The next step's batch (windows set with ``ctx.chunk``, pages allocated)."""
        while True:
            batch = self._plan()
            if batch or len(self.running) <= 1:
                break
            # Every running request waits for pages that only another one holds: the newest goes.
            self.preempt(list(self.running.values())[-1])
        self.stats.steps += 1
        self.stats.scheduled_tokens += sum(c.active_length for c in batch)
        return batch

    def _plan(self) -> list[TextContext]:
        budget = self.max_batch_input_tokens
        batch: dict[str, TextContext] = {}
        for ctx in list(self.running.values()):
            if ctx.request_id in self.running and self._pending(ctx) == 1 and self._fit_decode(ctx, batch):
                batch[ctx.request_id] = ctx
                budget -= 1
        for ctx in [c for c in self.running.values() if self._pending(c) > 1]:
            if budget <= 0 and batch:
                break
            if not self._window(ctx, budget, batch):
                continue
            try:
                self.kv.alloc(ctx)
            except KVCacheExhaustedError:
                ctx.set_token_indices()  # waits, whole, for pages to free up
                continue
            batch[ctx.request_id] = ctx
            budget -= ctx.active_length
        while self.waiting and len(self.running) < self.max_batch_size and (budget > 0 or not batch):
            ctx = self.waiting[0]
            if not self._window(ctx, budget, batch):
                break
            try:
                self.kv.alloc(ctx)
            except KVCacheExhaustedError:
                self._release(ctx)
                ctx.reset()
                break
            self.waiting.popleft()
            arrived = self._arrived.pop(ctx.request_id, None)
            if arrived is not None:
                self.stats.queue_waits.append(time.perf_counter() - arrived)
            self.running[ctx.request_id] = ctx
            batch[ctx.request_id] = ctx
            budget -= ctx.active_length
        return list(batch.values())

    @staticmethod
    def _pending(ctx: TextContext) -> int:
        return ctx.end_idx - ctx.start_idx

    def _window(self, ctx: TextContext, budget: int, batch: dict[str, TextContext]) -> bool:
        """Limits `ctx`'s next step to what the budget allows; False when it must wait."""
        pending = self._pending(ctx)
        if not self.chunked and pending > budget and batch:
            return False
        ctx.chunk(pending if not self.chunked else max(1, budget))
        return True

    def _same_cache(self, a: TextContext, b: TextContext) -> bool:
        """Whether `a`'s pages are in `b`'s cache (data-parallel replicas each have their own:
        preempting a request of another replica frees nothing `b` can use)."""
        replica_of = getattr(self.kv, "replica_of", None)
        return replica_of is None or replica_of(a.request_id) == replica_of(b.request_id)

    def _fit_decode(self, ctx: TextContext, batch: dict[str, TextContext]) -> bool:
        """Allocates `ctx`'s next page, preempting the newest requests of its cache not yet in
        this step's batch while the cache is full; False when `ctx` itself had to be preempted."""
        while True:
            try:
                self.kv.alloc(ctx)
                return True
            except KVCacheExhaustedError:
                victims = [c for c in self.running.values() if c.request_id not in batch and self._same_cache(c, ctx)]
                victim = victims[-1]  # ctx itself is among them
                self.preempt(victim)
                if victim is ctx:
                    return False

    def preempt(self, ctx: TextContext) -> None:
        """Frees `ctx`'s pages; it waits at the head of the queue to be recomputed."""
        del self.running[ctx.request_id]
        self._release(ctx)
        ctx.reset()
        self.waiting.appendleft(ctx)
        self.stats.preemptions += 1

    def finish(self, ctx: TextContext) -> None:
        """A request is done: it leaves the running set and its pages are released."""
        self.running.pop(ctx.request_id, None)
        self._release(ctx)


__all__ = ["Scheduler", "SchedulerStats"]
