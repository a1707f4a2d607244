"""``max serve``'s log-probabilities and ``n`` choices through the real OpenAI client, on the CPU
with SmolLM2. The reference: the same model's logits for each generated position, computed in
this process by a fresh prefill of the prompt and the tokens before it, then log-softmax in
float64 with numpy; the server's values (computed on the device inside its batched step) must
agree to 1e-3, and its top alternatives must be the reference's most likely tokens."""

from __future__ import annotations

import math

import numpy as np
import pytest

from serve_util import offline_generator, smollm_server

TOL = 1e-3


@pytest.fixture(scope="module")
def server():
    yield from smollm_server()


@pytest.fixture(scope="module")
def offline():
    # Room in the KV cache for one reference batch (a context per generated position).
    return offline_generator(16)


def _reference(gen, prompt: list[int], generated: list[int]) -> np.ndarray:
    """``[len(generated), vocab]`` float64 log-softmax of the logits that chose each generated
    token: a fresh prefill of the prompt and the tokens before it for each position, all in one
    ragged batch."""
    from max.pipelines.lib.context import TextContext

    p = gen.pipeline
    ctxs = [TextContext(max_length=p.max_length, tokens=np.asarray(prompt + generated[:j], np.int64))
            for j in range(len(generated))]
    try:
        for ctx in ctxs:
            p.kv_manager.claim(ctx.request_id)
            p.kv_manager.alloc(ctx)
        (cache,) = p.kv_manager.get_runtime_inputs([ctxs])
        offsets = np.cumsum([0] + [c.active_length for c in ctxs]).astype(np.uint32)
        tokens = np.concatenate([c.next_tokens for c in ctxs])
        x = p.model.execute(tokens, offsets, list(cache)).to_numpy().astype(np.float64)
    finally:
        for ctx in ctxs:
            p.release(ctx.request_id)
    top = x.max(axis=1, keepdims=True)
    return x - top - np.log(np.exp(x - top).sum(axis=1, keepdims=True))


def _greedy(gen, prompt, n, add_special_tokens=True):
    from max.interfaces import SamplingParams

    return gen.run([gen.context(prompt, SamplingParams(top_k=1, max_new_tokens=n),
                                add_special_tokens=add_special_tokens)])[0]


def test_chat_logprobs_equal_the_reference(server, offline):
    tok = offline.tokenizer
    messages = [{"role": "user", "content": "Name one planet. One word."}]
    r = server.client().chat.completions.create(model="smollm", messages=messages, max_tokens=12, temperature=0,
                                                logprobs=True, top_logprobs=5)
    choice = r.choices[0]
    rendered = tok.apply_chat_template(messages)
    prompt = tok.encode_sync(rendered, add_special_tokens=False).tolist()
    ref_run = _greedy(offline, rendered, 12, add_special_tokens=False)
    assert choice.message.content == ref_run.text
    # Every generated token has an entry, except an EOS that ended the answer (not in the text).
    entries = choice.logprobs.content
    ended = choice.finish_reason == "stop"
    assert len(entries) == r.usage.completion_tokens - ended == len(ref_run.tokens) - ended
    assert b"".join(bytes(e.bytes) for e in entries) == choice.message.content.encode()
    ref = _reference(offline, prompt, ref_run.tokens)
    for j, (e, token) in enumerate(zip(entries, ref_run.tokens)):
        assert bytes(e.bytes) == tok.token_bytes(token)
        assert abs(e.logprob - ref[j, token]) < TOL, (j, e.logprob, ref[j, token])
        best = np.argsort(-ref[j], kind="stable")[:5]
        assert [bytes(t.bytes) for t in e.top_logprobs] == [tok.token_bytes(int(i)) for i in best]
        assert np.allclose([t.logprob for t in e.top_logprobs], ref[j, best], atol=TOL)
        # Greedy: the chosen token is the most likely one.
        assert e.logprob == e.top_logprobs[0].logprob == max(t.logprob for t in e.top_logprobs)
        assert sum(math.exp(t.logprob) for t in e.top_logprobs) <= 1 + 1e-6


def test_sampled_completion_logprobs_are_the_raw_distribution(server, offline):
    """Sampled with temperature and top-k, the reported values are still the log-softmax of the
    model's raw logits (as OpenAI and vLLM report them), not of the tempered ones."""
    from max.interfaces import SamplingParams

    tok = offline.tokenizer
    prompt = tok.encode_sync("My favourite animal is").tolist()
    r = server.client().completions.create(model="smollm", prompt=prompt, max_tokens=12, temperature=0.6, seed=11,
                                           logprobs=3, extra_body={"top_k": 20})
    lp = r.choices[0].logprobs
    # The same seed gives the same tokens offline.
    run = offline.run([offline.context(prompt, SamplingParams(temperature=0.6, top_k=20, seed=11,
                                                              max_new_tokens=12))])[0]
    assert r.choices[0].text == run.text
    tokens = run.tokens[: len(lp.tokens)]
    assert len(tokens) == len(run.tokens) - (r.choices[0].finish_reason == "stop") > 0
    assert lp.tokens == [tok.token_bytes(t).decode(errors="replace") for t in tokens]
    ref = _reference(offline, prompt, tokens)
    assert np.allclose(lp.token_logprobs, ref[np.arange(len(tokens)), tokens], atol=TOL)
    for j, top in enumerate(lp.top_logprobs):
        best = np.argsort(-ref[j], kind="stable")[:3]
        expected: dict[str, float] = {}
        for i in best:
            expected.setdefault(tok.token_bytes(int(i)).decode(errors="replace"), ref[j, i])
        expected.setdefault(lp.tokens[j], ref[j, tokens[j]])  # the sampled token is always there
        assert top.keys() == expected.keys()
        assert np.allclose([top[k] for k in expected], list(expected.values()), atol=TOL)
    offsets = np.cumsum([0] + [len(t) for t in lp.tokens])[:-1]
    assert lp.text_offset == offsets.tolist() and "".join(lp.tokens) == r.choices[0].text


def test_streamed_logprobs_equal_whole(server):
    client = server.client()
    messages = [{"role": "user", "content": "Say something about the sea."}]
    args = dict(model="smollm", messages=messages, max_tokens=8, temperature=0, logprobs=True, top_logprobs=2)
    whole = client.chat.completions.create(**args).choices[0].logprobs.content
    chunks = list(client.chat.completions.create(stream=True, **args))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in whole]
    assert np.allclose([e.logprob for e in streamed], [e.logprob for e in whole], atol=1e-5)
    assert [[t.token for t in e.top_logprobs] for e in streamed] == [[t.token for t in e.top_logprobs] for e in whole]

    cargs = dict(model="smollm", prompt="Once upon a time", max_tokens=6, temperature=0, logprobs=1)
    w = client.completions.create(**cargs).choices[0].logprobs
    parts = [c.choices[0].logprobs for c in client.completions.create(stream=True, **cargs) if c.choices]
    assert sum((p.tokens for p in parts), []) == w.tokens
    assert sum((p.text_offset for p in parts), []) == w.text_offset
    assert np.allclose(sum((p.token_logprobs for p in parts), []), w.token_logprobs, atol=1e-5)
    # Without logprobs, none are sent.
    plain = client.completions.create(model="smollm", prompt="Once upon a time", max_tokens=3, temperature=0)
    assert plain.choices[0].logprobs is None


def test_n_choices(server, offline):
    client = server.client()
    # A prompt of more than one 16-token page, so that the choices can share a page.
    args = dict(model="smollm", prompt="In the garden behind the old house there were many animals, and my favourite "
                "animal among them was", max_tokens=6, temperature=1.0, seed=5, extra_body={"ignore_eos": True})
    before = server.metrics()
    r = client.completions.create(n=3, **args)
    assert [c.index for c in r.choices] == [0, 1, 2]
    texts = [c.text for c in r.choices]
    assert len(set(texts)) > 1  # each choice draws with its own seed
    assert r.usage.completion_tokens == 3 * 6
    assert r.usage.prompt_tokens == len(offline.tokenizer.encode_sync(args["prompt"]))
    # Choice 0 is the n=1 answer with the same seed (the streamed chat below shows that the
    # other choices' seeds are reproducible too).
    assert client.completions.create(n=1, **args).choices[0].text == texts[0]
    # The copies read the first choice's prompt pages from the prefix cache.
    hits = server.metrics()["maxserve_prefix_cache_hit_tokens_total"] - \
        before.get("maxserve_prefix_cache_hit_tokens_total", 0)
    assert hits > 0

    # Several prompts: choice i is choice i % n of prompt i // n.
    prompts = ["Once upon a time", "Water boils at"]
    r = client.completions.create(model="smollm", prompt=prompts, n=2, max_tokens=4, temperature=0)
    assert [c.text for c in r.choices] == [_greedy(offline, p, 4).text for p in prompts for _ in range(2)]

    # Chat, streamed: each choice's chunks carry its index and add up to its whole answer.
    messages = [{"role": "user", "content": "Tell me a colour."}]
    cargs = dict(model="smollm", messages=messages, max_tokens=6, temperature=1.0, seed=9, n=3, logprobs=True)
    whole = client.chat.completions.create(**cargs)
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **cargs))
    streamed = ["".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == i)
                for i in range(3)]
    assert streamed == [c.message.content for c in whole.choices]
    assert sorted(c.choices[0].index for c in chunks if c.choices and c.choices[0].finish_reason) == [0, 1, 2]
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert all(c.logprobs.content and c.logprobs.content[0].top_logprobs == [] for c in whole.choices)
    assert server.wait_for(lambda m: m["maxserve_kv_cache_used_pages"] == 0)["maxserve_kv_cache_used_pages"] == 0
