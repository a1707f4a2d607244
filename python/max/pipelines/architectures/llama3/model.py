"""The Llama-family decoder graph (Llama 2/3.x, SmolLM2; SmolLM3 with its NoPE layers; Mistral
with its optional sliding window; Granite with its multipliers; Qwen2 with q/k/v biases; Qwen3
with per-head q/k RMSNorm): token embedding, pre-norm blocks of rotary attention over the paged
KV cache and a SiLU-gated MLP, final RMSNorm, and the output projection (tied to the embedding
when the checkpoint has no ``lm_head``). Each projection takes its own weight's GGUF encoding,
so mixed-type files (Q4_K_M) work."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from max.nn import (
    MLP,
    AttentionWithRope,
    ColumnParallelLinear,
    DistributedTransformer,
    DistributedTransformerBlock,
    Embedding,
    Linear,
    Llama3RopeScalingParams,
    Llama3RotaryEmbedding,
    LongRoPERotaryEmbedding,
    LongRoPEScalingParams,
    RMSNorm,
    RotaryEmbedding,
    TensorParallelAttentionWithRope,
    Transformer,
    TransformerBlock,
    VocabParallelEmbedding,
)
from max.nn.attention import head_plan
from max.nn.attention.mask_config import AttentionMaskVariant
from max.pipelines.lib.decoder import DecoderArchitecture, DecoderSpec

GGUF_BLOCK = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
#: The GGUF names of the tensors outside the blocks that every decoder has.
GGUF_TOP = {
    "token_embd.weight": "embed_tokens.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "lm_head.weight",
}


def renamer(gguf_block: dict[str, str], gguf_top: dict[str, str] = GGUF_TOP,
            prefixes: tuple[str, ...] = ("model.",)) -> Callable[[str, str], str | None]:
    """An architecture's `rename`: module names from GGUF (``blk.N.<gguf_block key>``, and the
    tensors of `gguf_top`; other GGUF tensors dropped) or from safetensors (the first of
    `prefixes` a name starts with dropped; rotary ``inv_freq`` buffers dropped)."""

    def rename(fmt: str, name: str) -> str | None:
        if fmt == "gguf":
            if name in gguf_top:
                return gguf_top[name]
            m = re.fullmatch(r"blk\.(\d+)\.([a-z_]+)\.(weight|bias)", name)
            if m and m.group(2) in gguf_block:
                return f"layers.{m.group(1)}.{gguf_block[m.group(2)]}.{m.group(3)}"
            return None
        if name.endswith("rotary_emb.inv_freq"):
            return None
        prefix = next((p for p in prefixes if name.startswith(p)), "")
        return name[len(prefix):]

    return rename


rename = renamer(GGUF_BLOCK, {**GGUF_TOP, "rope_freqs.weight": "rope_freqs.weight"})


def kv_geometry(config: dict) -> tuple[int, int, int]:
    """(kv heads, head dim, layers) of a config, checked: model files are untrusted."""
    from max.pipelines.lib.model_source import _number

    for key in ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size"):
        if key not in config:
            raise ValueError(f"the model's config lacks {key}")
    heads = _number(config["num_attention_heads"], "num_attention_heads")
    hidden = _number(config["hidden_size"], "hidden_size")
    head_dim = _number(config.get("head_dim") or hidden // heads, "head_dim")
    kv_heads = _number(config.get("num_key_value_heads") or heads, "num_key_value_heads")
    if heads % kv_heads:
        raise ValueError(f"the model's {heads} attention heads are not a multiple of its {kv_heads} kv heads")
    return kv_heads, head_dim, _number(config["num_hidden_layers"], "num_hidden_layers")


def linear(spec: DecoderSpec, name: str, in_dim: int, out_dim: int, bias: bool = False) -> Linear:
    """A projection whose weight is `name`.weight, with that tensor's own encoding (an encoding
    that cannot hold the rows is an error naming the tensor)."""
    try:
        return Linear(in_dim, out_dim, spec.dtype, spec.device, has_bias=bias,
                      quantization_encoding=spec.encoding(f"{name}.weight"))
    except ValueError as e:
        raise ValueError(f"{name}.weight: {e}") from None


def rope_for(spec: DecoderSpec, *, interleaved: bool, theta: float | None = None,
             scaling: dict | None = None) -> RotaryEmbedding:
    """The rotary embedding of a config: plain, linear-scaled, Llama-3-scaled or LongRoPE, partial
    rotary dims, and GGUF's per-frequency divisors (``rope_freqs.weight``)."""
    c = spec.config
    heads = int(c["num_attention_heads"])
    head_dim = int(c.get("head_dim") or c["hidden_size"] // heads)
    rotary_dim = int(round(head_dim * float(c.get("partial_rotary_factor") or 1.0)))
    theta = float(theta if theta is not None else c.get("rope_theta") or 10000.0)
    scaling = scaling if scaling is not None else (c.get("rope_scaling") or {})
    kind = scaling.get("rope_type") or scaling.get("type")
    if kind is None and spec.weights.get("rope_factors_long.weight") is not None:
        kind = "longrope"  # a GGUF's LongRoPE factors, whatever its metadata says
    if kind == "llama3":
        rope: RotaryEmbedding = Llama3RotaryEmbedding(
            int(c["hidden_size"]), heads, theta, spec.max_seq_len, head_dim, interleaved=interleaved,
            scaling_params=Llama3RopeScalingParams(
                factor=float(scaling["factor"]),
                low_freq_factor=float(scaling.get("low_freq_factor", 1.0)),
                high_freq_factor=float(scaling.get("high_freq_factor", 4.0)),
                orig_max_position=int(scaling.get("original_max_position_embeddings", 8192)),
            ),
        )
    elif kind in ("longrope", "su"):
        rope = LongRoPERotaryEmbedding(int(c["hidden_size"]), heads, theta, spec.max_seq_len, head_dim,
                                       interleaved=interleaved, rotary_dim=rotary_dim,
                                       scaling_params=longrope_params(spec, scaling))
    elif kind in (None, "default", "linear"):
        factor = float(scaling.get("factor", 1.0)) if kind == "linear" else 1.0
        rope = RotaryEmbedding(int(c["hidden_size"]), heads, theta, spec.max_seq_len, head_dim,
                               interleaved=interleaved, rotary_dim=rotary_dim, scaling_factor=factor)
    else:
        raise NotImplementedError(f"rope scaling {kind!r} is not supported")
    divisors = spec.weights.get("rope_freqs.weight")
    if divisors is not None:
        factors = np.asarray(divisors.to_buffer().to_numpy(), np.float64).reshape(-1)
        if factors.shape != (rotary_dim // 2,) or not (np.isfinite(factors).all() and (factors > 0).all()):
            raise ValueError(f"rope_freqs.weight must hold {rotary_dim // 2} positive numbers (one per pair of "
                             f"rotary dims), got {factors.size} values")
        base = rope.compute_inv_freqs
        rope.compute_inv_freqs = lambda: base() / factors  # type: ignore[method-assign]
    return rope


def sliding_window(config: dict, arch: str) -> int | None:
    """Mistral's and Phi-3's window (every layer attends to that many most recent tokens), or
    None. Qwen2's per-layer windows (``use_sliding_window``) are refused rather than ignored."""
    from max.pipelines.lib.model_source import _number

    if arch == "Qwen2ForCausalLM" and config.get("use_sliding_window"):
        raise NotImplementedError("Qwen2 sliding-window attention (use_sliding_window) is not supported")
    window = config.get("sliding_window") if arch in ("MistralForCausalLM", "Phi3ForCausalLM") else None
    return None if window is None else _number(window, "sliding_window")


def longrope_params(spec: DecoderSpec, scaling: dict) -> LongRoPEScalingParams:
    """LongRoPE's factors (the config's lists, or a GGUF's ``rope_factors_short`` /
    ``rope_factors_long`` tensors), original context and attention factor, as Hugging Face
    computes them (``factor`` when given, else the context over the original one)."""
    from max.pipelines.lib.model_source import _number

    c = spec.config
    factors = {}
    for key in ("short_factor", "long_factor"):
        tensor = spec.weights.get(f"rope_factors_{key.split('_')[0]}.weight")
        values = scaling.get(key) if tensor is None else tensor.to_buffer().to_numpy().reshape(-1).tolist()
        if not isinstance(values, list) or not values:
            raise ValueError(f"the model's LongRoPE scaling lacks {key}")
        factors[key] = [_number(v, f"rope_scaling.{key}", float) for v in values]
    original = _number(scaling.get("original_max_position_embeddings") or c.get("original_max_position_embeddings"),
                       "original_max_position_embeddings")
    max_pos = _number(c.get("max_position_embeddings") or original, "max_position_embeddings")
    factor = scaling.get("factor")
    attention = scaling.get("attention_factor")
    if attention is None and factor is not None:
        f = _number(factor, "rope_scaling.factor", float)
        attention = 1.0 if f <= 1.0 else math.sqrt(1.0 + math.log(f) / math.log(original))
    return LongRoPEScalingParams(
        factors["short_factor"], factors["long_factor"], original, max_pos,
        None if attention is None else _number(attention, "rope_scaling.attention_factor", float))


def no_rope_layers(config: dict, arch: str) -> list[bool]:
    """SmolLM3's layers without rotary embeddings (``no_rope_layers``: 0 for those, or every
    ``no_rope_layer_interval``-th layer); none for other models. Its sliding windows are refused."""
    n = int(config["num_hidden_layers"])
    if arch != "SmolLM3ForCausalLM":
        return [False] * n
    if config.get("use_sliding_window"):
        raise NotImplementedError("SmolLM3 sliding-window attention (use_sliding_window) is not supported")
    flags = config.get("no_rope_layers")
    if flags is None:
        from max.pipelines.lib.model_source import _number

        interval = _number(config.get("no_rope_layer_interval") or 4, "no_rope_layer_interval")
        return [(i + 1) % interval == 0 for i in range(n)]
    if not isinstance(flags, list) or len(flags) != n or any(f not in (0, 1) for f in flags):
        raise ValueError(f"the model's no_rope_layers must give 0 or 1 for each of its {n} layers")
    return [f == 0 for f in flags]


class NoPETransformer(Transformer):
    """A Transformer some of whose layers (`nope`) have no rotary embedding: they get no table."""

    def __init__(self, *args: Any, nope: list[bool], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.nope = nope

    def layer_freqs(self, layer_idx: int, device: Any) -> Any:
        return None if self.nope[layer_idx] else self.rope.freqs_cis_on(device)


def granite_scales(config: dict, arch: str) -> dict:
    """Granite's multipliers: the embeddings', every residual branch's, the attention scale (in
    place of 1/sqrt(head_dim)) and the logits' divisor; the neutral values for other models."""
    from max.pipelines.lib.model_source import _number

    out: dict = {"embedding_multiplier": 1.0, "residual_multiplier": 1.0, "attention_multiplier": None,
                 "logits_scaling": 1.0}
    if arch == "GraniteForCausalLM":
        for key in out:
            if config.get(key) is not None:
                out[key] = _number(config[key], key, float, positive=key == "logits_scaling")
    return out


def build(spec: DecoderSpec) -> Transformer | DistributedTransformer:
    c = spec.config
    arch = (c.get("architectures") or ["LlamaForCausalLM"])[0]
    hidden, n_layers = int(c["hidden_size"]), int(c["num_hidden_layers"])
    heads = int(c["num_attention_heads"])
    kv_heads, head_dim, _ = kv_geometry(c)
    ffn = int(c["intermediate_size"])
    eps = float(c.get("rms_norm_eps") or 1e-6)
    def gguf_bias(module: str) -> bool:  # a GGUF says which biases there are by holding them
        return spec.weights_format == "gguf" and spec.has(f"layers.0.{module}.bias")

    qkv_bias = arch == "Qwen2ForCausalLM" or bool(c.get("attention_bias")) or gguf_bias("self_attn.q_proj")
    # Qwen2's biases are q/k/v's only
    o_bias = (arch != "Qwen2ForCausalLM" and bool(c.get("attention_bias"))) or gguf_bias("self_attn.o_proj")
    qk_norm = arch == "Qwen3ForCausalLM"
    window = sliding_window(c, arch)
    nope = no_rope_layers(c, arch)
    mlp_bias = bool(c.get("mlp_bias")) or gguf_bias("mlp.gate_proj")
    scales = granite_scales(c, arch)
    # llama.cpp's converter permutes Llama's (and Granite's) q/k rows so that adjacent dims pair up.
    interleaved = spec.weights_format == "gguf" and arch in ("LlamaForCausalLM", "GraniteForCausalLM",
                                                             "SmolLM3ForCausalLM")
    rope = rope_for(spec, interleaved=interleaved)
    act = c.get("hidden_act") or "silu"
    tp = spec.tensor_parallel
    if any(nope) and tp:
        raise NotImplementedError("SmolLM3 runs on one device; tensor parallelism covers the Llama and Qwen families")
    if tp:
        head_plan(heads, kv_heads, len(spec.devices or []))  # fails early when the heads do not split
    blocks = []
    for i in range(n_layers):
        p = f"layers.{i}"
        attn_kwargs = dict(
            rope=rope, num_attention_heads=heads, num_key_value_heads=kv_heads, hidden_size=hidden,
            kv_params=spec.kv_params, dtype=spec.dtype, has_bias=qkv_bias,
            use_qk_norm=qk_norm, rms_norm_eps=eps, head_dim=head_dim, local_window_size=window,
            scale=scales["attention_multiplier"],
            mask_variant=(AttentionMaskVariant.SLIDING_WINDOW_CAUSAL_MASK if window
                          else AttentionMaskVariant.CAUSAL_MASK),
        )
        attn = (TensorParallelAttentionWithRope(devices=spec.devices, **attn_kwargs) if tp
                else AttentionWithRope(devices=[spec.device], **attn_kwargs))
        attn.q_proj = linear(spec, f"{p}.self_attn.q_proj", hidden, heads * head_dim, qkv_bias)
        attn.k_proj = linear(spec, f"{p}.self_attn.k_proj", hidden, kv_heads * head_dim, qkv_bias)
        attn.v_proj = linear(spec, f"{p}.self_attn.v_proj", hidden, kv_heads * head_dim, qkv_bias)
        attn.o_proj = linear(spec, f"{p}.self_attn.o_proj", heads * head_dim, hidden, o_bias)
        mlp = MLP(spec.dtype, None, hidden, ffn, [spec.device], activation_function=act, has_bias=mlp_bias)
        mlp.gate_proj = linear(spec, f"{p}.mlp.gate_proj", hidden, ffn, mlp_bias)
        mlp.up_proj = linear(spec, f"{p}.mlp.up_proj", hidden, ffn, mlp_bias)
        mlp.down_proj = linear(spec, f"{p}.mlp.down_proj", ffn, hidden, mlp_bias)
        norms = (RMSNorm(hidden, spec.dtype, eps), RMSNorm(hidden, spec.dtype, eps))
        r = scales["residual_multiplier"]
        if tp:
            blocks.append(DistributedTransformerBlock(attn, mlp, *norms, spec.devices,  # type: ignore[arg-type]
                                                      residual_multiplier=r))
        else:
            blocks.append(TransformerBlock(attn, mlp, *norms, residual_multiplier=r))
    emb_w = spec.weights["embed_tokens.weight"]
    vocab = int(emb_w.shape[0])
    outer = dict(embedding_multiplier=scales["embedding_multiplier"], logits_scaling=scales["logits_scaling"])
    if tp:
        return _distributed(spec, hidden, heads, vocab, blocks, RMSNorm(hidden, spec.dtype, eps), rope, outer)
    embedding, lm_head = embedding_and_head(spec, hidden)
    if any(nope):  # SmolLM3
        return NoPETransformer(hidden, heads, blocks, RMSNorm(hidden, spec.dtype, eps), lm_head, embedding,
                               spec.kv_params, rope, nope=nope, **outer)
    return Transformer(hidden, heads, blocks, RMSNorm(hidden, spec.dtype, eps), lm_head, embedding, spec.kv_params,
                       rope, **outer)


def embedding_and_head(spec: DecoderSpec, hidden: int) -> tuple[Embedding, Linear]:
    """The token embedding and the output projection: ``lm_head.weight`` when the checkpoint has
    one, else the embedding's matrix (tied), each with its own GGUF encoding."""
    emb_w = spec.weights["embed_tokens.weight"]
    vocab = int(emb_w.shape[0])
    embedding = Embedding(vocab, hidden, spec.dtype, spec.device, quantization_encoding=emb_w.quantization_encoding)
    if spec.has("lm_head.weight") and not spec.config.get("tie_word_embeddings_forced"):
        head_w = spec.weights["lm_head.weight"]
        lm_head = Linear(hidden, int(head_w.shape[0]), spec.dtype, spec.device,
                         quantization_encoding=head_w.quantization_encoding)
    else:
        lm_head = Linear(hidden, vocab, spec.dtype, spec.device, quantization_encoding=emb_w.quantization_encoding)
        lm_head.set_shared_weight("weight", embedding.weight)
    return embedding, lm_head


def _distributed(spec: DecoderSpec, hidden: int, heads: int, vocab: int, blocks: list, norm: RMSNorm,
                 rope: RotaryEmbedding, outer: dict) -> DistributedTransformer:
    """The tensor-parallel decoder: the embedding and the output projection split by vocabulary."""
    devices = list(spec.devices or [])
    emb_w = spec.weights["embed_tokens.weight"]
    embedding = VocabParallelEmbedding(vocab, hidden, spec.dtype, devices,
                                       quantization_encoding=emb_w.quantization_encoding)
    if spec.has("lm_head.weight") and not spec.config.get("tie_word_embeddings_forced"):
        head_w = spec.weights["lm_head.weight"]
        lm_head = ColumnParallelLinear(hidden, int(head_w.shape[0]), spec.dtype, devices,
                                       quantization_encoding=head_w.quantization_encoding)
    else:
        lm_head = ColumnParallelLinear(hidden, vocab, spec.dtype, devices, tied_weight=embedding.weight,
                                       quantization_encoding=emb_w.quantization_encoding)
    return DistributedTransformer(hidden, heads, blocks, norm, lm_head, embedding, spec.kv_params, devices, rope,
                                  **outer)


LLAMA = DecoderArchitecture(rename=rename, build=build, kv_geometry=kv_geometry)

__all__ = ["GGUF_BLOCK", "GGUF_TOP", "LLAMA", "NoPETransformer", "build", "embedding_and_head", "granite_scales", "kv_geometry",
           "linear", "longrope_params", "no_rope_layers", "rename", "renamer", "rope_for", "sliding_window"]
