"""The Gemma 3 text decoder: embeddings scaled by sqrt(hidden), four RMSNorms per block (before
and after attention, before and after the MLP) computing ``x * (1 + w)``, per-head q/k RMSNorm,
attention scaled by ``query_pre_attn_scalar ** -0.5``, sliding-window layers with their own
rotary base (``rope_local_base_freq``) between global layers (``layer_types`` or every
``sliding_window_pattern``-th layer), a GELU-tanh gated MLP and tied output embeddings.
Gemma 2 is the same without the q/k norms, with one rotary base, every other layer sliding
(the first one included) and its logits soft-capped (``attn_logit_softcapping``,
``final_logit_softcapping``).

GGUF files store the norm weights with the 1 already added (llama.cpp's converter), so they
load with no offset."""

from __future__ import annotations

import math
from typing import Any

from max.graph import TensorValue
from max.nn import MLP, AttentionWithRope, RMSNorm, Transformer, TransformerBlock
from max.nn.attention.mask_config import AttentionMaskVariant
from max.nn.kv_cache import PagedCacheValues
from max.nn.rotary_embedding import RotaryEmbedding
from max.pipelines.architectures.llama3.model import (
    GGUF_BLOCK,
    embedding_and_head,
    kv_geometry,
    linear,
    renamer,
    rope_for,
)
from max.pipelines.lib.decoder import DecoderArchitecture, DecoderSpec

# Llama's names, with Gemma's four norms per block.
_GGUF_BLOCK = {
    **GGUF_BLOCK,
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
rename = renamer(_GGUF_BLOCK, prefixes=("model.language_model.", "language_model.model.", "model."))


class Gemma3Block(TransformerBlock):
    """``h = x + post_attn_norm(attn(norm(x)))``, ``h + post_ffw_norm(mlp(pre_ffw_norm(h)))``."""

    def __init__(self, attention: Any, mlp: Any, norms: list[RMSNorm]) -> None:
        super().__init__(attention, mlp, norms[0], norms[1])
        self.pre_feedforward_layernorm = norms[2]
        self.post_feedforward_layernorm = norms[3]

    def __call__(self, layer_idx: int, x: TensorValue, kv_collection: PagedCacheValues, freqs_cis: TensorValue,
                 input_row_offsets: TensorValue) -> TensorValue:
        a = self.self_attn(layer_idx, self.input_layernorm(x), kv_collection, freqs_cis, input_row_offsets)
        h = x + self.post_attention_layernorm(a)
        return h + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(h)))


class Gemma3Transformer(Transformer):
    """A Transformer whose sliding-window layers use the local rotary table."""

    def __init__(self, *args: Any, local_rope: RotaryEmbedding, sliding: list[bool], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.local_rope = local_rope
        self.sliding = sliding

    def layer_freqs(self, layer_idx: int, device: Any) -> TensorValue:
        rope = self.local_rope if self.sliding[layer_idx] else self.rope
        return rope.freqs_cis_on(device)


def sliding_layers(c: dict[str, Any], gemma2: bool = False) -> list[bool]:
    n = int(c["num_hidden_layers"])
    types = c.get("layer_types")
    if types:
        if not isinstance(types, list) or len(types) != n:
            raise ValueError(f"the model's layer_types must name each of its {n} layers")
        return [t == "sliding_attention" for t in types]
    pattern = int(c.get("sliding_window_pattern") or (2 if gemma2 else 6))
    return [(i + 1) % pattern != 0 for i in range(n)]


def build(spec: DecoderSpec) -> Transformer:
    c = spec.config
    gemma2 = (c.get("architectures") or [""])[0] == "Gemma2ForCausalLM"
    if spec.tensor_parallel:
        raise NotImplementedError("Gemma runs on one device; tensor parallelism covers the Llama and Qwen families")
    hidden, n_layers = int(c["hidden_size"]), int(c["num_hidden_layers"])
    heads = int(c["num_attention_heads"])
    kv_heads, head_dim, _ = kv_geometry(c)
    ffn = int(c["intermediate_size"])
    eps = float(c.get("rms_norm_eps") or 1e-6)
    offset = 0.0 if spec.weights_format == "gguf" else 1.0
    scalar = float(c.get("query_pre_attn_scalar") or head_dim)
    window = int(c.get("sliding_window") or 4096)
    sliding = sliding_layers(c, gemma2)
    global_rope = rope_for(spec, interleaved=False)
    local_rope = global_rope if gemma2 else rope_for(
        spec, interleaved=False, theta=float(c.get("rope_local_base_freq") or 10000.0), scaling={})
    act = c.get("hidden_activation") or c.get("hidden_act") or "gelu_pytorch_tanh"

    def norm(dim: int) -> RMSNorm:
        return RMSNorm(dim, spec.dtype, eps, weight_offset=offset, multiply_before_cast=True)

    blocks = []
    for i in range(n_layers):
        p = f"layers.{i}"
        attn = AttentionWithRope(
            rope=local_rope if sliding[i] else global_rope, num_attention_heads=heads, num_key_value_heads=kv_heads,
            hidden_size=hidden, kv_params=spec.kv_params, devices=[spec.device], dtype=spec.dtype,
            scale=1.0 / math.sqrt(scalar), use_qk_norm=not gemma2, rms_norm_eps=eps, qk_norm_weight_offset=offset,
            head_dim=head_dim,
            mask_variant=AttentionMaskVariant.SLIDING_WINDOW_CAUSAL_MASK if sliding[i] else AttentionMaskVariant.CAUSAL_MASK,
            local_window_size=window if sliding[i] else None,
            attn_logit_softcapping=c.get("attn_logit_softcapping"),
        )
        attn.q_proj = linear(spec, f"{p}.self_attn.q_proj", hidden, heads * head_dim)
        attn.k_proj = linear(spec, f"{p}.self_attn.k_proj", hidden, kv_heads * head_dim)
        attn.v_proj = linear(spec, f"{p}.self_attn.v_proj", hidden, kv_heads * head_dim)
        attn.o_proj = linear(spec, f"{p}.self_attn.o_proj", heads * head_dim, hidden)
        mlp = MLP(spec.dtype, None, hidden, ffn, [spec.device], activation_function=act)
        mlp.gate_proj = linear(spec, f"{p}.mlp.gate_proj", hidden, ffn)
        mlp.up_proj = linear(spec, f"{p}.mlp.up_proj", hidden, ffn)
        mlp.down_proj = linear(spec, f"{p}.mlp.down_proj", ffn, hidden)
        blocks.append(Gemma3Block(attn, mlp, [norm(hidden) for _ in range(4)]))
    embedding, lm_head = embedding_and_head(spec, hidden)
    return Gemma3Transformer(
        hidden, heads, blocks, norm(hidden), lm_head, embedding, spec.kv_params, global_rope,
        embedding_multiplier=math.sqrt(hidden), logits_softcapping=c.get("final_logit_softcapping"),
        local_rope=local_rope, sliding=sliding,
    )


GEMMA3 = DecoderArchitecture(rename=rename, build=build, kv_geometry=kv_geometry)

__all__ = ["GEMMA3", "build", "rename"]
