"""A decoder split over devices (tensor parallelism): ``DistributedTransformerBlock`` and
``DistributedTransformer``. Every device holds the whole residual stream; attention is split
by heads and the MLP by hidden features, each followed by an allreduce; the embedding is split
by vocabulary (an allreduce joins the rows) and the output projection by vocabulary (an
allgather joins the logits). Modules keep the names of the single-device ``Transformer``, so
one checkpoint loads into either; each device receives its piece of every weight at load.

Called with one value per device where values differ per device (KV caches) and the signal
buffers of the devices (``max.nn.comm.Signals``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Callable, Protocol

from max.dtype import DType
from max.graph import DeviceRef, TensorValue, Value, ops
from max.nn.embedding import VocabParallelEmbedding
from max.nn.kv_cache.cache_params import KVCacheParams, PagedCacheValues
from max.nn.layer import LayerList, Module
from max.nn.linear import ColumnParallelLinear
from max.nn.rotary_embedding import RotaryEmbedding
from max.nn.transformer.transformer import ReturnLogits, add_residual, last_token_indices


class ShardableCallable(Protocol):
    """A layer that can be called and split over devices."""

    def __call__(self, x: TensorValue) -> TensorValue: ...

    def shard(self, devices: Iterable[DeviceRef]) -> Sequence[Any]: ...


def distribute_value(v: TensorValue, devices: Sequence[DeviceRef]) -> list[TensorValue]:
    """`v` on every device of `devices` (moved where it is not there already)."""
    return [v if v.device == d else ops.transfer_to(v, d) for d in devices]


def forward_sharded_layers(layers: Sequence[Callable[[TensorValue], TensorValue]],
                           xs: Sequence[TensorValue]) -> list[TensorValue]:
    """``layers[i](xs[i])`` for each i."""
    if len(layers) != len(xs):
        raise AssertionError(f"{len(layers)} layers for {len(xs)} inputs")
    return [layer(x) for layer, x in zip(layers, xs)]


def take(it: Iterable[Value], n: int) -> list[Value]:
    """The next `n` items of `it`."""
    it = iter(it)
    return [next(it) for _ in range(n)]


def allreduce_with_residual(xs: Sequence[TensorValue], pieces: Sequence[TensorValue],
                            signal_buffers: Sequence[Any]) -> list[TensorValue]:
    """``x + allreduce(pieces)`` on every device (each has its own copy of the residual stream
    `xs`): the engine joins the adds to the allreduce, so each device adds its own copy inside
    the collective's launch where the peer-to-peer allreduce runs it."""
    return [add_residual(x, s) for x, s in zip(xs, ops.allreduce.sum(list(pieces), signal_buffers))]


class DistributedTransformerBlock(Module):
    """``h = x + allreduce(attention pieces)``, then ``h + allreduce(mlp pieces)``, on each
    device (``allreduce_with_residual`` with a residual multiplier of 1). `attention` is a
    ``TensorParallelAttentionWithRope``; `mlp` is split with its ``shard``; the norms are
    applied on every device."""

    def __init__(self, attention: Module, mlp: ShardableCallable, attention_norm: Callable[..., Any],
                 mlp_norm: Callable[..., Any], devices: Sequence[Any], distributed_gemm_config: Any = None,
                 residual_multiplier: float = 1.0) -> None:
        super().__init__()
        self.self_attn = attention
        self.mlp = mlp
        self.input_layernorm = attention_norm
        self.post_attention_layernorm = mlp_norm
        self.devices = [DeviceRef.from_device(d) for d in devices]
        self.residual_multiplier = float(residual_multiplier)

    def _mlp_pieces(self) -> list[Any]:
        pieces = self.__dict__.get("_mlp_shards")
        if pieces is None:
            pieces = list(self.mlp.shard(self.devices))
            object.__setattr__(self, "_mlp_shards", pieces)
        return pieces

    def __call__(self, layer_idx: int, xs: Sequence[TensorValue], signal_buffers: Sequence[Any],
                 kv_collections: Sequence[PagedCacheValues], freqs_cis: Sequence[TensorValue],
                 input_row_offsets: Sequence[TensorValue]) -> list[TensorValue]:
        r = self.residual_multiplier
        normed = [self.input_layernorm(x) for x in xs]
        fold = len(xs) > 1 and r == 1.0 and hasattr(self.self_attn, "partial_outputs")
        if fold:
            attn = self.self_attn.partial_outputs(layer_idx, normed, kv_collections, freqs_cis, input_row_offsets)
            hs = allreduce_with_residual(xs, attn, signal_buffers)
        else:
            attn = self.self_attn(layer_idx, normed, signal_buffers, kv_collections, freqs_cis, input_row_offsets)
            hs = [add_residual(x, a, r) for x, a in zip(xs, attn)]
        partial = forward_sharded_layers(self._mlp_pieces(), [self.post_attention_layernorm(h) for h in hs])
        if fold:
            return allreduce_with_residual(hs, partial, signal_buffers)
        mlp = ops.allreduce.sum(partial, signal_buffers) if len(hs) > 1 else partial
        return [add_residual(h, m, r) for h, m in zip(hs, mlp)]


class DistributedTransformer(Module):
    """A decoder over `devices`: ``__call__(tokens, signal_buffers, kv_collections,
    input_row_offsets=...)`` returns the float32 logits (on the first device) of each
    sequence's last token (``ReturnLogits.ALL``: of every token); with ``every_device=True``,
    one copy of them per device (the allgather leaves them on every device). `tokens` and
    `input_row_offsets` are one value (moved to the other devices) or one per device."""

    def __init__(self, dim: int, n_heads: int, layers: Sequence[DistributedTransformerBlock],
                 norm: Callable[..., Any], output: ColumnParallelLinear, embedding: VocabParallelEmbedding,
                 kv_params: KVCacheParams, devices: Sequence[Any], rope: RotaryEmbedding,
                 return_logits: ReturnLogits = ReturnLogits.LAST_TOKEN, use_subgraphs: bool = False,
                 subgraph_layer_groups: list[list[int]] | None = None, logits_scaling: float = 1.0,
                 embedding_multiplier: float = 1.0) -> None:
        super().__init__()
        if return_logits == ReturnLogits.VARIABLE:
            raise NotImplementedError("DistributedTransformer: ReturnLogits.VARIABLE is not supported")
        self.dim, self.n_heads = int(dim), int(n_heads)
        self.layers = LayerList(layers)
        self.norm = norm
        self.lm_head = output
        self.embed_tokens = embedding
        self.kv_params = kv_params
        self.devices = [DeviceRef.from_device(d) for d in devices]
        self.rope = rope
        self.return_logits = ReturnLogits(return_logits)
        self.logits_scaling = float(logits_scaling)
        self.embedding_multiplier = float(embedding_multiplier)

    def __call__(self, tokens: TensorValue | Sequence[TensorValue], signal_buffers: Sequence[Any],
                 kv_collections: Sequence[PagedCacheValues], return_n_logits: Any = None,
                 input_row_offsets: TensorValue | Sequence[TensorValue] | None = None,
                 every_device: bool = False) -> tuple[TensorValue, ...]:
        if input_row_offsets is None:
            raise ValueError("DistributedTransformer: input_row_offsets is required")
        n = len(self.devices)
        if len(kv_collections) != n:
            raise ValueError(f"DistributedTransformer: expected {n} KV caches, got {len(kv_collections)}")
        offsets = (list(input_row_offsets) if isinstance(input_row_offsets, (list, tuple))
                   else distribute_value(input_row_offsets, self.devices))
        hs = self.embed_tokens(tokens, signal_buffers)
        if self.embedding_multiplier != 1.0:
            hs = [h * self.embedding_multiplier for h in hs]
        freqs = [self.rope.freqs_cis_on(d) for d in self.devices]
        for i, layer in enumerate(self.layers):
            hs = layer(i, hs, signal_buffers, kv_collections, freqs, offsets)
        if self.return_logits == ReturnLogits.LAST_TOKEN:
            hs = [ops.gather(h, last_token_indices(o), axis=0) for h, o in zip(hs, offsets)]
        every = self.lm_head([self.norm(h) for h in hs], signal_buffers)
        return tuple(self._finish(x) for x in (every if every_device else every[:1]))

    def _finish(self, logits: TensorValue) -> TensorValue:
        if logits.dtype != DType.float32:
            logits = logits.cast(DType.float32)
        if self.logits_scaling != 1.0:
            logits = logits / self.logits_scaling
        return logits


__all__ = [
    "DistributedTransformer", "DistributedTransformerBlock", "ShardableCallable", "distribute_value",
    "forward_sharded_layers", "take",
]
