"""``Embedding``: rows of a ``[vocab_size, hidden_dim]`` table gathered by token id (from GGUF
quantized blocks too: the rows are gathered as bytes, then decoded)."""

from __future__ import annotations

from typing import Any

from max.dtype import DType
from max.graph import TensorValue, Weight, ops
from max.graph.quantization import QuantizationEncoding
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


__all__ = ["Embedding"]
