"""``max.nn.legacy``: the graph-building layers (MAX 26.1/26.2's name for them; MAX 26.7 calls
them ``max.nn``). Every class here stages ops on graph values inside a ``Graph``; the
submodules (``max.nn.legacy.linear``, ``.norm``, ``.attention``, ...) are ``max.nn``'s."""

import sys as _sys

from max.graph.sharding import ShardingStrategy
from max.nn import attention, comm, embedding, kernels, kv_cache, layer, linear, rotary_embedding, sampling_ops
from max.nn import transformer
from max.nn import _legacy_norm as norm
from max.nn import _legacy_sequential as sequential
from max.nn.attention import (
    AttentionMaskVariant,
    AttentionWithRope,
    MHAMaskVariant,
    MultiheadAttention,
    TensorParallelAttentionWithRope,
)
from max.nn.comm import Allreduce, Signals
from max.nn.embedding import Embedding, VocabParallelEmbedding
from max.nn.kv_cache import (
    KVCacheParams,
    KVCacheQuantizationConfig,
    KVCacheStrategy,
    PagedCacheInputSymbols,
    PagedCacheValues,
)
from max.nn.layer import Layer, LayerList, Module, Shardable, add_layer_hook, clear_hooks
from max.nn.linear import MLP, ColumnParallelLinear, DistributedGemmConfig, Linear
from max.nn._legacy_norm import GemmaRMSNorm, LayerNorm, RMSNorm
from max.nn.rotary_embedding import Llama3RopeScalingParams, Llama3RotaryEmbedding, RotaryEmbedding
from max.nn._legacy_sequential import Sequential
from max.nn.transformer import (
    DistributedTransformer,
    DistributedTransformerBlock,
    ReturnHiddenStates,
    ReturnLogits,
    Transformer,
    TransformerBlock,
)

# the graph layers' own modules, where max.nn's name now holds the eager ones (MAX 26.7)
_LEGACY = {"norm": "_legacy_norm", "sequential": "_legacy_sequential"}
for _name in ["attention", "comm", "embedding", "kernels", "kv_cache", "layer", "linear", "norm", "rotary_embedding",
              "sequential", "transformer", "attention.attention_with_rope", "attention.multihead_attention",
              "attention.mask_config", "kv_cache.cache_params", "transformer.transformer", "transformer.distributed_transformer",
              "attention.tensor_parallel"]:
    _sys.modules[f"{__name__}.{_name}"] = _sys.modules[f"max.nn.{_LEGACY.get(_name, _name)}"]

__all__ = [
    "MLP", "Allreduce", "ColumnParallelLinear", "DistributedGemmConfig", "DistributedTransformer",
    "DistributedTransformerBlock",
    "ShardingStrategy", "Signals", "TensorParallelAttentionWithRope", "VocabParallelEmbedding",
    "AttentionMaskVariant", "AttentionWithRope", "Embedding", "GemmaRMSNorm", "KVCacheParams",
    "KVCacheQuantizationConfig", "KVCacheStrategy", "Layer", "LayerList", "LayerNorm", "Linear",
    "Llama3RopeScalingParams", "Llama3RotaryEmbedding", "MHAMaskVariant", "Module", "MultiheadAttention",
    "PagedCacheInputSymbols", "PagedCacheValues", "RMSNorm", "ReturnHiddenStates", "ReturnLogits",
    "RotaryEmbedding", "Sequential", "Shardable", "Transformer", "TransformerBlock", "add_layer_hook",
    "clear_hooks", "attention", "comm", "embedding", "kernels", "kv_cache", "layer", "linear", "norm",
    "rotary_embedding", "sampling_ops", "sequential", "transformer",
]
