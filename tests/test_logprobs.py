"""The log-probability graph of the pipelines (max/pipelines/lib/logprobs.py) per device, on
fresh random logits, against a float64 numpy log-softmax: the chosen tokens' values and the
top 20, for every row of the logits and for a gathered subset in any order."""

from __future__ import annotations

import numpy as np
import pytest

from max import driver, engine
from max.pipelines.lib.logprobs import TOP_LOGPROBS_LIMIT, LogProbGraph

TOL = 1e-5


def _session(device):
    return engine.InferenceSession(devices=[driver.CPU()] if device.is_host else [driver.CPU(), device])


def _buf(x: np.ndarray, device) -> driver.Buffer:
    return driver.Buffer.from_numpy(np.ascontiguousarray(x)).to(device)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    top = x.max(axis=-1, keepdims=True)
    return x - top - np.log(np.exp(x - top).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("rows", [None, [4, 1, 5], [2]])
def test_log_probs_equal_numpy(device, rng, rows):
    batch, vocab = 6, int(rng.integers(300, 3000))
    logits = (rng.standard_normal((batch, vocab)) * rng.uniform(0.5, 8)).astype(np.float32)
    picked = list(range(batch)) if rows is None else rows
    tokens = rng.integers(0, vocab, len(picked)).astype(np.int64)
    graph = LogProbGraph(_session(device), device, vocab)
    out = graph.compute(_buf(logits, device), picked, _buf(tokens, device))
    ref = _log_softmax(logits[picked])
    assert np.abs(out.chosen - ref[np.arange(len(picked)), tokens]).max() < TOL
    best = np.argsort(-ref, axis=1, kind="stable")[:, :TOP_LOGPROBS_LIMIT]
    assert (out.top_ids == best).all()
    assert np.abs(out.top_values - np.take_along_axis(ref, best, axis=1)).max() < TOL

    # One row as the pipeline hands it on: the `count` most likely first, then the chosen token.
    entry = out.for_row(0, int(tokens[0]), 3)
    assert entry.token_log_probabilities == [pytest.approx(ref[0, tokens[0]], abs=TOL)]
    top = entry.top_log_probabilities[0]
    assert list(top)[:3] == best[0, :3].tolist() and int(tokens[0]) in top
    assert len(top) == 3 + (int(tokens[0]) not in best[0, :3])


def test_small_vocabulary_reports_every_token(device, rng):
    vocab = 7
    logits = rng.standard_normal((3, vocab)).astype(np.float32)
    tokens = np.array([0, 6, 3], np.int64)
    graph = LogProbGraph(_session(device), device, vocab)
    out = graph.compute(_buf(logits, device), [0, 1, 2], _buf(tokens, device))
    assert out.top_ids.shape == (3, vocab)
    np.testing.assert_allclose(np.exp(out.top_values).sum(axis=1), 1.0, atol=1e-5)
