"""Graph-building neural-network layers (MAX's ``max.nn``, also importable as
``max.nn.legacy``, the name MAX 26.1/26.2 documents them under: one set of classes).

Each layer is a ``Module`` whose ``__call__`` stages ops on graph values inside a ``Graph``;
weights are ``max.graph.Weight`` attributes named by their attribute path, with values from
``load_state_dict`` and handed to ``InferenceSession.load`` by ``state_dict()``."""

from max.nn import kernels, sampling_ops
from max.nn.attention import AttentionMaskVariant, AttentionWithRope, MHAMaskVariant, MultiheadAttention
from max.nn.embedding import Embedding
from max.nn.kv_cache import (
    KVCacheParams,
    KVCacheQuantizationConfig,
    KVCacheStrategy,
    PagedCacheInputSymbols,
    PagedCacheValues,
)
from max.nn.layer import Layer, LayerList, Module, Shardable, add_layer_hook, clear_hooks
from max.nn.linear import MLP, Linear
from max.nn.norm import GemmaRMSNorm, LayerNorm, RMSNorm
from max.nn.rotary_embedding import Llama3RopeScalingParams, Llama3RotaryEmbedding, RotaryEmbedding
from max.nn.sequential import Sequential
from max.nn.transformer import ReturnHiddenStates, ReturnLogits, Transformer, TransformerBlock

__all__ = [
    "MLP", "AttentionMaskVariant", "AttentionWithRope", "Embedding", "GemmaRMSNorm", "KVCacheParams",
    "KVCacheQuantizationConfig", "KVCacheStrategy", "Layer", "LayerList", "LayerNorm", "Linear",
    "Llama3RopeScalingParams", "Llama3RotaryEmbedding", "MHAMaskVariant", "Module", "MultiheadAttention",
    "PagedCacheInputSymbols", "PagedCacheValues", "RMSNorm", "ReturnHiddenStates", "ReturnLogits",
    "RotaryEmbedding", "Sequential", "Shardable", "Transformer", "TransformerBlock", "add_layer_hook",
    "clear_hooks", "kernels", "sampling_ops",
]
