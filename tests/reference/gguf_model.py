"""Read a llama.cpp GGUF decoder (llama, granite, qwen2, qwen3, gemma2, gemma3, phi3) as a Hugging Face config and
float64 weights.

`load_gguf_as_hf(path)` returns (config, weights) that `llm.causal_lm_logits` accepts: the config is
built from the GGUF metadata as the HF config.json it was converted from would read, and the weights
are dequantized with `gguf.quants.dequantize`, renamed to HF names and brought back to the HF layout
(the conventions undone are listed in `gguf_conventions.py`).

`gguf_bpe_tokenizer(path)` builds a `tokenizers.Tokenizer` from the GGUF's byte-level BPE vocabulary
(`tokenizer.ggml.model` = "gpt2") and merges, with the pre-tokenizer that `tokenizer.ggml.pre` names.

Where the metadata is silent, llama.cpp's own defaults are used (llama.cpp hard-codes them too):
Gemma 3 has one global layer in every 6 unless `gemma3.attention.sliding_window_pattern` says
otherwise, local rope base 10000 unless `gemma3.rope.freq_base_swa` is present, and attention scale
1/sqrt(head_dim) (hidden/heads for the 62-layer 27B model), i.e. `query_pre_attn_scalar` = head_dim.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize

from .gguf_conventions import GGUF_TO_HF_ARCH, gemma_norm_shift, gguf_to_hf_name, is_permuted, unpermute_from_llama_cpp

SUPPORTED_TYPES = {
    GGMLQuantizationType.F32,
    GGMLQuantizationType.F16,
    GGMLQuantizationType.BF16,
    GGMLQuantizationType.Q8_0,
    GGMLQuantizationType.Q4_0,
    GGMLQuantizationType.Q4_1,
    GGMLQuantizationType.Q4_K,
    GGMLQuantizationType.Q6_K,
}


def _field(reader: GGUFReader, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def _decimal(x: float) -> float:
    """A float32 metadata value as the shortest decimal that rounds to it (1e-05, not 9.99999974e-06)."""
    return float(np.format_float_scientific(np.float32(x), unique=True))


def read_tensor(reader: GGUFReader, name: str) -> np.ndarray:
    """One tensor, dequantized to float64, as a numpy array in HF order ([out, in])."""
    (t,) = [t for t in reader.tensors if t.name == name]
    return _dequantized(t)


def _dequantized(t) -> np.ndarray:
    if t.tensor_type not in SUPPORTED_TYPES:
        raise NotImplementedError(f"{t.name}: tensor type {t.tensor_type.name} is not supported here")
    shape = tuple(int(d) for d in reversed(t.shape.tolist()))
    return np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float64).reshape(shape)


def gguf_config(reader: GGUFReader) -> dict[str, Any]:
    """An HF-style config.json dict from the GGUF metadata."""
    arch = _field(reader, "general.architecture")
    if arch not in GGUF_TO_HF_ARCH:
        raise NotImplementedError(f"general.architecture {arch!r} is not supported ({sorted(GGUF_TO_HF_ARCH)})")
    hf_arch, model_type = GGUF_TO_HF_ARCH[arch]
    names = {t.name for t in reader.tensors}

    def get(key: str, default: Any = None) -> Any:
        return _field(reader, f"{arch}.{key}", default)

    hidden = int(get("embedding_length"))
    n_heads = int(get("attention.head_count"))
    n_layers = int(get("block_count"))
    head_dim = int(get("attention.key_length", hidden // n_heads))
    tokens = _field(reader, "tokenizer.ggml.tokens")
    config: dict[str, Any] = {
        "architectures": [hf_arch],
        "model_type": model_type,
        "hidden_size": hidden,
        "intermediate_size": int(get("feed_forward_length")),
        "num_hidden_layers": n_layers,
        "num_attention_heads": n_heads,
        "num_key_value_heads": int(get("attention.head_count_kv", n_heads)),
        "head_dim": head_dim,
        "rms_norm_eps": _decimal(get("attention.layer_norm_rms_epsilon", 1e-6)),
        "max_position_embeddings": int(get("context_length", 2048)),
        "vocab_size": int(get("vocab_size", len(tokens) if tokens else 0)),
        "tie_word_embeddings": "output.weight" not in names,
        "bos_token_id": _field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": _field(reader, "tokenizer.ggml.eos_token_id"),
    }
    rope_dim = int(get("rope.dimension_count", head_dim))
    if rope_dim != head_dim:
        config["partial_rotary_factor"] = rope_dim / head_dim
    scaling_type = get("rope.scaling.type")
    rope_scaling = None
    if scaling_type == "linear":
        rope_scaling = {"rope_type": "linear", "factor": _decimal(get("rope.scaling.factor"))}
    elif scaling_type not in (None, "none"):
        rope_scaling = {"rope_type": scaling_type}  # the reference refuses what it does not implement
    config["rope_scaling"] = rope_scaling
    if "rope_freqs.weight" in names:  # Llama 3 rope scaling, as per-frequency divisors
        config["rope_freq_factors"] = read_tensor(reader, "rope_freqs.weight").tolist()

    if arch in ("gemma2", "gemma3"):
        if arch == "gemma3":
            config["rope_theta"] = _decimal(get("rope.freq_base", 1_000_000.0))
            config["rope_local_base_freq"] = _decimal(get("rope.freq_base_swa", 10_000.0))
        else:
            config["rope_theta"] = _decimal(get("rope.freq_base", 10_000.0))
        config["sliding_window"] = int(get("attention.sliding_window", 4096))
        pattern = get("attention.sliding_window_pattern", 6 if arch == "gemma3" else 2)
        if isinstance(pattern, list):  # per-layer booleans: True = sliding
            config["layer_types"] = ["sliding_attention" if p else "full_attention" for p in pattern]
        else:
            config["sliding_window_pattern"] = int(pattern)
        config["query_pre_attn_scalar"] = hidden // n_heads if n_layers == (62 if arch == "gemma3" else 46) else head_dim
        config["hidden_activation"] = "gelu_pytorch_tanh"
        config["final_logit_softcapping"] = get("final_logit_softcapping")
        config["attn_logit_softcapping"] = get("attn_logit_softcapping")
    else:
        config["rope_theta"] = _decimal(get("rope.freq_base", 10_000.0))
        config["hidden_act"] = "silu"
        if arch == "smollm3":  # llama.cpp hard-codes the NoPE layers: every fourth
            config["no_rope_layer_interval"] = 4
        if arch == "granite":
            for key, hf in (("embedding_scale", "embedding_multiplier"), ("residual_scale", "residual_multiplier"),
                            ("attention.scale", "attention_multiplier"), ("logit_scale", "logits_scaling")):
                if get(key) is not None:
                    config[hf] = _decimal(get(key))
        if arch == "phi3":  # window 0: none; LongRoPE as two factor tensors and an attention factor
            config["sliding_window"] = int(get("attention.sliding_window", 0)) or None
            config["original_max_position_embeddings"] = int(get("rope.scaling.original_context_length"))
            if "rope_factors_long.weight" in names:
                config["rope_scaling"] = {
                    "rope_type": "longrope",
                    "long_factor": read_tensor(reader, "rope_factors_long.weight").tolist(),
                    "short_factor": read_tensor(reader, "rope_factors_short.weight").tolist(),
                    "attention_factor": _decimal(get("rope.scaling.attn_factor", 1.0)),
                }
        has_bias = any(n.endswith(("attn_q.bias", "attn_output.bias")) for n in names)
        if arch in ("llama", "qwen3", "granite", "smollm3"):
            config["attention_bias"] = has_bias
        if arch in ("llama", "granite", "smollm3"):
            config["mlp_bias"] = any(n.endswith("ffn_gate.bias") for n in names)
    return config


def load_gguf_as_hf(path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(HF-style config, {HF name: float64 array in HF layout}) of a llama/granite/qwen2/qwen3/gemma2/gemma3/phi3
    GGUF."""
    reader = GGUFReader(str(path))
    config = gguf_config(reader)
    arch = _field(reader, "general.architecture")
    heads = {"q": config["num_attention_heads"], "k": config["num_key_value_heads"]}
    weights: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        if t.name in ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"):
            continue  # folded into config["rope_freq_factors"] / config["rope_scaling"]
        w = _dequantized(t)
        if (which := is_permuted(arch, t.name)) is not None:
            w = unpermute_from_llama_cpp(w, heads[which])
        w = w - gemma_norm_shift(arch, t.name)
        weights[gguf_to_hf_name(arch, t.name)] = w
    return config, weights


# ----------------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------------

# The split regexes of llama.cpp's BPE pre-tokenizers, as in the HF tokenizer.json of those models.
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def byte_level_pre_tokenizer(pre: str):
    """The `tokenizers` pre-tokenizer for a `tokenizer.ggml.pre` name (GPT-2 style byte-level BPE)."""
    from tokenizers import Regex, pre_tokenizers

    if pre in ("gpt-2", "gpt2", "default"):  # GPT-2's own regex, built into ByteLevel
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":  # every digit alone, then GPT-2's regex
        return pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
        )
    splits = {"llama-bpe": LLAMA3_SPLIT, "llama3": LLAMA3_SPLIT, "qwen2": QWEN2_SPLIT}
    if pre not in splits:
        raise NotImplementedError(f"tokenizer.ggml.pre {pre!r} is not supported here")
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(splits[pre]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def gguf_bpe_tokenizer(path: str | Path):
    """A `tokenizers.Tokenizer` from a GGUF's gpt2-style vocabulary, merges and pre-tokenizer name.

    Control tokens (token_type 3) and user-defined ones (4) become added tokens, matched whole.
    No BOS/EOS is added: encode() gives the raw text's ids.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models

    reader = GGUFReader(str(path))
    if _field(reader, "tokenizer.ggml.model") != "gpt2":
        raise NotImplementedError("only byte-level BPE (tokenizer.ggml.model = gpt2) vocabularies")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    types = _field(reader, "tokenizer.ggml.token_type", [1] * len(tokens))
    merges = [tuple(m.split(" ")) for m in _field(reader, "tokenizer.ggml.merges")]
    pre = _field(reader, "tokenizer.ggml.pre", "default")
    vocab = {tok: i for i, tok in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=pre in ("llama-bpe", "llama3")))
    tokenizer.pre_tokenizer = byte_level_pre_tokenizer(pre)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types) if k == 3])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t, k in zip(tokens, types) if k == 4])
    return tokenizer
