"""rms_norm, rope, kv_cache_store and paged_attention against numpy float64, per device and
dtype, on fresh random inputs (ragged batches, GQA, every mask, pages in random order)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from max import driver, engine
from max.dtype import DType
from max.graph import BufferType, DeviceRef, Graph, TensorType
from max.nn import kernels

NP = {DType.float32: np.float32, DType.float16: np.float16, DType.bfloat16: ml_dtypes.bfloat16}
TOL = {DType.float32: 2e-5, DType.float16: 4e-3, DType.bfloat16: 3e-2}
DTYPES = list(NP)


def _session(device):
    return engine.InferenceSession(devices=[driver.CPU()] if device.is_host else [driver.CPU(), device])


def _buf(x: np.ndarray, device) -> driver.Buffer:
    return driver.Buffer.from_numpy(np.ascontiguousarray(x)).to(device)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offset,mbc", [(0.0, True), (1.0, True), (0.0, False)])
@pytest.mark.parametrize("d", [96, 97, 2048, 4096, 8192, 12288])  # warp, 256- and 1024-thread blocks, and a ragged row
def test_rms_norm(device, rng, dtype, offset, mbc, d):
    ref = DeviceRef.from_device(device)
    x = rng.standard_normal((5, 3, d)).astype(NP[dtype])
    w = rng.standard_normal(d).astype(NP[dtype])
    g = Graph(
        "rms",
        lambda a, b: kernels.rms_norm(a, b, 1e-5, weight_offset=offset, multiply_before_cast=mbc),
        input_types=[TensorType(dtype, x.shape, ref), TensorType(dtype, w.shape, ref)],
    )
    out = _session(device).load(g).execute(_buf(x, device), _buf(w, device))[0].to_numpy()
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + 1e-5) * (w.astype(np.float64) + offset)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=TOL[dtype] * 2, atol=TOL[dtype] * 2)


def _freqs(positions: int, rot: int, theta: float = 10000.0) -> np.ndarray:
    inv = 1.0 / theta ** (np.arange(0, rot, 2) / rot)
    ang = np.outer(np.arange(positions), inv)
    return np.stack([np.cos(ang), np.sin(ang)], -1).reshape(positions, rot)


def _rope_ref(x, freqs, pos, interleaved):
    x = x.astype(np.float64)
    rot = freqs.shape[1]
    out = x.copy()
    c, s = freqs[pos, 0::2][:, None, :], freqs[pos, 1::2][:, None, :]
    if interleaved:
        a, b = x[..., 0:rot:2], x[..., 1:rot:2]
        out[..., 0:rot:2], out[..., 1:rot:2] = a * c - b * s, b * c + a * s
    else:
        a, b = x[..., : rot // 2], x[..., rot // 2 : rot]
        out[..., : rot // 2], out[..., rot // 2 : rot] = a * c - b * s, b * c + a * s
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("rot", [32, 24])
def test_rope(device, rng, dtype, interleaved, rot):
    ref = DeviceRef.from_device(device)
    x = rng.standard_normal((7, 3, 32)).astype(NP[dtype])
    freqs = _freqs(64, rot).astype(np.float32)
    pos = rng.integers(0, 64, size=7).astype(np.uint32)
    g = Graph(
        "rope",
        lambda a, f, p: kernels.rope(a, f, p, interleaved=interleaved),
        input_types=[
            TensorType(dtype, x.shape, ref),
            TensorType(DType.float32, freqs.shape, ref),
            TensorType(DType.uint32, pos.shape, ref),
        ],
    )
    out = _session(device).load(g).execute(_buf(x, device), _buf(freqs, device), _buf(pos, device))[0].to_numpy()
    want = _rope_ref(x, freqs.astype(np.float64), pos, interleaved)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=TOL[dtype] * 2, atol=TOL[dtype] * 2)


def _attention_ref(q, keys, values, lens, qlens, scale, mask, window, softcap, group):
    """q [T, Hq, D]; keys/values: per sequence [total, Hkv, D] arrays (float64)."""
    out = np.zeros(q.shape, np.float64)
    row = 0
    for b, (cached, n) in enumerate(zip(lens, qlens)):
        total = cached + n
        for i in range(n):
            pos = cached + i
            lo, hi = 0, pos + 1
            if mask == "sliding_window":
                lo = max(0, pos + 1 - window)
            if mask == "null":
                hi = total
            for h in range(q.shape[1]):
                kh = keys[b][lo:hi, h // group]
                vh = values[b][lo:hi, h // group]
                s = kh @ q[row, h].astype(np.float64) * scale
                if softcap:
                    s = softcap * np.tanh(s / softcap)
                p = np.exp(s - s.max())
                out[row, h] = (p / p.sum()) @ vh
            row += 1
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "mask,window,softcap", [("causal", None, 0.0), ("sliding_window", 5, 0.0), ("null", None, 0.0), ("causal", None, 2.0)]
)
def test_store_then_attend(device, rng, dtype, mask, window, softcap):
    """Two steps through one cache: a ragged prefill (with some sequences already holding
    tokens), then a decode of one token per sequence; pages are shuffled across sequences."""
    ref = DeviceRef.from_device(device)
    layers, ps, hkv, hq, d, pages = 2, 4, 2, 6, 16, 40
    layer = 1
    lens = [0, 3, 9]
    qlens = [5, 1, 6]
    width = 6
    perm = rng.permutation(pages).astype(np.uint32)
    table = perm[: 3 * width].reshape(3, width)
    np_t = NP[dtype]
    blocks = rng.standard_normal((pages, 2, layers, ps, hkv, d)).astype(np_t)
    # The tokens already cached, written through a first store.
    hist_k = [rng.standard_normal((n + 1 + qn, hkv, d)).astype(np_t) for n, qn in zip(lens, qlens)]
    hist_v = [rng.standard_normal((n + 1 + qn, hkv, d)).astype(np_t) for n, qn in zip(lens, qlens)]

    def slot(b, j):
        return table[b, j // ps] * ps + j % ps

    def graph():
        types = [
            BufferType(dtype, blocks.shape, ref),
            TensorType(dtype, ["t", hq, d], ref),
            TensorType(dtype, ["t", hkv, d], ref),
            TensorType(dtype, ["t", hkv, d], ref),
            TensorType(DType.uint32, ["t"], ref),
            TensorType(DType.uint32, ["b1"], ref),
            TensorType(DType.uint32, ["b"], ref),
            TensorType(DType.uint32, ["b", width], ref),
        ]

        def body(cache, q, k, v, slots, offsets, lengths, tab):
            kernels.kv_cache_store(cache, k, v, slots, layer)
            return kernels.paged_attention(
                q, cache, offsets, lengths, tab, layer=layer, scale=0.3, mask=mask, window=window, softcap=softcap
            )

        return Graph("attn", body, input_types=types)

    model = _session(device).load(graph())
    cache = _buf(blocks, device)
    # Write the history that precedes the first step with a step of its own (no queries used).
    pre_slots = np.array([slot(b, j) for b in range(3) for j in range(lens[b])], np.uint32)
    if len(pre_slots):
        pre_k = np.concatenate([hist_k[b][: lens[b]] for b in range(3)])
        pre_v = np.concatenate([hist_v[b][: lens[b]] for b in range(3)])
        zero_q = np.zeros((len(pre_slots), hq, d), np_t)
        offs = np.array([0, len(pre_slots)], np.uint32)
        model.execute(
            cache, _buf(zero_q, device), _buf(pre_k, device), _buf(pre_v, device), _buf(pre_slots, device),
            _buf(offs, device), _buf(np.zeros(1, np.uint32), device), _buf(table[:1] * 0 + table[2:3], device),
        )
    for step in range(2):
        if step == 0:
            cached, n = lens, qlens
        else:
            cached, n = [a + b for a, b in zip(lens, qlens)], [1, 1, 1]
        rows = [(b, j) for b in range(3) for j in range(cached[b], cached[b] + n[b])]
        k = np.stack([hist_k[b][j] for b, j in rows])
        v = np.stack([hist_v[b][j] for b, j in rows])
        q = rng.standard_normal((len(rows), hq, d)).astype(np_t)
        slots = np.array([slot(b, j) for b, j in rows], np.uint32)
        offsets = np.concatenate([[0], np.cumsum(n)]).astype(np.uint32)
        out = model.execute(
            cache, _buf(q, device), _buf(k, device), _buf(v, device), _buf(slots, device),
            _buf(offsets, device), _buf(np.array(cached, np.uint32), device), _buf(table, device),
        )[0].to_numpy()
        keys = [hist_k[b][: cached[b] + n[b]].astype(np.float64) for b in range(3)]
        values = [hist_v[b][: cached[b] + n[b]].astype(np.float64) for b in range(3)]
        want = _attention_ref(q, keys, values, cached, n, 0.3, mask, window, softcap, hq // hkv)
        np.testing.assert_allclose(out.astype(np.float64), want, rtol=TOL[dtype] * 3, atol=TOL[dtype] * 3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask,window", [("causal", None), ("sliding_window", 3), ("sliding_window", 300)])
@pytest.mark.parametrize(
    "hkv,hq,d,lens",
    [(1, 4, 64, [2900]), (2, 6, 64, [1800, 5, 700]), (2, 16, 128, [300, 4100]), (1, 12, 64, [500, 40])],
)
def test_decode_over_long_caches(device, rng, dtype, mask, window, hkv, hq, d, lens):
    """One new token per sequence against caches of thousands of tokens: enough work that a
    device may split each head's keys into shares and combine them (shares with no visible key
    under a short sliding window included); head dims 64 and 128, 3 to 12 query heads per kv
    head (the GPU's decode form takes up to 8, the general form the rest)."""
    ref = DeviceRef.from_device(device)
    ps, layers = 64, 1
    width = max(lens) // ps + 1
    pages = len(lens) * width
    table = rng.permutation(pages).astype(np.uint32).reshape(len(lens), width)
    np_t = NP[dtype]
    blocks = rng.standard_normal((pages, 2, layers, ps, hkv, d)).astype(np_t)
    types = [
        TensorType(dtype, ["t", hq, d], ref),
        BufferType(dtype, blocks.shape, ref),
        TensorType(DType.uint32, ["b1"], ref),
        TensorType(DType.uint32, ["b"], ref),
        TensorType(DType.uint32, ["b", width], ref),
    ]

    def body(q, cache, offsets, lengths, tab):
        return kernels.paged_attention(q, cache, offsets, lengths, tab, layer=0, scale=0.125, mask=mask, window=window)

    model = _session(device).load(Graph("decode", body, input_types=types))
    q = rng.standard_normal((len(lens), hq, d)).astype(np_t)
    offsets = np.arange(len(lens) + 1, dtype=np.uint32)
    out = model.execute(
        _buf(q, device), _buf(blocks, device), _buf(offsets, device), _buf(np.array(lens, np.uint32), device),
        _buf(table, device),
    )[0].to_numpy()

    def rows(b, kv):
        n = lens[b] + 1
        return np.concatenate([blocks[table[b, p], kv, 0] for p in range(n // ps + 1)])[:n].astype(np.float64)

    keys = [rows(b, 0) for b in range(len(lens))]
    values = [rows(b, 1) for b in range(len(lens))]
    want = _attention_ref(q, keys, values, lens, [1] * len(lens), 0.125, mask, window, 0.0, hq // hkv)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=TOL[dtype] * 3, atol=TOL[dtype] * 3)


def test_attention_errors_name_the_argument():
    ref = DeviceRef.CPU()
    with pytest.raises(ValueError, match="paged_attention: mask: unknown mask"):
        Graph(
            "bad",
            lambda c, q, o, l, t: kernels.paged_attention(q, c, o, l, t, layer=0, scale=1.0, mask="full"),
            input_types=[
                BufferType(DType.float32, [4, 2, 1, 8, 1, 4], ref),
                TensorType(DType.float32, ["t", 2, 4], ref),
                TensorType(DType.uint32, ["b1"], ref),
                TensorType(DType.uint32, ["b"], ref),
                TensorType(DType.uint32, ["b", 2], ref),
            ],
        )
    with pytest.raises(TypeError, match="rope: positions: must be uint32"):
        Graph(
            "bad",
            lambda x, f, p: kernels.rope(x, f, p),
            input_types=[
                TensorType(DType.float32, [3, 2, 8], ref),
                TensorType(DType.float32, [16, 8], ref),
                TensorType(DType.int64, [3], ref),
            ],
        )
