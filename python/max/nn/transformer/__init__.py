"""Transformer blocks and decoders."""

from max.nn.transformer.transformer import ReturnHiddenStates, ReturnLogits, Transformer, TransformerBlock

__all__ = ["ReturnHiddenStates", "ReturnLogits", "Transformer", "TransformerBlock"]
