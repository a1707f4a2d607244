"""Data-parallel replicas (``--data-parallel-degree``) on simulated CPU devices: SmolLM2 (the
real GGUF) as two replicas gives each request the tokens one device gives it, with the requests
spread over both replicas and every page back when they finish; replicas that are themselves
tensor-parallel (2 x 2 devices); MAX's per-replica batches; the prefix cache steering a request
to the replica that holds its prompt; `max serve` with two replicas against the OpenAI client;
clear errors for a degree the devices do not divide."""

from __future__ import annotations

import os

import numpy as np
import pytest

from max.driver import DeviceSpec
from max.interfaces import SamplingParams, TextGenerationInputs
from max.pipelines import PipelineConfig
from max.pipelines.lib.context import TextContext
from max.pipelines.lib.data_parallel import DataParallelPipeline
from max.pipelines.lib.generate import Generator
from max.pipelines.lib.pipeline import load_pipeline
from models import smollm2_gguf
from reference.checkpoints import write_checkpoint
from serve_util import ServerProcess

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a quiet village,",
           "List three colours:", "The quick brown fox"]
GREEDY = SamplingParams(top_k=1, max_new_tokens=10, ignore_eos=True)


def _cpus(n: int) -> list[DeviceSpec]:
    return [DeviceSpec.cpu(i) for i in range(n)]


def _smollm(devices: int, degree: int = 1, max_batch_size: int = 4, **kw):
    return load_pipeline(PipelineConfig(model_path=str(smollm2_gguf()), max_length=128, max_batch_size=max_batch_size,
                                        device_specs=_cpus(devices), data_parallel_degree=degree,
                                        kv_cache_page_size=16, **kw))


@pytest.fixture(scope="module")
def one():
    return _smollm(1)


@pytest.fixture(scope="module")
def two():
    return _smollm(2, 2)


def _alone(p, prompts):
    out = []
    for prompt in prompts:
        gen = Generator(p)
        out.append(gen.run([gen.context(prompt, GREEDY)])[0].tokens)
    return out


def test_two_replicas_give_each_request_its_tokens(one, two):
    assert isinstance(two, DataParallelPipeline) and two.degree == 2
    assert two.max_batch_size == 8 and len(two.devices) == 2
    want = _alone(one, PROMPTS)
    gen = Generator(two)
    seen: set[int] = set()
    original = two.execute

    def spy(inputs):  # which replica each request runs on
        out = original(inputs)
        seen.update(two.kv_manager.replica_of(rid) for b in inputs.batches for rid in b)
        return out

    two.execute = spy
    try:
        got = [r.tokens for r in gen.run([gen.context(p, GREEDY) for p in PROMPTS])]
    finally:
        del two.execute
    assert got == want
    assert seen == {0, 1}
    assert two.kv_manager.get_num_used_pages() == 0 and two.kv_manager.get_metrics()["used_pages"] == 0
    assert two.kv_manager.free_pages == two.kv_manager.total_num_pages == sum(
        r.kv_manager.total_num_pages for r in two.replicas)


def test_tensor_parallel_replicas(tmp_path):
    ckpt = write_checkpoint(directory=tmp_path, seed=5, arch="llama")
    kw = dict(model_path=str(ckpt["hf_dir"]), max_length=64, quantization_encoding="float32", kv_cache_page_size=16)
    # each replica is a TP=2 group: the same arithmetic as one TP=2 pipeline, so the same tokens
    tp = load_pipeline(PipelineConfig(device_specs=_cpus(2), **kw))
    dp = load_pipeline(PipelineConfig(device_specs=_cpus(4), data_parallel_degree=2, **kw))
    assert [len(r.devices) for r in dp.replicas] == [2, 2]
    assert [len(r.kv_manager.get_device_tensors()) for r in dp.replicas] == [2, 2]
    rng = np.random.default_rng(6)
    prompts = [rng.integers(5, ckpt["config"]["vocab_size"], n).tolist() for n in (7, 12, 3)]
    sp = SamplingParams(top_k=1, max_new_tokens=6, ignore_eos=True)
    results = []
    for p in (tp, dp):
        gen = Generator(p)
        results.append([r.tokens for r in gen.run([gen.context(ids, sp) for ids in prompts])])
    assert results[1] == results[0]


def test_max_style_per_replica_batches(two):
    # TextGenerationInputs with one batch per replica: batch i's new requests run on replica i
    ctxs = [TextContext(max_length=128, tokens=np.arange(10, 10 + n), sampling_params=GREEDY) for n in (5, 9, 3)]
    try:
        two.execute(TextGenerationInputs([{ctxs[0].request_id: ctxs[0]},
                                          {c.request_id: c for c in ctxs[1:]}]))
        assert [two.kv_manager.replica_of(c.request_id) for c in ctxs] == [0, 1, 1]
        assert two.replicas[1].kv_manager.contains(ctxs[2].request_id)
        assert not two.replicas[0].kv_manager.contains(ctxs[2].request_id)
        assert all(len(c.generated_tokens) == 1 for c in ctxs)
    finally:
        for c in ctxs:
            two.release(c.request_id)
    assert two.kv_manager.get_num_used_pages() == 0


def test_the_prefix_cache_steers_a_request_to_its_replica(tmp_path):
    p = _smollm(2, 2, enable_prefix_caching=True)
    system = "You are a helpful assistant who answers in one short sentence about rivers and mountains. " * 3
    first = Generator(p)
    a = first.context(system + "Question one?", GREEDY)
    first.run([a])
    kv = p.kv_manager
    holder = [i for i, c in enumerate(kv.caches) if c.num_cached_pages > 0]
    assert len(holder) == 1
    # A request that shares the long prefix goes to the replica holding it, even though that
    # replica has fewer free pages; an unrelated one goes by load and free pages.
    b = TextContext(max_length=128, tokens=first.context(system + "Question two?", GREEDY).tokens,
                    sampling_params=GREEDY)
    assert kv.caches[holder[0]].cached_prefix_tokens(b) >= 16
    assert kv.choose(b) == holder[0]
    hits = kv.get_metrics()["prefix_hit_tokens"]
    Generator(p).run([b])
    assert kv.get_metrics()["prefix_hit_tokens"] > hits


def test_preemption_on_replicas_keeps_every_result(rng):
    # two replicas of 16 pages (caches sized for two 128-token sequences each) running four
    # requests each: eight requests of 30-39 prompt tokens and 40 new ones (5 pages each, 20 a
    # replica against its 16) run under the serving scheduler,
    # which preempts within a replica when its cache is full; every request still gets the
    # tokens it gets alone
    from max.serve.scheduler import Scheduler

    dp = _smollm(2, 2, max_batch_size=2)
    dp.kv_manager.max_batch_size = 4  # more requests per replica than its cache was sized for
    one = _smollm(1)
    sp = SamplingParams(top_k=1, max_new_tokens=40, ignore_eos=True)
    ctxs = [TextContext(max_length=128, tokens=rng.integers(100, 40000, n), sampling_params=sp)
            for n in rng.integers(30, 40, 8)]
    alone = []
    for c in ctxs:
        gen = Generator(one)
        alone.append(gen.run([gen.context(c.tokens.copy(), sp)])[0].tokens)
    sched = Scheduler(dp.kv_manager, max_batch_size=8, max_batch_input_tokens=48)
    for c in ctxs:
        sched.add(c)
    victims = []
    preempt = sched.preempt
    sched.preempt = lambda c: (victims.append(dp.kv_manager.replica_of(c.request_id)), preempt(c))[1]
    while sched.has_work:
        batch = sched.schedule()
        assert batch, "the scheduler made no progress"
        outs = dp.execute(TextGenerationInputs([{c.request_id: c for c in batch}]))
        for c in batch:
            if c.request_id in outs and outs[c.request_id].is_done:
                sched.finish(c)
    assert [c.generated_tokens.tolist() for c in ctxs] == alone
    assert victims and dp.kv_manager.get_num_used_pages() == 0


def test_degree_must_divide_the_devices():
    path = str(smollm2_gguf())
    with pytest.raises(ValueError, match="multiple of 2 devices .* got 3 devices"):
        load_pipeline(PipelineConfig(model_path=path, device_specs=_cpus(3), data_parallel_degree=2))
    with pytest.raises(ValueError, match="needs --devices listing a multiple of 2 devices .* got no --devices list"):
        load_pipeline(PipelineConfig(model_path=path, data_parallel_degree=2))
    with pytest.raises(ValueError, match="at least 1, got 0"):
        PipelineConfig(model_path=path, data_parallel_degree=0)


def test_serve_with_two_replicas():
    s = ServerProcess(smollm2_gguf(), "--max-length", "128", "--max-batch-size", "4", "--kv-cache-page-size", "16",
                      "--data-parallel-degree", "2", "--served-model-name", "smollm", devices="cpu:0,1")
    try:
        alone = s.greedy_texts("smollm", PROMPTS, 6, together=False)
        assert s.greedy_texts("smollm", PROMPTS, 6, together=True) == alone
        m = s.metrics()
        assert m["maxserve_kv_cache_used_pages"] == 0 and m["maxserve_kv_cache_total_pages"] > 0
    finally:
        assert s.stop() == 0, s.errors()


@pytest.mark.gpu
def test_two_gpu_replicas(tmp_path):
    """Two replicas, one per GPU, stepping at the same time from their own host threads: a
    request alone gets the tokens one GPU gives it (the same kernels on the same kind of GPU),
    and with numerics.batch_invariant a batch spread over both replicas gets each request's
    tokens alone."""
    from max import driver, tuning

    if driver.accelerator_count() < 2:
        if os.environ.get("MAX_REQUIRE_GPU") == "1" and driver.accelerator_count() == 0:
            pytest.fail("MAX_REQUIRE_GPU=1 but this machine has no GPU")
        pytest.skip("needs 2 GPUs")
    ckpt = write_checkpoint(directory=tmp_path, seed=9, arch="llama", dtype="bfloat16")
    kw = dict(model_path=str(ckpt["hf_dir"]), max_length=64, kv_cache_page_size=16, max_batch_size=4)
    gpus = [DeviceSpec.accelerator(0), DeviceSpec.accelerator(1)]
    rng = np.random.default_rng(4)
    prompts = [rng.integers(5, ckpt["config"]["vocab_size"], n).tolist() for n in (5, 9, 14, 3, 11, 7)]
    sp = SamplingParams(top_k=1, max_new_tokens=8, ignore_eos=True)

    def alone(p):
        out = []
        for ids in prompts:
            gen = Generator(p)
            out.append(gen.run([gen.context(ids, sp)])[0].tokens)
        return out

    one = load_pipeline(PipelineConfig(device_specs=gpus[:1], **kw))
    dp = load_pipeline(PipelineConfig(device_specs=gpus, data_parallel_degree=2, **kw))
    assert dp._pool is not None
    assert alone(dp) == alone(one)
    del one, dp
    with tuning.override("numerics.batch_invariant=1"):
        dp = load_pipeline(PipelineConfig(device_specs=gpus, data_parallel_degree=2, **kw))
        want = alone(dp)
        gen = Generator(dp)
        got = [r.tokens for r in gen.run([gen.context(ids, sp) for ids in prompts])]
    assert got == want
    assert dp.kv_manager.get_num_used_pages() == 0
