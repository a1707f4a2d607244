"""Multi-step decode (``TextGenerationInputs.num_steps``) on the real SmolLM2 GGUF: several
steps in one ``execute`` give exactly the tokens of as many single steps (greedy and seeded
sampling, a ragged batch), stop where a single-step run stops, leave the cache consistent for
the next request, and fall back to one step where the batch needs the host between steps."""

from __future__ import annotations

import numpy as np
import pytest

from max.driver import DeviceSpec
from max.interfaces import GenerationStatus, SamplingParams, TextGenerationInputs
from max.pipelines import PipelineConfig
from max.pipelines.lib import multistep
from max.pipelines.lib.context import TextContext
from max.pipelines.lib.pipeline import load_pipeline
from models import smollm2_gguf
from reference.checkpoints import write_checkpoint

MAX_LENGTH = 256


@pytest.fixture(scope="module")
def pipeline():
    return load_pipeline(PipelineConfig(model_path=str(smollm2_gguf()), max_length=MAX_LENGTH, max_batch_size=4,
                                        device_specs=[DeviceSpec.cpu()]))


def _contexts(prompts, sp):
    return [TextContext(max_length=MAX_LENGTH, tokens=p, sampling_params=sp) for p in prompts]


def _generate(pipeline, ctxs, num_steps):
    """Runs `ctxs` together to completion; returns each one's generated tokens and the number of
    tokens each output carried."""
    sizes = []
    try:
        while any(not c.is_done for c in ctxs):
            live = [c for c in ctxs if not c.is_done]
            outs = pipeline.execute(TextGenerationInputs([{c.request_id: c for c in live}], num_steps=num_steps))
            for c in live:
                assert outs[c.request_id].tokens == c.generated_tokens[-len(outs[c.request_id].tokens):].tolist()
                sizes.append(len(outs[c.request_id].tokens))
    finally:
        for c in ctxs:
            pipeline.release(c.request_id)
    return [c.generated_tokens.tolist() for c in ctxs], sizes


def _prompts(seed, lengths=(5, 23, 11)):
    rng = np.random.default_rng(seed)
    return [rng.integers(100, 40000, n) for n in lengths]


@pytest.mark.parametrize("sp", [
    SamplingParams(top_k=1, max_new_tokens=11, ignore_eos=True),
    SamplingParams(temperature=0.9, top_k=40, top_p=0.95, seed=1234, max_new_tokens=11, ignore_eos=True),
], ids=["greedy", "seeded"])
def test_several_steps_give_the_tokens_of_single_steps(pipeline, sp):
    prompts = _prompts(3)
    single, sizes1 = _generate(pipeline, _contexts(prompts, sp), 1)
    multi, sizes4 = _generate(pipeline, _contexts(prompts, sp), 4)
    assert multi == single
    assert all(len(t) == 11 for t in multi)
    assert set(sizes1) == {1}
    assert max(sizes4) == 4  # the decode steps really ran four at a time


def test_a_stop_token_inside_the_steps_ends_the_request_there(pipeline):
    sp = SamplingParams(top_k=1, max_new_tokens=20, ignore_eos=True)
    prompts = _prompts(5, (9,))
    (single,), _ = _generate(pipeline, _contexts(prompts, sp), 1)
    # the first token that has not appeared before it, at least 3 tokens in
    at = next(i for i in range(3, len(single)) if single[i] not in single[:i])
    stop = SamplingParams(top_k=1, max_new_tokens=20, stop_token_ids=[single[at]])
    (ctx,) = _contexts(prompts, stop)
    (multi,), _ = _generate(pipeline, [ctx], 8)
    assert multi == single[: at + 1]
    assert ctx.status == GenerationStatus.END_OF_SEQUENCE
    # the cache holds what a single-step run leaves: the next request is unaffected
    (again,), _ = _generate(pipeline, _contexts(prompts, sp), 8)
    assert again == single


def test_steps_stop_at_max_length(pipeline):
    sp = SamplingParams(top_k=1, ignore_eos=True)
    prompts = _prompts(9, (MAX_LENGTH - 6,))
    (single,), _ = _generate(pipeline, _contexts(prompts, sp), 1)
    (multi,), _ = _generate(pipeline, _contexts(prompts, sp), 8)
    assert multi == single and len(multi) == 6


@pytest.mark.parametrize("devices", [1, 2])
def test_one_copy_of_the_inputs_per_call_and_device(tmp_path, monkeypatch, devices):
    """The steps a call queues after its first move their inputs (cache inputs, row offsets,
    seeds) to each device in one copy; the tokens stay those of single steps, seeded sampling
    included, on one device and split over two simulated ones (a sampler per device)."""
    ckpt = write_checkpoint(directory=tmp_path, seed=21, arch="llama")
    sp = SamplingParams(temperature=0.9, top_k=20, seed=77, max_new_tokens=13, ignore_eos=True)
    prompts = [np.random.default_rng(5).integers(5, ckpt["config"]["vocab_size"], n) for n in (7, 12)]
    p = load_pipeline(PipelineConfig(model_path=str(ckpt["hf_dir"]), max_length=64, quantization_encoding="float32",
                                     device_specs=[DeviceSpec.cpu(i) for i in range(devices)], kv_cache_page_size=16))
    single, _ = _generate(p, [TextContext(max_length=64, tokens=t, sampling_params=sp) for t in prompts], 1)
    copies = []
    real = multistep.upload
    monkeypatch.setattr(multistep, "upload", lambda arrays, d: copies.append(len(arrays)) or real(arrays, d))
    multi, sizes = _generate(p, [TextContext(max_length=64, tokens=t, sampling_params=sp) for t in prompts], 5)
    assert multi == single and max(sizes) == 5
    # per call of 5 steps: one copy per device of the row offsets, the page table the steps
    # share and 4 steps' 4 arrays each
    assert copies and copies[:devices] == [2 + 4 * 4] * devices


def test_plan_takes_one_step_when_the_host_is_needed_between_steps():
    def ctx(n=1, **sp):
        c = TextContext(max_length=100, tokens=np.arange(1, 6), sampling_params=SamplingParams(**sp))
        if n == 1:
            c.commit()
            c.append(7)  # decoding: one new token
        return c

    assert multistep.plan([ctx(), ctx()], 8, 100) == 8
    assert multistep.plan([ctx(), ctx(n=5)], 8, 100) == 1  # a prompt in the batch
    assert multistep.plan([ctx(repetition_penalty=1.2)], 8, 100) == 1
    lp = ctx()
    lp.log_probabilities = 2
    assert multistep.plan([lp], 8, 100) == 1
    assert multistep.plan([ctx(max_new_tokens=3)], 8, 100) == 2  # one generated, two to go
    assert multistep.plan([ctx()], 8, 9) == 3  # 6 held, room for 3 more
    assert multistep.plan([ctx()], 1, 100) == 1


@pytest.mark.gpu
def test_several_steps_on_the_gpu_give_the_tokens_of_single_steps(gpu, tmp_path):
    """The captured decode step fed by the device's own sampled ids (a random SmolLM2-shaped
    bf16 model: the ids depend only on the arithmetic, which both runs share)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from llm_files import SHAPES, write_safetensors_model

    path = write_safetensors_model(tmp_path / "m", SHAPES["smollm2-135m"])
    p = load_pipeline(PipelineConfig(model_path=str(path), max_length=MAX_LENGTH, max_batch_size=4,
                                     device_specs=[DeviceSpec.accelerator(0)]))
    assert p.decode_steps == 8
    for sp in (SamplingParams(top_k=1, max_new_tokens=30, ignore_eos=True),
               SamplingParams(temperature=0.8, top_k=20, seed=7, max_new_tokens=30, ignore_eos=True)):
        prompts = _prompts(11, (7, 40, 19))
        single, _ = _generate(p, _contexts(prompts, sp), 1)
        multi, sizes = _generate(p, _contexts(prompts, sp), 8)
        assert multi == single and max(sizes) == 8


def test_context_tokens_grow_in_place_and_follow_assignments():
    """append/extend (the steps' bookkeeping) fill spare room instead of copying the tokens each
    time; views taken earlier keep their tokens, and an assigned array is noticed."""
    ctx = TextContext(max_length=100, tokens=[1, 2, 3])
    held = ctx.tokens
    for t in range(4, 40):
        ctx.append(t)
    ctx.extend([40, 41, 42])
    assert ctx.tokens.tolist() == list(range(1, 43)) and ctx.tokens.dtype == np.int64
    assert (ctx.end_idx, ctx.active_idx, ctx.step_count) == (42, 42, 39)
    assert held.tolist() == [1, 2, 3] and ctx.generated_tokens.tolist() == list(range(4, 43))
    ctx.tokens = np.array([7, 8])
    ctx.append(9)
    assert ctx.tokens.tolist() == [7, 8, 9] and ctx.end_idx == 3


def test_context_copies_and_pickles_share_no_room():
    """A copy (shallow or deep) or an unpickled context grows on its own: appending to one never
    shows in the other, and a pickle holds the tokens, not the spare room."""
    import copy
    import pickle

    ctx = TextContext(max_length=1000, tokens=[1, 2, 3])
    ctx.extend(list(range(4, 20)))
    for other in (copy.copy(ctx), copy.deepcopy(ctx), pickle.loads(pickle.dumps(ctx))):
        other.append(55)
        ctx.append(66)
        assert other.tokens[-1] == 55 and ctx.tokens[-1] == 66
        assert other.tokens[:-1].tolist() == list(range(1, 20))
        ctx.tokens = ctx.tokens[:-1]
    assert len(pickle.dumps(ctx)) < 2000
