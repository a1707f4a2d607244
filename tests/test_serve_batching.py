"""Continuous batching and prefix caching through ``max serve`` (SmolLM2, on the CPU and on the
GPU when there is one): 32 concurrent greedy requests of different prompt lengths, run in shared
steps with chunked prefill, each get exactly the text they get alone; a shared system prompt is
served from the prefix cache (the metrics count the hit) with the same text as when it was
computed."""

from __future__ import annotations


import numpy as np
import pytest

from models import smollm2_gguf
from serve_util import ServerProcess

WORDS = ("river mountain quiet engine purple window history seven garden bright "
         "coffee lantern silver market winter pencil orbit thunder meadow signal").split()


@pytest.fixture(scope="module", params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def server(request):
    if request.param == "gpu":
        request.getfixturevalue("gpu")  # skips without one
    # A small step budget: long prompts are prefilled in chunks alongside the decodes.
    # On the GPU the kernels are picked per batch (GEMV below 9 rows, tensor-core GEMMs above,
    # attention split by the batch's size), so a row's bits, and a near-tie of greedy tokens,
    # would follow the other requests in its step; numerics.batch_invariant fixes each row's
    # arithmetic whatever the batch (docs/kernels/batch_invariance.md). The CPU's kernels
    # already are row-invariant.
    knob = "numerics.batch_invariant=1" if request.param == "gpu" else None
    s = ServerProcess(smollm2_gguf(), "--max-length", "256", "--max-batch-size", "32", "--kv-cache-page-size", "16",
                      "--max-batch-input-tokens", "96", "--served-model-name", "smollm", devices=request.param,
                      tuning=knob)
    yield s
    assert s.stop() == 0, s.errors()


def _prompts(rng, count):
    lengths = rng.permutation(np.linspace(2, 120, count).astype(int))
    return [" ".join(rng.choice(WORDS, n)) for n in lengths]


def test_32_concurrent_greedy_requests_equal_each_alone(server, rng):
    prompts = _prompts(rng, 32)
    alone = server.greedy_texts("smollm", prompts, 8, together=False)
    before = server.metrics()
    assert server.greedy_texts("smollm", prompts, 8, together=True) == alone
    after = server.metrics()
    # The requests really shared steps: some step ran more than 16 of them.
    big = after["maxserve_batch_size_count"] - after['maxserve_batch_size_bucket{le="16.0"}']
    big_before = before["maxserve_batch_size_count"] - before['maxserve_batch_size_bucket{le="16.0"}']
    assert big > big_before
    assert after["maxserve_kv_cache_used_pages"] == 0


def test_shared_system_prompt_is_served_from_the_prefix_cache(server, rng):
    client = server.client()
    system = "You are a helpful assistant. Facts you know: " + " ".join(rng.choice(WORDS, 60))
    questions = ["What is the first fact?", "Name one colour you know.", "Say hello."]

    def ask(q):
        r = client.chat.completions.create(model="smollm", max_tokens=8, temperature=0,
                                           messages=[{"role": "system", "content": system},
                                                     {"role": "user", "content": q}])
        return r.choices[0].message.content, r.usage.prompt_tokens

    hits = lambda m: m.get("maxserve_prefix_cache_hit_tokens_total", 0)  # noqa: E731
    m0 = server.metrics()
    first, prompt_tokens = ask(questions[0])  # computes the system prompt's pages
    m1 = server.metrics()
    assert hits(m1) == hits(m0)  # a fresh system prompt: nothing to reuse
    again, _ = ask(questions[0])
    m2 = server.metrics()
    assert again == first
    # All full pages but the one holding the last prompt token came from the cache.
    assert hits(m2) - hits(m1) == (prompt_tokens - 1) // 16 * 16
    for q in questions[1:]:
        before = hits(server.metrics())
        ask(q)
        assert hits(server.metrics()) - before >= 48  # the system prompt's full pages at least
    assert server.metrics()["maxserve_kv_cache_used_pages"] == 0
