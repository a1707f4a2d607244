"""The Phi-3 decoder graph (Phi-3 and Phi-3.5 mini/medium, Phi-4-mini): the Llama block with q, k
and v in one projection (``qkv_proj``) and the gate and up projections in one (``gate_up_proj``,
gate rows first), half-split rotary embeddings over all or the first part of each head
(``partial_rotary_factor``), LongRoPE for the long-context models, and the same sliding window
(``sliding_window``, when set) in every layer."""

from __future__ import annotations


from max.graph import TensorValue
from max.nn import AttentionWithRope, Linear, RMSNorm, Transformer, TransformerBlock
from max.nn._util import activation
from max.nn.attention.mask_config import AttentionMaskVariant
from max.nn.layer import Module
from max.pipelines.architectures.llama3.model import (
    GGUF_TOP,
    embedding_and_head,
    kv_geometry,
    linear,
    renamer,
    rope_for,
    sliding_window,
)
from max.pipelines.lib.decoder import DecoderArchitecture, DecoderSpec

_GGUF_BLOCK = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_qkv": "self_attn.qkv_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_up": "mlp.gate_up_proj",
    "ffn_down": "mlp.down_proj",
}
rename = renamer(_GGUF_BLOCK, {**GGUF_TOP, "rope_factors_long.weight": "rope_factors_long.weight",
                                 "rope_factors_short.weight": "rope_factors_short.weight"})


class GateUpMLP(Module):
    """``down_proj(act(gate) * up)`` where ``[gate, up] = gate_up_proj(x)``: one projection to
    twice the feed-forward width, the gate's features first."""

    def __init__(self, gate_up_proj: Linear, down_proj: Linear, feed_forward_length: int, act: str) -> None:
        super().__init__()
        self.gate_up_proj = gate_up_proj
        self.down_proj = down_proj
        self.feed_forward_length = int(feed_forward_length)
        self._act = activation(act)

    def __call__(self, x: TensorValue) -> TensorValue:
        gate_up = self.gate_up_proj(x)
        ffn = self.feed_forward_length
        return self.down_proj(self._act(gate_up[:, :ffn]) * gate_up[:, ffn:])


def build(spec: DecoderSpec) -> Transformer:
    if spec.tensor_parallel:
        raise NotImplementedError("Phi-3 runs on one device; tensor parallelism covers the Llama and Qwen families")
    c = spec.config
    hidden, n_layers = int(c["hidden_size"]), int(c["num_hidden_layers"])
    heads = int(c["num_attention_heads"])
    kv_heads, head_dim, _ = kv_geometry(c)
    ffn = int(c["intermediate_size"])
    eps = float(c.get("rms_norm_eps") or 1e-5)
    window = sliding_window(c, "Phi3ForCausalLM")
    rope = rope_for(spec, interleaved=False)
    act = c.get("hidden_act") or "silu"
    blocks = []
    for i in range(n_layers):
        p = f"layers.{i}"
        attn = AttentionWithRope(
            rope=rope, num_attention_heads=heads, num_key_value_heads=kv_heads, hidden_size=hidden,
            kv_params=spec.kv_params, devices=[spec.device], dtype=spec.dtype, stacked_qkv=True,
            rms_norm_eps=eps, head_dim=head_dim, local_window_size=window,
            mask_variant=(AttentionMaskVariant.SLIDING_WINDOW_CAUSAL_MASK if window
                          else AttentionMaskVariant.CAUSAL_MASK),
        )
        attn.qkv_proj = linear(spec, f"{p}.self_attn.qkv_proj", hidden, (heads + 2 * kv_heads) * head_dim)
        attn.o_proj = linear(spec, f"{p}.self_attn.o_proj", heads * head_dim, hidden)
        mlp = GateUpMLP(linear(spec, f"{p}.mlp.gate_up_proj", hidden, 2 * ffn),
                        linear(spec, f"{p}.mlp.down_proj", ffn, hidden), ffn, act)
        blocks.append(TransformerBlock(attn, mlp, RMSNorm(hidden, spec.dtype, eps), RMSNorm(hidden, spec.dtype, eps)))
    embedding, lm_head = embedding_and_head(spec, hidden)
    norm = RMSNorm(hidden, spec.dtype, eps)
    return Transformer(hidden, heads, blocks, norm, lm_head, embedding, spec.kv_params, rope)


PHI3 = DecoderArchitecture(rename=rename, build=build, kv_geometry=kv_geometry)

__all__ = ["PHI3", "GateUpMLP", "build", "rename"]
