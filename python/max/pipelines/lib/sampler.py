"""Choosing each sequence's next token on the model's device: a small graph (compiled once per
device) over the step's logits with per-row sampling parameters (``sample_tokens``: greedy,
temperature, top-k, top-p, min-p, a seeded Gumbel choice), preceded by the repetition,
frequency and presence penalties when a row asks for them (``apply_penalties`` over each row's
token history). Only the chosen token ids come back to the host."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops
from max.nn.sampling_ops import apply_penalties, sample_tokens

#: A step's logits or token ids: one buffer, or one per device of a tensor-parallel model.
PerDevice = driver.Buffer | list[driver.Buffer]

_MASK = (1 << 64) - 1
_CHOICES = 0x6E5F63686F696365  # keeps choice seeds apart from step_seed's mixing of a token count


def splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


@functools.lru_cache(maxsize=4096)
def _id_seed(request_id: str) -> int:
    """The seed of a request without one: from its id (cached: a decode step asks for it once
    per request)."""
    return int.from_bytes(hashlib.blake2b(request_id.encode(), digest_size=8).digest(), "little")


def step_seed(ctx: Any) -> int:
    """The seed of a request's next draw: its own seed (or one derived from its id) mixed with
    the number of tokens it has generated, so that every step draws fresh noise and a seeded
    request is reproducible."""
    base = ctx.sampling_params.seed
    if base is None:
        base = _id_seed(str(ctx.request_id))
    generated = int(ctx.end_idx - ctx.prompt_length)
    return splitmix64(base ^ splitmix64(generated))


def seeds_of(ctxs: Sequence[Any]) -> np.ndarray:
    """The seeds of the contexts' next draws (``step_seed``), as the sampler's uint64 input."""
    return np.array([step_seed(c) for c in ctxs], np.uint64)


def choice_seed(seed: int, index: int) -> int:
    """The seed of choice `index` of a request for several choices (OpenAI's ``n``) with
    `seed`: choice 0 keeps it, so ``n=1`` is unchanged; the others get seeds mixed from it and
    their index, so that their draws differ and each stays reproducible."""
    return int(seed) if index == 0 else splitmix64(int(seed) ^ splitmix64(_CHOICES + index))


class Sampler:
    """Next tokens for rows of a ``logits [batch, vocab]`` buffer."""

    def __init__(self, session: engine.InferenceSession, device: driver.Device) -> None:
        self.device = device
        ref = DeviceRef.from_device(device)
        params = [
            TensorType(DType.float32, ["rows"], ref),
            TensorType(DType.int64, ["rows"], ref),
            TensorType(DType.float32, ["rows"], ref),
            TensorType(DType.float32, ["rows"], ref),
            TensorType(DType.uint64, ["rows"], ref),
        ]
        base = [TensorType(DType.float32, ["batch", "vocab"], ref), TensorType(DType.int64, ["rows"], ref)]
        with Graph("sample", input_types=base + params) as g:
            logits, rows, *p = (v.tensor for v in g.inputs)
            g.output(sample_tokens(ops.gather(logits, rows, axis=0), *p))
        self._plain = session.load(g)
        # Every row of the logits in order (each decode step): no gather, whose index check
        # would read the rows back to the host, so the graph is captured and replayed on a GPU.
        every = [TensorType(DType.float32, ["rows"], ref), TensorType(DType.int64, ["rows"], ref),
                 TensorType(DType.float32, ["rows"], ref), TensorType(DType.float32, ["rows"], ref),
                 TensorType(DType.uint64, ["rows"], ref)]
        with Graph("sample_every_row", input_types=[TensorType(DType.float32, ["rows", "vocab"], ref), *every]) as g:
            logits, *p = (v.tensor for v in g.inputs)
            g.output(sample_tokens(logits, *p))
        self._every = session.load(g)
        history = [
            TensorType(DType.int64, ["history"], ref),
            TensorType(DType.uint32, ["rows_plus_1"], ref),
            TensorType(DType.uint32, ["rows"], ref),
            TensorType(DType.float32, ["rows"], ref),
            TensorType(DType.float32, ["rows"], ref),
            TensorType(DType.float32, ["rows"], ref),
        ]
        with Graph("sample_penalized", input_types=base + params + history) as g:
            logits, rows, t, k, tp, mp, seed, toks, offs, plen, freq, pres, rep = (v.tensor for v in g.inputs)
            picked = apply_penalties(ops.gather(logits, rows, axis=0), toks, offs, plen, freq, pres, rep)
            g.output(sample_tokens(picked, t, k, tp, mp, seed))
        self._penalized = session.load(g)
        # Tokens a row may not produce yet (EOS and stop tokens before min_new_tokens): their
        # logits become -inf before sampling.
        block_types = [TensorType(DType.float32, ["rows", "vocab"], ref), TensorType(DType.int64, ["blocked", 2], ref)]
        with Graph("block_tokens", input_types=block_types) as g:
            logits, at = (v.tensor for v in g.inputs)
            g.output(ops.scatter_nd(logits, ops.broadcast_to(ops.constant(-np.inf, DType.float32, ref), [at.shape[0]]),
                                    at))
        self._block = session.load(g)
        self.penalties = True  # (PipelineConfig.enable_penalties)
        self._last_params: tuple[tuple, list[driver.Buffer]] | None = None

    def _row_params(self, sps: Sequence[Any]) -> list[driver.Buffer]:
        """Temperature, top-k, top-p and min-p per row on the device; the buffers of the last
        call are reused while the rows ask for the same values (every step of a decode)."""
        key = tuple((0.0 if sp.top_k == 1 else sp.temperature, sp.top_k, sp.top_p, sp.min_p) for sp in sps)
        if self._last_params is None or self._last_params[0] != key:
            t, k, tp, mp = zip(*key)
            self._last_params = (key, [
                self._put(np.array(t, np.float32)), self._put(np.array(k, np.int64)),
                self._put(np.array(tp, np.float32)), self._put(np.array(mp, np.float32)),
            ])
        return self._last_params[1]

    def _put(self, a: np.ndarray) -> driver.Buffer:
        b = driver.Buffer.from_numpy(np.ascontiguousarray(a))
        return b if self.device.is_host else b.to(self.device)

    def sample(self, logits: driver.Buffer, ctxs: Sequence[Any], rows: Sequence[int]) -> np.ndarray:
        """The next token of each context, from row `rows[i]` of `logits`."""
        return self.to_host(self.sample_on_device(logits, ctxs, rows))

    def to_host(self, tokens: driver.Buffer) -> np.ndarray:
        """``sample_on_device``'s token ids as a host array."""
        return (tokens if self.device.is_host else tokens.to(driver.CPU())).to_numpy()

    def sample_on_device(self, logits: driver.Buffer, ctxs: Sequence[Any], rows: Sequence[int],
                         seeds: driver.Buffer | None = None,
                         blocked: Sequence[tuple[int, int]] = ()) -> driver.Buffer:
        """As ``sample``, leaving the ``[rows]`` int64 token ids on the device (for a later
        graph over them, such as the log-probabilities'). `seeds`: ``seeds_of(ctxs)`` already on
        the device (a multi-step decode moves its steps' inputs there in one copy). `blocked`:
        (row of `logits`, token id) pairs that may not be chosen."""
        sps = [c.sampling_params for c in ctxs]
        if blocked:
            logits = self._block.execute(logits, self._put(np.asarray(blocked, np.int64).reshape(-1, 2)))[0]
        penalized = self.penalties and any(sp.has_penalties for sp in sps)
        every = not penalized and list(rows) == list(range(int(logits.shape[0])))
        args = [
            logits,
            None if every else self._put(np.asarray(rows, np.int64)),
            *self._row_params(sps),
            self._put(seeds_of(ctxs)) if seeds is None else seeds,
        ]
        if penalized:
            histories = [np.asarray(c.tokens, np.int64) for c in ctxs]
            offsets = np.concatenate([[0], np.cumsum([len(h) for h in histories])]).astype(np.uint32)
            args += [
                self._put(np.concatenate(histories)),
                self._put(offsets),
                self._put(np.array([c.prompt_length for c in ctxs], np.uint32)),
                self._put(np.array([sp.frequency_penalty for sp in sps], np.float32)),
                self._put(np.array([sp.presence_penalty for sp in sps], np.float32)),
                self._put(np.array([sp.repetition_penalty for sp in sps], np.float32)),
            ]
            return self._penalized.execute(*args)[0]
        if every:
            return self._every.execute(args[0], *args[2:])[0]
        return self._plain.execute(*args)[0]


class ReplicatedSampler:
    """A tensor-parallel model's sampler: one ``Sampler`` per device, each over that device's
    copy of the step's logits (``DecoderModel.execute_all``). The copies hold the same bits and
    sample_tokens is exact (the host reference's arithmetic, no atomics), so every device picks
    the same tokens, and the next step on each device reads its own copy of them: no device
    waits for another's sampler, or for a copy between them, to start a step. Token ids are
    lists of buffers, one per device; the host reads the first device's."""

    def __init__(self, session: engine.InferenceSession, devices: Sequence[driver.Device]) -> None:
        self.samplers = [Sampler(session, d) for d in devices]
        self.device = devices[0]

    @property
    def penalties(self) -> bool:
        """Whether penalties apply (``PipelineConfig.enable_penalties``), on every device."""
        return self.samplers[0].penalties

    @penalties.setter
    def penalties(self, on: bool) -> None:
        for s in self.samplers:
            s.penalties = on

    def sample(self, logits: Sequence[driver.Buffer], ctxs: Sequence[Any], rows: Sequence[int]) -> np.ndarray:
        return self.to_host(self.sample_on_device(logits, ctxs, rows))

    def to_host(self, tokens: PerDevice) -> np.ndarray:
        return self.samplers[0].to_host(first_copy(tokens))

    def sample_on_device(self, logits: Sequence[driver.Buffer], ctxs: Sequence[Any],
                         rows: Sequence[int], seeds: Sequence[driver.Buffer] | None = None,
                         blocked: Sequence[tuple[int, int]] = ()) -> list[driver.Buffer]:
        if len(logits) != len(self.samplers):
            raise ValueError(f"{len(logits)} copies of the logits for {len(self.samplers)} devices")
        per_device = [None] * len(self.samplers) if seeds is None else list(seeds)
        if len(per_device) != len(self.samplers):
            raise ValueError(f"{len(per_device)} copies of the seeds for {len(self.samplers)} devices")
        return [s.sample_on_device(x, ctxs, rows, z, blocked) for s, x, z in zip(self.samplers, logits, per_device)]


def first_copy(x: PerDevice) -> driver.Buffer:
    """The buffer on the model's first device of a value that may be one per device."""
    return x[0] if isinstance(x, (list, tuple)) else x


__all__ = ["PerDevice", "ReplicatedSampler", "Sampler", "choice_seed", "first_copy", "seeds_of", "splitmix64",
           "step_seed"]
