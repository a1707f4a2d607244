"""Transformer blocks and decoders."""

from max.nn.transformer.distributed_transformer import DistributedTransformer, DistributedTransformerBlock
from max.nn.transformer.transformer import ReturnHiddenStates, ReturnLogits, Transformer, TransformerBlock

__all__ = [
    "DistributedTransformer", "DistributedTransformerBlock", "ReturnHiddenStates", "ReturnLogits", "Transformer",
    "TransformerBlock",
]
