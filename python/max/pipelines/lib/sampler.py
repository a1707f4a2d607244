"""Choosing each sequence's next token on the model's device from its logits: a small graph
compiled once per device; only the chosen token ids come back to the host."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops


class Sampler:
    """Greedy (argmax) token choice over ``logits [batch, vocab]`` rows."""

    def __init__(self, session: engine.InferenceSession, device: driver.Device) -> None:
        self.device = device
        ref = DeviceRef.from_device(device)
        with Graph("greedy", input_types=[TensorType(DType.float32, ["batch", "vocab"], ref),
                                          TensorType(DType.int64, ["rows"], ref)]) as g:
            logits, rows = g.inputs
            picked = ops.gather(logits.tensor, rows.tensor, axis=0)
            g.output(ops.argmax(picked, axis=-1).reshape([rows.tensor.shape[0]]))
        self._greedy = session.load(g)

    def sample(self, logits: driver.Buffer, ctxs: Sequence[Any], rows: Sequence[int]) -> np.ndarray:
        """The next token of each context, from row `rows[i]` of `logits`."""
        idx = driver.Buffer.from_numpy(np.asarray(rows, np.int64))
        if not self.device.is_host:
            idx = idx.to(self.device)
        out = self._greedy.execute(logits, idx)[0]
        return out.to(driver.CPU()).to_numpy() if not self.device.is_host else out.to_numpy()


__all__ = ["Sampler"]
