"""``TransformerBlock`` (pre-norm attention and MLP with residuals) and ``Transformer`` (token
embedding, the blocks over the paged KV cache, the final norm and the logits of each sequence's
last token, or of every token)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any

from max.dtype import DType
from max.graph import TensorValue, ops
from max.nn.embedding import Embedding
from max.nn.kv_cache.cache_params import KVCacheParams, PagedCacheValues
from max.nn.layer import LayerList, Module
from max.nn.rotary_embedding import RotaryEmbedding


class ReturnLogits(str, enum.Enum):
    """Which tokens' logits the model returns."""

    LAST_TOKEN = "last_token"
    VARIABLE = "variable"
    ALL = "all"


class ReturnHiddenStates(str, enum.Enum):
    """Which hidden states the model returns besides the logits."""

    NONE = "none"
    ALL = "all"
    LAST = "last"
    ALL_NORMALIZED = "all_normalized"
    LAST_NORMALIZED = "last_normalized"


class TransformerBlock(Module):
    """``h = x + attention(norm(x)) * r``, then ``h + mlp(mlp_norm(h)) * r``."""

    def __init__(
        self,
        attention: Module,
        mlp: Callable[[TensorValue], TensorValue],
        attention_norm: Callable[[TensorValue], TensorValue],
        mlp_norm: Callable[[TensorValue], TensorValue],
        residual_multiplier: float = 1.0,
    ) -> None:
        super().__init__()
        self.self_attn = attention
        self.mlp = mlp
        self.input_layernorm = attention_norm
        self.post_attention_layernorm = mlp_norm
        self.residual_multiplier = float(residual_multiplier)

    def __call__(
        self,
        layer_idx: int,
        x: TensorValue,
        kv_collection: PagedCacheValues,
        freqs_cis: TensorValue,
        input_row_offsets: TensorValue,
    ) -> TensorValue:
        r = self.residual_multiplier
        attn = self.self_attn(layer_idx, self.input_layernorm(x), kv_collection, freqs_cis, input_row_offsets)
        h = add_residual(x, attn, r)
        return add_residual(h, self.mlp(self.post_attention_layernorm(h)), r)


def add_residual(x: TensorValue, y: TensorValue, multiplier: float = 1.0) -> TensorValue:
    """``x + y * multiplier``: a block's residual connection. A GPU graph folds the add into the
    epilogue of the matmul that produced `y`, so the eager sub-layers end with this same add
    inside their own graph (one rounding, as the block's graph has it)."""
    return x + (y if multiplier == 1.0 else y * multiplier)


def last_token_indices(input_row_offsets: TensorValue) -> TensorValue:
    """``input_row_offsets[1:] - 1`` as int64: the row of each sequence's last token."""
    return (input_row_offsets[1:].cast(DType.int64) - 1)


class Transformer(Module):
    """A decoder over ragged token batches: ``__call__(tokens, kv_collection,
    input_row_offsets)`` returns the float32 logits ``[batch, vocab]`` of each sequence's last
    token (``ReturnLogits.ALL``: ``[tokens, vocab]``)."""

    def __init__(
        self,
        dim: int,
        n_heads: int,
        layers: Sequence[Module],
        norm: Callable[[TensorValue], TensorValue],
        output: Callable[[TensorValue], TensorValue],
        embedding: Embedding,
        kv_params: KVCacheParams,
        rope: RotaryEmbedding,
        return_logits: ReturnLogits = ReturnLogits.LAST_TOKEN,
        return_hidden_states: ReturnHiddenStates = ReturnHiddenStates.NONE,
        embedding_multiplier: float = 1.0,
        logits_scaling: float = 1.0,
        *,
        logits_softcapping: float | None = None,
    ) -> None:
        super().__init__()
        self.dim, self.n_heads = int(dim), int(n_heads)
        self.layers = LayerList(layers)
        self.norm = norm
        self.lm_head = output
        self.embed_tokens = embedding
        self.kv_params = kv_params
        self.rope = rope
        self.return_logits = ReturnLogits(return_logits)
        self.return_hidden_states = ReturnHiddenStates(return_hidden_states)
        self.embedding_multiplier = float(embedding_multiplier)
        self.logits_scaling = float(logits_scaling)
        self.logits_softcapping = logits_softcapping

    def layer_freqs(self, layer_idx: int, device: Any) -> TensorValue:
        """The rotary table a layer uses (one for all layers here; Gemma 3 overrides)."""
        return self.rope.freqs_cis_on(device)

    def __call__(
        self,
        tokens: TensorValue,
        kv_collection: PagedCacheValues,
        input_row_offsets: TensorValue,
        return_n_logits: Any = None,
    ) -> tuple[TensorValue, ...]:
        h = self.embed_tokens(tokens)
        if self.embedding_multiplier != 1.0:
            h = h * self.embedding_multiplier
        for i, layer in enumerate(self.layers):
            h = layer(i, h, kv_collection, self.layer_freqs(i, h.device), input_row_offsets)
        if self.return_logits == ReturnLogits.LAST_TOKEN:
            h = ops.gather(h, last_token_indices(input_row_offsets), axis=0)
        normed = self.norm(h)
        logits = self.lm_head(normed)
        if logits.dtype != DType.float32:
            logits = logits.cast(DType.float32)
        if self.logits_scaling != 1.0:
            logits = logits / self.logits_scaling
        if self.logits_softcapping:
            cap = float(self.logits_softcapping)
            logits = ops.tanh(logits / cap) * cap
        if self.return_hidden_states == ReturnHiddenStates.NONE:
            return (logits,)
        hidden = normed if self.return_hidden_states in (ReturnHiddenStates.ALL_NORMALIZED,
                                                         ReturnHiddenStates.LAST_NORMALIZED) else h
        return (logits, hidden)


__all__ = ["ReturnHiddenStates", "ReturnLogits", "Transformer", "TransformerBlock", "add_residual"]
