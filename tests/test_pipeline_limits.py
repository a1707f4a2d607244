"""The text-generation pipeline's limits and the registry's lookups on a tiny random Llama
checkpoint (CPU): a context's own max_length bounds what ``execute`` generates (one step or
several), a context with no room ends without running the model, a request that fails in the
offline API gives its cache pages back, and the registry keeps same-named architectures of
different tasks apart, honours override_architecture and loads lazily in retrieve_factory."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from max.driver import DeviceSpec
from max.entrypoints.llm import LLM
from max.interfaces import GenerationStatus, PipelineTask, SamplingParams, TextGenerationInputs
from max.pipelines import PipelineConfig
from max.pipelines.lib.context import TextContext
from max.pipelines.lib.pipeline import load_pipeline
from max.pipelines.lib.registry import PipelineRegistry
from max.pipelines.lib.registry import PIPELINE_REGISTRY
from reference.checkpoints import write_checkpoint


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("llama")
    write_checkpoint("llama", d, seed=5)
    return str(d / "hf")


def _config(model_dir, **kw):
    return PipelineConfig(model_path=model_dir, device_specs=[DeviceSpec.cpu()], **kw)


@pytest.fixture(scope="module")
def pipeline(model_dir):
    return load_pipeline(_config(model_dir, max_length=64, max_batch_size=4))


def _run(pipeline, ctx, num_steps=1):
    tokens = []
    while not ctx.is_done:
        out = pipeline.execute(TextGenerationInputs([{ctx.request_id: ctx}], num_steps=num_steps))
        tokens += out[ctx.request_id].tokens
    pipeline.release(ctx.request_id)
    return tokens


def _ctx(n, max_length=64, **sp):
    return TextContext(max_length=max_length, tokens=np.arange(1, n + 1) % 300,
                       sampling_params=SamplingParams(top_k=1, ignore_eos=True, **sp))


@pytest.mark.parametrize("num_steps", [1, 8])
def test_a_context_stops_at_its_own_max_length(pipeline, num_steps):
    ctx = _ctx(5, max_length=8)
    tokens = _run(pipeline, ctx, num_steps)
    assert len(tokens) == 3 and ctx.end_idx == 8 and ctx.status == GenerationStatus.MAXIMUM_LENGTH
    # the same tokens as a context the pipeline's own max_length bounds, cut at 3
    assert tokens == _run(pipeline, _ctx(5, max_new_tokens=3), num_steps)


def test_a_context_without_room_ends_without_running_the_model(pipeline):
    calls = []
    original = pipeline.model.execute_all
    pipeline.model.execute_all = lambda *a, **k: calls.append(1) or original(*a, **k)
    try:
        full = _ctx(64)  # the prompt fills the pipeline's window
        none = _ctx(3, max_new_tokens=0)
        out = pipeline.execute(TextGenerationInputs([{full.request_id: full, none.request_id: none}]))
    finally:
        pipeline.model.execute_all = original
    assert calls == []
    for ctx in (full, none):
        assert out[ctx.request_id].tokens == [] and ctx.status == GenerationStatus.MAXIMUM_LENGTH
        assert not pipeline.kv_manager.contains(ctx.request_id)
    # beside a context that runs, only that one does
    live = _ctx(4, max_new_tokens=2)
    out = pipeline.execute(TextGenerationInputs([{live.request_id: live, none.request_id: none}]))
    assert len(out[live.request_id].tokens) == 1 and out[none.request_id].tokens == []
    _run(pipeline, live)


def test_a_failed_request_gives_its_pages_back(model_dir):
    llm = LLM(_config(model_dir, max_length=32, max_batch_size=2))
    kv = llm._pipeline.kv_manager
    free = kv.free_pages
    for _ in range(3):
        with pytest.raises(ValueError, match="outside the model's vocabulary"):
            llm.generate([[1, 2, 99999]], max_new_tokens=3)
        assert kv.free_pages == free
    (text,) = llm.generate(["hello"], max_new_tokens=3)
    assert isinstance(text, str)


def test_same_named_architectures_of_other_tasks_and_overrides(model_dir):
    llama = PIPELINE_REGISTRY.architectures["LlamaForCausalLM"]
    reg = PipelineRegistry([llama])
    emb = dataclasses.replace(llama, task=PipelineTask.EMBEDDINGS_GENERATION)
    reg.register(emb)
    assert reg.retrieve_architecture("LlamaForCausalLM", task=PipelineTask.EMBEDDINGS_GENERATION) is emb
    assert reg.retrieve_architecture("LlamaForCausalLM", task=PipelineTask.TEXT_GENERATION) is llama
    assert reg.retrieve_architecture("LlamaForCausalLM") is llama
    with pytest.raises(ValueError, match="already registered"):
        reg.register(emb)
    with pytest.raises(ValueError, match="already registered"):
        reg.register(llama)
    with pytest.raises(ValueError, match="'NoSuchArchitecture' is not a registered architecture"):
        PIPELINE_REGISTRY.retrieve(_config(model_dir, max_length=16), override_architecture="NoSuchArchitecture")
    with pytest.raises(ValueError, match="BertModel.*not a text_generation"):
        PIPELINE_REGISTRY.retrieve(_config(model_dir, max_length=16), override_architecture="BertModel")


def test_retrieve_factory_loads_a_pipeline_at_each_call(model_dir, monkeypatch):
    import max.pipelines.lib.pipeline as pl

    loads = []
    original = pl.DecoderModel.__init__
    monkeypatch.setattr(pl.DecoderModel, "__init__", lambda self, *a, **k: loads.append(1) or original(self, *a, **k))
    tokenizer, factory = PIPELINE_REGISTRY.retrieve_factory(_config(model_dir, max_length=16))
    assert loads == [] and tokenizer.encode_sync("hello").size > 0
    a, b = factory(), factory()
    assert a is not b and a.kv_manager is not b.kv_manager and len(loads) == 2


def test_registry_retrieves_task_tokenizer_and_context_type(model_dir):
    from max.pipelines.lib.context import EmbeddingContext

    config = _config(model_dir, max_length=16)
    assert PIPELINE_REGISTRY.retrieve_pipeline_task(config) == PipelineTask.TEXT_GENERATION
    assert PIPELINE_REGISTRY.retrieve_tokenizer(config).encode_sync("hello").size > 0
    assert PIPELINE_REGISTRY.retrieve_context_type(config) is TextContext
    assert PIPELINE_REGISTRY.retrieve_context_type(config, override_architecture="BertModel",
                                                   task=PipelineTask.EMBEDDINGS_GENERATION) is EmbeddingContext


def _first_tokens(pipeline, sp, n=1):
    ctx = TextContext(max_length=64, tokens=np.array([5, 17, 42, 99, 7]), sampling_params=sp)
    return _run(pipeline, ctx)[:n], ctx


def test_min_new_tokens_masks_the_tokens_that_would_end_the_request(model_dir, pipeline):
    """Before min_new_tokens an EOS or stop token may not be chosen (MAX's --enable-min-tokens:
    it "blocks the model from generating stopping tokens"); with enable_min_tokens off it ends the
    request at once, and with enable_penalties off penalties change nothing."""
    greedy = SamplingParams(top_k=1, max_new_tokens=4, ignore_eos=True)
    (first,), _ = _first_tokens(pipeline, greedy)
    for stop in (dict(stop_token_ids=[first]), dict()):
        sp = SamplingParams(top_k=1, max_new_tokens=4, min_new_tokens=3, **stop)
        ctx = TextContext(max_length=64, tokens=np.array([5, 17, 42, 99, 7]), sampling_params=sp,
                          eos_token_ids=set() if stop else {first})
        tokens = _run(pipeline, ctx)
        assert first not in tokens[:3] and len(tokens) >= 3, tokens
    off = load_pipeline(_config(model_dir, max_length=64, max_batch_size=4, enable_min_tokens=False,
                                enable_penalties=False))
    sp = SamplingParams(top_k=1, max_new_tokens=4, min_new_tokens=3, stop_token_ids=[first])
    assert _first_tokens(off, sp, 4)[0] == [first]
    plain = _first_tokens(off, SamplingParams(top_k=1, max_new_tokens=6, ignore_eos=True), 6)[0]
    penalized = SamplingParams(top_k=1, max_new_tokens=6, ignore_eos=True, frequency_penalty=2.0,
                               repetition_penalty=1.5)
    assert _first_tokens(off, penalized, 6)[0] == plain


def test_parameters_of_the_wrong_type_are_named():
    for kw, shown in ((dict(seed=1.5), "seed must be an integer, got 1.5"),
                      (dict(max_new_tokens=2.5), "max_new_tokens must be an integer"),
                      (dict(top_k=None), "top_k must be an integer, got None"),
                      (dict(min_new_tokens=True), "min_new_tokens must be an integer, got True"),
                      (dict(stop_token_ids=7), "stop_token_ids must be a list of token ids, got 7"),
                      (dict(stop_token_ids=[1.5]), "stop_token_ids must be integer token ids, got 1.5"),
                      (dict(temperature="0.5"), "temperature must be a number, got '0.5'")):
        with pytest.raises(ValueError, match=shown):
            SamplingParams(**kw)
    assert SamplingParams(seed=np.uint64(2**63), top_k=np.int64(5)).top_k == 5
    for bad in (-3, 25, 1.5):
        with pytest.raises(ValueError, match=r"log_probabilities must be an integer in \[0, 20\]"):
            TextContext(max_length=8, tokens=np.array([1]), log_probabilities=bad)
    with pytest.raises(ValueError, match="log_probabilities_echo .* is not supported"):
        TextContext(max_length=8, tokens=np.array([1]), log_probabilities=1, log_probabilities_echo=True)
    assert TextGenerationInputs([]).batch == {}
