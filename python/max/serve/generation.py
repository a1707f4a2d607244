"""The HTTP side of text generation: prompts become contexts (tokenised off the event loop when
long, checked against the context window), contexts go to the model worker, and each step's
tokens come back as text deltas (incremental detokenisation, stop strings), with their
log-probabilities when asked. Several choices of one prompt (OpenAI's ``n``) are separate
requests; with prefix caching the first runs alone until its prompt is cached, and the others
then share its pages instead of recomputing them. Bounded: past ``capacity`` requests in flight,
new ones are refused with 429. A request whose consumer goes away (client disconnect) is
cancelled in the worker, which frees its pages at once."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from max.interfaces import GenerationStatus, SamplingParams
from max.pipelines.lib.context import TextContext
from max.pipelines.lib.sampler import choice_seed
from max.serve.errors import APIError
from max.serve.logprobs import TokenLogProb, token_log_probs
from max.serve.metrics import ServerMetrics
from max.serve.worker import ModelWorker, Ticket


@dataclass
class Delta:
    """Text produced since the last delta, its token ids, the finish reason at the end, and the
    log-probabilities of the tokens that are part of the text (when the request asked: every
    token but one that ended the request, an EOS or stop token id, which the text leaves out)."""

    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    logprobs: list[TokenLogProb] = field(default_factory=list)


@dataclass
class Outcome:
    """What a finished request produced."""

    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str = "length"
    logprobs: list[TokenLogProb] = field(default_factory=list)


def finish_reason(status: GenerationStatus) -> str:
    if status == GenerationStatus.END_OF_SEQUENCE:
        return "stop"
    if status == GenerationStatus.CANCELLED:
        return "abort"
    return "length"


#: The most characters per token a prompt may have before it is refused untokenised.
MAX_CHARS_PER_TOKEN = 64


class GenerationService:
    """Turns prompts into streams of text for one text-generation pipeline."""

    def __init__(self, pipeline: Any, worker: ModelWorker, metrics: ServerMetrics, capacity: int) -> None:
        self.pipeline = pipeline
        self.tokenizer = pipeline.tokenizer
        self.worker = worker
        self.metrics = metrics
        self.capacity = int(capacity)
        self.max_length = int(pipeline.max_length)
        self.in_flight = 0
        self.accepting = True

    # -- prompts ----------------------------------------------------------------------------

    async def tokenize(self, prompt: str | Sequence[int], add_special_tokens: bool = True) -> np.ndarray:
        if not isinstance(prompt, str):
            ids = list(prompt)
            vocab = int(getattr(self.tokenizer, "vocab_size", 0) or 0) or 2**63
            if ids and (min(ids) < 0 or max(ids) >= vocab):
                raise APIError(400, f"prompt token ids must be in [0, {vocab}), got {min(ids)}..{max(ids)}",
                               param="prompt")
            return np.asarray(ids, np.int64)
        self.check_text_length(len(prompt), "prompt")
        # A long prompt is tokenised on a thread: the event loop keeps serving the others.
        if len(prompt) > 2048:
            return await asyncio.get_running_loop().run_in_executor(None, self._encode, prompt, add_special_tokens)
        return self._encode(prompt, add_special_tokens)

    def _encode(self, prompt: str, add_special_tokens: bool) -> np.ndarray:
        try:
            return self.tokenizer.encode_sync(prompt, add_special_tokens=add_special_tokens)
        except ValueError as e:  # the tokenizer refuses prompts past the model's length
            too_long = "tokens long" in str(e)
            raise APIError(400, str(e), param="prompt", code="context_length_exceeded" if too_long else None) from None

    def check_text_length(self, chars: int, param: str) -> None:
        """A 400 before tokenising text that cannot fit the context: more than MAX_CHARS_PER_TOKEN
        characters per token of it (tokenising tens of megabytes would hold the server up for
        seconds and gigabytes for a prompt that is refused anyway)."""
        if chars > MAX_CHARS_PER_TOKEN * self.max_length:
            raise APIError(400, f"the {param} is {chars} characters long; this model's context is {self.max_length} "
                                f"tokens (at most {MAX_CHARS_PER_TOKEN * self.max_length} characters)", param=param,
                           code="context_length_exceeded")

    async def chat_prompt(self, messages: list[dict[str, Any]], tools: Any = None,
                          options: dict[str, Any] | None = None) -> str:
        """The prompt text of `messages` (a 400 when they cannot fit the context: more messages
        than its tokens, or too much text; or when the template fails on what the request gave
        it). Large conversations are rendered off the event loop."""
        if len(messages) > self.max_length:
            raise APIError(400, f"{len(messages)} messages cannot fit this model's context of {self.max_length} tokens",
                           param="messages", code="context_length_exceeded")
        chars = sum(len(str(m.get("content") or "")) for m in messages)
        self.check_text_length(chars, "messages")

        def render() -> str:
            try:
                return self.tokenizer.apply_chat_template(messages, tools=tools, chat_template_options=options)
            except (ValueError, TypeError) as e:  # (TypeError: values of the wrong kind, e.g. tools: 5)
                raise APIError(400, f"cannot render the chat template: {e}", param="messages") from None

        if chars > 4096 or len(messages) > 64:
            return await asyncio.get_running_loop().run_in_executor(None, render)
        return render()

    async def compile_schema(self, schema: str | None) -> Any:
        """A matcher of `schema` (a request's ``response_format``), compiled off the event loop
        (None without a schema), or a 400 when the pipeline was built without structured
        output or cannot take the schema."""
        if schema is None:
            return None
        grammars = getattr(self.pipeline, "grammars", None)
        if grammars is None:
            raise APIError(400, "response_format json_object or json_schema (structured output) needs the server "
                                "started with --enable-structured-output", param="response_format")
        try:
            return await asyncio.get_running_loop().run_in_executor(None, grammars.compile, schema)
        except ValueError as e:
            raise APIError(400, str(e), param="response_format") from None

    def context(self, ids: np.ndarray, sampling: SamplingParams, log_probabilities: int = 0) -> TextContext:
        """A context for `ids`, or a 400 when the prompt and `max_tokens` do not fit the window.
        `log_probabilities` > 0 asks for each token's log-probability and that many of the most
        likely tokens at its position."""
        n = int(len(ids))
        if n == 0:
            raise APIError(400, "the prompt is empty", param="prompt")
        if n >= self.max_length:
            raise APIError(400, f"the prompt is {n} tokens long; this model's context is {self.max_length} tokens, "
                                "which leaves no room to generate", param="prompt", code="context_length_exceeded")
        want = sampling.max_new_tokens
        if want is not None and n + want > self.max_length:
            raise APIError(400, f"this model's context is {self.max_length} tokens, but {n + want} were requested "
                                f"({n} in the prompt, max_tokens {want})", param="max_tokens",
                           code="context_length_exceeded")
        return TextContext(max_length=self.max_length, tokens=ids, sampling_params=sampling,
                           eos_token_ids=self.pipeline.eos_token_ids, log_probabilities=log_probabilities)

    # -- generation -------------------------------------------------------------------------

    def admit(self, count: int = 1) -> None:
        """Counts `count` more requests in flight (each then runs through ``stream``), or refuses
        them: 429 when the server is full, 503 when it is stopping."""
        if not self.accepting or not self.worker.alive:
            raise APIError(503, "the model worker is not running" if self.accepting else "the server is shutting down")
        if self.in_flight + count > self.capacity:
            self.metrics.rejected.inc()
            raise APIError(429, f"the server is at capacity ({self.in_flight} requests in flight); retry later",
                           code="queue_full")
        self.in_flight += count
        self.metrics.in_flight.set(self.in_flight)

    def choices(self, ctx: TextContext, n: int = 1) -> list[AsyncIterator[Delta]]:
        """The ``stream``s of `n` choices of `ctx`'s prompt: `ctx` and copies of it, each a
        request of its own (the caller must have admitted `n`). With a seed, choice `i` samples
        with ``choice_seed(seed, i)``, so that the choices differ and each is reproducible. With
        prefix caching, the copies wait until the first choice's prompt is in the cache (its
        first token is out) and then share its pages."""
        ctxs = [ctx]
        for i in range(1, n):
            sp = ctx.sampling_params
            if sp.seed is not None:
                sp = dataclasses.replace(sp, seed=choice_seed(sp.seed, i))
            ctxs.append(TextContext(max_length=ctx.max_length, tokens=ctx.tokens.copy(), sampling_params=sp,
                                    eos_token_ids=ctx.eos_token_ids, log_probabilities=ctx.log_probabilities,
                                    json_schema=ctx.json_schema,
                                    _matcher=None if ctx.matcher is None else ctx.matcher.deep_copy()))
        if n == 1 or not self.pipeline.kv_manager.enable_prefix_caching:
            return [self.stream(c) for c in ctxs]
        cached = asyncio.Event()
        return [self.stream(ctxs[0], cached=cached), *(self.stream(c, after=cached) for c in ctxs[1:])]

    async def stream(self, ctx: TextContext, *, after: asyncio.Event | None = None,
                     cached: asyncio.Event | None = None) -> AsyncIterator[Delta]:
        """Text deltas of `ctx` as the model produces them; the last one has a finish reason.
        The caller must have called ``admit``. Leaving early cancels the request. The request
        goes to the worker once `after` is set (when given); `cached` is set when its first
        token is out (its prompt is in the KV cache) or it ends."""
        loop = asyncio.get_running_loop()
        ticket = Ticket(ctx, loop)
        sp = ctx.sampling_params
        cfg = getattr(self.pipeline, "pipeline_config", None)
        least = sp.min_new_tokens if cfg is None or cfg.sampling.enable_min_tokens else 0
        decoder = self.tokenizer.streaming_decoder(sp.stop, skip_special_tokens=True, min_tokens=least)
        generated: list[int] = []
        m = self.metrics
        m.input_tokens.inc(ctx.prompt_length)
        m.input_len.observe(ctx.prompt_length)
        start = last = time.perf_counter()
        done = False
        try:
            if after is not None:
                await after.wait()
            self.worker.submit(ticket)
            while True:
                item = await ticket.outputs.get()
                if cached is not None:
                    cached.set()
                if isinstance(item, BaseException):
                    raise APIError(500, str(item))
                now = time.perf_counter()
                if item.tokens:
                    (m.ttft if not generated else m.itl).observe((now - last if generated else now - start) * 1000)
                    last = now
                new = list(item.tokens)
                generated.extend(new)
                m.output_tokens.inc(len(new))
                text_ids = generated
                if item.status == GenerationStatus.END_OF_SEQUENCE and sp.stop_token_ids and new \
                        and new[-1] in sp.stop_token_ids:
                    text_ids = generated[:-1]  # like EOS, a stop token is not part of the text
                lps = token_log_probs(new, item.log_probabilities, ctx.log_probabilities)
                if item.status == GenerationStatus.END_OF_SEQUENCE and new \
                        and (new[-1] in ctx.eos_token_ids or new[-1] in (sp.stop_token_ids or ())):
                    lps = lps[:-1]  # the EOS or stop token id that ended the request (a schema's end is text)
                delta = decoder.push(text_ids) if not item.status.is_done else decoder.finish(text_ids)
                if delta.stopped:
                    done = True
                    if not item.status.is_done:
                        self.worker.cancel(ctx.request_id)
                    yield Delta(delta.text, new, "stop", lps)
                    return
                if item.status.is_done:
                    done = True
                    yield Delta(delta.text, new, finish_reason(item.status), lps)
                    return
                if delta.text or new:
                    yield Delta(delta.text, new, None, lps)
        finally:
            if cached is not None:
                cached.set()
            if not done:
                self.worker.cancel(ctx.request_id)
            self.in_flight -= 1
            m.in_flight.set(self.in_flight)
            m.output_len.observe(len(generated))
            m.request_time.observe((time.perf_counter() - start) * 1000)

    @staticmethod
    async def complete(deltas: AsyncIterator[Delta]) -> Outcome:
        """The whole text of a ``stream``."""
        out = Outcome()
        parts: list[str] = []
        async for d in deltas:
            parts.append(d.text)
            out.token_ids.extend(d.token_ids)
            out.logprobs.extend(d.logprobs)
            if d.finish_reason:
                out.finish_reason = d.finish_reason
        out.text = "".join(parts)
        return out


__all__ = ["Delta", "GenerationService", "Outcome", "finish_reason"]
