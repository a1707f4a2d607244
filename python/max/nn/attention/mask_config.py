"""Attention mask variants, as MAX names them."""

from __future__ import annotations

import enum


class AttentionMaskVariant(str, enum.Enum):
    """Which positions a query sees: all earlier ones (causal), the last few (sliding window),
    every one (null), or earlier ones within its chunk (chunked causal, not supported)."""

    CAUSAL_MASK = "causal"
    CHUNKED_CAUSAL_MASK = "chunked_causal"
    NULL_MASK = "null"
    SLIDING_WINDOW_CAUSAL_MASK = "sliding_window_causal"
    TENSOR_MASK = "tensor_mask"


MHAMaskVariant = AttentionMaskVariant


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
