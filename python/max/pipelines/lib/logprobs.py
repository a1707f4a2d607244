"""Log-probabilities of the sampled tokens, on the model's device: a small graph (compiled once
per device) over the step's raw logits — before temperature, top-k/top-p/min-p and penalties,
as OpenAI and vLLM report them — that takes each row's ``logsoftmax``, picks the sampled
token's value (``gather_nd`` at the ids the sampler left on the device) and the ``top`` most
likely tokens (``top_k``). Only those numbers come back to the host, never a vocabulary row."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, TensorValue, ops
from max.interfaces import LogProbabilities

# OpenAI's largest ``top_logprobs``: every step computes this many alternatives, requests slice.
TOP_LOGPROBS_LIMIT = 20


def _log_probs(logits: TensorValue, tokens: TensorValue, top: int) -> tuple[TensorValue, ...]:
    lp = ops.logsoftmax(logits, axis=-1)
    chosen = ops.gather_nd(lp, ops.unsqueeze(tokens, -1), batch_dims=1)
    values, ids = ops.top_k(lp, top, axis=-1)
    return chosen, values, ids


@dataclass
class StepLogProbs:
    """One step's log-probabilities, on the host: per sampled row, the chosen token's
    (``chosen [rows]``) and the ``top`` largest, most likely first (``top_values``,
    ``top_ids [rows, top]``)."""

    chosen: np.ndarray
    top_values: np.ndarray
    top_ids: np.ndarray

    def for_row(self, row: int, token: int, count: int) -> LogProbabilities:
        """Row `row`'s entry for its sampled `token`: the token's log-probability and a dict of
        the `count` most likely tokens, most likely first, then `token` if it is not among them
        (OpenAI's ``top_logprobs`` of completions always holds the sampled token)."""
        count = min(int(count), self.top_ids.shape[1])
        top = {int(i): float(v) for i, v in zip(self.top_ids[row, :count], self.top_values[row, :count])}
        chosen = float(self.chosen[row])
        top.setdefault(int(token), chosen)
        return LogProbabilities(token_log_probabilities=[chosen], top_log_probabilities=[top])


class LogProbGraph:
    """Log-probabilities for sampled rows of a ``logits [batch, vocab]`` buffer."""

    def __init__(self, session: engine.InferenceSession, device: driver.Device, vocab_size: int) -> None:
        self.device = device
        self.top = max(1, min(TOP_LOGPROBS_LIMIT, int(vocab_size)))
        ref = DeviceRef.from_device(device)
        tokens = TensorType(DType.int64, ["rows"], ref)
        # Every row of the logits in order (each decode step): no gather.
        with Graph("logprobs_every_row", input_types=[TensorType(DType.float32, ["rows", "vocab"], ref), tokens]) as g:
            logits, chosen = (v.tensor for v in g.inputs)
            g.output(*_log_probs(logits, chosen, self.top))
        self._every = session.load(g)
        types = [TensorType(DType.float32, ["batch", "vocab"], ref), TensorType(DType.int64, ["rows"], ref), tokens]
        with Graph("logprobs", input_types=types) as g:
            logits, rows, chosen = (v.tensor for v in g.inputs)
            g.output(*_log_probs(ops.gather(logits, rows, axis=0), chosen, self.top))
        self._rows = session.load(g)

    def compute(self, logits: driver.Buffer, rows: Sequence[int], tokens: driver.Buffer) -> StepLogProbs:
        """The log-probabilities of row `rows[i]` of `logits` at `tokens[i]` (the sampler's
        output, still on the device) and its top alternatives."""
        if list(rows) == list(range(int(logits.shape[0]))):
            out = self._every.execute(logits, tokens)
        else:
            idx = driver.Buffer.from_numpy(np.asarray(rows, np.int64))
            out = self._rows.execute(logits, idx if self.device.is_host else idx.to(self.device), tokens)
        host = [(b if self.device.is_host else b.to(driver.CPU())).to_numpy() for b in out]
        return StepLogProbs(*host)


__all__ = ["TOP_LOGPROBS_LIMIT", "LogProbGraph", "StepLogProbs"]
