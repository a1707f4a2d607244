"""Quantization encodings and settings (``max.graph.quantization``).

The GGUF encodings are block-based: a fixed number of elements is quantized together into a
fixed number of bytes, so a quantized row is a whole number of blocks stored as uint8. GPTQ is
configured by a ``QuantizationConfig`` instead."""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True)
class BlockParameters:
    """How a block encoding packs elements: ``elements_per_block`` of them in ``block_size``
    bytes."""

    elements_per_block: int
    block_size: int


@dataclass(frozen=True)
class QuantizationConfig:
    """Settings of a non-block encoding such as GPTQ: method, bit width, group size, whether
    columns were reordered by activation (``desc_act``) and whether it is symmetric."""

    quant_method: str
    bits: int
    group_size: int
    desc_act: bool = False
    sym: bool = False


class QuantizationEncoding(enum.Enum):
    """The quantization encodings MAX graphs understand."""

    Q4_0 = "Q4_0"
    Q4_1 = "Q4_1"
    Q4_K = "Q4_K"
    Q5_K = "Q5_K"
    Q6_K = "Q6_K"
    Q8_0 = "Q8_0"
    GPTQ = "GPTQ"

    @property
    def block_parameters(self) -> BlockParameters:
        """Elements per block and bytes per block; a ValueError for GPTQ, which has no blocks (its
        settings are a QuantizationConfig's)."""
        found = _BLOCK_PARAMETERS.get(self)
        if found is None:
            raise ValueError(f"{self._name_} is not a block encoding: it has no block parameters "
                             "(its group size and bit width are a QuantizationConfig's)")
        return found

    @property
    def block_size(self) -> int:
        """Bytes in one encoded block."""
        return self.block_parameters.block_size

    @property
    def elements_per_block(self) -> int:
        """Elements gathered into one block."""
        return self.block_parameters.elements_per_block

    @property
    def is_gguf(self) -> bool:
        """Whether GGUF files can hold this encoding."""
        return self in _BLOCK_PARAMETERS

    @property
    def name(self) -> str:  # type: ignore[override]
        """The lowercase name (``"q4_k"``)."""
        return self._name_.lower()


# GGUF block layouts (bytes): Q4_0 f16 scale + 16 bytes of nibbles; Q4_1 adds an f16 min;
# Q8_0 f16 scale + 32 int8; Q4_K f16 d, dmin + 12 bytes of scales + 128 of nibbles; Q5_K adds
# 32 bytes of high bits; Q6_K 128 low nibbles + 64 high bits + 16 int8 scales + f16 d.
_BLOCK_PARAMETERS = {
    QuantizationEncoding.Q4_0: BlockParameters(32, 18),
    QuantizationEncoding.Q4_1: BlockParameters(32, 20),
    QuantizationEncoding.Q4_K: BlockParameters(256, 144),
    QuantizationEncoding.Q5_K: BlockParameters(256, 176),
    QuantizationEncoding.Q6_K: BlockParameters(256, 210),
    QuantizationEncoding.Q8_0: BlockParameters(32, 34),
}

__all__ = ["BlockParameters", "QuantizationConfig", "QuantizationEncoding"]
