"""Model files are untrusted: a wrong value in a config, an index, a sentence-transformers file or
the weights is a ValueError that names it, raised before anything is built from it (no hang, no
huge allocation, no traceback from deep inside), and the process stays usable."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from safetensors.numpy import load_file, save_file

from max.driver import DeviceSpec
from max.interfaces import SamplingParams
from max.pipelines import PipelineConfig
from max.pipelines.lib.pipeline import load_pipeline
from max.pipelines.lib.registry import PIPELINE_REGISTRY
from reference.checkpoints import write_checkpoint


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    return write_checkpoint("llama", tmp_path_factory.mktemp("llama"), seed=3)["hf_dir"]


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def _load(path: Path, **kw):
    return load_pipeline(PipelineConfig(model_path=str(path), max_length=64, device_specs=[DeviceSpec.cpu()],
                                        quantization_encoding="float32", **kw))


def _with_config(llama: Path, tmp_path: Path, change) -> Path:
    d = _copy(llama, tmp_path / "m")
    config = json.loads((d / "config.json").read_text())
    config = change(config)
    (d / "config.json").write_text(json.dumps(config))
    return d


@pytest.mark.parametrize("key, value, needle", [
    ("num_hidden_layers", 10**12, "num_hidden_layers must be a whole number from 1 to 2147483647"),
    ("num_hidden_layers", 100000, "gives 100000 layers but its weights hold layers 0 to 1"),
    ("num_hidden_layers", 1, "gives 1 layers but its weights hold layers 0 to 1"),
    ("num_hidden_layers", True, "num_hidden_layers must be a whole number"),
    ("num_key_value_heads", 2.5, "num_key_value_heads must be a whole number"),
    ("intermediate_size", "abc", "intermediate_size must be a whole number"),
    ("max_position_embeddings", 10**8, "max_position_embeddings must be a whole number from 1 to 4194304"),
    ("intermediate_size", None, "lacks .?intermediate_size"),
    ("max_position_embeddings", -1, "max_position_embeddings must be a whole number"),
    ("rope_theta", math.nan, "rope_theta must be a finite positive number"),
    ("rms_norm_eps", [1e-5], "rms_norm_eps must be a finite positive number"),
    ("rope_scaling", "abc", "rope_scaling must be an object"),
    ("rope_scaling", {"rope_type": "llama3"}, "rope_scaling \\(llama3\\) lacks factor"),
    ("rope_scaling", {"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 4,
                      "original_max_position_embeddings": 8192}, "low_freq_factor must be below high_freq_factor"),
    ("rope_scaling", {"rope_type": "linear", "factor": 0}, "rope_scaling.factor must be a finite positive"),
    ("partial_rotary_factor", 1.5, "partial_rotary_factor must be in"),
    ("architectures", [5], "architectures must be a list of names"),
    ("hidden_size", ..., "lacks hidden_size"),
])
def test_bad_config_values_are_named(llama, tmp_path, key, value, needle):
    d = _with_config(llama, tmp_path, lambda c: {k: v for k, v in {**c, key: value}.items() if v is not ...})
    with pytest.raises(ValueError, match=needle):
        _load(d)


@pytest.mark.parametrize("text, needle", [
    ("[1, 2]", "config.json must hold a JSON object, got list"),
    ("[" * 100000 + "]" * 100000, "config.json is not valid JSON"),
    ("{\"a\": \xff}", "config.json is not valid JSON"),
])
def test_config_file_that_is_not_an_object(llama, tmp_path, text, needle):
    d = _copy(llama, tmp_path / "m")
    (d / "config.json").write_bytes(text.encode("latin-1"))
    with pytest.raises(ValueError, match=needle):
        _load(d)


def test_transformers_5_rope_parameters_are_read(llama, tmp_path):
    """A config saved by transformers 5 gives its rope settings only as `rope_parameters`: the
    model runs with them (theta and Llama-3 scaling), as the reference (and transformers) do."""
    import numpy as np

    from max.pipelines.lib.context import TextContext
    from reference.checkpoints import LLAMA3_ROPE_SCALING
    from reference.llm import causal_lm_logits

    def v5(c):
        c = {k: v for k, v in c.items() if k not in ("rope_theta", "rope_scaling")}
        return {**c, "rope_parameters": {**LLAMA3_ROPE_SCALING, "rope_theta": 500000.0}}

    d = _with_config(llama, tmp_path, v5)
    config = json.loads((d / "config.json").read_text())
    weights = {k: np.asarray(v, np.float64) for k, v in load_file(str(d / "model.safetensors")).items()}
    p = _load(d)
    ids = list(range(5, 45))
    ctx = TextContext(max_length=64, tokens=np.array(ids))
    p.kv_manager.claim(ctx.request_id)
    p.kv_manager.alloc(ctx)
    (cache,) = p.kv_manager.get_runtime_inputs([[ctx]])
    got = p.model.execute(ctx.next_tokens, np.array([0, len(ids)], np.uint32), list(cache)).to_numpy()[0]
    want = causal_lm_logits(config, weights, ids)[-1]
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-4 * np.abs(want).max())
    assert not np.allclose(want, causal_lm_logits({**config, "rope_parameters": None}, weights, ids)[-1], atol=1e-2)


def test_gemma_layer_types_must_name_every_layer(tmp_path):
    ck = write_checkpoint("gemma3", tmp_path / "g", seed=3)
    config = json.loads((ck["hf_dir"] / "config.json").read_text())
    (ck["hf_dir"] / "config.json").write_text(json.dumps({**config, "layer_types": ["full_attention"]}))
    with pytest.raises(ValueError, match="layer_types must list"):
        _load(ck["hf_dir"])


def test_shard_index_is_checked(llama, tmp_path):
    d = _copy(llama, tmp_path / "m")
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": ["model.safetensors"]}))
    with pytest.raises(ValueError, match="weight_map must map names to files"):
        _load(d)
    (tmp_path / "outside.safetensors").write_bytes((d / "model.safetensors").read_bytes())
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": "../outside.safetensors"}}))
    with pytest.raises(ValueError, match="names shards outside the model directory"):
        _load(d)


def test_sharded_model_in_a_hub_cache_layout_loads(llama, tmp_path):
    """A Hugging Face cache snapshot's files are symlinks into blobs/: its shards are inside the
    model directory all the same."""
    blobs, snap = tmp_path / "blobs", tmp_path / "snapshots" / "rev"
    blobs.mkdir()
    snap.mkdir(parents=True)
    weights = load_file(str(llama / "model.safetensors"))
    names = sorted(weights)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2 :]}
    index = {"weight_map": {n: f for f, ns in shards.items() for n in ns}}
    for f, ns in shards.items():
        save_file({n: weights[n] for n in ns}, str(blobs / f))
        (snap / f).symlink_to(blobs / f)
    (blobs / "index").write_text(json.dumps(index))
    (snap / "model.safetensors.index.json").symlink_to(blobs / "index")
    for f in llama.iterdir():
        if not f.name.startswith("model"):
            (blobs / f.name).write_bytes(f.read_bytes())
            (snap / f.name).symlink_to(blobs / f.name)
    assert _load(snap) is not None


def test_tokenizer_adding_ids_outside_the_vocabulary(llama, tmp_path):
    d = _copy(llama, tmp_path / "m")
    tok = json.loads((d / "tokenizer.json").read_text())
    tok["post_processor"]["special_tokens"]["<|begin_of_text|>"]["ids"] = [1000000]
    (d / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(ValueError, match=r"the tokenizer adds token ids \[1000000\] to every prompt"):
        _load(d)


def test_weights_that_disagree_with_the_vocabulary(llama, tmp_path):
    d = _copy(llama, tmp_path / "m")
    weights = load_file(str(d / "model.safetensors"))
    save_file({k: v for k, v in weights.items() if k != "model.embed_tokens.weight"}, str(d / "model.safetensors"))
    with pytest.raises(ValueError, match="lacks the token embedding"):
        _load(d)
    save_file({**weights, "lm_head.weight": weights["lm_head.weight"][:7]}, str(d / "model.safetensors"))
    with pytest.raises(ValueError, match="lm_head.weight has 7 rows, the token embedding 400"):
        _load(d)
    save_file(weights, str(d / "model.safetensors"))
    assert _load(d) is not None  # the same process loads a good model afterwards


def test_bert_files_are_checked(tmp_path):
    from max.interfaces import PipelineTask

    ck = write_checkpoint("bert", tmp_path / "b", seed=3)
    d = ck["hf_dir"]

    def load():
        return load_pipeline(PipelineConfig(model_path=str(d), device_specs=[DeviceSpec.cpu()]),
                             task=PipelineTask.EMBEDDINGS_GENERATION)

    config = json.loads((d / "config.json").read_text())
    for change, needle in [({"num_attention_heads": 3}, "hidden_size 64 is not a multiple of its 3 attention heads"),
                           ({"num_hidden_layers": 10**6}, "gives 1000000 layers but its weights hold layers 0 to 1")]:
        (d / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(ValueError, match=needle):
            load()
    (d / "config.json").write_text(json.dumps(config))
    modules = (d / "modules.json").read_text()
    (d / "modules.json").write_text('{"a": 1}')
    with pytest.raises(ValueError, match="modules.json must hold a JSON list"):
        load()
    (d / "modules.json").write_text(modules)
    (d / "sentence_bert_config.json").write_text('{"max_seq_length": -5}')
    with pytest.raises(ValueError, match="max_seq_length must be a whole number"):
        load()


def test_quantization_encoding_must_match_the_weights():
    """--quantization-encoding: a GGUF block encoding the file's weights do not use, or an
    encoding no pipeline loads (GPTQ, float8), is refused instead of silently ignored; a float
    encoding sets the activations' dtype; a block encoding needs a GGUF file."""
    import numpy as np

    from max import driver
    from max.dtype import DType
    from max.graph.quantization import QuantizationEncoding as Q
    from max.graph.weights import WeightData
    from max.pipelines.lib.decoder import choose_dtype

    def w(name, enc):
        data = WeightData.from_numpy(np.zeros((2, 18), np.uint8), name)
        data.quantization_encoding = enc
        return data

    weights = {"a": w("a", Q.Q4_1), "b": w("b", Q.Q8_0), "norm": w("norm", None)}
    cpu = driver.CPU()
    assert choose_dtype("gguf", {}, "q4_1", cpu, weights) == DType.float32
    assert choose_dtype("gguf", {}, "Q8_0", cpu, weights) == DType.float32
    assert choose_dtype("gguf", {}, "bfloat16", cpu, weights) == DType.bfloat16
    with pytest.raises(ValueError, match=r"q4_k: the GGUF file's weights are not in it \(their block encodings: Q4_1, Q8_0\)"):
        choose_dtype("gguf", {}, "q4_k", cpu, weights)
    for enc in ("gptq", "float8_e4m3fn"):
        with pytest.raises(ValueError, match=f"{enc}: models with such weights are not supported"):
            choose_dtype("gguf", {}, enc, cpu, weights)
    with pytest.raises(ValueError, match="q4_0 needs a GGUF file; this model is safetensors"):
        choose_dtype("safetensors", {}, "q4_0", cpu, {})


def test_request_and_registry_values():
    for bad in ({"temperature": math.inf}, {"temperature": 1e39}, {"repetition_penalty": math.inf},
                {"repetition_penalty": math.nan}, {"repetition_penalty": 1e300}, {"repetition_penalty": 1e-300}):
        # (the samplers take them as float32: 1e300 was inf there, 1e-300 zero)
        with pytest.raises(ValueError, match=r"must be a number .* within float32's"):
            SamplingParams(**bad)
    assert SamplingParams(temperature=1e-40, repetition_penalty=1e-30).repetition_penalty == 1e-30
    with pytest.raises(ValueError, match="top_k must be a 64-bit integer"):
        SamplingParams(top_k=2**63)
    with pytest.raises(ValueError, match="stop_token_ids must be token ids"):
        SamplingParams(stop_token_ids=[-1])
    with pytest.raises(ValueError, match="cannot import 'no_such_module_here'"):
        PIPELINE_REGISTRY.load_custom(["no_such_module_here"])
    with pytest.raises(ValueError, match="no such directory '/no/such/dir'"):
        PIPELINE_REGISTRY.load_custom(["/no/such/dir:mod"])


def test_kv_cache_format(llama):
    """`kv_cache_format` (`--kv-cache-format`) of a decoder sets its cache's dtype (a name or a
    DType); one the engine does not take is an error naming it (never silently ignored)."""
    from max.dtype import DType

    assert _load(llama, kv_cache_format="float32").model.kv_params.dtype == DType.float32
    assert _load(llama, kv_cache_format=DType.bfloat16).model.kv_params.dtype == DType.bfloat16
    for f8 in ("float8_e4m3fn", DType.float8_e4m3fn):
        with pytest.raises(NotImplementedError, match="float8 KV caches are not supported yet"):
            PipelineConfig(model_path=str(llama), kv_cache_format=f8)
    with pytest.raises(ValueError, match="kv_cache_format must be float32, bfloat16 or float16, got 'int8'"):
        PipelineConfig(model_path=str(llama), kv_cache_format="int8")


def test_kv_cache_format_flag_reaches_the_config():
    import argparse

    from max.entrypoints.cli.options import add_model_flags, pipeline_config

    p = argparse.ArgumentParser()
    add_model_flags(p)
    cfg = pipeline_config(p.parse_args(["--model-path", "m", "--kv-cache-format", "bfloat16"]))
    assert cfg.model.kv_cache.kv_cache_format == "bfloat16"
    assert pipeline_config(p.parse_args(["--model-path", "m"])).model.kv_cache.kv_cache_format is None
