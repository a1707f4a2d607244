"""``TensorParallelAttentionWithRope``: attention split by heads over devices. Each device
computes its heads (``head_plan``) from the same activations, over its own KV cache; the
partial outputs of the output projection are summed by an allreduce, so every device ends with
the whole layer's output."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from max.graph import DeviceRef, TensorValue, ops
from max.nn.attention.attention_with_rope import AttentionWithRope
from max.nn.kv_cache.cache_params import PagedCacheValues


class TensorParallelAttentionWithRope(AttentionWithRope):
    """``AttentionWithRope`` over `devices`. The whole weights stay on the host; each device
    receives its rows of q/k/v and columns of the output projection when the graph loads.
    Called with one value per device (activations, KV caches, rotary tables, row offsets) and
    the signal buffers; returns one output per device."""

    def __init__(self, *, devices: Sequence[Any], **kwargs: Any) -> None:
        refs = [DeviceRef.from_device(d) for d in devices]
        if not refs:
            raise ValueError("TensorParallelAttentionWithRope: expected at least one device")
        super().__init__(devices=[DeviceRef.CPU()], **kwargs)
        self.devices = refs

    def _pieces(self) -> list[AttentionWithRope]:
        pieces = self.__dict__.get("_shards")
        if pieces is None:
            pieces = self.shard(self.devices)
            object.__setattr__(self, "_shards", pieces)
        return pieces

    def partial_outputs(
        self,
        layer_idx: int,
        x: Sequence[TensorValue],
        kv_collections: Sequence[PagedCacheValues],
        freqs_cis: Sequence[TensorValue],
        input_row_offsets: Sequence[TensorValue],
    ) -> list[TensorValue]:
        """Each device's output projection of its heads, before the allreduce that sums them
        (``DistributedTransformerBlock`` adds the residual to the first one before it)."""
        n = len(self.devices)
        for name, values in (("x", x), ("kv_collections", kv_collections), ("freqs_cis", freqs_cis),
                             ("input_row_offsets", input_row_offsets)):
            if len(values) != n:
                raise ValueError(f"TensorParallelAttentionWithRope: {name}: expected {n} values, got {len(values)}")
        return [piece(layer_idx, *args)
                for piece, *args in zip(self._pieces(), x, kv_collections, freqs_cis, input_row_offsets)]

    def __call__(  # type: ignore[override]
        self,
        layer_idx: int,
        x: Sequence[TensorValue],
        signal_buffers: Sequence[Any],
        kv_collections: Sequence[PagedCacheValues],
        freqs_cis: Sequence[TensorValue],
        input_row_offsets: Sequence[TensorValue],
    ) -> list[TensorValue]:
        outs = self.partial_outputs(layer_idx, x, kv_collections, freqs_cis, input_row_offsets)
        return ops.allreduce.sum(outs, signal_buffers) if len(outs) > 1 else outs


__all__ = ["TensorParallelAttentionWithRope"]
