"""``TextGenerationPipeline``: a decoder model, its tokenizer, KV cache and sampler. ``execute``
runs one step for a batch of requests (each processes its next prompt chunk or its last
generated token) and samples the next token of every request whose prompt is complete, with
its log-probabilities for requests that ask (``TextContext.log_probabilities``);
``load_pipeline`` builds one from a ``PipelineConfig``."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from max import driver, engine
from max.driver import DeviceSpec
from max.interfaces import GenerationStatus, PipelineTask, TextGenerationInputs, TextGenerationOutput
from max.kv_cache import KVCacheExhaustedError, PagedKVCacheManager
from max.pipelines.lib.config import PipelineConfig
from max.pipelines.lib.context import TextContext
from max.pipelines.lib.decoder import DecoderModel
from max.pipelines.lib import multistep
from max.pipelines.lib.logprobs import LogProbGraph
from max.pipelines.lib.model_source import ModelSource, resolve
from max.pipelines.lib.sampler import ReplicatedSampler, Sampler, first_copy
from max.pipelines.lib.structured import Grammars
from max.pipelines.lib.weights import read_weights


def pick_devices(specs: list[DeviceSpec]) -> list[driver.Device]:
    """The devices a model runs on: the specs' (several: tensor parallel; several CPU specs
    stand for as many simulated devices), else the first GPU, else the CPU. A GPU the machine
    lacks or cannot open is a ValueError naming it."""
    if not specs:
        return [driver.Accelerator() if driver.accelerator_count() else driver.CPU()]
    kinds = {s.device_type for s in specs}
    if len(kinds) > 1:
        raise ValueError("--devices: a model runs on GPUs or on the CPU, not on both")
    if kinds == {"cpu"}:
        return [driver.CPU() for _ in specs]
    count = driver.accelerator_count()
    out = []
    for s in specs:
        if not 0 <= s.id < count:
            raise ValueError(f"gpu:{s.id} not found: this machine has {count} GPU{'s' if count != 1 else ''}")
        try:
            out.append(driver.Accelerator(s.id))
        except Exception as e:  # the driver's own error, with the device named
            raise ValueError(f"gpu:{s.id} failed to open: {e}") from e
        if s.id in [d.id for d in out[:-1]]:
            raise ValueError(f"--devices lists gpu:{s.id} twice")
    return out


def pick_device(specs: list[DeviceSpec]) -> driver.Device:
    """The one device a single-device model runs on (see ``pick_devices``)."""
    devices = pick_devices(specs)
    if len(devices) > 1:
        raise NotImplementedError("this model runs on one device; pass a single device in --devices")
    return devices[0]


def session_for(device: driver.Device | list[driver.Device]) -> engine.InferenceSession:
    devices = device if isinstance(device, list) else [device]
    return engine.InferenceSession(devices=[driver.CPU(), *[d for d in devices if not d.is_host]])


def _host_available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 << 30


def cache_pages(model: DecoderModel, config: PipelineConfig, max_batch: int, device: driver.Device,
                weights_bytes: int) -> int:
    """Pages for `max_batch` sequences of max_length tokens, within the memory budget (GPU:
    device_memory_utilization of free memory; host: a quarter of available memory), and at
    least one full sequence."""
    p = model.kv_params
    per_seq = -(-model.max_seq_len // p.page_size)
    want = per_seq * max_batch
    if device.is_host:
        budget = _host_available_bytes() // 4
    else:
        stats = device.stats
        free = int(stats.get("free_memory", 0)) if isinstance(stats, dict) else 0
        budget = int(free * config.model.kv_cache.device_memory_utilization) - weights_bytes // 8
    fit = max(per_seq, budget // p.bytes_per_block)
    return int(min(want, fit))


def check_special_ids(tokenizer: Any, vocab_size: int) -> None:
    """The ids the tokenizer adds to every prompt (BOS, a post-processor's template) must be in
    the model's vocabulary: a tokenizer file that says otherwise is an error at load, naming it,
    not at the first request."""
    encode = getattr(tokenizer, "encode_sync", None)
    if encode is None:
        return
    try:
        added = [int(i) for i in encode("", add_special_tokens=True)]
    except ValueError:
        return  # (a tokenizer that refuses an empty prompt adds nothing we can check)
    bad = sorted({i for i in added if not 0 <= i < vocab_size})
    if bad:
        raise ValueError(f"the tokenizer adds token ids {bad} to every prompt, outside the model's vocabulary of "
                         f"{vocab_size} (its special tokens: tokenizer.json, tokenizer_config.json or the GGUF's "
                         f"tokenizer.ggml.* keys)")


class TextGenerationPipeline:
    """Generates tokens for batches of ``TextContext``s."""

    def __init__(self, pipeline_config: PipelineConfig, source: ModelSource, arch: Any, tokenizer: Any) -> None:
        t0 = time.perf_counter()
        self.pipeline_config = pipeline_config
        self.source = source
        self.architecture = arch
        self.tokenizer = tokenizer
        mc = pipeline_config.model
        self.devices = pick_devices(mc.device_specs)
        self.device = self.devices[0]
        self.session = session_for(self.devices)
        model_max = int(source.config.get("max_position_embeddings") or 4096)
        self.max_length = int(pipeline_config.max_length or model_max)
        if self.max_length > model_max:
            raise ValueError(f"max_length {self.max_length} exceeds the model's {model_max} positions")
        self.max_batch_size = int(pipeline_config.max_batch_size or 32)
        raw = read_weights(source.weight_files)
        page_size = int(mc.kv_cache.kv_cache_page_size)
        self.model = DecoderModel(arch.pipeline_model, source, raw, self.session, self.devices,
                                  encoding=mc.quantization_encoding, max_seq_len=self.max_length, page_size=page_size,
                                  cache_dtype=mc.kv_cache.cache_dtype())
        check_special_ids(tokenizer, self.model.vocab_size)
        from max.pipelines.lib.weights import weight_bytes

        pages = cache_pages(self.model, pipeline_config, self.max_batch_size, self.device, weight_bytes(raw))
        self.kv_manager = PagedKVCacheManager(self.model.kv_params, self.session, pages, max_seq_len=self.max_length,
                                              devices=self.devices,
                                              enable_prefix_caching=mc.kv_cache.enable_prefix_caching)
        self.sampler: Sampler | ReplicatedSampler = (
            ReplicatedSampler(self.session, self.devices) if self.model.signals is not None
            else Sampler(self.session, self.device))
        self.sampler.penalties = bool(pipeline_config.sampling.enable_penalties)
        self._min_tokens = bool(pipeline_config.sampling.enable_min_tokens)
        self.logprobs = LogProbGraph(self.session, self.device, self.model.vocab_size)
        self.grammars: Grammars | None = None
        if pipeline_config.sampling.enable_structured_output:
            self.grammars = Grammars(tokenizer, self.model.vocab_size, self.session, self.devices)
        overlap = pipeline_config.enable_overlap_scheduler
        self._overlap = not self.device.is_host if overlap is None else bool(overlap)
        self._queued: multistep.Queued | None = None
        # the copies of a call's tokens to the host, apart from the step queued after them
        self._reads = driver.DeviceStream(self.device) if self._overlap and not self.device.is_host else None
        self.load_seconds = time.perf_counter() - t0

    def warm_up(self) -> None:
        """Runs a two-token prompt and one decode step, so that every kernel the model uses is
        compiled (and cached on disk) before the first real request; it asks for
        log-probabilities, so that their kernels are compiled too."""
        from max.interfaces import SamplingParams

        ctx = TextContext(max_length=self.max_length, tokens=np.zeros(2, np.int64), log_probabilities=1,
                          sampling_params=SamplingParams(top_k=1, max_new_tokens=2, ignore_eos=True))
        try:
            while not ctx.is_done:
                self.execute(TextGenerationInputs([{ctx.request_id: ctx}]))
        finally:
            self.release(ctx.request_id)

    @property
    def eos_token_ids(self) -> set[int]:
        return set(getattr(self.tokenizer, "eos_token_ids", set()) or set())

    def release(self, request_id: Any) -> None:
        if self.kv_manager.contains(request_id):
            self.kv_manager.release(request_id)

    def execute(self, inputs: TextGenerationInputs) -> dict[str, TextGenerationOutput]:
        """One step over the batch: each context processes its pending tokens (a prompt chunk
        set with ``ctx.chunk``, or its last token); contexts whose prompt is now complete get
        their next token sampled, appended and checked against the stop conditions. A context
        with ``log_probabilities`` > 0 also gets the token's log-probability and that many of the
        most likely alternatives (log-softmax of the raw logits, computed on the device).

        With ``inputs.num_steps`` > 1 and a batch that only decodes, up to that many steps run
        back to back on the device (``multistep``) and each output carries one token per step,
        up to the context's stop."""
        ctxs: list[TextContext] = list(inputs.batch.values())
        # A context with no room for a token (its prompt fills its max_length or the pipeline's,
        # or max_new_tokens is 0) ends at once, without running the model.
        outputs: dict[str, TextGenerationOutput] = {}
        for ctx in [c for c in ctxs if self._room(c) <= 0]:
            ctx.status = GenerationStatus.MAXIMUM_LENGTH
            outputs[ctx.request_id] = TextGenerationOutput(ctx.request_id, [], ctx.status, None)
        ctxs = [c for c in ctxs if c.request_id not in outputs]
        if not ctxs:
            return outputs
        queued, self._queued = self._queued, None
        steps = multistep.plan(ctxs, inputs.num_steps, self.max_length)
        # One step more, queued for the next call (the overlap scheduler), for calls of several
        # steps (the batch is expected to stay) where that step is one a multi-step run could
        # take too (room for it, nothing needing the host).
        ahead = int(self._overlap and inputs.num_steps > 1
                    and multistep.plan(ctxs, steps + 1, self.max_length) == steps + 1)
        for ctx in ctxs:
            if not self.kv_manager.contains(ctx.request_id):
                self.kv_manager.claim(ctx.request_id)
        planned = steps + ahead
        got = self._alloc(ctxs, planned)
        if got < planned:
            steps, ahead = 1, 0
        first = queued.ids if queued is not None and queued.matches(ctxs, self.kv_manager) else None
        if first is None:
            tokens = np.concatenate([ctx.next_tokens for ctx in ctxs])
            offsets = np.zeros(len(ctxs) + 1, np.uint32)
            offsets[1:] = np.cumsum([ctx.active_length for ctx in ctxs])
            caches = self.kv_manager.get_runtime_inputs([ctxs])
            logits = self.run_step(tokens, offsets, [b for cache in caches for b in cache])
        self.kv_manager.step([ctxs])
        finishing = [i for i, ctx in enumerate(ctxs) if ctx.active_idx == ctx.end_idx]
        for ctx in ctxs:
            ctx.commit()
        if finishing:
            sampled = [ctxs[i] for i in finishing]
            lps = None
            if first is not None:
                on_device = first  # the previous call's step ahead: every context decodes
            else:
                masked = self._grammar_masked(logits, sampled, finishing)
                on_device = self.sampler.sample_on_device(masked, sampled, finishing,
                                                          blocked=self._blocked(sampled, finishing))
                lps = self.logprobs.compute(first_copy(logits), finishing, first_copy(on_device)) \
                    if any(c.log_probabilities > 0 for c in sampled) else None
            ahead = ahead if len(sampled) == len(ctxs) else 0
            ids = multistep.run_more(self, sampled, on_device, steps) if steps > 1 else [on_device]
            # the next call's first step: on a GPU queued behind this call's last one, before
            # the host waits for the tokens (read on a stream of their own) and hands them out,
            # and dropped if a token may end its request; on the host (which runs the step as
            # it is queued) only when none may
            early = bool(ahead) and self._reads is not None
            read = multistep.read_later(self, ids, self._reads if early else None)
            nxt = multistep.queue_step(self, sampled, ids[-1], steps) if early else None
            chosen = read().tolist()  # [rows][steps]
            if any(self._may_stop(c, t) for c, t in zip(sampled, chosen)):
                nxt = None
            elif ahead and not early:
                nxt = multistep.queue_step(self, sampled, ids[-1], steps)
            for row, (ctx, tokens) in enumerate(zip(sampled, chosen)):
                kept, status, end = [], GenerationStatus.ACTIVE, ctx.end_idx
                for token in tokens:
                    kept.append(token)
                    end += 1
                    status = self._status(ctx, token, end)
                    if not status.is_done and ctx.eos_sequences and self._ends_a_sequence(ctx, kept, end):
                        status = GenerationStatus.END_OF_SEQUENCE
                    if status.is_done:
                        break
                if len(kept) > 1:  # each token but the last was processed by the step after it
                    ctx.extend(kept[:-1])
                    self.kv_manager.step([[ctx]])
                    ctx.commit()
                ctx.append(kept[-1])
                if ctx.json_schema is not None and self.grammars is not None:
                    state = self.grammars.advance(ctx, kept)
                    if state == "error":
                        status = GenerationStatus.CANCELLED
                    elif state == "done" and not status.is_done:
                        status = GenerationStatus.END_OF_SEQUENCE  # the schema's text is complete
                ctx.status = status
                lp = [lps.for_row(row, tokens[0], ctx.log_probabilities)] \
                    if lps is not None and ctx.log_probabilities > 0 else None
                outputs[ctx.request_id] = TextGenerationOutput(ctx.request_id, kept, ctx.status, lp)
            if nxt is not None:  # (no request ended: none of its tokens may)
                self._queued = multistep.Queued(multistep.state(sampled, self.kv_manager), nxt)
        return outputs

    def _grammar_masked(self, logits: Any, ctxs: list[TextContext], rows: list[int]) -> Any:
        """`logits` with the tokens the structured contexts' schemas do not allow next at -inf
        (``structured.Grammars``); as they are when no context has a schema."""
        if not any(c.json_schema is not None for c in ctxs):
            return logits
        if self.grammars is None:
            raise ValueError("a request with a JSON schema (structured output) needs a pipeline built with "
                             "enable_structured_output (--enable-structured-output)")
        return self.grammars.mask(logits, ctxs, rows)

    def run_step(self, tokens: Any, offsets: Any, cache_inputs: list[driver.Buffer]) -> Any:
        """One step's logits, for the sampler: on the model's device, or one copy per device of a
        tensor-parallel model (each device samples its own copy of the next tokens). They may
        be the step graph's own result buffers, which the next step overwrites: every use of
        them (sampling, log-probabilities) is queued before the next step."""
        every = self.model.execute_all(tokens, offsets, cache_inputs, reuse_results=True)
        return every if isinstance(self.sampler, ReplicatedSampler) else every[0]

    def _alloc(self, ctxs: list[TextContext], steps: int) -> int:
        """Gives every context the cache pages of `steps` steps; when the cache cannot hold that
        many, of one step (the steps this call will run)."""
        if steps > 1:
            try:
                for ctx in ctxs:
                    self.kv_manager.alloc(ctx, num_steps=steps)
                return steps
            except KVCacheExhaustedError:
                pass
        for ctx in ctxs:
            self.kv_manager.alloc(ctx)
        return 1

    @property
    def decode_steps(self) -> int:
        """Decode steps a caller asks ``execute`` for at once (``TextGenerationInputs.num_steps``):
        ``max_num_steps`` when set, else 8 on a GPU (the host's per-step work then overlaps the
        device's) and 1 on the CPU (whose steps are the host's work)."""
        n = int(self.pipeline_config.max_num_steps)
        if n > 0:
            return n
        return 1 if self.device.is_host else 8

    def _may_stop(self, ctx: TextContext, tokens: list[int]) -> bool:
        """Whether any of `tokens`, the next ones `ctx` will append, is one that ends it (lengths
        are the caller's plan's)."""
        generated = ctx.end_idx - ctx.prompt_length  # before the first of them is appended
        return any(self._ends(ctx, t, generated + k + 1) for k, t in enumerate(tokens))

    def _ends(self, ctx: TextContext, token: int, generated: int) -> bool:
        """Whether `token`, as generated token number `generated` of `ctx`, ends it: an end of
        sequence (unless ignored) or a stop token, once ``min_new_tokens`` allows."""
        sp = ctx.sampling_params
        if self._min_tokens and generated < sp.min_new_tokens:
            return False
        return token in self._stoppers(ctx)

    def _ends_a_sequence(self, ctx: TextContext, kept: list[int], end: int) -> bool:
        """Whether `ctx`'s generated tokens, with `kept` (its newest, not yet appended; `end`
        tokens in all) after them, end with one of its ``eos_sequences`` (once min_new_tokens
        allows, and unless EOS is ignored)."""
        sp = ctx.sampling_params
        generated = end - ctx.prompt_length
        if sp.ignore_eos or ctx.ignore_eos or (self._min_tokens and generated < sp.min_new_tokens):
            return False
        for seq in ctx.eos_sequences:
            n = len(seq)
            if n == 0 or n > generated:
                continue
            tail = kept[-n:] if len(kept) >= n else [*ctx.tokens[ctx.end_idx - (n - len(kept)):].tolist(), *kept]
            if [int(t) for t in seq] == tail:
                return True
        return False

    def _stoppers(self, ctx: TextContext) -> set[int]:
        """The token ids that end `ctx`: its end-of-sequence ids (unless ignored) and stop ids."""
        sp = ctx.sampling_params
        eos = set() if sp.ignore_eos or ctx.ignore_eos else set(ctx.eos_token_ids or self.eos_token_ids)
        return eos | set(sp.stop_token_ids or ())

    def _blocked(self, ctxs: list[TextContext], rows: list[int]) -> list[tuple[int, int]]:
        """(logits row, token id) of the tokens that may not be sampled now: the ones that would
        end a context before its ``min_new_tokens`` (with ``enable_min_tokens``)."""
        if not self._min_tokens:
            return []
        vocab = int(self.model.vocab_size)
        return [(row, t) for ctx, row in zip(ctxs, rows) if multistep.min_tokens_pending(ctx)
                for t in sorted(self._stoppers(ctx)) if 0 <= t < vocab]

    def _limit(self, ctx: TextContext) -> int:
        """The most tokens `ctx` may hold, prompt included: its max_length and the pipeline's."""
        return min(self.max_length, int(ctx.max_length))

    def _room(self, ctx: TextContext) -> int:
        """How many more tokens `ctx` may generate (its window, then its max_new_tokens)."""
        room = self._limit(ctx) - ctx.end_idx
        sp = ctx.sampling_params
        if sp.max_new_tokens is not None:
            room = min(room, sp.max_new_tokens - (ctx.end_idx - ctx.prompt_length))
        return room

    def _status(self, ctx: TextContext, token: int, end: int | None = None) -> GenerationStatus:
        """`ctx`'s status once it holds `end` tokens (default: as it is), `token` the last."""
        sp = ctx.sampling_params
        end = ctx.end_idx if end is None else end
        generated = end - ctx.prompt_length
        if self._ends(ctx, token, generated):
            return GenerationStatus.END_OF_SEQUENCE
        if sp.max_new_tokens is not None and generated >= sp.max_new_tokens:
            return GenerationStatus.MAXIMUM_LENGTH
        if end >= self._limit(ctx):
            return GenerationStatus.MAXIMUM_LENGTH
        return GenerationStatus.ACTIVE


def load_pipeline(pipeline_config: PipelineConfig, task: PipelineTask = PipelineTask.TEXT_GENERATION,
                  registry: Any = None, architecture: str | None = None) -> Any:
    """The pipeline for the config's model: the architecture from its config.json or GGUF
    metadata (or the registered one `architecture` names), the tokenizer from its files; with
    data_parallel_degree > 1, that many replicas (``data_parallel.DataParallelPipeline``)."""
    from max.pipelines.lib.registry import PIPELINE_REGISTRY

    registry = registry or PIPELINE_REGISTRY
    if pipeline_config.custom_architectures:
        registry.load_custom(pipeline_config.custom_architectures)
    mc = pipeline_config.model
    source = resolve(mc.model_path, mc.weight_path)
    arch = registry.architecture_for(source, task, architecture)
    tokenizer = arch.tokenizer(source, pipeline_config)
    degree = int(mc.data_parallel_degree)
    if task == PipelineTask.EMBEDDINGS_GENERATION:
        from max.pipelines.lib.embeddings import EmbeddingsPipeline

        if degree != 1:
            raise NotImplementedError(f"--data-parallel-degree {degree}: encoder models run as one replica")
        return EmbeddingsPipeline(pipeline_config, source, arch, tokenizer)
    if degree != 1:
        from max.pipelines.lib.data_parallel import DataParallelPipeline

        return DataParallelPipeline(pipeline_config, source, arch, tokenizer, degree)
    return TextGenerationPipeline(pipeline_config, source, arch, tokenizer)


__all__ = ["TextGenerationPipeline", "cache_pages", "load_pipeline", "pick_device", "pick_devices", "session_for"]
