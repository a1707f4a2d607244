"""Data-parallel replicas (``--data-parallel-degree N``): the devices of ``--devices`` split into
N equal groups, each running its own copy of the model (tensor-parallel over its group when it
has several devices) with its own KV cache; each request runs on one replica from its first
step to its last. ``DataParallelPipeline`` has ``TextGenerationPipeline``'s interface, so
``max generate``, ``max serve`` and the pipeline API use it unchanged; its ``kv_manager`` is a
``ReplicaCaches``, which gives a request that has no pages yet to a replica: the one whose prefix
cache holds most of its prompt, else the one running the fewest requests, else the one with the
most free pages, among those running fewer than ``max_batch_size`` requests. A step runs every
replica's share of the batch, on GPUs at the same time (one host thread per replica: the engine
releases the GIL while it launches and waits), on CPU devices one after another (each execution
already uses every core)."""

from __future__ import annotations

import copy
import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from max.interfaces import TextGenerationInputs, TextGenerationOutput
from max.kv_cache import KVCacheExhaustedError
from max.pipelines.lib.config import PipelineConfig


def replica_configs(config: PipelineConfig, degree: int) -> list[PipelineConfig]:
    """One config per replica, each with its share of ``--devices`` (in order) and degree 1. A
    ValueError when the devices are not `degree` equal groups."""
    specs = list(config.model.device_specs)
    if degree < 1:
        raise ValueError(f"--data-parallel-degree must be at least 1, got {degree}")
    if not specs or len(specs) % degree:
        listed = f"{len(specs)} device{'s' if len(specs) != 1 else ''}" if specs else "no --devices list"
        raise ValueError(f"--data-parallel-degree {degree} needs --devices listing a multiple of {degree} devices "
                         f"(each replica gets an equal share), got {listed}")
    per = len(specs) // degree
    out = []
    for r in range(degree):
        c = copy.copy(config)
        c.model = dataclasses.replace(config.model, device_specs=specs[r * per : (r + 1) * per], data_parallel_degree=1)
        out.append(c)
    return out


class ReplicaCaches:
    """The replicas' KV caches as one manager for the scheduler: a request's calls go to its
    replica's cache, and the first call that gives it pages (``alloc``, or ``claim``) chooses the
    replica. Totals (pages, metrics) are sums over the replicas."""

    def __init__(self, caches: list[Any], max_batch_size: int) -> None:
        self.caches = caches
        self.max_batch_size = int(max_batch_size)  # per replica
        self.page_size = caches[0].page_size
        self.enable_prefix_caching = caches[0].enable_prefix_caching
        self._replica: dict[Any, int] = {}

    # -- assignment -------------------------------------------------------------------------

    def replica_of(self, request_id: Any) -> int | None:
        return self._replica.get(request_id)

    def load(self, replica: int) -> int:
        """Requests the replica holds."""
        return sum(1 for r in self._replica.values() if r == replica)

    def choose(self, ctx: Any) -> int:
        """The replica for a request without one: most of its prompt in the prefix cache, then
        fewest requests, then most free pages, then the lowest index; only replicas with room for
        another request. KVCacheExhaustedError when every replica runs max_batch_size requests."""
        open_ = [r for r in range(len(self.caches)) if self.load(r) < self.max_batch_size]
        if not open_:
            raise KVCacheExhaustedError(f"every replica runs {self.max_batch_size} requests")
        return max(open_, key=lambda r: (self.caches[r].cached_prefix_tokens(ctx), -self.load(r),
                                         self.caches[r].free_pages, -r))

    def assign(self, ctx: Any, replica: int | None = None) -> int:
        """`ctx`'s replica, choosing one (or taking `replica`) when it has none."""
        r = self._replica.get(ctx.request_id)
        if r is None:
            r = self.choose(ctx) if replica is None else int(replica)
            self._replica[ctx.request_id] = r
        return r

    # -- the manager's calls ----------------------------------------------------------------

    def contains(self, request_id: Any, replica_idx: int = 0) -> bool:
        r = self._replica.get(request_id)
        return r is not None and self.caches[r].contains(request_id)

    def claim(self, request_id: Any, replica_idx: int | None = None) -> None:
        r = self._replica.setdefault(request_id, 0 if replica_idx is None else int(replica_idx))
        self.caches[r].claim(request_id)

    def alloc(self, data: Any, replica_idx: int | None = None, num_steps: int = 1) -> None:
        fresh = data.request_id not in self._replica
        r = self.assign(data, replica_idx)
        try:
            self.caches[r].alloc(data, num_steps=num_steps)
        except BaseException:
            if fresh and not self.caches[r].contains(data.request_id):
                del self._replica[data.request_id]  # never got pages: free to go elsewhere
            raise

    def release(self, request_id: Any, replica_idx: int = 0) -> None:
        r = self._replica.pop(request_id, None)
        if r is None:
            raise ValueError(f"ReplicaCaches: request {request_id!r} is not claimed")
        if self.caches[r].contains(request_id):
            self.caches[r].release(request_id)

    def get_req_blocks(self, request_id: Any, replica_idx: int = 0) -> list[int]:
        return self.caches[self._replica[request_id]].get_req_blocks(request_id)

    @property
    def total_num_pages(self) -> int:
        return sum(c.total_num_pages for c in self.caches)

    @property
    def free_pages(self) -> int:
        return sum(c.free_pages for c in self.caches)

    @property
    def num_cached_pages(self) -> int:
        return sum(c.num_cached_pages for c in self.caches)

    def get_num_pages(self, replica_idx: int | None = None) -> int:
        return self.total_num_pages if replica_idx is None else self.caches[replica_idx].total_num_pages

    def get_num_used_pages(self, replica_idx: int | None = None) -> int:
        if replica_idx is not None:
            return self.caches[replica_idx].get_num_used_pages()
        return sum(c.get_num_used_pages() for c in self.caches)

    def get_metrics(self, replica_idx: int | None = None) -> dict[str, int]:
        if replica_idx is not None:
            return self.caches[replica_idx].get_metrics()
        total: dict[str, int] = {}
        for c in self.caches:
            for k, v in c.get_metrics().items():
                total[k] = total.get(k, 0) + v
        return total

    def reset_prefix_cache(self) -> None:
        for c in self.caches:
            c.reset_prefix_cache()


class DataParallelPipeline:
    """`degree` ``TextGenerationPipeline`` replicas behind one pipeline's interface."""

    def __init__(self, pipeline_config: PipelineConfig, source: Any, arch: Any, tokenizer: Any, degree: int) -> None:
        from max.pipelines.lib.pipeline import TextGenerationPipeline

        t0 = time.perf_counter()
        configs = replica_configs(pipeline_config, degree)
        self.replicas = [TextGenerationPipeline(c, source, arch, tokenizer) for c in configs]
        first = self.replicas[0]
        self.pipeline_config = pipeline_config
        self.source, self.architecture, self.tokenizer = source, arch, tokenizer
        self.devices = [d for r in self.replicas for d in r.devices]
        self.device = first.device
        self.model = first.model
        self.max_length = first.max_length
        self.max_batch_size = first.max_batch_size * degree  # max_batch_size per replica
        self.kv_manager = ReplicaCaches([r.kv_manager for r in self.replicas], first.max_batch_size)
        # GPU replicas step at the same time, one host thread each; CPU ones in turn.
        self._pool = None if first.device.is_host else ThreadPoolExecutor(degree, thread_name_prefix="max-replica")
        self.load_seconds = time.perf_counter() - t0

    @property
    def degree(self) -> int:
        return len(self.replicas)

    @property
    def eos_token_ids(self) -> set[int]:
        return self.replicas[0].eos_token_ids

    @property
    def decode_steps(self) -> int:
        return self.replicas[0].decode_steps

    def _each(self, calls: list[Any]) -> list[Any]:
        """Runs the calls (one per replica that has work), at the same time on GPUs."""
        if self._pool is None or len(calls) < 2:
            return [c() for c in calls]
        return [f.result() for f in [self._pool.submit(c) for c in calls]]

    def warm_up(self) -> None:
        self._each([r.warm_up for r in self.replicas])

    def release(self, request_id: Any) -> None:
        if self.kv_manager.replica_of(request_id) is not None:
            self.kv_manager.release(request_id)

    @property
    def grammars(self) -> Any:
        """The first replica's (schemas compile alike for every replica; a context carries its
        own matcher)."""
        return self.replicas[0].grammars

    def execute(self, inputs: TextGenerationInputs) -> dict[str, TextGenerationOutput]:
        """One step: each request runs on its replica (a request new to the pipeline is given
        one: with as many batches as replicas, as MAX's scheduler passes them, batch i's go to
        replica i; otherwise see ``ReplicaCaches.choose``). Replicas without requests sit out."""
        per_replica = len(inputs.batches) == self.degree
        parts: list[dict[Any, Any]] = [{} for _ in self.replicas]
        for i, batch in enumerate(inputs.batches):
            for rid, ctx in batch.items():
                parts[self.kv_manager.assign(ctx, i if per_replica else None)][rid] = ctx
        calls = [lambda rep=rep, part=part: rep.execute(TextGenerationInputs([part], num_steps=inputs.num_steps))
                 for rep, part in zip(self.replicas, parts) if part]
        outputs: dict[str, TextGenerationOutput] = {}
        for out in self._each(calls):
            outputs.update(out)
        return outputs

    def __del__(self) -> None:
        if getattr(self, "_pool", None) is not None:
            self._pool.shutdown(wait=False)


__all__ = ["DataParallelPipeline", "ReplicaCaches", "replica_configs"]
