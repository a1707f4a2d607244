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
    pages are ``lookup_table[b]`` (a page id at or past the cache's pages holds no keys: those
    positions are left out). `mask`: "causal", "sliding_window" (the last `window`
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


def flash_attention_gpu(
    q: Any,
    k: Any,
    v: Any,
    mask_variant: Any,
    scale: float,
    local_window_size: int = -1,
    valid_length: Any = None,
    *,
    key_mask: Any = None,
) -> TensorValue:
    """Attention of ``q [batch, q_len, heads, head_dim]`` over ``k``, ``v [batch, kv_len,
    kv_heads, head_dim]`` (``heads`` a multiple of ``kv_heads``: query head ``h`` reads kv head
    ``h // (heads // kv_heads)``), returning ``[batch, q_len, heads, head_dim]``.

    `mask_variant` (an ``AttentionMaskVariant`` or its value): ``NULL_MASK`` (every key),
    ``CAUSAL_MASK`` or ``SLIDING_WINDOW_CAUSAL_MASK`` (the last `local_window_size` keys up to
    the query's own). Query ``i`` sits at key position ``i + max(kv_len - q_len, 0)`` (the
    queries are the last rows of the keys' sequence). `scale` multiplies the scores before the
    softmax. `valid_length` (``[batch]`` uint32) hides keys at and past ``valid_length[b]``;
    `key_mask` (``[batch, kv_len]``, true or nonzero keeps a key) hides any keys. A query row
    that sees no key gets zeros.

    Staged as one attention over a scratch paged cache of one key per page: the keys and values
    are copied into it (one kv_cache_store) and the hidden keys get no page, so the GPU runs its
    tensor-core prefill kernels (bfloat16 and float16, head dims 64 and 128) and any device the
    same math as ``paged_attention``."""
    from max.dtype import DType
    from max.graph import BufferType, Dim, StaticDim, ops

    from max.nn.attention.mask_config import AttentionMaskVariant, op_mask

    g = graph_of(q, k, v)
    qt = as_tensor(q, graph=g, op="flash_attention_gpu", arg="q")
    kt = as_tensor(k, graph=g, op="flash_attention_gpu", arg="k")
    vt = as_tensor(v, graph=g, op="flash_attention_gpu", arg="v")
    for name, t in (("q", qt), ("k", kt), ("v", vt)):
        if t.rank != 4:
            raise ValueError(f"flash_attention_gpu: {name} must be [batch, seq_len, heads, head_dim], got {t.shape}")
    if kt.shape != vt.shape or kt.dtype != vt.dtype:
        raise ValueError(f"flash_attention_gpu: k {kt.dtype} {kt.shape} and v {vt.dtype} {vt.shape} must match")
    if kt.dtype != qt.dtype or qt.shape[0] != kt.shape[0] or qt.shape[3] != kt.shape[3]:
        raise ValueError(
            f"flash_attention_gpu: q {qt.dtype} {qt.shape} and k {kt.dtype} {kt.shape} must share the dtype, "
            "the batch and the head dim"
        )
    heads_q, heads_kv = qt.shape[2], kt.shape[2]
    if isinstance(heads_q, StaticDim) and isinstance(heads_kv, StaticDim) and int(heads_q) % max(int(heads_kv), 1):
        raise ValueError(f"flash_attention_gpu: q's {int(heads_q)} heads are not a multiple of k's {int(heads_kv)}")
    variant = AttentionMaskVariant(mask_variant)
    window = None
    if variant == AttentionMaskVariant.SLIDING_WINDOW_CAUSAL_MASK:
        if local_window_size < 1:
            raise ValueError(f"flash_attention_gpu: a sliding window needs local_window_size >= 1, got {local_window_size}")
        window = int(local_window_size)
    mask = op_mask(variant)
    batch, q_len, heads, dim = qt.shape
    kv_len, kv_heads = kt.shape[1], kt.shape[2]
    dev = qt.device
    pages = Dim(batch) * Dim(kv_len)
    blocks = ops.buffer_create(BufferType(qt.dtype, [pages, 2, 1, 1, kv_heads, dim], dev))
    slots = ops.range(0, pages, 1, out_dim=pages, dtype=DType.uint32, device=dev)
    kv_cache_store(blocks, kt.reshape([pages, kv_heads, dim]), vt.reshape([pages, kv_heads, dim]), slots, 0)
    table = slots.reshape([batch, kv_len])
    keep = None
    if valid_length is not None:
        lengths = as_tensor(valid_length, graph=g, op="flash_attention_gpu", arg="valid_length")
        key = ops.range(0, kv_len, 1, out_dim=kv_len, dtype=DType.uint32, device=dev)
        keep = ops.unsqueeze(key, 0) < ops.unsqueeze(lengths.cast(DType.uint32), 1)
    if key_mask is not None:
        km = as_tensor(key_mask, graph=g, op="flash_attention_gpu", arg="key_mask")
        km = km if km.dtype == DType.bool else km != ops.constant(0, km.dtype, dev)
        keep = km if keep is None else ops.logical_and(keep, km)
    if keep is not None:
        no_page = ops.constant(0xFFFFFFFF, DType.uint32, dev)  # past every page: the key is skipped
        table = ops.where(keep, table, no_page)
    rows = Dim(batch) * Dim(q_len)
    offsets = ops.range(0, rows + 1, q_len, out_dim=Dim(batch) + 1, dtype=DType.uint32, device=dev)
    if Dim(kv_len) == Dim(q_len):
        before = ops.constant(0, DType.uint32, dev)
    elif isinstance(Dim(kv_len), StaticDim) and isinstance(Dim(q_len), StaticDim):
        before = ops.constant(max(int(kv_len) - int(q_len), 0), DType.uint32, dev)
    else:
        diff = ops.shape_to_tensor([kv_len]) - ops.shape_to_tensor([q_len])
        before = ops.max(diff, 0).cast(DType.uint32).reshape([])
    cached = ops.broadcast_to(before, [batch])
    out = paged_attention(
        qt.reshape([rows, heads, dim]), blocks, offsets, cached, table, layer=0, scale=scale, mask=mask, window=window
    )
    return out.reshape([batch, q_len, heads, dim])


__all__ = ["flash_attention_gpu", "kv_cache_store", "paged_attention", "rms_norm", "rope"]
