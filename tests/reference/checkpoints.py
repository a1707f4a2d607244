"""Write tiny random-weight checkpoints: a Hugging Face directory and the GGUF llama.cpp would make of it.

`write_checkpoint(arch, directory, ...)` for arch in llama, smollm3, mistral, granite, qwen2, qwen3, gemma2, gemma3, phi3,
olmo2 (decoders) and bert
writes under `directory`:
- `hf/`: config.json, generation_config.json, model.safetensors (or two shards + index),
  tokenizer.json, tokenizer_config.json (with a chat template); for bert also vocab.txt and the
  sentence-transformers files (modules.json, 1_Pooling/config.json with mean pooling, ...);
- `model.gguf` (decoders only; checkpoint_gguf.py): written with gguf.GGUFWriter as convert_hf_to_gguf.py writes that
  architecture (metadata keys, tensor names, q/k permutation for llama, 1 + w Gemma norms, tokenizer;
  Mistral as the converter writes it: the "llama" architecture, without the sliding window).

It returns {"config", "weights", "hf_dir", "gguf", "gguf_config", "tokenizer"} (`gguf_config`: the model
the GGUF describes, as a config.json; the same as `config` except for Mistral, which the GGUF holds as a
Llama without the window): `weights` maps HF names to float64
arrays holding exactly the values stored (in both files: with `gguf_quant`, the safetensors file stores
the dequantized GGUF values, so the two files describe the same model), ready for `llm.py`.

Sizes: hidden 64, 4 heads, intermediate 128, vocab 400 (the toy tokenizer); smollm3 4 layers (the last
without rotary embeddings, as every fourth); llama, mistral, granite, qwen2, phi3 and olmo2 2 layers with 2 kv heads and head_dim 16 (mistral and phi3: a sliding window of 8 tokens;
granite: its four multipliers; phi3: q/k/v in one `qkv_proj` and gate/up in one `gate_up_proj`, as Phi-3
stores them; olmo2: post-norms and q/k norms over all heads); qwen3 head_dim 32 (q_proj wider than hidden,
as in real Qwen3); gemma2 4 layers (every other one sliding with window 8, the first included), 2 kv heads,
head_dim 32; gemma3 6 layers (5 sliding with window 8, then 1 global: llama.cpp's fixed Gemma 3 pattern),
1 kv head, head_dim 32. `config_overrides` changes any config.json value (e.g.
`rope_scaling=LLAMA3_ROPE_SCALING`, `tie_word_embeddings`, `attention_bias`, `hidden_size=256` for
K-quant-sized rows).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import gguf
import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

from .checkpoint_gguf import FLOAT_GGUF_TYPES, gguf_payloads, write_gguf
from .toy_tokenizer import SPECIALS, bpe_tokenizer, wordpiece_tokenizer

DECODER_ARCHS = ("llama", "smollm3", "mistral", "granite", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "olmo2")

LLAMA3_ROPE_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    # 8192 as in Llama 3.1: convert_hf_to_gguf.py reads this key at the top level of config.json and
    # falls back to 8192, so any other value would make the GGUF disagree with the HF model.
    "original_max_position_embeddings": 8192,
}
GEMMA3_LINEAR_ROPE_SCALING = {"rope_type": "linear", "factor": 8.0}  # global layers only, as Gemma 3 4B+
# Phi-3.5 / Phi-4-mini's LongRoPE (factors for 12 rotary dims, exact in float32 as a GGUF stores them),
# and the overrides that make the tiny Phi-3 a Phi-4-mini: 3/4 of each head rotated, context 256 over an
# original 32 (attention factor sqrt(1 + ln 8 / ln 32)), tied embeddings, no window.
PHI3_LONGROPE_SCALING = {
    "rope_type": "longrope",
    "short_factor": [1.0, 1.25, 1.5, 2.0, 3.0, 4.0],
    "long_factor": [1.0, 2.0, 4.0, 8.0, 16.0, 32.0],
}
PHI3_LONGROPE_OVERRIDES = {
    "rope_scaling": PHI3_LONGROPE_SCALING, "partial_rotary_factor": 0.75, "original_max_position_embeddings": 32,
    "sliding_window": None, "tie_word_embeddings": True,
}

_TOKENIZER_FAMILY = {"llama": "llama", "smollm3": "llama", "mistral": "llama", "granite": "llama", "qwen2": "qwen", "qwen3": "qwen",
                     "gemma2": "gemma3", "gemma3": "gemma3", "phi3": "llama", "olmo2": "llama"}
_DEFAULT_PRETOKENIZER = {"llama": "llama-bpe", "smollm3": "llama-bpe", "mistral": "llama-bpe", "granite": "llama-bpe", "qwen2": "qwen2",
                         "qwen3": "qwen2", "gemma2": "gpt-2", "gemma3": "gpt-2",
                         "phi3": "gpt-2", "olmo2": "llama-bpe"}
# The GGUF architecture convert_hf_to_gguf.py writes for each.
_GGUF_ARCH = {"mistral": "llama"}
_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


# ----------------------------------------------------------------------------------------------
# config.json
# ----------------------------------------------------------------------------------------------


def decoder_config(arch: str, tokenizer, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """A small but realistic config.json for `arch`, with the tokenizer's size and special ids."""
    spec = SPECIALS[_TOKENIZER_FAMILY[arch]]
    ids = {role: tokenizer.token_to_id(spec[role]) if spec[role] else None for role in ("bos", "eos", "pad")}
    extra_eos = [tokenizer.token_to_id(t) for t in spec["extra_eos"]]
    common = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "max_position_embeddings": 256,
        "vocab_size": tokenizer.get_vocab_size(with_added_tokens=True),
        "bos_token_id": ids["bos"],
        "eos_token_id": [ids["eos"], *extra_eos] if extra_eos else ids["eos"],
        "pad_token_id": ids["pad"],
        "initializer_range": 0.02,
        "attention_dropout": 0.0,
        "use_cache": True,
        "torch_dtype": "float32",
    }
    if arch == "llama":
        config = {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", **common,
            "num_hidden_layers": 2, "num_key_value_heads": 2, "head_dim": 16, "hidden_act": "silu",
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": None,
            "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
        }
    elif arch == "smollm3":  # 4 layers: the last without rope (every fourth, as llama.cpp fixes it)
        config = {
            "architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3", **common,
            "num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 16, "hidden_act": "silu",
            "rms_norm_eps": 1e-6, "rope_theta": 5000000.0, "rope_scaling": None, "attention_bias": False,
            "mlp_bias": False, "tie_word_embeddings": True, "no_rope_layer_interval": 4, "use_sliding_window": False,
        }
    elif arch == "mistral":
        config = {
            "architectures": ["MistralForCausalLM"], "model_type": "mistral", **common,
            "num_hidden_layers": 2, "num_key_value_heads": 2, "head_dim": 16, "hidden_act": "silu",
            "rms_norm_eps": 1e-5, "rope_theta": 1000000.0, "sliding_window": 8, "tie_word_embeddings": False,
        }
    elif arch == "granite":  # none of the four multipliers neutral (Granite 3 8B: 12, 0.22, 1/128, 16)
        config = {
            "architectures": ["GraniteForCausalLM"], "model_type": "granite", **common,
            "num_hidden_layers": 2, "num_key_value_heads": 2, "hidden_act": "silu", "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False, "mlp_bias": False,
            "tie_word_embeddings": True, "embedding_multiplier": 0.5, "residual_multiplier": 1.5,
            "attention_multiplier": 0.375, "logits_scaling": 0.5,
        }
    elif arch == "olmo2":
        config = {
            "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", **common,
            "num_hidden_layers": 2, "num_key_value_heads": 2, "hidden_act": "silu", "rms_norm_eps": 1e-6,
            "rope_theta": 500000.0, "rope_scaling": None, "attention_bias": False, "tie_word_embeddings": False,
        }
    elif arch == "phi3":  # Phi-3-mini-4k-like (its window, 2047, is 8 here); Phi-4-mini by overrides
        config = {
            "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", **common,
            "num_hidden_layers": 2, "num_key_value_heads": 2, "hidden_act": "silu", "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0, "rope_scaling": None, "partial_rotary_factor": 1.0, "sliding_window": 8,
            "original_max_position_embeddings": 256, "tie_word_embeddings": False,
        }
    elif arch in ("qwen2", "qwen3"):
        config = {
            "architectures": ["Qwen2ForCausalLM" if arch == "qwen2" else "Qwen3ForCausalLM"], "model_type": arch,
            **common, "num_hidden_layers": 2, "num_key_value_heads": 2, "head_dim": 16 if arch == "qwen2" else 32,
            "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None,
            "use_sliding_window": False, "sliding_window": None, "max_window_layers": 2,
            "tie_word_embeddings": True,
        }
        if arch == "qwen3":
            config["attention_bias"] = False
    elif arch == "gemma2":  # layers 0, 2, 4 sliding (window 8), softcaps as Gemma 2's
        config = {
            "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", **common,
            "num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 32,
            "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
            "sliding_window": 8, "query_pre_attn_scalar": 32, "attn_logit_softcapping": 50.0,
            "final_logit_softcapping": 30.0, "attention_bias": False, "tie_word_embeddings": True,
            "layer_types": ["sliding_attention", "full_attention"] * 2,
        }
    elif arch == "gemma3":
        config = {
            "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", **common,
            "num_hidden_layers": 6, "num_key_value_heads": 1, "head_dim": 32,
            "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": None,
            "sliding_window": 8, "sliding_window_pattern": 6, "query_pre_attn_scalar": 32,
            "attn_logit_softcapping": None, "final_logit_softcapping": None,
            "attention_bias": False, "tie_word_embeddings": True,
        }
    else:
        raise ValueError(f"unknown decoder arch {arch!r}")
    config.update(overrides or {})
    if arch == "gemma3" and "layer_types" not in (overrides or {}):
        pattern = config["sliding_window_pattern"]
        config["layer_types"] = [
            "full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
            for i in range(config["num_hidden_layers"])
        ]
    return config


def bert_config(tokenizer, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """A tiny BertModel config.json (MiniLM-shaped)."""
    config = {
        "architectures": ["BertModel"], "model_type": "bert",
        "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
        "hidden_act": "gelu", "layer_norm_eps": 1e-12, "max_position_embeddings": 128, "type_vocab_size": 2,
        "vocab_size": tokenizer.get_vocab_size(), "pad_token_id": 0, "position_embedding_type": "absolute",
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02,
        "torch_dtype": "float32",
    }
    config.update(overrides or {})
    return config


# ----------------------------------------------------------------------------------------------
# Random weights
# ----------------------------------------------------------------------------------------------


def _norm_weight(rng, size: int, gemma: bool, scale: float = 1.0) -> np.ndarray:
    """Near `scale` (Gemma: w near scale - 1, used as 1 + w), on a 2**-16 grid so that 1 + w is exact in
    float32 (the Gemma GGUF stores 1 + w)."""
    w = (scale - 1.0 if gemma else scale) + 0.1 * rng.standard_normal(size)
    return np.round(w * 2.0**16) / 2.0**16


def _linear_weight(rng, out_features: int, in_features: int, gain: float = 1.0) -> np.ndarray:
    return rng.standard_normal((out_features, in_features)) * (gain / math.sqrt(in_features))


# Scales chosen so that greedy decoding does not just repeat a token, even with tied embeddings: the
# attention and MLP updates (o_proj / down_proj gain, Gemma's post-norms) outweigh the token's own
# embedding in the residual stream, and the logits spread over several units.
# Linear weights are N(0, (gain / sqrt(fan_in))^2): gain 1 (std 0.125 at fan-in 64) except these.
EMBED_STD = 0.5
GEMMA_EMBED_STD = 0.12  # Gemma multiplies embeddings by sqrt(hidden) = 8
O_PROJ_GAIN = 3.0
DOWN_PROJ_GAIN = 6.0
GEMMA_POST_NORM = 3.0  # (1 + w) of Gemma's post-attention / post-feedforward norms
GEMMA_FINAL_NORM = 3.0


def random_decoder_weights(config: dict[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """HF-named float64 random weights for a decoder config (before casting to the storage dtype)."""
    arch = config["model_type"]
    gemma = arch in ("gemma2", "gemma3_text")
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    n_heads, n_kv = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or hidden // n_heads
    attn_bias = config.get("attention_bias", False)
    qkv_bias = attn_bias or arch == "qwen2"
    o_bias = attn_bias and arch != "qwen2"
    mlp_bias = config.get("mlp_bias", False) and arch in ("llama", "granite")

    embed_std = GEMMA_EMBED_STD if gemma else EMBED_STD
    w: dict[str, np.ndarray] = {"model.embed_tokens.weight": embed_std * rng.standard_normal((config["vocab_size"], hidden))}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        if arch != "olmo2":  # (OLMo 2 norms the blocks' outputs instead)
            w[p + "input_layernorm.weight"] = _norm_weight(rng, hidden, gemma)
        for name, rows in (("q_proj", n_heads * head_dim), ("k_proj", n_kv * head_dim), ("v_proj", n_kv * head_dim)):
            w[p + f"self_attn.{name}.weight"] = _linear_weight(rng, rows, hidden)
            if qkv_bias:
                w[p + f"self_attn.{name}.bias"] = 0.2 * rng.standard_normal(rows)
        w[p + "self_attn.o_proj.weight"] = _linear_weight(rng, hidden, n_heads * head_dim, O_PROJ_GAIN)
        if o_bias:
            w[p + "self_attn.o_proj.bias"] = 0.2 * rng.standard_normal(hidden)
        if arch in ("qwen3", "gemma3_text"):
            w[p + "self_attn.q_norm.weight"] = _norm_weight(rng, head_dim, gemma)
            w[p + "self_attn.k_norm.weight"] = _norm_weight(rng, head_dim, gemma)
        if arch == "olmo2":  # over all heads at once
            w[p + "self_attn.q_norm.weight"] = _norm_weight(rng, n_heads * head_dim, gemma)
            w[p + "self_attn.k_norm.weight"] = _norm_weight(rng, n_kv * head_dim, gemma)
        for name, shape in (("gate_proj", (inter, hidden)), ("up_proj", (inter, hidden)), ("down_proj", (hidden, inter))):
            w[p + f"mlp.{name}.weight"] = _linear_weight(rng, *shape, DOWN_PROJ_GAIN if name == "down_proj" else 1.0)
            if mlp_bias:
                w[p + f"mlp.{name}.bias"] = 0.2 * rng.standard_normal(shape[0])
        post = GEMMA_POST_NORM if gemma or arch == "olmo2" else 1.0  # (OLMo 2: a post-norm too)
        w[p + "post_attention_layernorm.weight"] = _norm_weight(rng, hidden, gemma, post)
        if gemma:
            w[p + "pre_feedforward_layernorm.weight"] = _norm_weight(rng, hidden, gemma)
            w[p + "post_feedforward_layernorm.weight"] = _norm_weight(rng, hidden, gemma, GEMMA_POST_NORM)
        if arch == "olmo2":
            w[p + "post_feedforward_layernorm.weight"] = _norm_weight(rng, hidden, gemma, GEMMA_POST_NORM)
    w["model.norm.weight"] = _norm_weight(rng, hidden, gemma, GEMMA_FINAL_NORM if gemma else 1.0)
    if not config.get("tie_word_embeddings", gemma):
        w["lm_head.weight"] = EMBED_STD * rng.standard_normal((config["vocab_size"], hidden))
    if arch == "phi3":  # one projection for q, k, v and one for gate, up (rows in that order)
        for i in range(config["num_hidden_layers"]):
            p = f"model.layers.{i}."
            w[p + "self_attn.qkv_proj.weight"] = np.concatenate(
                [w.pop(p + f"self_attn.{n}_proj.weight") for n in "qkv"])
            w[p + "mlp.gate_up_proj.weight"] = np.concatenate(
                [w.pop(p + "mlp.gate_proj.weight"), w.pop(p + "mlp.up_proj.weight")])
    return w


def random_bert_weights(config: dict[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """HF-named float64 random BertModel weights (embeddings.*, encoder.layer.N.*, pooler.*)."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]

    def layer_norm(prefix: str) -> dict[str, np.ndarray]:
        return {prefix + ".weight": _norm_weight(rng, hidden, False), prefix + ".bias": 0.1 * rng.standard_normal(hidden)}

    def dense(prefix: str, out_f: int, in_f: int) -> dict[str, np.ndarray]:
        return {prefix + ".weight": _linear_weight(rng, out_f, in_f), prefix + ".bias": 0.1 * rng.standard_normal(out_f)}

    w = {
        "embeddings.word_embeddings.weight": 0.5 * rng.standard_normal((config["vocab_size"], hidden)),
        "embeddings.position_embeddings.weight": 0.2 * rng.standard_normal((config["max_position_embeddings"], hidden)),
        "embeddings.token_type_embeddings.weight": 0.2 * rng.standard_normal((config["type_vocab_size"], hidden)),
        **layer_norm("embeddings.LayerNorm"),
    }
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            w.update(dense(p + f"attention.self.{name}", hidden, hidden))
        w.update(dense(p + "attention.output.dense", hidden, hidden))
        w.update(layer_norm(p + "attention.output.LayerNorm"))
        w.update(dense(p + "intermediate.dense", inter, hidden))
        w.update(dense(p + "output.dense", hidden, inter))
        w.update(layer_norm(p + "output.LayerNorm"))
    w.update(dense("pooler.dense", hidden, hidden))
    return w


# ----------------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------------


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_safetensors(hf_dir: Path, tensors: dict[str, np.ndarray], sharded: bool) -> None:
    """model.safetensors, or model-0000{1,2}-of-00002.safetensors + model.safetensors.index.json."""
    if not sharded:
        save_file(tensors, str(hf_dir / "model.safetensors"), metadata={"format": "pt"})
        return
    names = list(tensors)
    parts = [names[: len(names) // 2], names[len(names) // 2 :]]
    weight_map = {}
    for k, part in enumerate(parts, start=1):
        filename = f"model-{k:05d}-of-{len(parts):05d}.safetensors"
        save_file({n: tensors[n] for n in part}, str(hf_dir / filename), metadata={"format": "pt"})
        weight_map.update({n: filename for n in part})
    total = sum(int(t.nbytes) for t in tensors.values())
    _write_json(hf_dir / "model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map})


def _write_decoder_tokenizer(hf_dir: Path, arch: str, tokenizer, config: dict[str, Any]) -> None:
    spec = SPECIALS[_TOKENIZER_FAMILY[arch]]
    tokenizer.save(str(hf_dir / "tokenizer.json"))
    decoder = tokenizer.get_added_tokens_decoder()
    _write_json(
        hf_dir / "tokenizer_config.json",
        {
            "add_bos_token": spec["add_bos"],
            "add_eos_token": False,
            "added_tokens_decoder": {
                str(i): {"content": t.content, "lstrip": t.lstrip, "normalized": t.normalized,
                         "rstrip": t.rstrip, "single_word": t.single_word, "special": t.special}
                for i, t in sorted(decoder.items())
            },
            "bos_token": spec["bos"],
            "eos_token": spec["eos"],
            "pad_token": spec["pad"],
            "unk_token": None,
            "chat_template": spec["chat_template"],
            "clean_up_tokenization_spaces": False,
            "model_max_length": config["max_position_embeddings"],
            "tokenizer_class": "PreTrainedTokenizerFast",
        },
    )
    _write_json(
        hf_dir / "generation_config.json",
        {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
         "pad_token_id": config["pad_token_id"], "do_sample": False},
    )


def _write_bert_files(hf_dir: Path, tokenizer, config: dict[str, Any]) -> None:
    tokenizer.save(str(hf_dir / "tokenizer.json"))
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    (hf_dir / "vocab.txt").write_text("".join(t + "\n" for t, _ in vocab), encoding="utf-8")
    specials = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]"}
    _write_json(hf_dir / "special_tokens_map.json", specials)
    _write_json(hf_dir / "tokenizer_config.json", {"do_lower_case": True, **specials, "tokenize_chinese_chars": True,
                                                    "strip_accents": None, "tokenizer_class": "BertTokenizer",
                                                    "model_max_length": config["max_position_embeddings"]})
    _write_json(hf_dir / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ])
    _write_json(hf_dir / "sentence_bert_config.json", {"max_seq_length": config["max_position_embeddings"], "do_lower_case": False})
    _write_json(hf_dir / "1_Pooling" / "config.json", {
        "word_embedding_dimension": config["hidden_size"], "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
    })
    _write_json(hf_dir / "config_sentence_transformers.json", {"__version__": {"sentence_transformers": "2.0.0"}})


# ----------------------------------------------------------------------------------------------
# Entry point
# ----------------------------------------------------------------------------------------------


def write_checkpoint(
    arch: str,
    directory: Path,
    *,
    seed: int = 0,
    dtype: str = "float32",
    sharded: bool = False,
    gguf_quant: str | None = None,
    config_overrides: dict[str, Any] | None = None,
    pretokenizer: str | None = None,
) -> dict[str, Any]:
    """Write a tiny random `arch` model under `directory` (see the module docstring) and describe it.

    dtype: safetensors storage ("float32", "float16", "bfloat16"; the GGUF's 2-D tensors match it);
    gguf_quant: "Q8_0", "Q4_0", "Q4_1" (or "Q4_K"/"Q6_K" where the gguf package can quantize them)
    for the GGUF's 2-D tensors; pretokenizer: the llama.cpp pre-tokenizer of the toy BPE (default
    llama: "llama-bpe", qwen: "qwen2", gemma3: "gpt-2").
    """
    directory = Path(directory)
    hf_dir = directory / "hf"
    hf_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    np_dtype = _DTYPES[dtype]

    if arch == "bert":
        tokenizer = wordpiece_tokenizer()
        config = bert_config(tokenizer, config_overrides)
        stored = {k: v.astype(np_dtype) for k, v in random_bert_weights(config, rng).items()}
        files = {**stored, "embeddings.position_ids": np.arange(config["max_position_embeddings"], dtype=np.int64)[None]}
        write_safetensors(hf_dir, files, sharded)
        _write_json(hf_dir / "config.json", {**config, "torch_dtype": dtype})
        _write_bert_files(hf_dir, tokenizer, config)
        weights = {k: np.asarray(v, dtype=np.float64) for k, v in stored.items()}
        return {"config": config, "weights": weights, "hf_dir": hf_dir, "gguf": None, "tokenizer": tokenizer}

    if arch not in DECODER_ARCHS:
        raise ValueError(f"unknown arch {arch!r}; expected one of {DECODER_ARCHS + ('bert',)}")
    if gguf_quant is not None:
        if dtype != "float32":
            raise ValueError("gguf_quant stores dequantized values in float32 safetensors; use dtype='float32'")
        try:
            gguf.quants.quantize(np.zeros((1, 256), np.float32), gguf.GGMLQuantizationType[gguf_quant])
        except NotImplementedError as e:
            raise NotImplementedError(f"the installed gguf package cannot quantize to {gguf_quant} ({e}); use Q8_0, Q4_0 or Q4_1") from None
    pre = pretokenizer or _DEFAULT_PRETOKENIZER[arch]
    tokenizer = bpe_tokenizer(_TOKENIZER_FAMILY[arch], pre)
    config = decoder_config(arch, tokenizer, config_overrides)
    config["torch_dtype"] = dtype
    stored = {k: v.astype(np_dtype) for k, v in random_decoder_weights(config, rng).items()}

    gguf_arch = _GGUF_ARCH.get(arch, arch)
    payloads, held = gguf_payloads(gguf_arch, config, stored, dtype, gguf_quant)
    if gguf_quant is not None:  # both files hold the dequantized values
        stored = {k: v.astype(np.float32) for k, v in held.items()}
    write_safetensors(hf_dir, stored, sharded)
    _write_json(hf_dir / "config.json", config)
    _write_decoder_tokenizer(hf_dir, arch, tokenizer, config)
    gguf_path = directory / "model.gguf"
    write_gguf(gguf_path, gguf_arch, config, payloads, hf_dir, tokenizer, pre, gguf_quant or FLOAT_GGUF_TYPES[dtype])
    weights = {k: np.asarray(v, dtype=np.float64) for k, v in stored.items()}
    gguf_config = config if gguf_arch == arch else {
        **config, "architectures": ["LlamaForCausalLM"], "model_type": "llama", "sliding_window": None}
    return {"config": config, "weights": weights, "hf_dir": hf_dir, "gguf": gguf_path, "gguf_config": gguf_config,
            "tokenizer": tokenizer}
