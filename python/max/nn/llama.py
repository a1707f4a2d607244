"""The eager Llama decoder block: ``RopeAttention`` (rotary attention over a ``PagedKVCache``),
``GatedMLP`` (``down(act(gate(x)) * up(x))``) and ``LlamaBlock`` (pre-norm attention and MLP
with residuals), modules over Tensors whose parameters carry the graph layers' names
(``self_attn.q_proj.weight``, ``mlp.gate_proj.weight``, ``input_layernorm.weight``, ...), so a
checkpoint's block loads into either.

There is one implementation of the math: each sub-layer runs as one eager op (a small graph,
compiled once per shape and cached) that stages the graph layers' own functions
(``rope_attention``, ``gated_mlp``, ``dense``, ``add_residual``, the ``rms_norm`` kernel), so the
eager block and ``TransformerBlock`` execute the same kernels on the same values and agree bit
for bit. The residual add is part of the attention and MLP ops rather than an op of its own
because a GPU graph folds it into the epilogue of the output projection's matmul (one rounding
of ``x + W a`` instead of two); staged beside that matmul in the eager op it folds the same way."""

from __future__ import annotations

import math
from typing import Any

from max.nn._util import activation
from max.nn.attention.attention_with_rope import rope_attention
from max.nn.kv_cache.cache_params import PagedCacheValues
from max.nn.kv_cache.paged_cache import CacheStep
from max.nn.layers import Linear, RMSNorm
from max.nn.linear import dense, gated_mlp
from max.nn.module import Module
from max.nn.transformer.transformer import add_residual
from max.tensor import Tensor
from max._eager.dispatch import apply


def _bias(layer: Linear) -> Tensor | None:
    return layer.bias if isinstance(layer.bias, Tensor) else None


def _attention_op(x, wq, bq, wk, bk, wv, bv, wo, blocks, freqs_cis, offsets, lengths, table, positions, slots,
                  residual, *, layer, n_heads, n_kv_heads, head_dim, interleaved, scale, multiplier):
    kv = PagedCacheValues(blocks, lengths, table, None, positions, slots)
    y = rope_attention(
        x, lambda v: (dense(v, wq, bq), dense(v, wk, bk), dense(v, wv, bv)), lambda a: dense(a, wo),
        kv, freqs_cis, offsets, layer=layer, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim,
        interleaved=interleaved, scale=scale,
    )
    return y if residual is None else add_residual(residual, y, multiplier)


def _mlp_op(x, wg, bg, wu, bu, wd, bd, residual, *, act, multiplier):
    def proj(w: Any, b: Any) -> Any:
        return lambda v: dense(v, w, b)

    y = gated_mlp(x, proj(wg, bg), proj(wu, bu), proj(wd, bd), activation(act))
    return y if residual is None else add_residual(residual, y, multiplier)


class RopeAttention(Module):
    """Causal grouped-query self-attention with rotary embeddings over a paged KV cache, for
    ragged token batches ``x [tokens, hidden_size]``. `layer_idx` picks the layer's slice of the
    cache; `interleaved` rotates adjacent pairs (GGUF Llama) instead of dim i with dim
    i + head_dim/2 (Hugging Face)."""

    def __init__(self, hidden_size: int, n_heads: int, n_kv_heads: int, head_dim: int | None = None, *,
                 layer_idx: int = 0, interleaved: bool = False, scale: float | None = None,
                 bias: bool = False) -> None:
        self.n_heads, self.n_kv_heads = int(n_heads), int(n_kv_heads)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"RopeAttention: {n_heads} heads are not a multiple of {n_kv_heads} kv heads")
        self.head_dim = int(head_dim) if head_dim is not None else int(hidden_size) // self.n_heads
        self.layer_idx = int(layer_idx)
        self.interleaved = bool(interleaved)
        self.scale = float(scale) if scale is not None else 1.0 / math.sqrt(self.head_dim)
        q_dim, kv_dim = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        self.q_proj = Linear(hidden_size, q_dim, bias=bias)
        self.k_proj = Linear(hidden_size, kv_dim, bias=bias)
        self.v_proj = Linear(hidden_size, kv_dim, bias=bias)
        self.o_proj = Linear(q_dim, hidden_size, bias=False)

    def forward(self, x: Tensor, cache: CacheStep, freqs_cis: Tensor, residual: Tensor | None = None,
                residual_multiplier: float = 1.0) -> Tensor:
        """The attention output ``[tokens, hidden_size]``, or ``residual + output *
        residual_multiplier`` when `residual` is given; the new tokens' keys and values are
        written to `cache`. `freqs_cis` is the rotary table ``[positions, head_dim]``
        (float32 (cos, sin) pairs, ``max.nn.rope.freqs``)."""
        if not isinstance(cache, CacheStep):
            raise TypeError(f"RopeAttention: cache must be a CacheStep (PagedKVCache.step), got {type(cache).__name__}")
        q, k, v = self.q_proj, self.k_proj, self.v_proj
        args = (x, q.weight, _bias(q), k.weight, _bias(k), v.weight, _bias(v), self.o_proj.weight, cache.blocks,
                freqs_cis, cache.input_row_offsets, cache.cache_lengths, cache.lookup_table, cache.positions,
                cache.slots, residual)
        attrs = {"layer": self.layer_idx, "n_heads": self.n_heads, "n_kv_heads": self.n_kv_heads,
                 "head_dim": self.head_dim, "interleaved": self.interleaved, "scale": self.scale,
                 "multiplier": float(residual_multiplier)}
        return apply(_attention_op, args, attrs)


class GatedMLP(Module):
    """``down_proj(act(gate_proj(x)) * up_proj(x))`` (act: silu by default)."""

    def __init__(self, hidden_size: int, intermediate_size: int, *, bias: bool = False,
                 activation_function: str = "silu") -> None:
        activation(activation_function)  # an unknown name fails here
        self.activation_function = activation_function
        self.gate_proj = Linear(hidden_size, intermediate_size, bias=bias)
        self.up_proj = Linear(hidden_size, intermediate_size, bias=bias)
        self.down_proj = Linear(intermediate_size, hidden_size, bias=bias)

    def forward(self, x: Tensor, residual: Tensor | None = None, residual_multiplier: float = 1.0) -> Tensor:
        g, u, d = self.gate_proj, self.up_proj, self.down_proj
        args = (x, g.weight, _bias(g), u.weight, _bias(u), d.weight, _bias(d), residual)
        return apply(_mlp_op, args, {"act": self.activation_function, "multiplier": float(residual_multiplier)})


class BlockRMSNorm(RMSNorm):
    """RMSNorm as the graph ``RMSNorm`` applies it by default (and so the Llama pipeline): the
    weight multiplies in float32, before the one rounding to x's dtype."""

    _before_cast = True


class LlamaBlock(Module):
    """``h = x + attn(input_layernorm(x)) * r``, then ``h + mlp(post_attention_layernorm(h)) * r``
    (r: `residual_multiplier`), as ``max.nn.TransformerBlock`` computes it in a graph."""

    def __init__(self, hidden_size: int, n_heads: int, n_kv_heads: int, intermediate_size: int, *,
                 head_dim: int | None = None, layer_idx: int = 0, rms_norm_eps: float = 1e-6,
                 interleaved: bool = False, attention_bias: bool = False, mlp_bias: bool = False,
                 activation_function: str = "silu", residual_multiplier: float = 1.0) -> None:
        self.self_attn = RopeAttention(hidden_size, n_heads, n_kv_heads, head_dim, layer_idx=layer_idx,
                                       interleaved=interleaved, bias=attention_bias)
        self.mlp = GatedMLP(hidden_size, intermediate_size, bias=mlp_bias, activation_function=activation_function)
        self.input_layernorm = BlockRMSNorm(hidden_size, rms_norm_eps)
        self.post_attention_layernorm = BlockRMSNorm(hidden_size, rms_norm_eps)
        self.residual_multiplier = float(residual_multiplier)

    def forward(self, x: Tensor, cache: CacheStep, freqs_cis: Tensor) -> Tensor:
        r = self.residual_multiplier
        h = self.self_attn(self.input_layernorm(x), cache, freqs_cis, residual=x, residual_multiplier=r)
        return self.mlp(self.post_attention_layernorm(h), residual=h, residual_multiplier=r)


__all__ = ["BlockRMSNorm", "GatedMLP", "LlamaBlock", "RopeAttention"]
