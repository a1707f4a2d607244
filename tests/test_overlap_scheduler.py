"""The overlap scheduler (``PipelineConfig.enable_overlap_scheduler``): each decode ``execute``
also queues the next call's first step, which the next call uses when it is for the same
requests in the same state and drops otherwise. On the real SmolLM2 GGUF (on the CPU, where it
is off unless asked for) the tokens are exactly those of the same calls without it, whatever
the calls do between them (a batch that changes, a stop inside the steps, a release), and the
queued step really stands in for the next call's first one."""

from __future__ import annotations

import numpy as np
import pytest

from max.driver import DeviceSpec
from max.interfaces import SamplingParams, TextGenerationInputs
from max.pipelines import PipelineConfig
from max.pipelines.lib.context import TextContext
from max.pipelines.lib.pipeline import load_pipeline
from models import smollm2_gguf

MAX_LENGTH = 256


def _load(overlap, devices=None, path=None):
    return load_pipeline(PipelineConfig(model_path=str(path or smollm2_gguf()), max_length=MAX_LENGTH, max_batch_size=4,
                                        device_specs=devices or [DeviceSpec.cpu()],
                                        enable_overlap_scheduler=overlap))


@pytest.fixture(scope="module")
def plain():
    return _load(False)


@pytest.fixture(scope="module")
def overlapped():
    return _load(True)


class HostTokens:
    """Counts the model executions whose token ids came from the host (a step the pipeline ran
    itself rather than one fed by the device's own sampled ids), and all of them (`steps`)."""

    def __init__(self, pipeline):
        self.pipeline, self.inner, self.count, self.steps = pipeline, pipeline.model.execute_all, 0, 0

    def __enter__(self):
        def execute(tokens, *rest, **kw):
            self.count += isinstance(tokens, np.ndarray)
            self.steps += 1
            return self.inner(tokens, *rest, **kw)

        self.pipeline.model.execute_all = execute
        return self

    def __exit__(self, *exc):
        self.pipeline.model.execute_all = self.inner


def _contexts(seed, lengths, sp):
    rng = np.random.default_rng(seed)
    return [TextContext(max_length=MAX_LENGTH, tokens=rng.integers(100, 40000, n), sampling_params=sp)
            for n in lengths]


def _run(pipeline, ctxs, schedule, num_steps):
    """Runs `ctxs` through the calls of `schedule` (each a list of context indices; the live
    ones among them take part) until all are done; each context's generated tokens."""
    try:
        k = 0
        while any(not c.is_done for c in ctxs):
            live = [ctxs[i] for i in schedule[min(k, len(schedule) - 1)] if not ctxs[i].is_done]
            live = live or [c for c in ctxs if not c.is_done]
            outs = pipeline.execute(TextGenerationInputs([{c.request_id: c for c in live}], num_steps=num_steps))
            for c in live:
                got = outs[c.request_id].tokens
                assert got == c.generated_tokens[len(c.generated_tokens) - len(got):].tolist()
            k += 1
    finally:
        for c in ctxs:
            pipeline.release(c.request_id)
    return [c.generated_tokens.tolist() for c in ctxs]


@pytest.mark.parametrize("num_steps", [1, 2, 4])
@pytest.mark.parametrize("sp", [
    SamplingParams(top_k=1, max_new_tokens=13, ignore_eos=True),
    SamplingParams(temperature=0.9, top_k=40, top_p=0.95, seed=99, max_new_tokens=13, ignore_eos=True),
], ids=["greedy", "seeded"])
def test_the_queued_step_stands_in_for_the_next_calls_first(plain, overlapped, sp, num_steps):
    want = _run(plain, _contexts(3, (5, 23, 11), sp), [[0, 1, 2]], num_steps)
    with HostTokens(overlapped) as host:
        got = _run(overlapped, _contexts(3, (5, 23, 11), sp), [[0, 1, 2]], num_steps)
    assert got == want and all(len(t) == 13 for t in got)
    if num_steps == 1:
        # calls of one step (made while requests wait to join the batch) queue nothing
        assert host.count == 13  # the prompt's call and 12 of one step each
    else:
        # the prompt's call and the first decode call take their ids from the host; every
        # later call starts from the step the call before it queued
        assert host.count == 2


def test_a_changing_batch_drops_the_queued_step(plain, overlapped):
    sp = SamplingParams(top_k=1, max_new_tokens=12, ignore_eos=True)
    # both, then the first alone (the step queued for both is dropped), then both again
    # (the step queued for the first alone is dropped), then the second alone
    schedule = [[0, 1], [0, 1], [0], [0, 1], [0, 1], [1]]
    want = _run(plain, _contexts(7, (9, 17), sp), schedule, 2)
    with HostTokens(overlapped) as host:
        got = _run(overlapped, _contexts(7, (9, 17), sp), schedule, 2)
    assert got == want
    assert host.count >= 5  # every change of batch ran its first step from host ids


def test_a_stop_inside_the_steps_queues_nothing_and_leaves_the_cache_sound(plain, overlapped):
    sp = SamplingParams(top_k=1, max_new_tokens=20, ignore_eos=True)
    (single,) = _run(plain, _contexts(5, (9,), sp), [[0]], 1)
    at = next(i for i in range(3, len(single)) if single[i] not in single[:i])
    stop = SamplingParams(top_k=1, max_new_tokens=20, stop_token_ids=[single[at]])
    (ctx,) = _contexts(5, (9,), stop)
    with HostTokens(plain) as without:
        _run(plain, _contexts(5, (9,), stop), [[0]], 4)
    with HostTokens(overlapped) as steps:
        (got,) = _run(overlapped, [ctx], [[0]], 4)
    assert got == single[: at + 1]
    assert overlapped._queued is None
    # the call that read the stop token queued nothing: no step was run for nothing
    assert steps.steps == without.steps
    # the next request is unaffected by whatever the dropped steps wrote
    (again,) = _run(overlapped, _contexts(5, (9,), sp), [[0]], 4)
    assert again == single


def test_a_stop_token_is_not_sampled_before_min_new_tokens(plain, overlapped):
    """Before min_new_tokens a stop token may not be chosen (its logit is masked), so the
    greedy tokens differ from the unconstrained ones where it would have come; the overlapped
    pipeline (which runs such steps one at a time) gives the same tokens."""
    sp = SamplingParams(top_k=1, max_new_tokens=20, ignore_eos=True)
    (single,) = _run(plain, _contexts(5, (9,), sp), [[0]], 1)
    at = next(i for i in range(3, len(single)) if single[i] not in single[:i])
    late = SamplingParams(top_k=1, max_new_tokens=20, ignore_eos=True, stop_token_ids=[single[at]],
                          min_new_tokens=at + 2)
    want = _run(plain, _contexts(5, (9,), late), [[0]], 4)
    got = _run(overlapped, _contexts(5, (9,), late), [[0]], 4)
    assert got == want
    assert want[0][:at] == single[:at] and single[at] not in want[0][: at + 1]


def test_a_request_claimed_again_does_not_take_the_step_queued_for_its_old_pages():
    """Preempted (its pages released and the context reset, as the serving scheduler does
    without the pipeline) and admitted again with its prefix reused when its last token starts
    a page, a request is in the state the queued step was for, but that step wrote the token's
    keys into a page it no longer holds: the claim on the cache tells them apart."""
    ps = 16
    sp = SamplingParams(top_k=1, max_new_tokens=40, ignore_eos=True)

    def scenario(p):
        rng = np.random.default_rng(0)
        ctx = TextContext(max_length=128, tokens=rng.integers(100, 40000, 20), sampling_params=sp)
        kv, queued_then = p.kv_manager, None
        try:
            p.execute(TextGenerationInputs([{ctx.request_id: ctx}]))  # the prompt
            while (ctx.end_idx - 1) % ps != 0:
                two = (ctx.end_idx + 1) % ps == 0  # two steps end with the last token starting a page
                p.execute(TextGenerationInputs([{ctx.request_id: ctx}], num_steps=2 if two else 1))
            queued_then = p._queued is not None
            kv.release(ctx.request_id)
            ctx.reset()
            other = TextContext(max_length=128, tokens=rng.integers(100, 40000, 5), sampling_params=sp)
            kv.alloc(other)  # takes the page just freed
            kv.alloc(ctx)  # admitted again, its full pages reused
            assert ctx.active_length == 1
            while not ctx.is_done:
                p.execute(TextGenerationInputs([{ctx.request_id: ctx}], num_steps=2))
            kv.release(other.request_id)
        finally:
            if kv.contains(ctx.request_id):
                kv.release(ctx.request_id)
        return ctx.generated_tokens.tolist(), queued_then

    def load(overlap):
        return load_pipeline(PipelineConfig(model_path=str(smollm2_gguf()), max_length=128, max_batch_size=2,
                                            kv_cache_page_size=ps, enable_prefix_caching=True,
                                            device_specs=[DeviceSpec.cpu()], enable_overlap_scheduler=overlap))

    want, _ = scenario(load(False))
    got, queued = scenario(load(True))
    assert queued, "a step was queued for the old pages"
    assert got == want


def test_a_released_request_no_longer_matches_its_queued_step(overlapped):
    sp = SamplingParams(top_k=1, max_new_tokens=30, ignore_eos=True)
    (ctx,) = _contexts(1, (6,), sp)
    kv = overlapped.kv_manager
    try:
        for _ in range(3):
            overlapped.execute(TextGenerationInputs([{ctx.request_id: ctx}], num_steps=2))
        queued = overlapped._queued
        assert queued is not None and queued.matches([ctx], kv)
    finally:
        overlapped.release(ctx.request_id)
    assert not queued.matches([ctx], kv)
    kv.claim(ctx.request_id)  # claimed again: other pages
    try:
        assert not queued.matches([ctx], kv)
    finally:
        kv.release(ctx.request_id)


def test_the_cpu_runs_without_it_unless_asked(plain):
    assert not _load(None)._overlap and not plain._overlap


@pytest.mark.gpu
def test_the_queued_step_on_the_gpu_gives_the_tokens_of_single_steps(gpu, tmp_path):
    """On the GPU (where it is on by default) against the same model with it off, a random
    SmolLM2-shaped bf16 model (the ids depend only on the arithmetic, which both runs share):
    single and multi-step calls, greedy and seeded, and a stop inside a call's steps."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from llm_files import SHAPES, write_safetensors_model

    path = write_safetensors_model(tmp_path / "m", SHAPES["smollm2-135m"])
    on = _load(None, [DeviceSpec.accelerator(0)], path)
    off = _load(False, [DeviceSpec.accelerator(0)], path)
    assert on._overlap and not off._overlap
    for sp in (SamplingParams(top_k=1, max_new_tokens=30, ignore_eos=True),
               SamplingParams(temperature=0.8, top_k=20, seed=7, max_new_tokens=30, ignore_eos=True)):
        want = _run(off, _contexts(11, (7, 40, 19), sp), [[0, 1, 2]], 1)
        for num_steps in (1, 8):  # one step: nothing queued ahead
            with HostTokens(on) as host:
                got = _run(on, _contexts(11, (7, 40, 19), sp), [[0, 1, 2]], num_steps)
            assert got == want and host.count == (30 if num_steps == 1 else 2)
    # a stop inside a call's steps: the GPU queued the next step before the tokens were read
    # (their copy runs on a stream of its own), so that one step ran for nothing and is dropped
    # (seeded sampling: a random model's greedy tokens soon repeat one token)
    kw = dict(temperature=0.8, top_k=20, seed=5, max_new_tokens=30, ignore_eos=True)
    sp = SamplingParams(**kw)
    (single,) = _run(off, _contexts(12, (9,), sp), [[0]], 1)
    new = [i for i in range(9, 24) if single[i] not in single[:i]]  # (calls of 8 after the prompt's)
    assert new, f"the tokens repeat ({single}): the stop needs a token not seen before"
    at = new[0]
    stop = SamplingParams(**kw, stop_token_ids=[single[at]])
    with HostTokens(off) as without:
        _run(off, _contexts(12, (9,), stop), [[0]], 8)
    with HostTokens(on) as steps:
        (got,) = _run(on, _contexts(12, (9,), stop), [[0]], 8)
    assert got == single[: at + 1] and on._queued is None
    assert steps.steps == without.steps + 1
    (again,) = _run(on, _contexts(12, (9,), sp), [[0]], 8)
    assert again == single


def test_the_serving_scheduler_with_preemptions_and_cancels_keeps_every_result(plain, rng):
    """The serving scheduler releases pages itself (preemption, cancellation) and changes the
    batch between calls: with the overlap scheduler every request still gets exactly the
    tokens it gets alone, and no page stays used."""
    from max.pipelines.lib.generate import Generator
    from max.serve.scheduler import Scheduler

    p = load_pipeline(PipelineConfig(model_path=str(smollm2_gguf()), max_length=128, max_batch_size=2,
                                     kv_cache_page_size=16, device_specs=[DeviceSpec.cpu()],
                                     enable_overlap_scheduler=True))
    sp = SamplingParams(top_k=1, max_new_tokens=40, ignore_eos=True)
    prompts = [rng.integers(100, 40000, n) for n in rng.integers(10, 40, 6)]
    ctxs = [TextContext(max_length=128, tokens=t, sampling_params=sp) for t in prompts]
    alone = []
    for t in prompts:
        gen = Generator(plain)
        alone.append(gen.run([gen.context(t.copy(), sp)])[0].tokens)
    kv = p.kv_manager
    sched = Scheduler(kv, max_batch_size=6, max_batch_input_tokens=48)  # ~30 pages wanted, 16 exist
    for c in ctxs:
        sched.add(c)
    cancelled = None
    calls = 0
    with HostTokens(p) as host:
        while sched.has_work:
            batch = sched.schedule()
            assert batch, "the scheduler made no progress"
            outs = p.execute(TextGenerationInputs([{c.request_id: c for c in batch}], num_steps=2))
            for c in batch:
                if c.request_id in outs and outs[c.request_id].is_done:
                    sched.finish(c)
            calls += 1
            if calls == 12 and cancelled is None:
                live = [c for c in batch if not c.is_done]
                cancelled = live[-1] if live else None
                if cancelled is not None:
                    assert sched.remove(cancelled.request_id) is cancelled
    assert sched.stats.preemptions > 0
    assert cancelled is not None and host.count < calls  # some calls started from a queued step
    for k, (c, want) in enumerate(zip(ctxs, alone)):
        got = c.generated_tokens.tolist()
        if c is not cancelled:
            assert len(got) == len(want), f"request {k}"
        _agree_but_at_a_close_race(plain, prompts[k], list(want), got, f"request {k}")
    assert kv.get_num_used_pages() == 0


def _agree_but_at_a_close_race(p, prompt, want: list[int], got: list[int], what: str) -> None:
    """`got` is `want` (greedy tokens of `prompt` alone on `p`), or parts from it at a step whose
    two best logits (from `p`, fed `want`) are within float32 rounding of each other: a request
    recomputed after a preemption, or prefilled in other chunks beside other requests, sums its
    products in another order, which may settle such a race the other way (and everything after
    it differs)."""
    parted = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    if parted is None:
        return
    ctx = TextContext(max_length=p.max_length, tokens=np.array(prompt))
    p.kv_manager.claim(ctx.request_id)
    try:
        for t in [None, *want[:parted]]:
            if t is not None:
                ctx.append(t)
            p.kv_manager.alloc(ctx)
            offsets = np.array([0, ctx.active_length], np.uint32)
            caches = p.kv_manager.get_runtime_inputs([[ctx]])
            logits = p.model.execute(ctx.next_tokens, offsets, [b for c in caches for b in c]).to_numpy()[0]
            p.kv_manager.step([[ctx]])
            ctx.commit()
    finally:
        p.release(ctx.request_id)
    tol = 1e-4 * np.abs(logits).max()
    assert logits[want[parted]] - logits[got[parted]] <= tol, (
        f"{what}: token {parted} is {got[parted]}, not {want[parted]}, at a clear race "
        f"(logits {logits[want[parted]]:.6f} and {logits[got[parted]]:.6f})")
