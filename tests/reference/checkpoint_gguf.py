"""The GGUF half of the tiny checkpoints (checkpoints.py): the tensors and metadata that llama.cpp's
convert_hf_to_gguf.py writes for a Hugging Face decoder (names, llama q/k permutation, 1 + w Gemma
norms, quantized blocks, per-architecture keys, rope factor tensors, the tokenizer)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from .gguf_conventions import gemma_norm_shift, hf_to_gguf_name, is_permuted, permute_for_llama_cpp, unpermute_from_llama_cpp

FLOAT_GGUF_TYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
_FILE_TYPES = {
    "F32": gguf.LlamaFileType.ALL_F32,
    "F16": gguf.LlamaFileType.MOSTLY_F16,
    "BF16": gguf.LlamaFileType.MOSTLY_BF16,
    "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
    "Q4_1": gguf.LlamaFileType.MOSTLY_Q4_1,
    "Q4_K": gguf.LlamaFileType.MOSTLY_Q4_K_M,
    "Q6_K": gguf.LlamaFileType.MOSTLY_Q6_K,
}


def gguf_payloads(arch: str, config: dict[str, Any], stored: dict[str, np.ndarray], dtype: str, quant: str | None):
    """[(gguf name, array to write, raw ggml type or None)] and the HF-layout float64 values they hold.

    Follows convert_hf_to_gguf.py: 1-D tensors are F32; 2-D ones take the output type (F32/F16/BF16, or
    `quant`, falling back to F16 where a row is not a whole number of quant blocks)."""
    heads = {"q": config["num_attention_heads"], "k": config["num_key_value_heads"]}
    qtype = gguf.GGMLQuantizationType[quant] if quant else None
    payloads, held = [], {}
    for hf_name, value in stored.items():
        name = hf_to_gguf_name(arch, hf_name)
        data = np.asarray(value, dtype=np.float32)
        if (which := is_permuted(arch, name)) is not None:
            data = permute_for_llama_cpp(data, heads[which])
        data = data + np.float32(gemma_norm_shift(arch, name))  # float32 arithmetic, as the converter
        ggml = gguf.GGMLQuantizationType.F32 if data.ndim == 1 else gguf.GGMLQuantizationType[FLOAT_GGUF_TYPES[dtype]]
        if data.ndim == 2 and qtype is not None:
            block = gguf.GGML_QUANT_SIZES[qtype][0]
            ggml = qtype if data.shape[1] % block == 0 else gguf.GGMLQuantizationType.F16
        raw = ggml not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16)
        payload = gguf.quants.quantize(data, ggml)  # float32 / float16 arrays, or the raw block bytes
        back = np.asarray(gguf.quants.dequantize(payload, ggml) if raw else payload, dtype=np.float64)
        back = back.reshape(data.shape) - gemma_norm_shift(arch, name)
        if which is not None:
            back = unpermute_from_llama_cpp(back, heads[which])
        held[hf_name] = back
        payloads.append((name, payload, ggml if raw else None))
    return payloads, held


def _llama3_rope_factors(config: dict[str, Any]) -> np.ndarray:
    """rope_freqs.weight as convert_hf_to_gguf.py computes it (float32 frequencies, 8192 fallback)."""
    scaling = config["rope_scaling"]
    dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    freqs = 1.0 / (np.float32(config.get("rope_theta", 10000.0)) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    factor = scaling.get("factor", 8.0)
    low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
    old_context = config.get("original_max_position_embeddings", 8192)
    factors = []
    for freq in freqs.astype(np.float64):
        wavelen = 2 * math.pi / freq
        if wavelen < old_context / high:
            factors.append(1.0)
        elif wavelen > old_context / low:
            factors.append(factor)
        else:
            smooth = (old_context / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(factors, dtype=np.float32)


def _gguf_tokenizer_metadata(writer: gguf.GGUFWriter, hf_dir: Path, tokenizer, pretokenizer: str) -> None:
    """tokenizer.ggml.* as the converter's _set_vocab_gpt2 writes them."""
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    added = tokenizer.get_added_tokens_decoder()
    by_id = {i: t for t, i in vocab.items()}
    tokens, types = [], []
    for i in range(len(by_id)):
        tokens.append(by_id[i])
        if i in added:
            types.append(gguf.TokenType.CONTROL if added[i].special else gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pretokenizer)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    gguf.SpecialVocab(hf_dir, load_merges=True).add_to_gguf(writer, quiet=True)  # merges, ids, add_bos, template


def write_gguf(path: Path, arch: str, config: dict[str, Any], payloads, hf_dir: Path, tokenizer,
               pretokenizer: str, file_type: str) -> None:
    """The GGUF file: metadata as convert_hf_to_gguf.py sets it for `arch`, then the tensors."""
    if arch == "gemma2":
        n = config["num_hidden_layers"]
        alternate = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]
        if config["layer_types"] != alternate or config["query_pre_attn_scalar"] != config["head_dim"]:
            raise ValueError("llama.cpp's Gemma 2 (not 27B): every other layer sliding, 1/sqrt(head_dim) scale")
    if arch == "gemma3":
        every_sixth = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(config["num_hidden_layers"])]
        if config["layer_types"] != every_sixth:
            raise ValueError("llama.cpp's Gemma 3 has one global layer in every 6; a GGUF cannot say otherwise")
        if config["query_pre_attn_scalar"] != config["head_dim"]:
            raise ValueError("llama.cpp's Gemma 3 (not 27B) scales attention by 1/sqrt(head_dim)")
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(f"tiny-random-{arch}")
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    scaling = config.get("rope_scaling") or {}
    if scaling.get("rope_type", scaling.get("type")) == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(scaling["factor"])
    writer.add_rope_freq_base(config["rope_theta"])
    if arch == "gemma3":  # newer converters: rope_parameters["sliding_attention"]["rope_theta"]
        writer.add_float32(f"{arch}.rope.freq_base_swa", config["rope_local_base_freq"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    if arch == "phi3":  # Phi3MiniModel: rope dims, original context, window (0: none), LongRoPE
        rope_dims = int(head_dim * (config.get("partial_rotary_factor") or 1.0))
        writer.add_rope_dimension_count(rope_dims)
        writer.add_rope_scaling_orig_ctx_len(config["original_max_position_embeddings"])
        writer.add_sliding_window(config.get("sliding_window") or 0)
        if scaling.get("long_factor"):
            scale = config["max_position_embeddings"] / config["original_max_position_embeddings"]
            original = config["original_max_position_embeddings"]
            attn = math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1 else 1.0
            writer.add_rope_scaling_attn_factors(attn)
    else:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_file_type(_FILE_TYPES[file_type])
    if arch in ("llama", "granite", "smollm3"):
        writer.add_vocab_size(config["vocab_size"])
        writer.add_rope_dimension_count(head_dim)
    if arch == "granite":  # GraniteModel: the config's *_multiplier values as *_scale keys
        writer.add_attention_scale(config["attention_multiplier"])
        writer.add_embedding_scale(config["embedding_multiplier"])
        writer.add_residual_scale(config["residual_multiplier"])
        writer.add_logit_scale(config["logits_scaling"])
    if arch in ("gemma2", "gemma3"):
        if config.get("final_logit_softcapping"):
            writer.add_final_logit_softcapping(config["final_logit_softcapping"])
        writer.add_sliding_window(config["sliding_window"])
    if arch == "gemma2":
        writer.add_attn_logit_softcapping(config["attn_logit_softcapping"])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    _gguf_tokenizer_metadata(writer, hf_dir, tokenizer, pretokenizer)

    if arch == "llama" and scaling.get("rope_type") == "llama3":
        writer.add_tensor("rope_freqs.weight", _llama3_rope_factors(config))
    if arch == "phi3" and scaling.get("long_factor"):
        writer.add_tensor("rope_factors_long.weight", np.asarray(scaling["long_factor"], np.float32))
        writer.add_tensor("rope_factors_short.weight", np.asarray(scaling["short_factor"], np.float32))
    for name, payload, raw_dtype in payloads:
        writer.add_tensor(name, payload, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
