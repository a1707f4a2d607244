"""``Embedding``: rows of a ``[vocab_size, hidden_dim]`` table gathered by token id (from GGUF
quantized blocks too: the rows are gathered as bytes, then decoded)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from max.dtype import DType
from max.graph import DeviceRef, TensorValue, Weight, ops
from max.graph.quantization import QuantizationEncoding
from max.graph.sharding import ShardingStrategy, even_ranges
from max.nn._util import as_dtype, device_ref
from max.nn.layer import Module


class Embedding(Module):
    """A lookup table of `vocab_size` rows of `hidden_dim` values."""

    def __init__(
        self,
        vocab_size: int,
        hidden_dim: int,
        dtype: DType,
        device: Any,
        quantization_encoding: QuantizationEncoding | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__()
        self.vocab_size, self.hidden_dim = int(vocab_size), int(hidden_dim)
        self.dtype = dtype
        self.device = device_ref(device)
        self.quantization_encoding = quantization_encoding
        shape: tuple[int, int] = (self.vocab_size, self.hidden_dim)
        wdtype = dtype
        if quantization_encoding is not None:
            epb, size = quantization_encoding.elements_per_block, quantization_encoding.block_size
            if self.hidden_dim % epb:
                raise ValueError(f"Embedding: hidden_dim {hidden_dim} is not a whole number of {quantization_encoding.value} blocks")
            shape, wdtype = (self.vocab_size, self.hidden_dim // epb * size), DType.uint8
        self.weight = Weight(f"{name}.weight" if name else "weight", wdtype, shape, self.device,
                             quantization_encoding=quantization_encoding)

    def __call__(self, indices: TensorValue) -> TensorValue:
        rows = ops.gather(self.weight, indices, axis=0)
        if self.quantization_encoding is not None:
            rows = as_dtype(ops.dequantize(self.quantization_encoding, rows), self.dtype)
        return rows


class VocabParallelEmbedding(Embedding):
    """An embedding split by vocabulary over `devices`: device ``i`` holds rows
    ``[start_i, stop_i)`` and looks up the tokens in its range (zeros for the others); an
    allreduce sums the devices' rows, so every device gets every token's embedding exactly."""

    def __init__(self, vocab_size: int, hidden_dim: int, dtype: DType, devices: Sequence[Any],
                 quantization_encoding: QuantizationEncoding | None = None, name: str | None = None) -> None:
        refs = [device_ref(d) for d in devices]
        if not refs:
            raise ValueError("VocabParallelEmbedding: expected at least one device")
        super().__init__(vocab_size, hidden_dim, dtype, DeviceRef.CPU(), quantization_encoding, name)
        self.devices = refs
        self.ranges = even_ranges(self.vocab_size, len(refs))

    def _pieces(self) -> list[Weight]:
        pieces = self.__dict__.get("_shards")
        if pieces is None:
            self.weight.sharding_strategy = ShardingStrategy.ranges(0, self.ranges)
            pieces = self.weight.shard(self.devices)
            object.__setattr__(self, "_shards", pieces)
        return pieces

    def __call__(self, indices: Any, signal_buffers: Sequence[Any] | None = None) -> Any:  # type: ignore[override]
        """`indices` on the first device (or one value per device); a list of the embeddings,
        one per device."""
        n = len(self.devices)
        ids = list(indices) if isinstance(indices, (list, tuple)) else [indices] * n
        rows = []
        for i, (weight, (start, stop), ref) in enumerate(zip(self._pieces(), self.ranges, self.devices)):
            idx = ids[i] if ids[i].device == ref else ops.transfer_to(ids[i], ref)
            inside = (idx >= start) & (idx < stop)
            local = ops.where(inside, idx - start, ops.constant(0, idx.dtype, ref))
            r = ops.gather(weight, local, axis=0)
            if self.quantization_encoding is not None:
                r = as_dtype(ops.dequantize(self.quantization_encoding, r), self.dtype)
            zero = ops.constant(0, r.dtype, ref)
            rows.append(ops.where(ops.unsqueeze(inside, -1), r, zero))
        if n == 1:
            return rows
        if signal_buffers is None:
            raise ValueError("VocabParallelEmbedding: the allreduce needs signal_buffers")
        return ops.allreduce.sum(rows, signal_buffers)


__all__ = ["Embedding", "VocabParallelEmbedding"]
