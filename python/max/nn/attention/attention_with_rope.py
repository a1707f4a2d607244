"""``AttentionWithRope``: the self-attention of Llama-family decoders over the paged KV cache.
Per layer: q/k/v projections (optional biases, optional per-head RMSNorm of q and k), rotary
embeddings at each token's position, the new keys and values written to the cache, attention
of the queries over their sequences' cached tokens (GQA, causal or sliding-window mask), and
the output projection. Inputs are ragged: ``x [total_tokens, hidden]``. The math is the
function ``rope_attention``, which the eager attention module stages with the same ops."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from typing import Any

from max.dtype import DType
from max.graph import DeviceRef, TensorValue, ops
from max.graph.quantization import QuantizationEncoding
from max.nn import kernels
from max.nn.attention.mask_config import AttentionMaskVariant, op_mask
from max.nn.kv_cache.cache_params import KVCacheParams, PagedCacheValues
from max.nn.layer import Module
from max.nn.linear import Linear
from max.nn._legacy_norm import RMSNorm
from max.nn.rotary_embedding import RotaryEmbedding


class AttentionWithRope(Module):
    """Multi-head (grouped-query) attention with rotary embeddings over a paged KV cache.

    Beyond MAX's arguments: `quantization_encoding` for GGUF-quantized projections,
    `mask_variant`/`local_window_size` for sliding-window layers, `qk_norm_weight_offset`
    (Gemma's ``1 + w``) and `attn_logit_softcapping`."""

    def __init__(
        self,
        *,
        rope: RotaryEmbedding,
        sharding_strategy: Any = None,
        num_attention_heads: int,
        num_key_value_heads: int,
        hidden_size: int,
        kv_params: KVCacheParams,
        devices: Sequence[DeviceRef] | None = None,
        dtype: DType = DType.float32,
        linear_cls: type = Linear,
        stacked_qkv: bool = False,
        scale: float | None = None,
        has_bias: bool = False,
        float8_config: Any = None,
        clip_qkv: float | None = None,
        use_qk_norm: bool = False,
        rms_norm_eps: float = 1e-6,
        quantization_encoding: QuantizationEncoding | None = None,
        mask_variant: AttentionMaskVariant = AttentionMaskVariant.CAUSAL_MASK,
        local_window_size: int | None = None,
        qk_norm_weight_offset: float = 0.0,
        attn_logit_softcapping: float | None = None,
        head_dim: int | None = None,
    ) -> None:
        super().__init__()
        object.__setattr__(self, "_sharding_strategy", sharding_strategy)
        if clip_qkv is not None and not clip_qkv > 0:
            raise ValueError(f"AttentionWithRope: clip_qkv must be positive, got {clip_qkv}")
        self.clip_qkv = clip_qkv
        self.rope = rope
        self.n_heads = int(num_attention_heads)
        self.n_kv_heads = int(num_key_value_heads)
        self.hidden_size = int(hidden_size)
        self.kv_params = kv_params
        self.head_dim = int(head_dim or kv_params.head_dim)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"AttentionWithRope: {self.n_heads} heads are not a multiple of {self.n_kv_heads} kv heads")
        self.scale = float(scale) if scale is not None else 1.0 / math.sqrt(self.head_dim)
        self.mask_variant = AttentionMaskVariant(mask_variant)
        self.local_window_size = local_window_size
        self.softcap = float(attn_logit_softcapping or 0.0)
        self.stacked_qkv = stacked_qkv
        device = (devices or [DeviceRef.CPU()])[0]
        self.devices = list(devices or [device])
        q_dim, kv_dim = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim

        def linear(i: int, o: int, bias: bool) -> Module:
            return linear_cls(i, o, dtype, device, has_bias=bias, quantization_encoding=quantization_encoding,
                              float8_config=float8_config)

        if stacked_qkv:
            self.qkv_proj = linear(self.hidden_size, q_dim + 2 * kv_dim, has_bias)
        else:
            self.q_proj = linear(self.hidden_size, q_dim, has_bias)
            self.k_proj = linear(self.hidden_size, kv_dim, has_bias)
            self.v_proj = linear(self.hidden_size, kv_dim, has_bias)
        self.o_proj = linear(q_dim, self.hidden_size, False)
        if use_qk_norm:
            self.q_norm = RMSNorm(self.head_dim, dtype, rms_norm_eps, weight_offset=qk_norm_weight_offset)
            self.k_norm = RMSNorm(self.head_dim, dtype, rms_norm_eps, weight_offset=qk_norm_weight_offset)
        self.use_qk_norm = use_qk_norm

    @property
    def sharding_strategy(self) -> Any:
        """How ``shard`` splits the layer (by heads: ``head_plan``); None until sharded."""
        return self.__dict__.get("_sharding_strategy")

    def shard(self, devices: Sequence[Any]) -> list[AttentionWithRope]:
        """One attention layer per device, each computing the heads ``head_plan`` gives it:
        its rows of q/k/v, its columns of the output projection (so the devices' outputs
        summed are the layer's), its heads of the KV cache."""
        from max.graph.sharding import ShardingStrategy
        from max.nn.attention.head_plan import head_plan

        if self.stacked_qkv:
            raise NotImplementedError("AttentionWithRope.shard: stacked_qkv layers cannot be sharded yet")
        refs = [DeviceRef.from_device(d) for d in devices]
        plan = head_plan(self.n_heads, self.n_kv_heads, len(refs))
        hd = self.head_dim
        q_rows = [(qs * hd, qe * hd) for (qs, qe), _ in plan]
        kv_rows = [(ks * hd, ke * hd) for _, (ks, ke) in plan]
        self.q_proj.sharding_strategy = ShardingStrategy.ranges(0, q_rows)
        self.k_proj.sharding_strategy = ShardingStrategy.ranges(0, kv_rows)
        self.v_proj.sharding_strategy = ShardingStrategy.ranges(0, kv_rows)
        self.o_proj.sharding_strategy = ShardingStrategy.ranges(1, q_rows)
        object.__setattr__(self, "_sharding_strategy", self.q_proj.sharding_strategy)
        qs_, ks_, vs_, os_ = (p.shard(refs) for p in (self.q_proj, self.k_proj, self.v_proj, self.o_proj))
        out = []
        for i, ref in enumerate(refs):
            piece = copy.copy(self)
            piece.__class__ = AttentionWithRope  # a plain layer on one device, whatever self is
            Module.__init__(piece)  # with a registry of its own: not part of self's state dict
            (qs, qe), (ks, ke) = plan[i]
            piece.n_heads, piece.n_kv_heads, piece.devices = qe - qs, ke - ks, [ref]
            piece.q_proj, piece.k_proj, piece.v_proj, piece.o_proj = qs_[i], ks_[i], vs_[i], os_[i]
            out.append(piece)
        return out

    def _qkv(self, x: TensorValue) -> tuple[TensorValue, TensorValue, TensorValue]:
        if self.stacked_qkv:
            q_dim, kv_dim = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
            qkv = self.qkv_proj(x)
            q, k, v = qkv[:, :q_dim], qkv[:, q_dim : q_dim + kv_dim], qkv[:, q_dim + kv_dim :]
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        c = self.__dict__.get("clip_qkv")
        if c is None:
            return q, k, v
        # clip_qkv: the projections clamped to [-c, c] before the rope, as OLMo's attention does
        q, k, v = (ops.min(ops.max(t, -c), c) for t in (q, k, v))
        return q, k, v

    def __call__(
        self,
        layer_idx: int,
        x: TensorValue,
        kv_collection: PagedCacheValues,
        freqs_cis: TensorValue,
        input_row_offsets: TensorValue,
    ) -> TensorValue:
        qk_norm = (lambda q, k: (self.q_norm(q), self.k_norm(k))) if self.use_qk_norm else None
        return rope_attention(
            x, self._qkv, self.o_proj, kv_collection, freqs_cis, input_row_offsets,
            layer=layer_idx, n_heads=self.n_heads, n_kv_heads=self.n_kv_heads, head_dim=self.head_dim,
            interleaved=self.rope.interleaved, scale=self.scale, mask=op_mask(self.mask_variant),
            window=self.local_window_size, softcap=self.softcap, qk_norm=qk_norm,
            f32_as_bf16=self._quantized(),
        )

    def _quantized(self) -> bool:
        """Whether a projection's weight is GGUF-quantized: its products then carry bfloat16's
        error, so a float32 attention may read its inputs as bfloat16 (faster on a GPU)."""
        projs = ("qkv_proj", "o_proj") if self.stacked_qkv else ("q_proj", "k_proj", "v_proj", "o_proj")
        return any(getattr(getattr(self, name, None), "quantization_encoding", None) is not None for name in projs)


def rope_attention(
    x: TensorValue,
    qkv: Callable[[TensorValue], tuple[TensorValue, TensorValue, TensorValue]],
    out: Callable[[TensorValue], TensorValue],
    kv_collection: PagedCacheValues,
    freqs_cis: TensorValue | None,
    input_row_offsets: TensorValue,
    *,
    layer: int,
    n_heads: int,
    n_kv_heads: int,
    head_dim: int,
    interleaved: bool,
    scale: float,
    mask: str = "causal",
    window: int | None = None,
    softcap: float = 0.0,
    qk_norm: Callable[[TensorValue, TensorValue], tuple[TensorValue, TensorValue]] | None = None,
    f32_as_bf16: bool = False,
) -> TensorValue:
    """The attention of ragged tokens ``x [tokens, hidden]`` over the paged cache, as graph ops:
    `qkv` projects x to ``q [tokens, n_heads * head_dim]`` and ``k``, ``v [tokens, n_kv_heads *
    head_dim]``; per head, `qk_norm` (optional) and the rotary embedding at each token's
    position; k and v written to the cache of `layer`; attention over the cache (`f32_as_bf16`:
    see ``kernels.paged_attention``); `out` projects the heads back. The math of
    ``AttentionWithRope`` and of the eager attention module alike."""
    if not isinstance(layer, int):
        raise TypeError("AttentionWithRope: layer_idx must be a Python int (the layer's index in the cache)")
    if kv_collection.positions is None or kv_collection.slots is None:
        raise ValueError("AttentionWithRope: the cache values need the token positions and slots")
    tokens = x.shape[0]
    q, k, v = qkv(x)
    q = q.reshape([tokens, n_heads, head_dim])
    k = k.reshape([tokens, n_kv_heads, head_dim])
    v = v.reshape([tokens, n_kv_heads, head_dim])
    if qk_norm is not None:
        q, k = qk_norm(q, k)
    if freqs_cis is not None:  # (None: a layer without rotary embeddings, as SmolLM3's NoPE layers)
        q = kernels.rope(q, freqs_cis, kv_collection.positions, interleaved=interleaved)
        k = kernels.rope(k, freqs_cis, kv_collection.positions, interleaved=interleaved)
    blocks = kv_collection.kv_blocks
    kernels.kv_cache_store(blocks, k.cast(blocks.dtype) if k.dtype != blocks.dtype else k,
                           v.cast(blocks.dtype) if v.dtype != blocks.dtype else v, kv_collection.slots, layer)
    if q.dtype != blocks.dtype:
        q = q.cast(blocks.dtype)
    attn = kernels.paged_attention(
        q,
        blocks,
        input_row_offsets,
        kv_collection.cache_lengths,
        kv_collection.lookup_table,
        layer=layer,
        scale=scale,
        mask=mask,
        window=window,
        softcap=softcap,
        f32_as_bf16=f32_as_bf16,
    )
    attn = attn.reshape([tokens, n_heads * head_dim])
    if attn.dtype != x.dtype:
        attn = attn.cast(x.dtype)
    return out(attn)


__all__ = ["AttentionWithRope", "rope_attention"]


def __getattr__(name: str) -> Any:
    # MAX keeps the tensor-parallel layer in this module; it lives in tensor_parallel.py here
    # (which imports this one), so it is found on first use.
    if name == "TensorParallelAttentionWithRope":
        from max.nn.attention.tensor_parallel import TensorParallelAttentionWithRope

        return TensorParallelAttentionWithRope
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
