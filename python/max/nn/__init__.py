"""``max.nn``: neural-network modules, in both of MAX's spellings.

- The eager modules of MAX 26.1/26.2's docs: ``Module``, ``module_dataclass``, ``Linear``,
  ``Embedding``, ``RMSNorm``, ``GemmaRMSNorm``, ``RotaryEmbedding``, ``TransposedRotaryEmbedding``,
  ``Sequential``, ``ModuleList`` (also ``max.experimental.nn``, MAX 26.7's name for them).
- The graph-building layers (MAX 26.7's ``max.nn``; ``max.nn.legacy`` in 26.1/26.2): ``Linear``,
  ``Embedding``, ``RMSNorm``, ... called with their own signatures (a dtype, a device) build the
  graph layer, so both spellings work; ``LayerList``, ``LayerNorm``, ``MLP``, attention,
  ``Transformer`` and the KV-cache types are graph layers only. ``max.nn.Module`` is the eager
  base, which extends the graph layers' base: graph layers subclassing it keep working."""

from max.graph.sharding import ShardingStrategy
from max.nn import comm, kernels, sampling_ops
from max.nn.attention import (
    AttentionMaskVariant,
    AttentionWithRope,
    MHAMaskVariant,
    MultiheadAttention,
    TensorParallelAttentionWithRope,
)
from max.nn.comm import Allreduce, Signals
from max.nn.embedding import VocabParallelEmbedding
from max.nn.kv_cache import (
    KVCacheParams,
    KVCacheQuantizationConfig,
    KVCacheStrategy,
    PagedCacheInputSymbols,
    PagedCacheValues,
)
from max.nn.layer import Layer, LayerList, Shardable, add_layer_hook, clear_hooks
from max.nn.layers import Embedding, GemmaRMSNorm, Linear, ModuleList, RMSNorm, Sequential, rms_norm
from max.nn.linear import MLP, ColumnParallelLinear, DistributedGemmConfig
from max.nn.module import Module, module_dataclass
from max.nn._legacy_norm import LayerNorm
from max.nn.rope import RotaryEmbedding, TransposedRotaryEmbedding
from max.nn.rotary_embedding import (
    Llama3RopeScalingParams,
    Llama3RotaryEmbedding,
    LongRoPERotaryEmbedding,
    LongRoPEScalingParams,
)
from max.nn.transformer import (
    DistributedTransformer,
    DistributedTransformerBlock,
    ReturnHiddenStates,
    ReturnLogits,
    Transformer,
    TransformerBlock,
)

__all__ = [
    "MLP", "Allreduce", "ColumnParallelLinear", "DistributedGemmConfig", "DistributedTransformer",
    "DistributedTransformerBlock",
    "ShardingStrategy", "Signals", "TensorParallelAttentionWithRope", "VocabParallelEmbedding", "comm",
    "AttentionMaskVariant", "AttentionWithRope", "Embedding", "GemmaRMSNorm", "KVCacheParams",
    "KVCacheQuantizationConfig", "KVCacheStrategy", "Layer", "LayerList", "LayerNorm", "Linear",
    "Llama3RopeScalingParams", "Llama3RotaryEmbedding", "LongRoPERotaryEmbedding", "LongRoPEScalingParams",
    "MHAMaskVariant", "Module", "ModuleList",
    "MultiheadAttention", "PagedCacheInputSymbols", "PagedCacheValues", "RMSNorm", "ReturnHiddenStates",
    "ReturnLogits", "RotaryEmbedding", "Sequential", "Shardable", "Transformer", "TransformerBlock",
    "TransposedRotaryEmbedding", "add_layer_hook", "clear_hooks", "kernels", "module_dataclass", "rms_norm",
    "sampling_ops",
]
