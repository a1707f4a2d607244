"""Text generation through the pipeline on the real SmolLM2 GGUF: the KV cache is used (every
decode step processes one token, however long the prompt), chunked prefill and batches of
different prompts give the tokens each prompt gets alone, and the offline LLM API."""

from __future__ import annotations

import numpy as np
import pytest

from max.entrypoints.llm import LLM
from max.interfaces import SamplingParams, TextGenerationInputs
from max.pipelines import PipelineConfig
from max.pipelines.lib.generate import Generator
from max.pipelines.lib.pipeline import load_pipeline
from models import smollm2_gguf


@pytest.fixture(scope="module")
def pipeline():
    return load_pipeline(PipelineConfig(model_path=str(smollm2_gguf()), max_length=1024, max_batch_size=4,
                                        device_specs=[__import__("max.driver", fromlist=["DeviceSpec"]).DeviceSpec.cpu()]))


def _count_tokens(pipeline):
    """Wraps the model to record how many tokens each step processes."""
    seen: list[int] = []
    model = pipeline.model
    original = model.execute_all

    def counted(tokens, offsets, cache, **kw):
        seen.append(len(tokens))
        return original(tokens, offsets, cache, **kw)

    model.execute_all = counted
    return seen, lambda: setattr(model, "execute_all", original)


@pytest.mark.parametrize("prompt_len", [16, 512])
def test_decode_processes_one_token_per_step(pipeline, prompt_len):
    gen = Generator(pipeline)
    rng = np.random.default_rng(prompt_len)
    ctx = gen.context(rng.integers(100, 40000, prompt_len).tolist(), SamplingParams(top_k=1, max_new_tokens=12, ignore_eos=True))
    seen, restore = _count_tokens(pipeline)
    try:
        (r,) = gen.run([ctx])
    finally:
        restore()
    assert len(r.tokens) == 12
    assert sum(seen[: len(seen) - 11]) == prompt_len  # the prompt once (maybe in chunks)
    assert seen[-11:] == [1] * 11  # then one token per step: nothing is recomputed


def test_chunked_prefill_and_batching_match_single_runs(pipeline):
    prompts = ["The capital of France is", "Once upon a time, in a land far away,", "def fibonacci(n):"]
    sp = SamplingParams(top_k=1, max_new_tokens=10, ignore_eos=True)
    alone = []
    for p in prompts:
        gen = Generator(pipeline)
        alone.append(gen.run([gen.context(p, sp)])[0].tokens)
    gen = Generator(pipeline)
    together = [r.tokens for r in gen.run([gen.context(p, sp) for p in prompts])]
    assert together == alone
    # A prompt processed in chunks of 3 tokens gives the same continuation.
    old = pipeline.pipeline_config.max_batch_input_tokens
    pipeline.pipeline_config.max_batch_input_tokens = 3
    try:
        gen = Generator(pipeline)
        chunked = gen.run([gen.context(prompts[1], sp)])[0].tokens
    finally:
        pipeline.pipeline_config.max_batch_input_tokens = old
    assert chunked == alone[1]


def test_a_later_request_may_end_first(pipeline):
    """Requests of one run that end in another order than they were given (a later one with
    fewer tokens to make) are each handed their own result (taking a finished request out of
    the running ones compared contexts by their token arrays, which raised)."""
    gen = Generator(pipeline)
    ctxs = [gen.context(p, SamplingParams(top_k=1, max_new_tokens=n, ignore_eos=True))
            for p, n in [("The capital of France is", 9), ("Once upon a time", 2), ("def f(x):", 5)]]
    results = gen.run(ctxs)
    assert [len(r.tokens) for r in results] == [9, 2, 5]


def test_step_logits_of_a_batch_equal_each_alone(pipeline):
    """Ragged prefill of three prompts in one step: each row's logits equal its own run."""
    from max.pipelines.lib.context import TextContext

    rng = np.random.default_rng(7)
    prompts = [rng.integers(100, 40000, n) for n in (5, 17, 9)]

    def logits_of(ctxs):
        for c in ctxs:
            pipeline.kv_manager.claim(c.request_id)
            pipeline.kv_manager.alloc(c)
        tokens = np.concatenate([c.next_tokens for c in ctxs])
        offsets = np.concatenate([[0], np.cumsum([c.active_length for c in ctxs])]).astype(np.uint32)
        (cache,) = pipeline.kv_manager.get_runtime_inputs([ctxs])
        out = pipeline.model.execute(tokens, offsets, list(cache)).to_numpy().copy()
        for c in ctxs:
            pipeline.release(c.request_id)
        return out

    mk = lambda p: TextContext(max_length=1024, tokens=p)  # noqa: E731
    together = logits_of([mk(p) for p in prompts])
    for i, p in enumerate(prompts):
        alone = logits_of([mk(p)])[0]
        np.testing.assert_allclose(together[i], alone, rtol=1e-4, atol=1e-4 * np.abs(alone).max())


def test_log_probabilities_only_for_contexts_that_ask(pipeline):
    """A context with log_probabilities gets one entry per token (greedy: the chosen token is
    the most likely one); its neighbour in the batch gets none, and neither's tokens change."""
    from max.pipelines.lib.context import TextContext

    prompts = ["The capital of France is", "def fibonacci(n):"]
    sp = SamplingParams(top_k=1, max_new_tokens=4, ignore_eos=True)
    gen = Generator(pipeline)
    plain = [r.tokens for r in gen.run([gen.context(p, sp) for p in prompts])]
    gen = Generator(pipeline)
    asked, other = gen.run([gen.context(prompts[0], sp, log_probabilities=3), gen.context(prompts[1], sp)])
    assert [asked.tokens, other.tokens] == plain and other.log_probabilities is None
    assert asked.log_probabilities is not None and len(asked.log_probabilities) == 4
    for token, entry in zip(asked.tokens, asked.log_probabilities):
        top = entry.top_log_probabilities[0]
        assert list(top)[0] == token and top[token] == entry.token_log_probabilities[0]
        assert len(top) == 3 and list(top.values()) == sorted(top.values(), reverse=True)
    # The first token's value against a float64 log-softmax of a fresh prefill's logits.
    ctx = TextContext(max_length=1024, tokens=gen.tokenizer.encode_sync(prompts[0]))
    pipeline.kv_manager.claim(ctx.request_id)
    pipeline.kv_manager.alloc(ctx)
    (cache,) = pipeline.kv_manager.get_runtime_inputs([[ctx]])
    x = pipeline.model.execute(ctx.next_tokens, np.array([0, ctx.active_length], np.uint32), list(cache))
    pipeline.release(ctx.request_id)
    x = x.to_numpy()[0].astype(np.float64)
    ref = x - x.max() - np.log(np.exp(x - x.max()).sum())
    assert abs(asked.log_probabilities[0].token_log_probabilities[0] - ref[asked.tokens[0]]) < 1e-4


def test_eos_and_stop_strings(pipeline):
    gen = Generator(pipeline)
    full = gen.run([gen.context("The capital of France is", SamplingParams(top_k=1, max_new_tokens=30))])[0].text
    stop = full.split()[3]  # a word in the middle of the continuation
    gen = Generator(pipeline)
    r = gen.run([gen.context("The capital of France is", SamplingParams(top_k=1, max_new_tokens=30, stop=[stop]))])[0]
    assert r.text == full[: full.index(stop)] and r.finish_reason == "stop"
    gen = Generator(pipeline)
    r = gen.run([gen.context("The capital of France is", SamplingParams(top_k=1, max_new_tokens=3))])[0]
    assert len(r.tokens) == 3 and r.finish_reason == "length"


def test_llm_offline_api():
    llm = LLM(PipelineConfig(model_path=str(smollm2_gguf()), max_length=256))
    (text,) = llm.generate(["The capital of France is"], max_new_tokens=5)
    assert text.startswith(" Paris")
    (reply,) = llm.chat([{"role": "user", "content": "What is the capital of France?"}], max_new_tokens=20)
    assert "Paris" in reply
    with pytest.raises(ValueError, match="not an embedding model"):
        llm.encode(["hi"])


def test_llm_takes_the_sampling_parameters_own_limit():
    """A SamplingParams' max_new_tokens wins over the method's default (it was replaced by 100)."""
    llm = LLM(PipelineConfig(model_path=str(smollm2_gguf()), max_length=256))
    llm.generate(["Once upon a time"], sampling_params=SamplingParams(top_k=1, max_new_tokens=3, ignore_eos=True))
    assert len(llm.last_results[0].tokens) == 3
    llm.chat([{"role": "user", "content": "Tell me a story."}], sampling_params=SamplingParams(
        top_k=1, max_new_tokens=4, ignore_eos=True))
    assert len(llm.last_results[0].tokens) == 4
    llm.generate(["Once upon a time"], max_new_tokens=2, sampling_params=SamplingParams(top_k=1, ignore_eos=True))
    assert len(llm.last_results[0].tokens) == 2


def test_eos_sequences_end_a_request(pipeline):
    sp = SamplingParams(top_k=1, max_new_tokens=12, ignore_eos=False)
    gen = Generator(pipeline)
    free = gen.run([gen.context("The capital of France is", sp)])[0].tokens
    gen = Generator(pipeline)
    ctx = gen.context("The capital of France is", sp)
    ctx.eos_sequences = [[99999, 99998], free[3:5]]
    (r,) = gen.run([ctx])
    assert r.tokens == free[:5] and r.finish_reason == "stop"


def test_contexts_sharing_a_request_id_are_refused(pipeline):
    gen = Generator(pipeline)
    sp = SamplingParams(top_k=1, max_new_tokens=2)
    with pytest.raises(ValueError, match="share the request id 'same'"):
        gen.run([gen.context("Hi", sp, request_id="same"), gen.context("Bye", sp, request_id="same")])
    with pytest.raises(ValueError, match="ignore_eos must be true or false"):
        SamplingParams(ignore_eos="false")
    from max.pipelines.core import TextContext

    assert TextContext is type(gen.context("Hi", sp))


def test_seeded_sampling_is_reproducible_and_seeds_differ(pipeline):
    def text(seed, **kw):
        gen = Generator(pipeline)
        sp = SamplingParams(top_k=50, temperature=0.9, max_new_tokens=16, ignore_eos=True, seed=seed, **kw)
        return gen.run([gen.context("Once upon a time", sp)])[0].tokens

    a = text(3)
    assert text(3) == a
    assert any(text(s) != a for s in (4, 5, 6))
    # A strong repetition penalty makes repeated tokens rarer than without it.
    plain = text(9, min_p=0.0)
    penalized = text(9, repetition_penalty=2.0)
    assert len(set(penalized)) >= len(set(plain)) - 1


def test_batch_rows_keep_their_own_parameters(pipeline):
    gen = Generator(pipeline)
    greedy = SamplingParams(top_k=1, max_new_tokens=8, ignore_eos=True)
    hot = SamplingParams(temperature=1.5, top_k=0, max_new_tokens=8, ignore_eos=True, seed=1)
    alone = gen.run([gen.context("The capital of France is", greedy)])[0].tokens
    gen = Generator(pipeline)
    mixed = gen.run([gen.context("The capital of France is", greedy), gen.context("Once upon a time", hot)])
    assert mixed[0].tokens == alone
