"""Running requests to completion offline (``max generate``, ``LLM.generate``): requests join
the running batch as KV pages allow, prompts are processed in chunks within the step's token
budget (``max_batch_input_tokens``) alongside the decoding requests, and each request's tokens
become streamed text (stop strings honoured, incomplete characters held back). A context with
``log_probabilities`` > 0 gets each generated token's log-probabilities in its result."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from max.interfaces import GenerationStatus, LogProbabilities, SamplingParams, TextGenerationInputs
from max.kv_cache import KVCacheExhaustedError
from max.pipelines.lib.context import TextContext


@dataclass
class GenerationResult:
    """A finished request: its prompt, tokens, text, why it stopped, its timings and, when it
    asked for them, one ``LogProbabilities`` per generated token."""

    request_id: str
    prompt_tokens: np.ndarray
    tokens: list[int]
    text: str
    finish_reason: str
    time_to_first_token: float | None = None
    log_probabilities: list[LogProbabilities] | None = None


@dataclass
class GenerationStats:
    """Timings of one ``run``: prefill (prompt tokens until every first token) and decode."""

    prompt_tokens: int = 0
    generated_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    decode_tokens: int = 0
    first_token_seconds: float | None = None
    steps: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def prefill_tokens_per_second(self) -> float:
        return self.prompt_tokens / self.prefill_seconds if self.prefill_seconds > 0 else 0.0

    @property
    def decode_tokens_per_second(self) -> float:
        return self.decode_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0


@dataclass(eq=False)
class _Running:
    ctx: TextContext
    decoder: Any
    text: list[str] = field(default_factory=list)
    stop_reason: str | None = None
    first_token_at: float | None = None
    log_probabilities: list[LogProbabilities] = field(default_factory=list)


def _finish_reason(status: GenerationStatus, stopped_by_string: bool) -> str:
    if stopped_by_string or status == GenerationStatus.END_OF_SEQUENCE:
        return "stop"
    if status == GenerationStatus.CANCELLED:
        return "cancelled"
    return "length"


class Generator:
    """Drives a ``TextGenerationPipeline`` over a set of requests."""

    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline
        self.tokenizer = pipeline.tokenizer
        self.stats = GenerationStats()

    def context(self, prompt: str | Sequence[int], sampling: SamplingParams, *, request_id: str | None = None,
                add_special_tokens: bool = True, log_probabilities: int = 0) -> TextContext:
        """A context for a text prompt (tokenized) or a list of token ids; `log_probabilities`
        > 0 asks for each token's log-probability and that many most likely alternatives."""
        ids = self.tokenizer.encode_sync(prompt, add_special_tokens=add_special_tokens) \
            if isinstance(prompt, str) else np.asarray(prompt, np.int64)
        max_length = self.pipeline.max_length
        if len(ids) >= max_length:
            raise ValueError(
                f"the prompt is {len(ids)} tokens long; with max_length {max_length} no token is left to generate"
            )
        kwargs: dict[str, Any] = {"request_id": request_id} if request_id else {}
        return TextContext(max_length=max_length, tokens=ids, sampling_params=sampling,
                           eos_token_ids=self.pipeline.eos_token_ids, log_probabilities=log_probabilities, **kwargs)

    def run(
        self,
        contexts: Sequence[TextContext],
        on_text: Callable[[TextContext, str], None] | None = None,
    ) -> list[GenerationResult]:
        """Generates every context to completion; `on_text(ctx, delta)` receives printable text
        as it is produced. Results come back in the order of `contexts`."""
        p = self.pipeline
        request_ids = [c.request_id for c in contexts]
        if len(set(request_ids)) != len(request_ids):
            twice = next(i for i in request_ids if request_ids.count(i) > 1)
            raise ValueError(f"two contexts share the request id {twice!r}: each request needs its own")
        decode = lambda ids: self.tokenizer.decode_sync(ids, skip_special_tokens=True)  # noqa: E731
        from max.pipelines.tokenizer import StreamingDecoder

        # max_new_tokens 0: nothing to generate, so the model does not run for them
        done: dict[str, GenerationResult] = {
            c.request_id: GenerationResult(c.request_id, c.prompt_tokens.copy(), [], "", "length", None,
                                           [] if c.log_probabilities > 0 else None)
            for c in contexts if c.sampling_params.max_new_tokens == 0}
        cfg = getattr(p, "pipeline_config", None)
        enforce = cfg is None or cfg.sampling.enable_min_tokens  # (stop strings count from min_new_tokens)
        waiting = deque(_Running(ctx, StreamingDecoder(decode, ctx.sampling_params.stop,
                                                       ctx.sampling_params.min_new_tokens if enforce else 0))
                        for ctx in contexts if ctx.request_id not in done)
        order = [c.request_id for c in contexts]
        running: list[_Running] = []
        self.stats = GenerationStats(prompt_tokens=int(sum(r.ctx.prompt_length for r in waiting)))
        t_start = time.perf_counter()
        try:
            self._loop(waiting, running, done, on_text, t_start)
        except BaseException:
            # a request that failed (or an interrupt) gives its pages back: the pipeline stays usable
            for r in running:
                p.release(r.ctx.request_id)
            raise
        return [done[i] for i in order]

    def _loop(self, waiting: deque[_Running], running: list[_Running], done: dict[str, GenerationResult],
              on_text: Callable[[TextContext, str], None] | None, t_start: float) -> None:
        """``run``'s steps until every request is done (results into `done`). The serving
        scheduler picks each step's batch: requests join while the cache holds their pages,
        prompts go in chunks within the step's token budget, and when a decode needs a page and
        none is free the newest request gives its pages back and is recomputed later (the same
        tokens). `running` follows the scheduler's running requests (``run`` releases them on
        an error)."""
        from max.serve.scheduler import Scheduler

        p, stats = self.pipeline, self.stats
        cfg = p.pipeline_config
        sched = Scheduler(p.kv_manager, p.max_batch_size, cfg.max_batch_input_tokens, cfg.enable_chunked_prefill)
        records = {r.ctx.request_id: r for r in waiting}
        for r in waiting:
            sched.add(r.ctx)
        waiting.clear()
        t_prefill_end: float | None = None
        while sched.has_work:
            batch = [records[c.request_id] for c in sched.schedule()]
            running[:] = [records[rid] for rid in sched.running]
            if not batch:
                ctx = next(iter(sched.running.values()), None) or sched.waiting[0]
                raise KVCacheExhaustedError(f"request {ctx.request_id} ({ctx.end_idx} tokens) needs more KV-cache "
                                            f"pages than the cache's {p.kv_manager.total_num_pages}: give the cache "
                                            "more memory (--device-memory-utilization) or lower --max-length")
            # several decode steps at once when nobody waits to join the batch
            steps = 1 if sched.waiting else p.decode_steps
            outputs = p.execute(TextGenerationInputs([{r.ctx.request_id: r.ctx for r in batch}], num_steps=steps))
            stats.steps += 1
            now = time.perf_counter()
            for r in batch:
                out = outputs.get(r.ctx.request_id)
                if out is not None:
                    self._took(r, out, now - t_start, on_text)
            if t_prefill_end is None and not sched.waiting and all(
                    records[rid].first_token_at is not None for rid in sched.running):
                t_prefill_end = now
                stats.prefill_seconds = now - t_start
                t_decode_start = now
            for r in batch:
                if r.ctx.is_done:
                    self._finish(r, done, on_text)
                    sched.finish(r.ctx)  # (its pages go back)
            running[:] = [records[rid] for rid in sched.running]
        end = time.perf_counter()
        if t_prefill_end is None:
            stats.prefill_seconds = end - t_start
        else:
            stats.decode_seconds = end - t_decode_start

    def _took(self, r: _Running, out: Any, at: float, on_text: Callable[[TextContext, str], None] | None) -> None:
        """A step's output for `r`: timings, log-probabilities, text (and a stop string)."""
        stats = self.stats
        new = len(out.tokens)
        if r.first_token_at is None:
            r.first_token_at = at
            if stats.first_token_seconds is None:
                stats.first_token_seconds = at
            new -= 1
        stats.decode_tokens += new
        stats.generated_tokens += len(out.tokens)
        if out.log_probabilities:
            r.log_probabilities.extend(out.log_probabilities)
        delta = r.decoder.push(r.ctx.generated_tokens.tolist())
        if delta.text:
            r.text.append(delta.text)
            if on_text:
                on_text(r.ctx, delta.text)
        if delta.stopped:
            r.stop_reason = "stop"
            r.ctx.status = GenerationStatus.END_OF_SEQUENCE

    def _finish(self, r: _Running, done: dict[str, GenerationResult],
                on_text: Callable[[TextContext, str], None] | None) -> None:
        if r.stop_reason is None:
            tail = r.decoder.finish(r.ctx.generated_tokens.tolist())
            if tail.text:
                r.text.append(tail.text)
                if on_text:
                    on_text(r.ctx, tail.text)
        done[r.ctx.request_id] = GenerationResult(
            r.ctx.request_id, r.ctx.prompt_tokens.copy(), r.ctx.generated_tokens.tolist(), "".join(r.text),
            _finish_reason(r.ctx.status, r.stop_reason is not None), r.first_token_at,
            r.log_probabilities if r.ctx.log_probabilities > 0 else None)


__all__ = ["GenerationResult", "GenerationStats", "Generator"]
