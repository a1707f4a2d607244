"""Float64 numpy reference forward passes: decoder LLMs (Llama, SmolLM3, Mistral, Granite, Qwen2, Qwen3, Gemma 2 and 3,
Phi-3, OLMo 2) and BERT sentence embeddings.

Tests check the engine's model implementations against these functions. Everything is computed in
float64 from Hugging Face-named weights (`model.layers.0.self_attn.q_proj.weight`, shaped [out, in])
and the Hugging Face `config.json` dict; the maths follows the `transformers` modelling code of each
architecture. Deliberately independent of the `max` package, and written for clarity, not speed:
every call recomputes the whole sequence (no KV cache).

Public functions:
- `causal_lm_logits(config, weights, token_ids)` -> [T, vocab] logits of one sequence (positions 0..T-1).
- `greedy_tokens(config, weights, prompt_ids, n)` / `greedy_with_margins(...)`: greedy continuation.
- `decoder_spec(config)`: the resolved hyper-parameters (per-layer sliding window and rope frequencies).
- `rope_inv_freq(head_dim, theta, scaling)`: rotary inverse frequencies incl. linear / llama3 scaling.
- `bert_embeddings(config, weights, token_ids, *, normalize, pooling)`: a sentence-transformers vector.

One non-Hugging Face config key is understood: `rope_freq_factors` (a list of head_dim/2 floats). It is
what `gguf_model.load_gguf_as_hf` sets from llama.cpp's `rope_freqs.weight` tensor (how a GGUF stores
Llama 3 rope scaling): the inverse frequencies are divided by these factors, as llama.cpp does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

Weights = Mapping[str, np.ndarray]

# config["architectures"][0] -> the family name used below.
DECODER_FAMILIES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "SmolLM3ForCausalLM": "smollm3",
    "GraniteForCausalLM": "granite",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3",
    "Phi3ForCausalLM": "phi3",
    "Olmo2ForCausalLM": "olmo2",
}

# transformers' default for `tie_word_embeddings` in each family's config class.
_TIE_DEFAULT = {
    "llama": False, "smollm3": True, "mistral": False, "granite": False, "qwen2": False, "qwen3": False,
    "gemma2": True, "gemma3": True, "olmo2": False, "phi3": False,
}


# ----------------------------------------------------------------------------------------------
# Hyper-parameters
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerSpec:
    """Attention shape of one decoder layer."""

    sliding_window: int | None  # a query at i sees keys j with i - window < j <= i; None: all j <= i
    inv_freq: np.ndarray  # [rotary_dim // 2] rotary inverse frequencies (float64)


@dataclass(frozen=True)
class DecoderSpec:
    """Everything the forward pass needs from config.json, resolved once."""

    family: str  # "llama", "smollm3", "mistral", "granite", "qwen2", "qwen3", "gemma2", "gemma3", "phi3" or "olmo2"
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_eps: float
    gemma_norm: bool  # RMSNorm multiplies by (1 + w) instead of w
    qk_norm: bool  # per-head RMSNorm on q and k before rope (Qwen3, Gemma 3)
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    activation: str  # of the gate projection: "silu", "gelu_tanh" or "gelu"
    attn_scale: float  # multiplies q.k
    embed_scale: float  # multiplies the token embeddings
    attn_softcap: float | None
    final_softcap: float | None
    tie_embeddings: bool  # lm_head is the embedding matrix
    layers: tuple[LayerSpec, ...]
    # LongRoPE (Phi-3): cos and sin are multiplied by `rope_attention_factor`, and a sequence longer
    # than `rope_original_max` uses `long_inv_freq` at every position (transformers' rule).
    # Granite: every residual branch is multiplied by `residual_multiplier`, the logits divided by
    # `logits_scaling` (its embedding and attention multipliers are embed_scale and attn_scale).
    residual_multiplier: float = 1.0
    logits_scaling: float = 1.0
    rope_attention_factor: float = 1.0
    rope_original_max: int | None = None
    long_inv_freq: np.ndarray | None = None


def rope_inv_freq(head_dim: int, theta: float, scaling: Mapping[str, Any] | None = None) -> np.ndarray:
    """Inverse frequencies theta**(-2i/head_dim), i < head_dim/2, after an optional HF `rope_scaling`.

    Supported `rope_type`s: "default", "linear" (all frequencies / factor) and "llama3" (Llama 3.1:
    long wavelengths / factor, short ones untouched, a smooth blend in between).
    """
    inv_freq = 1.0 / float(theta) ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    kind = "default" if not scaling else scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv_freq
    if kind in ("longrope", "su"):  # the short factors; llm.py's `_longrope` has the rest
        return inv_freq / np.asarray(scaling["short_factor"], dtype=np.float64)
    if kind == "linear":
        return inv_freq / float(scaling["factor"])
    if kind == "llama3":
        factor = float(scaling["factor"])
        low_freq_factor = float(scaling["low_freq_factor"])
        high_freq_factor = float(scaling["high_freq_factor"])
        old_context = float(scaling["original_max_position_embeddings"])
        wavelen = 2.0 * math.pi / inv_freq
        long_wavelen = old_context / low_freq_factor  # beyond this: fully scaled
        short_wavelen = old_context / high_freq_factor  # below this: unchanged
        # In between, blend linearly in old_context / wavelen from "scaled" (0) to "unchanged" (1).
        smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
        blended = (1.0 - smooth) * inv_freq / factor + smooth * inv_freq
        return np.where(
            wavelen < short_wavelen, inv_freq, np.where(wavelen > long_wavelen, inv_freq / factor, blended)
        )
    raise NotImplementedError(f"rope_type {kind!r} is not implemented in the reference")


def _rope_settings(config: Mapping[str, Any], family: str, layer_type: str) -> tuple[float, Mapping | None]:
    """(theta, scaling dict or None) for a layer type ("full_attention" / "sliding_attention").

    Reads both config styles: transformers v5's `rope_parameters` (flat, or per layer type) and the
    classic `rope_theta` / `rope_scaling` (+ Gemma 3's `rope_local_base_freq` for sliding layers).
    """
    params = config.get("rope_parameters")
    if params:
        if "full_attention" in params or "sliding_attention" in params:
            params = params[layer_type]
        return float(params["rope_theta"]), params
    if family == "gemma3":
        if layer_type == "sliding_attention":
            return float(config.get("rope_local_base_freq", 10_000.0)), None
        return float(config.get("rope_theta", 1_000_000.0)), config.get("rope_scaling")
    return float(config.get("rope_theta", 10_000.0)), config.get("rope_scaling")


def _gemma_layer_types(config: Mapping[str, Any], family: str) -> list[str]:
    """`layer_types` if given, else every `sliding_window_pattern`-th layer (default: Gemma 3 6,
    Gemma 2 2) is global."""
    n = int(config["num_hidden_layers"])
    if config.get("layer_types"):
        types = list(config["layer_types"])
        assert len(types) == n, "layer_types must name every layer"
        return types
    pattern = int(config.get("sliding_window_pattern", 6 if family == "gemma3" else 2))
    return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n)]


def _activation_name(name: str) -> str:
    if name in ("silu", "swish"):
        return "silu"
    if name in ("gelu_pytorch_tanh", "gelu_tanh", "gelu_new", "gelu_fast"):
        return "gelu_tanh"
    if name == "gelu":
        return "gelu"
    raise NotImplementedError(f"activation {name!r} is not implemented in the reference")


def decoder_spec(config: Mapping[str, Any]) -> DecoderSpec:
    """Resolve a Hugging Face decoder config into a `DecoderSpec`."""
    arch = config["architectures"][0]
    if arch not in DECODER_FAMILIES:
        raise NotImplementedError(f"architecture {arch!r} is not in the reference ({sorted(DECODER_FAMILIES)})")
    family = DECODER_FAMILIES[arch]
    if config.get("use_sliding_window"):
        raise NotImplementedError("Qwen-style use_sliding_window is not implemented in the reference")
    hidden = int(config["hidden_size"])
    n_heads = int(config["num_attention_heads"])
    n_kv = int(config.get("num_key_value_heads") or n_heads)
    head_dim = int(config.get("head_dim") or hidden // n_heads)
    # Rotary embeddings on the first rotary_dim dims of a head (Phi-4-mini: 3/4 of them).
    rotary_dim = int(head_dim * float(config.get("partial_rotary_factor") or 1.0))
    attention_bias = bool(config.get("attention_bias", False))

    freq_factors = config.get("rope_freq_factors")

    def inv_freq_for(layer_type: str) -> np.ndarray:
        theta, scaling = _rope_settings(config, family, layer_type)
        inv = rope_inv_freq(rotary_dim, theta, scaling)
        if freq_factors is not None and layer_type == "full_attention":
            inv = inv / np.asarray(freq_factors, dtype=np.float64)
        return inv

    if family in ("gemma2", "gemma3"):
        types = _gemma_layer_types(config, family)
        window = int(config["sliding_window"]) if config.get("sliding_window") else None
        layers = tuple(
            LayerSpec(window if t == "sliding_attention" else None, inv_freq_for(t)) for t in types
        )
    else:  # Mistral, Phi-3: the same window (if any) in every layer
        full = inv_freq_for("full_attention")
        windowed = family in ("mistral", "phi3") and config.get("sliding_window")
        window = int(config["sliding_window"]) if windowed else None
        layers = tuple(LayerSpec(window, full) for _ in range(int(config["num_hidden_layers"])))
    if family == "smollm3":  # NoPE layers (no_rope_layers[i] == 0) rotate by nothing: frequencies 0
        n = int(config["num_hidden_layers"])
        if config.get("use_sliding_window"):
            raise NotImplementedError("SmolLM3's use_sliding_window is not implemented in the reference")
        flags = config.get("no_rope_layers") or [
            int((i + 1) % int(config.get("no_rope_layer_interval", 4)) != 0) for i in range(n)]
        layers = tuple(layer if flag else LayerSpec(layer.sliding_window, np.zeros_like(layer.inv_freq))
                       for layer, flag in zip(layers, flags))

    gemma = family in ("gemma2", "gemma3")
    act = config.get("hidden_activation") or config.get("hidden_act") or ("gelu_pytorch_tanh" if gemma else "silu")
    return DecoderSpec(
        family=family,
        hidden_size=hidden,
        num_layers=int(config["num_hidden_layers"]),
        num_heads=n_heads,
        num_kv_heads=n_kv,
        head_dim=head_dim,
        rms_eps=float(config.get("rms_norm_eps", 1e-6)),
        gemma_norm=gemma,
        qk_norm=family in ("qwen3", "gemma3"),
        qkv_bias={"qwen2": True, "mistral": False, "phi3": False}.get(family, attention_bias),
        o_bias=False if family in ("qwen2", "mistral", "phi3") else attention_bias,
        mlp_bias=bool(config.get("mlp_bias", False)) if family in ("llama", "granite", "smollm3") else False,
        activation=_activation_name(act),
        attn_scale=(float(config.get("query_pre_attn_scalar", 256)) ** -0.5 if gemma
                    else float(config.get("attention_multiplier", 1.0)) if family == "granite" else head_dim**-0.5),
        embed_scale=(math.sqrt(hidden) if gemma
                     else float(config.get("embedding_multiplier", 1.0)) if family == "granite" else 1.0),
        residual_multiplier=float(config.get("residual_multiplier", 1.0)) if family == "granite" else 1.0,
        logits_scaling=float(config.get("logits_scaling", 1.0)) if family == "granite" else 1.0,
        attn_softcap=config.get("attn_logit_softcapping") if gemma else None,
        final_softcap=config.get("final_logit_softcapping") if gemma else None,
        tie_embeddings=bool(config.get("tie_word_embeddings", _TIE_DEFAULT[family])),
        layers=layers,
        **_longrope(config, family, rotary_dim),
    )


def _longrope(config: Mapping[str, Any], family: str, rotary_dim: int) -> dict[str, Any]:
    """LongRoPE's extra DecoderSpec fields (transformers' `_compute_longrope_parameters`): frequencies
    divided per pair by `short_factor` (`rope_inv_freq`) or, past `original_max_position_embeddings`,
    by `long_factor`; cos and sin scaled by sqrt(1 + ln(s) / ln(original)) for
    s = max_position_embeddings / original > 1, unless `attention_factor` is given."""
    _, scaling = _rope_settings(config, family, "full_attention")
    if not scaling or scaling.get("rope_type", scaling.get("type")) not in ("longrope", "su"):
        return {}
    original = int(scaling.get("original_max_position_embeddings") or config["original_max_position_embeddings"])
    factor = scaling.get("factor") or int(config["max_position_embeddings"]) / original
    attention = scaling.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1.0 else math.sqrt(1.0 + math.log(factor) / math.log(original))
    theta = float(_rope_settings(config, family, "full_attention")[0])
    long_inv = rope_inv_freq(rotary_dim, theta) / np.asarray(scaling["long_factor"], dtype=np.float64)
    return {"rope_attention_factor": float(attention), "rope_original_max": original, "long_inv_freq": long_inv}


# ----------------------------------------------------------------------------------------------
# Building blocks (float64)
# ----------------------------------------------------------------------------------------------


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _linear(x: np.ndarray, w: Weights, name: str, bias: bool) -> np.ndarray:
    """x @ W.T (+ b) for the HF Linear `name` (weight [out, in])."""
    y = x @ _f64(w[name + ".weight"]).T
    if bias:
        y = y + _f64(w[name + ".bias"])
    return y


def _rms_norm(x: np.ndarray, weight: np.ndarray, eps: float, gemma: bool) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) over the last axis, times w (Llama) or (1 + w) (Gemma)."""
    normed = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    weight = _f64(weight)
    return normed * ((1.0 + weight) if gemma else weight)


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # biased, as torch
    return (x - mean) / np.sqrt(var + eps) * _f64(weight) + _f64(bias)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _activate(x: np.ndarray, kind: str) -> np.ndarray:
    if kind == "silu":  # x * sigmoid(x), sigmoid written with tanh so that it never overflows
        return x * 0.5 * (1.0 + np.tanh(0.5 * x))
    if kind == "gelu_tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    if kind == "gelu":  # exact, erf-based
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    raise ValueError(kind)


def _rope(x: np.ndarray, positions: np.ndarray, inv_freq: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """HF rotary embedding on x [T, heads, head_dim]: over the first rotary_dim = 2 * len(inv_freq)
    dims, dimension i pairs with i + rotary_dim/2; the rest pass through. cos and sin times `scale`."""
    angles = positions[:, None] * inv_freq[None, :]  # [T, rotary_dim/2]
    cos = scale * np.cos(angles)[:, None, :]
    sin = scale * np.sin(angles)[:, None, :]
    half = inv_freq.shape[0]
    x1, x2, rest = x[..., :half], x[..., half : 2 * half], x[..., 2 * half :]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], axis=-1)


def _softmax(scores: np.ndarray) -> np.ndarray:
    scores = scores - scores.max(axis=-1, keepdims=True)
    e = np.exp(scores)
    return e / e.sum(axis=-1, keepdims=True)


def _causal_attention(q, k, v, scale, softcap, window) -> np.ndarray:
    """q [T, Hq, D], k/v [T, Hkv, D] -> [T, Hq*D]. Query head h reads kv head h // (Hq/Hkv)."""
    t, n_heads, _ = q.shape
    group = n_heads // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, k) * scale
    if softcap:
        scores = softcap * np.tanh(scores / softcap)
    i = np.arange(t)[:, None]
    j = np.arange(t)[None, :]
    allowed = j <= i
    if window is not None:
        allowed &= j > i - window
    probs = _softmax(np.where(allowed[None], scores, -np.inf))
    return np.einsum("hqk,khd->qhd", probs, v).reshape(t, -1)


# ----------------------------------------------------------------------------------------------
# Decoder forward
# ----------------------------------------------------------------------------------------------


def _decoder_layer(x: np.ndarray, w: Weights, spec: DecoderSpec, index: int, positions: np.ndarray) -> np.ndarray:
    p = f"model.layers.{index}."
    layer = spec.layers[index]
    t = x.shape[0]

    def norm(v, name):
        return _rms_norm(v, w[p + name], spec.rms_eps, spec.gemma_norm)

    h = x if spec.family == "olmo2" else norm(x, "input_layernorm.weight")  # (OLMo 2: no pre-norms)
    q_dim, kv_dim = spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim
    if spec.family == "phi3":  # q, k and v rows one after another in qkv_proj
        qkv = _linear(h, w, p + "self_attn.qkv_proj", False)
        q, k, v = qkv[:, :q_dim], qkv[:, q_dim : q_dim + kv_dim], qkv[:, q_dim + kv_dim :]
    else:
        q = _linear(h, w, p + "self_attn.q_proj", spec.qkv_bias)
        k = _linear(h, w, p + "self_attn.k_proj", spec.qkv_bias)
        v = _linear(h, w, p + "self_attn.v_proj", spec.qkv_bias)
    if spec.family == "olmo2":  # RMSNorm over the whole q and k projections (all heads together)
        q = norm(q, "self_attn.q_norm.weight")
        k = norm(k, "self_attn.k_norm.weight")
    q = q.reshape(t, spec.num_heads, spec.head_dim)
    k = k.reshape(t, spec.num_kv_heads, spec.head_dim)
    v = v.reshape(t, spec.num_kv_heads, spec.head_dim)
    if spec.qk_norm:
        q = norm(q, "self_attn.q_norm.weight")
        k = norm(k, "self_attn.k_norm.weight")
    inv_freq = layer.inv_freq
    if spec.long_inv_freq is not None and t > spec.rope_original_max:
        inv_freq = spec.long_inv_freq
    q = _rope(q, positions, inv_freq, spec.rope_attention_factor)
    k = _rope(k, positions, inv_freq, spec.rope_attention_factor)
    attn = _causal_attention(q, k, v, spec.attn_scale, spec.attn_softcap, layer.sliding_window)
    attn = _linear(attn, w, p + "self_attn.o_proj", spec.o_bias)

    def mlp(v):
        if spec.family == "phi3":  # gate rows, then up rows, in gate_up_proj
            gate, up = np.split(_linear(v, w, p + "mlp.gate_up_proj", False), 2, axis=-1)
        else:
            gate = _linear(v, w, p + "mlp.gate_proj", spec.mlp_bias)
            up = _linear(v, w, p + "mlp.up_proj", spec.mlp_bias)
        return _linear(_activate(gate, spec.activation) * up, w, p + "mlp.down_proj", spec.mlp_bias)

    if spec.family == "olmo2":  # the blocks' outputs are normed, then added
        x = x + norm(attn, "post_attention_layernorm.weight")
        return x + norm(mlp(x), "post_feedforward_layernorm.weight")
    if spec.family in ("gemma2", "gemma3"):  # sandwich norms around both blocks
        x = x + norm(attn, "post_attention_layernorm.weight")
        return x + norm(mlp(norm(x, "pre_feedforward_layernorm.weight")), "post_feedforward_layernorm.weight")
    r = spec.residual_multiplier
    x = x + attn * r  # Llama/Qwen/Phi-3: post_attention_layernorm is the norm *before* the MLP
    return x + mlp(norm(x, "post_attention_layernorm.weight")) * r


def _final_hidden(spec: DecoderSpec, w: Weights, token_ids: Sequence[int]) -> np.ndarray:
    """Normed last-layer hidden states [T, hidden]."""
    ids = np.asarray(list(token_ids), dtype=np.int64)
    if ids.ndim != 1 or ids.size == 0:
        raise ValueError("token_ids must be a non-empty sequence of ints")
    x = _f64(w["model.embed_tokens.weight"])[ids] * spec.embed_scale
    positions = np.arange(ids.size, dtype=np.float64)
    for i in range(spec.num_layers):
        x = _decoder_layer(x, w, spec, i, positions)
    return _rms_norm(x, w["model.norm.weight"], spec.rms_eps, spec.gemma_norm)


def _lm_head(spec: DecoderSpec, w: Weights, hidden: np.ndarray) -> np.ndarray:
    head = w["model.embed_tokens.weight"] if spec.tie_embeddings else w["lm_head.weight"]
    logits = hidden @ _f64(head).T / spec.logits_scaling
    if spec.final_softcap:
        logits = spec.final_softcap * np.tanh(logits / spec.final_softcap)
    return logits


def causal_lm_logits(config: Mapping[str, Any], weights: Weights, token_ids: Sequence[int]) -> np.ndarray:
    """Logits [T, vocab] (float64) of one sequence at positions 0..T-1 under causal attention."""
    spec = decoder_spec(config)
    return _lm_head(spec, weights, _final_hidden(spec, weights, token_ids))


def greedy_with_margins(
    config: Mapping[str, Any], weights: Weights, prompt_ids: Sequence[int], n: int
) -> tuple[list[int], list[float]]:
    """n greedy tokens after the prompt, and at each step the gap between the top two logits.

    The whole sequence is recomputed every step. Exact ties go to the lowest token id (np.argmax).
    """
    spec = decoder_spec(config)
    ids = list(int(i) for i in prompt_ids)
    out: list[int] = []
    margins: list[float] = []
    for _ in range(n):
        logits = _lm_head(spec, weights, _final_hidden(spec, weights, ids)[-1:])[0]
        top2 = np.sort(logits)[-2:]
        nxt = int(np.argmax(logits))
        out.append(nxt)
        margins.append(float(top2[1] - top2[0]))
        ids.append(nxt)
    return out, margins


def greedy_tokens(config: Mapping[str, Any], weights: Weights, prompt_ids: Sequence[int], n: int) -> list[int]:
    """n greedy (argmax) tokens continuing `prompt_ids`."""
    return greedy_with_margins(config, weights, prompt_ids, n)[0]


# ----------------------------------------------------------------------------------------------
# BERT sentence embeddings
# ----------------------------------------------------------------------------------------------


def _bert_weights(weights: Weights) -> dict[str, np.ndarray]:
    """The BertModel weights without a leading `bert.` (BertFor* checkpoints have one)."""
    if any(k.startswith("bert.") for k in weights):
        return {k[len("bert.") :]: v for k, v in weights.items() if k.startswith("bert.")}
    return dict(weights)


def bert_token_states(config: Mapping[str, Any], weights: Weights, token_ids: Sequence[int]) -> np.ndarray:
    """Last-layer hidden states [T, hidden] of BertModel on one unpadded sequence (token type 0)."""
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise NotImplementedError("only absolute position embeddings are implemented")
    w = _bert_weights(weights)
    eps = float(config.get("layer_norm_eps", 1e-12))
    n_heads = int(config["num_attention_heads"])
    act = _activation_name(config.get("hidden_act", "gelu"))
    ids = np.asarray(list(token_ids), dtype=np.int64)
    t = ids.size

    x = (
        _f64(w["embeddings.word_embeddings.weight"])[ids]
        + _f64(w["embeddings.position_embeddings.weight"])[:t]
        + _f64(w["embeddings.token_type_embeddings.weight"])[0]
    )
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    for i in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{i}."
        q, k, v = (
            _linear(x, w, p + f"attention.self.{n}", True).reshape(t, n_heads, -1) for n in ("query", "key", "value")
        )
        scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(q.shape[-1])  # bidirectional, no mask
        ctx = np.einsum("hqk,khd->qhd", _softmax(scores), v).reshape(t, -1)
        attn = _linear(ctx, w, p + "attention.output.dense", True)
        x = _layer_norm(attn + x, w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], eps)
        ffn = _linear(_activate(_linear(x, w, p + "intermediate.dense", True), act), w, p + "output.dense", True)
        x = _layer_norm(ffn + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
    return x


def bert_embeddings(
    config: Mapping[str, Any],
    weights: Weights,
    token_ids: Sequence[int],
    *,
    normalize: bool,
    pooling: str = "mean",
) -> np.ndarray:
    """A sentence-transformers vector [hidden] for one tokenized sentence (with its [CLS]/[SEP]).

    pooling: "mean" (over all tokens: one unpadded sentence has an all-ones attention mask), "cls"
    (the first token) or "max"; normalize: divide by the L2 norm (sentence-transformers' Normalize).
    For a padded batch, the engine's result for each row must equal this on the unpadded row.
    """
    states = bert_token_states(config, weights, token_ids)
    if pooling == "mean":
        vec = states.mean(axis=0)
    elif pooling == "cls":
        vec = states[0]
    elif pooling == "max":
        vec = states.max(axis=0)
    else:
        raise ValueError(f"unknown pooling {pooling!r}")
    if normalize:
        vec = vec / max(float(np.linalg.norm(vec)), 1e-12)
    return vec
