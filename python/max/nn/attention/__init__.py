"""Attention layers: ``AttentionWithRope`` over the paged KV cache, ``MultiheadAttention``
without a cache, and the mask variants."""

from max.nn.attention.attention_with_rope import AttentionWithRope
from max.nn.attention.mask_config import AttentionMaskVariant, MHAMaskVariant
from max.nn.attention.head_plan import head_plan
from max.nn.attention.multihead_attention import MultiheadAttention
from max.nn.attention.tensor_parallel import TensorParallelAttentionWithRope

__all__ = [
    "AttentionMaskVariant", "AttentionWithRope", "MHAMaskVariant", "MultiheadAttention",
    "TensorParallelAttentionWithRope", "head_plan",
]
