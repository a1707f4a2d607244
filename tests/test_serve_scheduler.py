"""The serving scheduler driven directly over the real SmolLM2 pipeline (CPU): when the KV
cache cannot hold every running request, the newest are preempted and recomputed, and every
request still gets exactly the tokens it gets alone; cancelling frees pages at once; the token
budget bounds every step."""

from __future__ import annotations

import numpy as np
import pytest

from max.driver import DeviceSpec
from max.interfaces import SamplingParams, TextGenerationInputs
from max.pipelines import PipelineConfig
from max.pipelines.lib.context import TextContext
from max.pipelines.lib.generate import Generator
from max.pipelines.lib.pipeline import load_pipeline
from max.serve.scheduler import Scheduler
from models import smollm2_gguf


@pytest.fixture(scope="module")
def pipeline():
    # Pages for two sequences of 128 tokens: 16 pages of 16 tokens.
    return load_pipeline(PipelineConfig(model_path=str(smollm2_gguf()), max_length=128, max_batch_size=2,
                                        kv_cache_page_size=16, enable_prefix_caching=True,
                                        device_specs=[DeviceSpec.cpu()]))


def _contexts(pipeline, rng, count, new_tokens):
    sp = SamplingParams(top_k=1, max_new_tokens=new_tokens, ignore_eos=True)
    lengths = rng.integers(10, 40, count)
    return [TextContext(max_length=pipeline.max_length, tokens=rng.integers(100, 40000, n), sampling_params=sp)
            for n in lengths]


def _run(pipeline, sched, ctxs, budget_seen=None):
    for c in ctxs:
        sched.add(c)
    while sched.has_work:
        batch = sched.schedule()
        assert batch, "the scheduler made no progress"
        if budget_seen is not None:
            budget_seen.append(sum(c.active_length for c in batch))
        outs = pipeline.execute(TextGenerationInputs([{c.request_id: c for c in batch}]))
        for c in batch:
            if c.request_id in outs and outs[c.request_id].is_done:
                sched.finish(c)
    return [c.generated_tokens.tolist() for c in ctxs]


def test_preemption_recomputes_and_keeps_every_result(pipeline, rng):
    kv = pipeline.kv_manager
    ctxs = _contexts(pipeline, rng, 6, 40)  # ~5 pages each, 30 wanted, 16 exist
    alone = []
    for c in ctxs:
        gen = Generator(pipeline)
        copy = gen.context(c.tokens.copy(), c.sampling_params)
        alone.append(gen.run([copy])[0].tokens)
    kv.reset_prefix_cache()
    sched = Scheduler(kv, max_batch_size=6, max_batch_input_tokens=48)
    steps: list[int] = []
    assert _run(pipeline, sched, ctxs, steps) == alone
    assert sched.stats.preemptions > 0
    assert max(steps) <= 48
    assert kv.get_num_used_pages() == 0


def test_cancel_frees_pages_at_once(pipeline, rng):
    kv = pipeline.kv_manager
    sched = Scheduler(kv, max_batch_size=4, max_batch_input_tokens=256)
    ctxs = _contexts(pipeline, rng, 3, 50)
    for c in ctxs:
        sched.add(c)
    for _ in range(3):
        batch = sched.schedule()
        pipeline.execute(TextGenerationInputs([{c.request_id: c for c in batch}]))
    used = kv.get_num_used_pages()
    assert used > 0
    mine = len(kv.get_req_blocks(ctxs[1].request_id))
    assert sched.remove(ctxs[1].request_id) is ctxs[1]
    assert kv.get_num_used_pages() == used - mine
    assert sched.remove("no such request") is None
    for c in (ctxs[0], ctxs[2]):
        sched.remove(c.request_id)
    assert kv.get_num_used_pages() == 0 and not sched.has_work


def test_admission_waits_for_the_batch_size(pipeline, rng):
    sched = Scheduler(pipeline.kv_manager, max_batch_size=2, max_batch_input_tokens=1000)
    ctxs = _contexts(pipeline, rng, 4, 3)
    for c in ctxs:
        sched.add(c)
    batch = sched.schedule()
    assert [c.request_id for c in batch] == [c.request_id for c in ctxs[:2]]
    assert len(sched.waiting) == 2
    for c in ctxs:
        sched.remove(c.request_id)
    assert np.all([not pipeline.kv_manager.contains(c.request_id) for c in ctxs])


def test_scheduler_and_worker_import_without_the_serve_extra():
    # FastAPI and uvicorn come with the `serve` extra; the scheduler and the worker (what a
    # program batching its own requests uses) must not need them
    import subprocess
    import sys

    code = ("import sys; sys.modules['fastapi'] = None; sys.modules['uvicorn'] = None\n"
            "import max.serve, max.serve.scheduler, max.serve.worker\n"
            "try:\n    max.serve.run\nexcept ImportError as e:\n    print('needs', e.name)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "needs fastapi"


def test_offline_generation_waits_and_preempts_within_a_small_cache(pipeline, rng):
    """Generator.run (``max generate``, ``LLM.generate``) schedules as the server does: with 16
    pages for six requests of ~5 pages each, requests wait for pages, a growing one preempts the
    newest, and each gets the tokens it gets alone (it admitted them all and failed)."""
    ctxs = _contexts(pipeline, rng, 6, 40)
    alone = []
    for c in ctxs:
        gen = Generator(pipeline)
        alone.append(gen.run([gen.context(c.tokens.copy(), c.sampling_params)])[0].tokens)
    pipeline.kv_manager.reset_prefix_cache()
    old = pipeline.max_batch_size
    pipeline.max_batch_size = 6  # (more than the cache holds at once)
    try:
        gen = Generator(pipeline)
        together = [r.tokens for r in gen.run([gen.context(c.tokens.copy(), c.sampling_params) for c in ctxs])]
    finally:
        pipeline.max_batch_size = old
    assert together == alone
    assert pipeline.kv_manager.get_num_used_pages() == 0
