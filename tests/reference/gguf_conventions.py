"""How llama.cpp's convert_hf_to_gguf.py lays a Hugging Face decoder out in a GGUF file.

Shared by the GGUF reader (`gguf_model.py`, which undoes these) and the checkpoint writer
(`checkpoints.py`, which applies them), and stated once here so that both sides read alike:

- tensor names: `model.layers.N.self_attn.q_proj.weight` <-> `blk.N.attn_q.weight`, ... (per architecture:
  Llama's `post_attention_layernorm` is the pre-MLP norm `ffn_norm`, Gemma 3's is `post_attention_norm`;
  Phi-3's fused `qkv_proj` is `attn_qkv` and its fused `gate_up_proj` is `ffn_up`);
- the `llama` (and `granite`) architecture's q/k row permutation: llama.cpp rotates adjacent pairs (2i, 2i+1) of a head,
  HF rotates (i, i + head_dim/2), so the converter reorders the rows of q_proj / k_proj (and their
  biases) head by head. Qwen2, Qwen3 and Gemma 3 use llama.cpp's NEOX rope: no permutation;
- Gemma 3 RMSNorm weights: HF multiplies by (1 + w); the converter stores 1 + w (every `*norm.weight`).

Shapes: GGUF lists dimensions fastest-first (ne[0] = row length); the `gguf` package's writer and reader
reverse them, so numpy arrays are [out, in] on both sides, like HF.
"""

from __future__ import annotations

import numpy as np

# general.architecture -> the HF architecture and model_type it comes from.
GGUF_TO_HF_ARCH = {
    "llama": ("LlamaForCausalLM", "llama"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2"),
    "qwen3": ("Qwen3ForCausalLM", "qwen3"),
    "gemma2": ("Gemma2ForCausalLM", "gemma2"),
    "gemma3": ("Gemma3ForCausalLM", "gemma3_text"),
    "phi3": ("Phi3ForCausalLM", "phi3"),
    "granite": ("GraniteForCausalLM", "granite"),
    "olmo2": ("Olmo2ForCausalLM", "olmo2"),
    "smollm3": ("SmolLM3ForCausalLM", "smollm3"),
}

_GLOBAL_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}

# HF name after `model.layers.N.` -> GGUF name after `blk.N.` (".weight" / ".bias" kept as they are).
_BLOCK_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
_BLOCK_NORMS = {
    "llama": {"post_attention_layernorm": "ffn_norm"},
    "qwen2": {"post_attention_layernorm": "ffn_norm"},
    "qwen3": {"post_attention_layernorm": "ffn_norm"},
    "gemma2": {
        "post_attention_layernorm": "post_attention_norm",
        "pre_feedforward_layernorm": "ffn_norm",
        "post_feedforward_layernorm": "post_ffw_norm",
    },
    "gemma3": {
        "post_attention_layernorm": "post_attention_norm",
        "pre_feedforward_layernorm": "ffn_norm",
        "post_feedforward_layernorm": "post_ffw_norm",
    },
    "phi3": {"post_attention_layernorm": "ffn_norm"},
    "granite": {"post_attention_layernorm": "ffn_norm"},
    "olmo2": {"post_attention_layernorm": "post_attention_norm", "post_feedforward_layernorm": "post_ffw_norm"},
    "smollm3": {"post_attention_layernorm": "ffn_norm"},
}
# Phi-3's fused projections, in place of the separate ones.
_PHI3_BLOCK = {
    "input_layernorm": "attn_norm",
    "self_attn.qkv_proj": "attn_qkv",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def _block_table(arch: str) -> dict[str, str]:
    return {**(_PHI3_BLOCK if arch == "phi3" else _BLOCK_NAMES), **_BLOCK_NORMS[arch]}


def hf_to_gguf_name(arch: str, hf_name: str) -> str:
    """GGUF tensor name of an HF decoder weight for `general.architecture` = arch."""
    if hf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[hf_name]
    parts = hf_name.split(".")
    if parts[:2] != ["model", "layers"]:
        raise KeyError(f"no GGUF name for {hf_name!r}")
    block, module, suffix = parts[2], ".".join(parts[3:-1]), parts[-1]
    return f"blk.{block}.{_block_table(arch)[module]}.{suffix}"


def gguf_to_hf_name(arch: str, gguf_name: str) -> str:
    """Inverse of `hf_to_gguf_name`."""
    for hf, gg in _GLOBAL_NAMES.items():
        if gg == gguf_name:
            return hf
    parts = gguf_name.split(".")
    if parts[0] != "blk":
        raise KeyError(f"no HF name for {gguf_name!r}")
    inverse = {gg: hf for hf, gg in _block_table(arch).items()}
    block, module, suffix = parts[1], ".".join(parts[2:-1]), parts[-1]
    return f"model.layers.{block}.{inverse[module]}.{suffix}"


def permute_for_llama_cpp(w: np.ndarray, n_heads: int) -> np.ndarray:
    """HF q/k rows -> llama.cpp rows: within each head, HF row a*half + i goes to row 2*i + a."""
    half = w.shape[0] // n_heads // 2
    return w.reshape(n_heads, 2, half, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_from_llama_cpp(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp q/k rows -> HF rows (inverse of `permute_for_llama_cpp`)."""
    half = w.shape[0] // n_heads // 2
    return w.reshape(n_heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def is_permuted(arch: str, gguf_name: str) -> str | None:
    """"q" or "k" when this tensor carries the llama q/k permutation (with q's or k's head count)."""
    if arch not in ("llama", "granite", "smollm3"):  # (Granite's and SmolLM3's converters are LlamaModel's)
        return None
    module = gguf_name.split(".")[-2] if gguf_name.startswith("blk.") else ""
    return {"attn_q": "q", "attn_k": "k"}.get(module)


def gemma_norm_shift(arch: str, gguf_name: str) -> float:
    """What the converter adds to this tensor: 1.0 for Gemma 3 norm weights, else 0."""
    return 1.0 if arch in ("gemma2", "gemma3") and gguf_name.endswith("norm.weight") else 0.0
