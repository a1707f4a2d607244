"""Graph ops of the transformer layers that MAX stages as custom kernels: RMS normalisation,
rotary embeddings, and writing to and attending over the paged KV cache.

The cache is one buffer ``[pages, 2, layers, page_size, kv_heads, head_dim]`` (keys at index 0
of the second axis, values at 1). A batch is ragged: the new tokens of every sequence are
concatenated along the first axis, and ``input_row_offsets`` (``[batch + 1]``, uint32) says where
each sequence's rows start. Index tensors are uint32. The ops are checked and typed in Rust
(crates/graph/src/ops/attention.rs and reduction.rs) as they are staged.
"""

from __future__ import annotations

from typing import Any

from max.graph import BufferValue, TensorValue
from max.graph.ops._stage import as_tensor, graph_of, stage, stage1


def rms_norm(
    x: Any, weight: Any, epsilon: float, weight_offset: float = 0.0, multiply_before_cast: bool = True
) -> TensorValue:
    """``x / sqrt(mean(x**2, -1) + epsilon) * (weight + weight_offset)`` over the last dim,
    computed in float32 (float64 for float64). With `multiply_before_cast` the weight multiplies
    in float32 before the one rounding to x's dtype; otherwise the normalised value is rounded
    first (Gemma multiplies before the cast, Llama after)."""
    g = graph_of(x, weight)
    xv = as_tensor(x, graph=g, op="rms_norm", arg="input")
    wv = as_tensor(weight, graph=g, op="rms_norm", arg="weight")
    attrs = {
        "epsilon": float(epsilon),
        "weight_offset": float(weight_offset),
        "multiply_before_cast": bool(multiply_before_cast),
    }
    return stage1("rms_norm", [xv, wv], attrs, graph=g)


def rope(x: Any, freqs_cis: Any, positions: Any, *, interleaved: bool = True) -> TensorValue:
    """Rotary position embedding of ``x [tokens, heads, head_dim]``: row ``t`` rotates by the
    angles of row ``positions[t]`` of ``freqs_cis [max_positions, rotary_dim]`` (``(cos, sin)``
    pairs side by side). `interleaved`: adjacent dims form a pair (GGUF Llama layout);
    otherwise dim ``i`` pairs with ``i + rotary_dim / 2`` (Hugging Face layout). Dims past
    ``rotary_dim`` pass through."""
    g = graph_of(x, freqs_cis, positions)
    args = [
        as_tensor(x, graph=g, op="rope", arg="x"),
        as_tensor(freqs_cis, graph=g, op="rope", arg="freqs_cis"),
        as_tensor(positions, graph=g, op="rope", arg="positions"),
    ]
    return stage1("rope", args, {"interleaved": bool(interleaved)}, graph=g)


def _buffer(op: str, value: Any) -> BufferValue:
    if not isinstance(value, BufferValue):
        raise TypeError(f"{op}: blocks: expected the KV cache BufferValue, got {type(value).__name__}")
    return value


def kv_cache_store(blocks: BufferValue, k: Any, v: Any, slots: Any, layer: int) -> None:
    """Writes the keys and values ``[tokens, kv_heads, head_dim]`` of the new tokens into the
    cache of layer `layer`, token ``t`` at slot ``slots[t]`` (``page * page_size + offset``).
    Ordered after earlier cache ops by the graph's chain."""
    b = _buffer("kv_cache_store", blocks)
    g = b._graph
    args = [
        b,
        as_tensor(k, graph=g, op="kv_cache_store", arg="k"),
        as_tensor(v, graph=g, op="kv_cache_store", arg="v"),
        as_tensor(slots, graph=g, op="kv_cache_store", arg="slots"),
    ]
    (chain,) = stage("kv_cache_store", [g._current_chain, *args], {"layer": int(layer)}, graph=g)
    g._current_chain = chain  # type: ignore[assignment]


def paged_attention(
    q: Any,
    blocks: BufferValue,
    input_row_offsets: Any,
    cache_lengths: Any,
    lookup_table: Any,
    *,
    layer: int,
    scale: float,
    mask: str = "causal",
    window: int | None = None,
    softcap: float = 0.0,
    f32_as_bf16: bool = False,
) -> TensorValue:
    """Attention of the new tokens' queries ``q [tokens, q_heads, head_dim]`` over their
    sequences' cached keys and values of layer `layer`. Sequence ``b`` has
    ``cache_lengths[b]`` tokens cached before this step and rows
    ``input_row_offsets[b]:input_row_offsets[b + 1]`` of `q`, at the following positions; its
    pages are ``lookup_table[b]``. `mask`: "causal", "sliding_window" (the last `window`
    positions) or "null" (every position of the sequence). `softcap` > 0 caps the scores with
    ``softcap * tanh(s / softcap)``. Query head ``h`` reads kv head ``h // (q_heads // kv_heads)``.
    `f32_as_bf16`: float32 queries, keys and values may be read as bfloat16 (on a GPU the
    tensor-core decode kernel takes them), for models whose products carry bfloat16's error
    anyway (quantized projections); without it float32 attention keeps float32 products."""
    b = _buffer("paged_attention", blocks)
    g = b._graph
    args = [
        as_tensor(q, graph=g, op="paged_attention", arg="q"),
        b,
        as_tensor(input_row_offsets, graph=g, op="paged_attention", arg="input_row_offsets"),
        as_tensor(cache_lengths, graph=g, op="paged_attention", arg="cache_lengths"),
        as_tensor(lookup_table, graph=g, op="paged_attention", arg="lookup_table"),
    ]
    attrs: dict[str, Any] = {"layer": int(layer), "scale": float(scale), "mask": mask, "softcap": float(softcap)}
    if window is not None:
        attrs["window"] = int(window)
    if f32_as_bf16:
        attrs["f32_as_bf16"] = True
    out, chain = stage("paged_attention", [g._current_chain, *args], attrs, graph=g)
    g._current_chain = chain  # type: ignore[assignment]
    return out  # type: ignore[return-value]


__all__ = ["kv_cache_store", "paged_attention", "rms_norm", "rope"]
