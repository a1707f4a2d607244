"""The BERT encoder of sentence-transformers models (all-MiniLM-L6-v2 and the like): word,
position and token-type embeddings, post-norm encoder layers (self-attention over the padded
batch with its padding masked, exact-erf GELU feed-forward), then mean (or CLS / max) pooling
over the real tokens and optional L2 normalisation. Module names follow the checkpoint's
(``embeddings.word_embeddings``, ``encoder.layer.0.attention.self.query`` ...)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from max.dtype import DType
from max.graph import DeviceRef, TensorValue, ops
from max.nn import Embedding, LayerList, LayerNorm, Linear, Module


class _Namespace(Module):
    """A module that only groups sub-modules under a name."""


class BertSelfAttention(Module):
    def __init__(self, hidden: int, heads: int, dtype: DType, device: DeviceRef) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query = Linear(hidden, hidden, dtype, device, has_bias=True)
        self.key = Linear(hidden, hidden, dtype, device, has_bias=True)
        self.value = Linear(hidden, hidden, dtype, device, has_bias=True)

    def _split(self, t: TensorValue, b: Any, s: Any) -> TensorValue:
        return t.reshape([b, s, self.heads, self.head_dim]).permute([0, 2, 1, 3])

    def __call__(self, x: TensorValue, mask_add: TensorValue) -> TensorValue:
        b, s, hidden = x.shape
        q, k, v = (self._split(f(x), b, s) for f in (self.query, self.key, self.value))
        scores = (q @ k.permute([0, 1, 3, 2])).cast(DType.float32) * (1.0 / math.sqrt(self.head_dim)) + mask_add
        probs = ops.softmax(scores).cast(x.dtype)
        return (probs @ v).permute([0, 2, 1, 3]).reshape([b, s, hidden])


class BertLayer(Module):
    def __init__(self, hidden: int, heads: int, ffn: int, eps: float, act: str, dtype: DType, device: DeviceRef) -> None:
        super().__init__()
        self.attention = _Namespace()
        self.attention.self = BertSelfAttention(hidden, heads, dtype, device)
        self.attention.output = _Namespace()
        self.attention.output.dense = Linear(hidden, hidden, dtype, device, has_bias=True)
        self.attention.output.LayerNorm = LayerNorm(hidden, [device], dtype, eps)
        self.intermediate = _Namespace()
        self.intermediate.dense = Linear(hidden, ffn, dtype, device, has_bias=True)
        self.output = _Namespace()
        self.output.dense = Linear(ffn, hidden, dtype, device, has_bias=True)
        self.output.LayerNorm = LayerNorm(hidden, [device], dtype, eps)
        if act not in ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu"):
            raise NotImplementedError(f"BERT hidden_act {act!r} is not supported")
        self.act = act

    def __call__(self, x: TensorValue, mask_add: TensorValue) -> TensorValue:
        a = self.attention.output.dense(self.attention.self(x, mask_add))
        h = self.attention.output.LayerNorm(a + x)
        f = self.intermediate.dense(h)
        if self.act == "relu":
            f = ops.relu(f)
        else:
            f = ops.gelu(f, approximate="none" if self.act == "gelu" else "tanh")
        return self.output.LayerNorm(self.output.dense(f) + h)


class BertEncoder(Module):
    """``__call__(input_ids [batch, seq] int64, attention_mask [batch, seq] int64)`` ->
    pooled (and optionally normalised) float32 ``[batch, hidden]``."""

    def __init__(self, config: dict[str, Any], dtype: DType, device: DeviceRef, *, pooling: str = "mean",
                 normalize: bool = True) -> None:
        super().__init__()
        hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
        eps = float(config.get("layer_norm_eps", 1e-12))
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise NotImplementedError("BERT with relative position embeddings is not supported")
        self.embeddings = _Namespace()
        self.embeddings.word_embeddings = Embedding(int(config["vocab_size"]), hidden, dtype, device)
        self.embeddings.position_embeddings = Embedding(int(config["max_position_embeddings"]), hidden, dtype, device)
        self.embeddings.token_type_embeddings = Embedding(int(config.get("type_vocab_size", 2)), hidden, dtype, device)
        self.embeddings.LayerNorm = LayerNorm(hidden, [device], dtype, eps)
        self.encoder = _Namespace()
        self.encoder.layer = LayerList([
            BertLayer(hidden, heads, int(config["intermediate_size"]), eps, config.get("hidden_act", "gelu"), dtype, device)
            for _ in range(int(config["num_hidden_layers"]))
        ])
        if pooling not in ("mean", "cls", "max"):
            raise ValueError(f"unsupported pooling {pooling!r} (mean, cls or max)")
        self.pooling, self.normalize, self.dtype, self.device = pooling, normalize, dtype, device

    def __call__(self, input_ids: TensorValue, attention_mask: TensorValue) -> TensorValue:
        b, s = input_ids.shape
        dev = input_ids.device
        positions = ops.range(0, s, 1, out_dim=s, dtype=DType.int64, device=dev)
        e = self.embeddings
        h = e.word_embeddings(input_ids) + ops.unsqueeze(e.position_embeddings(positions), 0)
        h = h + e.token_type_embeddings(ops.constant(np.zeros(1, np.int64), DType.int64, dev))
        h = e.LayerNorm(h)
        keep = attention_mask.cast(DType.float32)
        mask_add = ops.unsqueeze(ops.unsqueeze((keep - 1.0) * 1e30, 1), 1)  # [b, 1, 1, s]: 0 or -1e30
        for layer in self.encoder.layer:
            h = layer(h, mask_add)
        h = h.cast(DType.float32)
        if self.pooling == "cls":
            pooled = h[:, 0, :]
        elif self.pooling == "max":
            pooled = ops.max(h + ops.unsqueeze((keep - 1.0) * 1e30, 2), axis=1).reshape([b, h.shape[2]])
        else:
            w = ops.unsqueeze(keep, 2)
            total = ops.sum(h * w, axis=1).reshape([b, h.shape[2]])
            count = ops.max(ops.sum(keep, axis=1), 1e-9)
            pooled = total / count
        if self.normalize:
            norm = ops.sqrt(ops.sum(pooled * pooled, axis=1))
            pooled = pooled / ops.max(norm, 1e-12)
        return pooled


def rename(fmt: str, name: str) -> str | None:
    if name.endswith("position_ids") or name.startswith("pooler."):
        return None
    return name[len("bert."):] if name.startswith("bert.") else name


__all__ = ["BertEncoder", "rename"]
