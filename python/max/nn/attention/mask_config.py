"""Attention mask variants, as MAX names them."""

from __future__ import annotations

import enum


class MHAMaskVariant(str, enum.Enum):
    """The mask variants of the multi-head attention kernels, numbered as MAX numbers them;
    wherever an ``AttentionMaskVariant`` is taken, one of these (or its number) stands for the
    variant of the same name."""

    CAUSAL_MASK = "0"
    CAUSAL_ALIBI_MASK = "1"
    NULL_MASK = "2"
    CHUNKED_CAUSAL_MASK = "3"
    SLIDING_WINDOW_CAUSAL_MASK = "4"


class AttentionMaskVariant(str, enum.Enum):
    """Which positions a query sees: all earlier ones (causal), the last few (sliding window),
    every one (null), or earlier ones within its chunk (chunked causal, not supported)."""

    CAUSAL_MASK = "causal"
    CHUNKED_CAUSAL_MASK = "chunked_causal"
    NULL_MASK = "null"
    SLIDING_WINDOW_CAUSAL_MASK = "sliding_window_causal"
    TENSOR_MASK = "tensor_mask"

    @classmethod
    def _missing_(cls, value: object) -> AttentionMaskVariant | None:
        # an MHAMaskVariant (or its number): the variant of the same name (ALiBi has none)
        try:
            numbered = MHAMaskVariant(value)
        except ValueError:
            return None
        return cls.__members__.get(numbered.name)


def op_mask(variant: AttentionMaskVariant | str) -> str:
    """The `mask` attribute of ``paged_attention`` for a variant."""
    v = AttentionMaskVariant(variant)
    if v == AttentionMaskVariant.CAUSAL_MASK:
        return "causal"
    if v == AttentionMaskVariant.SLIDING_WINDOW_CAUSAL_MASK:
        return "sliding_window"
    if v == AttentionMaskVariant.NULL_MASK:
        return "null"
    raise NotImplementedError(f"attention mask {v.value} is not supported")


__all__ = ["AttentionMaskVariant", "MHAMaskVariant"]
