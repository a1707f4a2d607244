"""Graph ops that turn a batch of logits into next tokens: ``sample_tokens`` (temperature,
top-k, top-p, min-p and a seeded Gumbel-max draw) and ``apply_penalties`` (repetition,
frequency and presence penalties over each sequence's history).

Every parameter is a tensor of one value per row, so one graph serves a batch of requests with
different settings. The ops are checked and typed in Rust (crates/graph/src/ops/sampling.rs,
which defines them) as they are staged; the CPU and GPU kernels give the same tokens for the
same inputs.
"""

from __future__ import annotations

from typing import Any

from max.graph import TensorValue
from max.graph.ops._stage import as_tensor, graph_of, stage1


def _args(op: str, names: list[str], values: tuple[Any, ...]) -> list[TensorValue]:
    g = graph_of(*values)
    return [as_tensor(v, graph=g, op=op, arg=n) for n, v in zip(names, values)]


def sample_tokens(logits: Any, temperature: Any, top_k: Any, top_p: Any, min_p: Any, seed: Any) -> TensorValue:
    """One token per row of ``logits [batch, vocab]`` (float32), as ``[batch]`` int64.

    Row ``b`` takes the index of its largest logit (the lowest on ties; NaN counts as -inf)
    when ``temperature[b] <= 0`` or ``top_k[b] == 1``. Otherwise, with ``z = logits[b] /
    temperature[b]``, it keeps the ``z_i`` at or above the largest of: the ``top_k[b]``-th
    largest ``z`` when ``1 < top_k[b] < vocab`` (ties kept; ``top_k <= 0`` or ``>= vocab``
    keeps all), ``max(z) + ln(min_p[b])`` when ``min_p[b] > 0``, and, when ``top_p[b] < 1``,
    the threshold where the kept ``softmax(z)`` mass, largest first, reaches ``top_p[b]``; the
    largest ``z`` is always kept. The token is ``argmax(z_i + g_i)`` over the kept set, ``g_i``
    Gumbel noise hashed from ``seed[b]`` (uint64) and ``i``: the same seed gives the same token.

    Dtypes: temperature, top_p and min_p float32 ``[batch]``; top_k int64; seed uint64.
    """
    names = ["logits", "temperature", "top_k", "top_p", "min_p", "seed"]
    args = _args("sample_tokens", names, (logits, temperature, top_k, top_p, min_p, seed))
    return stage1("sample_tokens", args, graph=args[0]._graph)


def apply_penalties(
    logits: Any,
    tokens: Any,
    offsets: Any,
    prompt_lengths: Any,
    frequency: Any,
    presence: Any,
    repetition: Any,
) -> TensorValue:
    """``logits [batch, vocab]`` (float32) with each row's penalties, same shape.

    Row ``b``'s history is ``tokens[offsets[b]:offsets[b + 1]]`` (``tokens`` int64 ``[N]``,
    ``offsets`` uint32 ``[batch + 1]``): its first ``prompt_lengths[b]`` (uint32) are the
    prompt, the rest were generated. Every id in the history has its logit divided by
    ``repetition[b]`` when positive and multiplied by it otherwise (1 changes nothing); then an
    id generated ``c > 0`` times loses ``frequency[b] * c + presence[b]``. The penalties are
    float32 ``[batch]``. Token ids outside the vocabulary are an error on the CPU and ignored on
    the GPU.
    """
    names = ["logits", "tokens", "offsets", "prompt_lengths", "frequency", "presence", "repetition"]
    values = (logits, tokens, offsets, prompt_lengths, frequency, presence, repetition)
    args = _args("apply_penalties", names, values)
    return stage1("apply_penalties", args, graph=args[0]._graph)


__all__ = ["apply_penalties", "sample_tokens"]
