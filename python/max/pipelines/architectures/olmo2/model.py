"""The OLMo 2 decoder (AllenAI): the Llama layers without pre-norms: RMSNorms after attention
and after the MLP (``post_attention_layernorm``, ``post_feedforward_layernorm``), each added
to the residual afterwards, and RMSNorms over the whole q and k projections (all heads
together, ``q_norm`` / ``k_norm``) before half-split rotary embeddings."""

from __future__ import annotations

from typing import Any

from max.graph import TensorValue
from max.nn import MLP, AttentionWithRope, RMSNorm, Transformer
from max.nn.kv_cache import PagedCacheValues
from max.nn.layer import Module
from max.pipelines.architectures.llama3.model import (
    GGUF_BLOCK,
    embedding_and_head,
    kv_geometry,
    linear,
    renamer,
    rope_for,
)
from max.pipelines.lib.decoder import DecoderArchitecture, DecoderSpec

# Llama's names, without the pre-norms and with the two post-norms.
_GGUF_BLOCK = {
    **{k: v for k, v in GGUF_BLOCK.items() if k not in ("attn_norm", "ffn_norm")},
    "post_attention_norm": "post_attention_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
rename = renamer(_GGUF_BLOCK)


class Olmo2Attention(AttentionWithRope):
    """Attention whose q and k projections are RMS-normalised over all their heads at once."""

    def __init__(self, *, q_norm: RMSNorm, k_norm: RMSNorm, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.q_norm = q_norm
        self.k_norm = k_norm

    def _qkv(self, x: TensorValue) -> tuple[TensorValue, TensorValue, TensorValue]:
        q, k, v = super()._qkv(x)
        return self.q_norm(q), self.k_norm(k), v


class Olmo2Block(Module):
    """``h = x + post_attention_norm(attn(x))``, then ``h + post_feedforward_norm(mlp(h))``."""

    def __init__(self, attention: Olmo2Attention, mlp: MLP, post_attention: RMSNorm, post_feedforward: RMSNorm) -> None:
        super().__init__()
        self.self_attn = attention
        self.mlp = mlp
        self.post_attention_layernorm = post_attention
        self.post_feedforward_layernorm = post_feedforward

    def __call__(self, layer_idx: int, x: TensorValue, kv_collection: PagedCacheValues, freqs_cis: TensorValue,
                 input_row_offsets: TensorValue) -> TensorValue:
        h = x + self.post_attention_layernorm(self.self_attn(layer_idx, x, kv_collection, freqs_cis, input_row_offsets))
        return h + self.post_feedforward_layernorm(self.mlp(h))


def build(spec: DecoderSpec) -> Transformer:
    if spec.tensor_parallel:
        raise NotImplementedError("OLMo 2 runs on one device; tensor parallelism covers the Llama and Qwen families")
    c = spec.config
    hidden, n_layers = int(c["hidden_size"]), int(c["num_hidden_layers"])
    heads = int(c["num_attention_heads"])
    kv_heads, head_dim, _ = kv_geometry(c)
    ffn = int(c["intermediate_size"])
    eps = float(c.get("rms_norm_eps") or 1e-6)
    bias = bool(c.get("attention_bias"))
    rope = rope_for(spec, interleaved=False)
    act = c.get("hidden_act") or "silu"

    def norm(dim: int) -> RMSNorm:
        return RMSNorm(dim, spec.dtype, eps, multiply_before_cast=True)

    blocks = []
    for i in range(n_layers):
        p = f"layers.{i}"
        attn = Olmo2Attention(
            rope=rope, num_attention_heads=heads, num_key_value_heads=kv_heads, hidden_size=hidden,
            kv_params=spec.kv_params, devices=[spec.device], dtype=spec.dtype, rms_norm_eps=eps, head_dim=head_dim,
            q_norm=norm(heads * head_dim), k_norm=norm(kv_heads * head_dim),
        )
        attn.q_proj = linear(spec, f"{p}.self_attn.q_proj", hidden, heads * head_dim, bias)
        attn.k_proj = linear(spec, f"{p}.self_attn.k_proj", hidden, kv_heads * head_dim, bias)
        attn.v_proj = linear(spec, f"{p}.self_attn.v_proj", hidden, kv_heads * head_dim, bias)
        attn.o_proj = linear(spec, f"{p}.self_attn.o_proj", heads * head_dim, hidden, bias)
        mlp = MLP(spec.dtype, None, hidden, ffn, [spec.device], activation_function=act)
        mlp.gate_proj = linear(spec, f"{p}.mlp.gate_proj", hidden, ffn)
        mlp.up_proj = linear(spec, f"{p}.mlp.up_proj", hidden, ffn)
        mlp.down_proj = linear(spec, f"{p}.mlp.down_proj", ffn, hidden)
        blocks.append(Olmo2Block(attn, mlp, norm(hidden), norm(hidden)))
    embedding, lm_head = embedding_and_head(spec, hidden)
    return Transformer(hidden, heads, blocks, norm(hidden), lm_head, embedding, spec.kv_params, rope)


OLMO2 = DecoderArchitecture(rename=rename, build=build, kv_geometry=kv_geometry)

__all__ = ["OLMO2", "Olmo2Attention", "Olmo2Block", "build", "rename"]
