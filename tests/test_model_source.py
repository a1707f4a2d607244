"""Finding models on disk and reading their configuration: clear errors for missing files,
unreadable or inconsistent metadata (model files are untrusted)."""

from __future__ import annotations

import json

import gguf
import numpy as np
import pytest

from max.pipelines.lib.model_source import gguf_to_hf_config, resolve

BASE = {"general.architecture": "llama", "llama.embedding_length": 64, "llama.attention.head_count": 4,
        "llama.block_count": 2}


@pytest.mark.parametrize("bad,needle", [
    ({"llama.block_count": 0}, "block_count must be a whole number from 1"),
    ({"llama.attention.head_count": "x"}, "head_count must be a whole number"),
    ({"llama.embedding_length": 1 << 63}, "embedding_length must be a whole number from 1 to 2147483647"),
    ({"llama.attention.head_count": 2.5}, "head_count must be a whole number"),
    ({"llama.context_length": [1, 2]}, "context_length must be a whole number"),
    ({"llama.rope.dimension_count": "abc"}, "rope.dimension_count must be a whole number"),
    ({"llama.rope.dimension_count": 7}, "rope.dimension_count must be even and at most its head size 16, got 7"),
    ({"llama.rope.dimension_count": 1000}, "rope.dimension_count must be even and at most"),
    ({"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": "x"}, "rope.scaling.factor must be a finite"),
    ({"llama.attention.head_count_kv": 3}, "not a multiple of its 3 kv heads"),
    ({"llama.embedding_length": None}, "lacks llama.embedding_length"),
    ({"general.architecture": None}, "no general.architecture"),
])
def test_bad_gguf_metadata(bad, needle):
    with pytest.raises(ValueError, match=needle):
        gguf_to_hf_config({**BASE, **bad})


def test_gguf_config_keys():
    c = gguf_to_hf_config({**BASE, "llama.attention.head_count_kv": 2, "llama.rope.freq_base": 5e5})
    assert c["architectures"] == ["LlamaForCausalLM"] and c["head_dim"] == 16 and c["num_key_value_heads"] == 2
    assert c["rope_theta"] == 5e5
    # per-layer counts (a list, one per layer) give the first layer's
    c = gguf_to_hf_config({**BASE, "llama.attention.head_count_kv": [2, 2], "llama.feed_forward_length": [96, 96]})
    assert c["num_key_value_heads"] == 2 and c["intermediate_size"] == 96


def test_resolve_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve(str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        resolve(str(tmp_path))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        resolve(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(FileNotFoundError, match="holds no safetensors"):
        resolve(str(tmp_path))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "shard-1.safetensors"}}))
    with pytest.raises(FileNotFoundError, match="names shards that are missing"):
        resolve(str(tmp_path))
    text = tmp_path / "weights.txt"
    text.write_text("hello")
    with pytest.raises(ValueError, match="not a .gguf file"):
        resolve(str(text))


def test_weight_paths_that_would_be_ignored_are_refused(tmp_path):
    """A GGUF model path holds the weights: another --weight-path is refused rather than
    silently ignored; so are several GGUF weight files, or GGUF mixed with safetensors (the
    paths are checked before any file is read)."""
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF")
    st = tmp_path / "model.safetensors"
    st.write_bytes(b"{}")
    with pytest.raises(ValueError, match="is a GGUF file, which holds the weights itself; --weight-path .*other.gguf"):
        resolve(str(model), [other])
    with pytest.raises(ValueError, match="a GGUF model is one file"):
        resolve(str(tmp_path), [model, other])
    with pytest.raises(ValueError, match="do not mix"):
        resolve(str(tmp_path), [model, st])


def test_a_gguf_with_inconsistent_heads_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_embedding_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(3)
    w.add_tensor("token_embd.weight", np.zeros((8, 64), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ValueError, match="not a multiple of its 3 kv heads"):
        resolve(str(path))
