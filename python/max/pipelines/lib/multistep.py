"""Several decode steps in one ``execute`` (``TextGenerationInputs.num_steps``, MAX's multi-step
decode). Steps after the first take the previous step's sampled tokens straight from the device,
so the host queues step k+1 while the GPU still runs step k and reads every token back once at
the end: the host's per-step work (cache inputs, uploads, launches) hides behind the GPU instead
of adding to it, which is most of a small model's time per token.

The extra steps are planned before the first one runs (``plan``): every context must sample at
the first step (no prompt chunk pending, a single new token each, so that the prompt's first
token is never held back), none may need its token history on the host (penalties),
log-probabilities or a schema's mask (structured output), and the count shrinks so that no
context runs past its ``max_new_tokens`` or the pipeline's ``max_length``. Tokens past a stop
(end of sequence, a stop token) are dropped by the caller's bookkeeping; the cache positions
they wrote are never read.

The overlap scheduler (``PipelineConfig.enable_overlap_scheduler``) queues one step more than
a call of several steps returns (``Queued``), behind the call's last step and before its tokens
are read back (``read_later``: the copy to the host runs on a stream of its own, so it waits
for the last step only): the device goes from the call's last step straight to the next call's
first, which runs while the host reads the tokens, hands them out and the caller comes back.
The next call uses it when it is for the same contexts in the same state (``Queued.matches``:
request ids, claims on the cache, lengths, last tokens and sampling parameters); otherwise it
is dropped, like the steps past a stop (a call whose tokens may end a request drops its own:
one step run for nothing as a request ends). Either way the tokens are those of single steps.
Calls of one step (the generation loops make those while requests wait to join the batch,
which then changes) queue nothing ahead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from max import driver
from max.driver._upload import upload
from max.pipelines.lib.sampler import PerDevice, ReplicatedSampler, first_copy, seeds_of


@dataclass
class Ahead:
    """What the KV-cache manager and the sampler read of a context `steps` tokens after it
    was handed to ``execute``: one token to process, the previous ones cached."""

    request_id: Any
    sampling_params: Any
    prompt_length: int
    start_idx: int
    end_idx: int
    active_length: int = 1


def min_tokens_pending(ctx: Any) -> bool:
    """Whether `ctx` has generated fewer than its min_new_tokens (its ending tokens are masked)."""
    return ctx.end_idx - ctx.prompt_length < ctx.sampling_params.min_new_tokens


def plan(ctxs: Sequence[Any], requested: int, max_length: int) -> int:
    """How many steps to run for `ctxs` (at least 1) when `requested` are asked for."""
    if requested <= 1:
        return 1
    steps = requested
    for ctx in ctxs:
        sp = ctx.sampling_params
        if ctx.active_length != 1 or ctx.active_idx != ctx.end_idx or ctx.log_probabilities > 0 \
                or sp.has_penalties or min_tokens_pending(ctx) or ctx.json_schema is not None:
            return 1  # (min_new_tokens, a schema: each step masks tokens by the ones before)
        # tokens this context may still add: the step's own plus one per further step
        room = min(max_length, int(ctx.max_length)) - ctx.end_idx
        if sp.max_new_tokens is not None:
            room = min(room, sp.max_new_tokens - (ctx.end_idx - ctx.prompt_length))
        steps = min(steps, room)
    return max(1, steps)


def queue_step(pipeline: Any, ctxs: Sequence[Any], prev: PerDevice, k: int) -> PerDevice:
    """Queues step k + 1 of a call (k >= 1) after the step whose sampled ids (one per context, in
    order) are `prev`; its ids, on the device."""
    return queue_steps(pipeline, ctxs, prev, k, 1)[0]


def queue_steps(pipeline: Any, ctxs: Sequence[Any], prev: PerDevice, k: int, count: int) -> list[PerDevice]:
    """Queues steps k + 1 .. k + `count` of a call (k >= 1), the first after the step whose
    sampled ids (one per context, in order) are `prev`; each step's ids, on the device. Every
    step's inputs (cache lengths, page table, positions and slots, the row offsets, the
    sampling seeds) go to each device in one copy (``upload``; the page table the steps share
    once): each copy is an operation of its own on the device's stream, between the steps'
    kernels."""
    # before step j+1 a context holds j more tokens, all but the newest cached
    steps = [[Ahead(c.request_id, c.sampling_params, c.prompt_length, c.end_idx + j - 1, c.end_idx + j) for c in ctxs]
             for j in range(k, k + count)]
    rows = list(range(len(ctxs)))
    kv = pipeline.kv_manager
    arrays = [np.arange(len(ctxs) + 1, dtype=np.uint32)]
    at: list[list[int]] = []  # per step: where its cache inputs and seeds are in `arrays`
    tables: list[int] = []
    for views in steps:
        lengths, table, positions, slots = kv.runtime_arrays(views)
        # the call's steps share a page table (their pages were given out before the first):
        # one copy of it
        t = next((i for i in tables if np.array_equal(arrays[i], table)), None)
        if t is None:
            t = len(arrays)
            tables.append(t)
            arrays.append(table)
        at.append([len(arrays), t, len(arrays) + 1, len(arrays) + 2, len(arrays) + 3])
        arrays += [lengths, positions, slots, seeds_of(views)]
    moved = [upload(arrays, d) for d in kv.devices]  # (the model's devices, in its order)
    replicated = isinstance(pipeline.sampler, ReplicatedSampler)
    out = []
    for views, (lengths, table, positions, slots, seeds) in zip(steps, at):
        caches = kv.runtime_inputs_from([[m[lengths], m[table], m[positions], m[slots]] for m in moved])
        logits = pipeline.run_step(out[-1] if out else prev, [m[0] for m in moved], [b for cache in caches for b in cache])
        dev_seeds = [m[seeds] for m in moved]
        out.append(pipeline.sampler.sample_on_device(logits, views, rows, dev_seeds if replicated else dev_seeds[0]))
    return out


def run_more(pipeline: Any, ctxs: Sequence[Any], first: PerDevice, steps: int) -> list[PerDevice]:
    """Queues steps 2..`steps` after a first step whose sampled ids (one per context, in order)
    are `first`; returns every step's ids, still on the device."""
    return [first, *queue_steps(pipeline, ctxs, first, 1, steps - 1)] if steps > 1 else [first]


def state(ctxs: Sequence[Any], kv: Any) -> list[tuple]:
    """What a step queued ahead depends on: each context's request id, claim on the cache (a
    request preempted or released and claimed again has new pages), length, last token and
    sampling parameters, in batch order."""
    return [(c.request_id, kv.claim_id(c.request_id), c.end_idx, int(c.tokens[-1]), c.sampling_params)
            for c in ctxs]


@dataclass
class Queued:
    """A decode step queued by the previous ``execute`` for contexts whose state after that call
    is `after`; `ids` are its sampled token ids, on the device."""

    after: list[tuple]
    ids: PerDevice

    def matches(self, ctxs: Sequence[Any], kv: Any) -> bool:
        """Whether the step is the one `ctxs` would run next: the same contexts in the same
        order and state, each with just its last token to process."""
        return all(c.active_length == 1 and c.active_idx == c.end_idx and c.log_probabilities == 0
                   and not c.sampling_params.has_penalties and not min_tokens_pending(c)
                   and c.json_schema is None for c in ctxs) and state(ctxs, kv) == self.after


def read_back(pipeline: Any, ids: Sequence[PerDevice]) -> np.ndarray:
    """Every step's ids as one host array [rows, steps]: gathered on the device, then one copy
    back (one wait for the device instead of one per step)."""
    if len(ids) == 1 or pipeline.device.is_host:
        return np.stack([pipeline.sampler.to_host(t) for t in ids], axis=1)
    return pipeline.sampler.to_host(_gathered(pipeline, ids)).T


def read_later(pipeline: Any, ids: Sequence[PerDevice], stream: driver.DeviceStream | None) -> Callable[[], np.ndarray]:
    """``read_back`` in two halves: the ids are gathered now, on the device's stream, and the
    returned function copies them to the host on `stream` (a stream of the pipeline's device,
    which first waits for the gather), so work queued on the device's stream in between does
    not delay the copy. Without a stream (a host device): the ids are read at once."""
    if stream is None or pipeline.device.is_host:
        host = read_back(pipeline, ids)
        return lambda: host
    every = _gathered(pipeline, ids) if len(ids) > 1 else first_copy(ids[0])
    stream.wait_for(pipeline.device)
    on_side = every.to(stream)  # the same memory, its copies on `stream`
    return lambda: pipeline.sampler.to_host(on_side).reshape(len(ids), -1).T


def _gathered(pipeline: Any, ids: Sequence[PerDevice]) -> driver.Buffer:
    """The steps' ids as one device buffer [steps, rows]."""
    rows = int(first_copy(ids[0]).shape[0])
    every = driver.Buffer(first_copy(ids[0]).dtype, [len(ids), rows], device=pipeline.device)
    for k, t in enumerate(ids):
        every[k].inplace_copy_from(first_copy(t))
    return every


__all__ = ["Ahead", "Queued", "plan", "queue_step", "queue_steps", "read_back", "read_later", "run_more", "state"]
