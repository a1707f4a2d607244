"""max.nn.kernels.flash_attention_gpu (MAX's dense attention over [batch, seq, heads, head_dim]
tensors) against numpy float64 on fresh random inputs, per device and dtype: every mask variant,
GQA, query and key lengths that differ, valid lengths and key masks (rows that see no key give
zeros), the GPU's tensor-core head dims (64, 128) and others; clear errors on bad shapes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType
from max.nn.attention import MHAMaskVariant
from max.nn.kernels import flash_attention_gpu

NP = {DType.float32: np.float32, DType.float16: np.float16, DType.bfloat16: ml_dtypes.bfloat16}
TOL = {DType.float32: 2e-5, DType.float16: 4e-3, DType.bfloat16: 3e-2}


def reference(q, k, v, scale, mask, window, keep):
    """float64 attention: query i at key position i + max(kv_len - q_len, 0); `keep` [b, kv_len]."""
    b, sq, h, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    pos = np.arange(sq)[:, None] + max(sk - sq, 0)
    key = np.arange(sk)[None, :]
    vis = np.ones((sq, sk), bool)
    if mask != "null":
        vis &= key <= pos
    if mask == "sliding_window_causal":
        vis &= key > pos - window
    out = np.zeros((b, sq, h, d))
    for bi in range(b):
        seen = vis & keep[bi][None, :]
        for hi in range(h):
            kh = hi // (h // hkv)
            s = np.where(seen, q[bi, :, hi] @ k[bi, :, kh].T * scale, -np.inf)
            m = np.max(s, axis=1, keepdims=True)
            p = np.exp(s - np.where(np.isfinite(m), m, 0.0))
            z = p.sum(axis=1, keepdims=True)
            out[bi, :, hi] = np.where(z > 0, p @ v[bi, :, kh] / np.where(z > 0, z, 1.0), 0.0)
    return out


def run(device, dtype, q, k, v, *, mask="null", window=-1, valid=None, key_mask=None, scale=0.125):
    ref = DeviceRef.from_device(device)
    types = [TensorType(dtype, x.shape, ref) for x in (q, k, v)]
    extra = []
    if valid is not None:
        types.append(TensorType(DType.uint32, valid.shape, ref))
        extra.append(valid)
    if key_mask is not None:
        types.append(TensorType(DType.bool, key_mask.shape, ref))
        extra.append(key_mask)

    def build(*ins):
        rest = list(ins[3:])
        vl = rest.pop(0) if valid is not None else None
        km = rest.pop(0) if key_mask is not None else None
        return flash_attention_gpu(ins[0], ins[1], ins[2], mask, scale, window, vl, key_mask=km)

    devices = [driver.CPU()] if device.is_host else [driver.CPU(), device]
    model = engine.InferenceSession(devices=devices).load(Graph("flash", build, input_types=types))
    args = [driver.Buffer.from_numpy(np.ascontiguousarray(x)).to(device) for x in (q, k, v, *extra)]
    return model.execute(*args)[0].to_numpy().astype(np.float64)


@pytest.mark.parametrize("dtype", list(NP))
@pytest.mark.parametrize(
    "b,sq,sk,h,hkv,d,mask,window",
    [
        (2, 128, 128, 4, 4, 64, "null", -1),  # an encoder (BERT's head dim)
        (1, 100, 100, 8, 2, 128, "causal", -1),  # GQA, rows past a tile
        (3, 5, 70, 4, 1, 64, "causal", -1),  # fewer queries than keys: the last rows of the sequence
        (2, 64, 64, 2, 2, 32, "null", -1),  # a head dim outside the tensor-core kernels'
        (1, 90, 90, 4, 2, 64, "sliding_window_causal", 17),
    ],
)
def test_matches_float64(device, rng, dtype, b, sq, sk, h, hkv, d, mask, window):
    np_t = NP[dtype]
    q = rng.standard_normal((b, sq, h, d)).astype(np_t)
    k = rng.standard_normal((b, sk, hkv, d)).astype(np_t)
    v = rng.standard_normal((b, sk, hkv, d)).astype(np_t)
    got = run(device, dtype, q, k, v, mask=mask, window=window)
    want = reference(q, k, v, 0.125, mask, window, np.ones((b, sk), bool))
    np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16])
@pytest.mark.parametrize("mask", ["null", "causal"])
def test_valid_lengths_and_key_masks_hide_keys(device, rng, dtype, mask):
    b, s, h, d = 4, 96, 4, 64
    np_t = NP[dtype]
    q, k, v = (rng.standard_normal((b, s, h, d)).astype(np_t) for _ in range(3))
    valid = np.array([96, 40, 0, 1], np.uint32)  # a whole row, a padded one, none, one key
    keep = np.arange(s)[None, :] < valid[:, None]
    got = run(device, dtype, q, k, v, mask=mask, valid=valid)
    np.testing.assert_allclose(got, reference(q, k, v, 0.125, mask, -1, keep), rtol=TOL[dtype], atol=TOL[dtype])
    assert not got[2].any()  # no key: zeros
    # any pattern of hidden keys, with and without valid lengths
    km = rng.random((b, s)) < 0.7
    got = run(device, dtype, q, k, v, mask=mask, key_mask=km)
    np.testing.assert_allclose(got, reference(q, k, v, 0.125, mask, -1, km), rtol=TOL[dtype], atol=TOL[dtype])
    got = run(device, dtype, q, k, v, mask=mask, valid=valid, key_mask=km)
    np.testing.assert_allclose(got, reference(q, k, v, 0.125, mask, -1, km & keep), rtol=TOL[dtype], atol=TOL[dtype])


def test_symbolic_batch_and_sequence(rng):
    """One graph for every batch and length (the dims named, not fixed)."""
    h, d = 2, 16
    types = [TensorType(DType.float32, ["b", "s", h, d], DeviceRef.CPU()) for _ in range(3)]
    graph = Graph(
        "flash_dyn", lambda q, k, v: flash_attention_gpu(q, k, v, MHAMaskVariant.CAUSAL_MASK, 0.25), input_types=types
    )
    model = engine.InferenceSession(devices=[driver.CPU()]).load(graph)
    for b, s in [(1, 3), (3, 17)]:
        q, k, v = (rng.standard_normal((b, s, h, d)).astype(np.float32) for _ in range(3))
        got = model.execute(*(driver.Buffer.from_numpy(x) for x in (q, k, v)))[0].to_numpy()
        want = reference(q, k, v, 0.25, "causal", -1, np.ones((b, s), bool))
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_bad_inputs_raise_clear_errors():
    cpu = DeviceRef.CPU()

    def stage(qs, ks, vs, dtypes=(DType.float32,) * 3, **kw):
        types = [TensorType(t, s, cpu) for t, s in zip(dtypes, (qs, ks, vs))]
        Graph("bad", lambda q, k, v: flash_attention_gpu(q, k, v, kw.pop("mask", "null"), 1.0, **kw), input_types=types)

    with pytest.raises(ValueError, match="q must be"):
        stage((2, 4, 8), (2, 4, 1, 8), (2, 4, 1, 8))
    with pytest.raises(ValueError, match="must match"):
        stage((2, 4, 2, 8), (2, 4, 1, 8), (2, 5, 1, 8))
    with pytest.raises(ValueError, match="head dim"):
        stage((2, 4, 2, 8), (2, 4, 1, 16), (2, 4, 1, 16))
    with pytest.raises(ValueError, match="dtype"):
        stage((2, 4, 2, 8), (2, 4, 1, 8), (2, 4, 1, 8), dtypes=(DType.bfloat16, DType.float32, DType.float32))
    with pytest.raises(ValueError, match="local_window_size"):
        stage((2, 4, 2, 8), (2, 4, 1, 8), (2, 4, 1, 8), mask="sliding_window_causal")
    with pytest.raises(NotImplementedError, match="chunked_causal"):
        stage((2, 4, 2, 8), (2, 4, 1, 8), (2, 4, 1, 8), mask="chunked_causal")
    with pytest.raises(ValueError, match="not a multiple"):
        stage((2, 4, 3, 8), (2, 4, 2, 8), (2, 4, 2, 8))  # 3 query heads over 2 kv heads

