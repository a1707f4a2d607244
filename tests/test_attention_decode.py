"""paged_attention's decode form on the GPU (attention_decode.cu) against numpy float64, on
fresh random caches: every dtype (f32 rows on the tensor cores, read as bf16, and on the CUDA
cores), query heads per kv head of 1 to 8 (the kernel's head groups
and the padded ones), head dims 16 to 256, page sizes that are and are not powers of two,
contexts that are not whole steps or pages, sequences of very different lengths in one batch,
lookup tables much wider than any sequence, every mask and softcap, short multi-row chunks,
CUDA-graph replays whose lengths change between calls, page sizes down to 1 token (the
tensor-core kernel's windows of page ids), splits that end inside pages or hold a few keys, and
page ids or lengths that point outside the cache (skipped, never read). Skips without a GPU."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from max import driver, engine, tuning
from max.dtype import DType
from max.graph import BufferType, DeviceRef, Graph, TensorType
from max.nn import kernels

pytestmark = pytest.mark.gpu

NP = {DType.float32: np.float32, DType.float16: np.float16, DType.bfloat16: ml_dtypes.bfloat16}
TOL = {DType.float32: 1e-4, DType.float16: 6e-3, DType.bfloat16: 4e-2}


def _tol(dtype, d, f32_mma=True):
    """The bound for `dtype` rows of `d` dims: f32 rows of whole k steps up to 128 dims that may
    be read as bf16 (`f32_as_bf16`, `f32_mma`) run on the tensor cores, their query, keys and
    values rounded to bf16 as they are read: bf16's bound."""
    if dtype == DType.float32 and f32_mma and d % 16 == 0 and d <= 128:
        return TOL[DType.bfloat16]
    return TOL[dtype]
DTYPES = list(NP)
BAD = 0xFFFFFFFF


def _reference(q, keys, values, cached, qlens, scale, mask, window, softcap, group, visible=None):
    """q [T, Hq, D]; keys/values[b]: [positions, Hkv, D] float64; visible[b]: bool [positions]
    (False: the key's page is bad, so it is skipped)."""
    out = np.zeros(q.shape, np.float64)
    hkv = q.shape[1] // group
    row = 0
    for b, (c, n) in enumerate(zip(cached, qlens)):
        k, v = keys[b], values[b]  # [positions, Hkv, D]
        for i in range(n):
            pos = c + i
            lo, hi = 0, min(pos + 1, c + n)
            if mask == "sliding_window":
                lo = max(0, pos + 1 - window)
            if mask == "null":
                hi = c + n
            hi = min(hi, len(k))
            keep = np.arange(lo, hi)
            if visible is not None:
                keep = keep[visible[b][lo:hi]]
            if len(keep):
                qg = q[row].astype(np.float64).reshape(hkv, group, -1)
                s = np.einsum("nkd,kgd->kgn", k[keep], qg) * scale
                if softcap:
                    s = softcap * np.tanh(s / softcap)
                p = np.exp(s - s.max(-1, keepdims=True))
                p /= p.sum(-1, keepdims=True)
                out[row] = np.einsum("kgn,nkd->kgd", p, v[keep]).reshape(q.shape[1], -1)
            row += 1
    return out


class Case:
    """A paged cache holding `totals[b]` positions of each sequence on shuffled pages, with a
    lookup table `width` pages wide (its unused entries BAD)."""

    def __init__(self, rng, dtype, hkv, d, ps, totals, width, layers=2, layer=1, spare=3):
        self.ps, self.width, self.layer = ps, width, layer
        used = [-(-t // ps) for t in totals]
        pages = sum(used) + spare
        perm = rng.permutation(pages).astype(np.uint32)
        self.table = np.full((len(totals), width), BAD, np.uint32)
        at = 0
        for b, u in enumerate(used):
            self.table[b, :u] = perm[at : at + u]
            at += u
        self.blocks = rng.standard_normal((pages, 2, layers, ps, hkv, d), dtype=np.float32).astype(NP[dtype])

    def rows(self, b, which, n):
        """Positions 0..n of sequence b (keys: which=0, values: 1), float64, [n, Hkv, D]."""
        pages = [self.table[b, p] for p in range(-(-n // self.ps))]
        got = [self.blocks[p if p != BAD else 0, which, self.layer] for p in pages]
        return np.concatenate(got)[:n].astype(np.float64) if got else np.zeros((0,) + self.blocks.shape[4:])


def _model(gpu, dtype, hq, case, mask, window, softcap, scale, f32_as_bf16=True):
    ref = DeviceRef.from_device(gpu)
    types = [
        TensorType(dtype, ["t", hq, case.blocks.shape[-1]], ref),
        BufferType(dtype, case.blocks.shape, ref),
        TensorType(DType.uint32, ["b1"], ref),
        TensorType(DType.uint32, ["b"], ref),
        TensorType(DType.uint32, ["b", case.width], ref),
    ]

    def body(q, cache, offsets, lengths, table):
        return kernels.paged_attention(q, cache, offsets, lengths, table, layer=case.layer, scale=scale, mask=mask,
                                       window=window, softcap=softcap, f32_as_bf16=f32_as_bf16)

    return engine.InferenceSession(devices=[driver.CPU(), gpu]).load(Graph("decode", body, input_types=types))


def _run(model, gpu, q, case, cached, qlens, table=None):
    up = lambda a: driver.Buffer.from_numpy(np.ascontiguousarray(a)).to(gpu)  # noqa: E731
    offsets = np.concatenate([[0], np.cumsum(qlens)]).astype(np.uint32)
    with tuning.record_launches() as log:
        out = model.execute(
            up(q), up(case.blocks), up(offsets), up(np.array(cached, np.uint32)),
            up(case.table if table is None else table),
        )[0].to_numpy()
    return out.astype(np.float64), log


def _check(gpu, rng, dtype, hkv, hq, d, ps, cached, qlens, width, mask="causal", window=None, softcap=0.0, layers=2,
           f32_mma=True, tol=None):
    totals = [c + n for c, n in zip(cached, qlens)]
    case = Case(rng, dtype, hkv, d, ps, totals, width, layers=layers, layer=layers - 1)
    scale = d**-0.5
    model = _model(gpu, dtype, hq, case, mask, window, softcap, scale, f32_as_bf16=f32_mma)
    q = rng.standard_normal((sum(qlens), hq, d)).astype(NP[dtype])
    out, log = _run(model, gpu, q, case, cached, qlens)
    keys = [case.rows(b, 0, t) for b, t in enumerate(totals)]
    values = [case.rows(b, 1, t) for b, t in enumerate(totals)]
    want = _reference(q, keys, values, cached, qlens, scale, mask, window, softcap, hq // hkv)
    tol = tol or _tol(dtype, d, f32_mma)
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)
    return log


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "hkv,hq,d,ps",
    [
        (8, 32, 128, 16),  # Llama-3-8B: 4 query heads per kv head
        (3, 9, 64, 64),  # SmolLM2-135M: 3, run by the kernel of 4
        (4, 4, 64, 5),  # 1 (multi-head), pages of 5 tokens
        (4, 8, 32, 128),  # 2, dim 32
        (2, 14, 128, 16),  # 7, run by the kernel of 8
        (1, 8, 256, 64),  # 8, dim 256 (a warp a 16-bit row; the general form for float32)
        (2, 4, 16, 16),  # 2, dim 16 (one k step)
    ],
)
def test_decode_over_very_different_lengths(gpu, rng, dtype, hkv, hq, d, ps):
    """One token per sequence; lengths from 0 to past a thousand, none a whole step or page,
    with a table wide enough for 4k tokens (most splits of the short sequences find nothing)."""
    cached = [0, 46, 301, 1013, 5]
    log = _check(gpu, rng, dtype, hkv, hq, d, ps, cached, [1] * len(cached), width=-(-4100 // ps))
    if not (dtype == DType.float32 and d == 256):
        kernel = log.last("attention")["kernel"]
        assert kernel.startswith("paged_decode_mma_" if d % 16 == 0 else "paged_decode_"), kernel
    if dtype == DType.float32 and d < 256:
        # f32 attention not allowed to read bf16: the CUDA-core f32 kernels, exact to f32's bound
        log = _check(gpu, rng, dtype, hkv, hq, d, ps, cached, [1] * len(cached), width=-(-4100 // ps),
                     f32_mma=False)
        assert log.last("attention")["kernel"].startswith("paged_decode_f32"), log.last("attention")
        with tuning.override("attention.decode_f32_mma=0"):  # and with the knob off
            log = _check(gpu, rng, dtype, hkv, hq, d, ps, cached[:2], [1, 1], width=-(-4100 // ps), tol=TOL[dtype])
        assert log.last("attention")["kernel"].startswith("paged_decode_f32"), log.last("attention")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "mask,window,softcap",
    [("causal", None, 0.0), ("sliding_window", 7, 0.0), ("sliding_window", 300, 0.0), ("null", None, 0.0),
     ("causal", None, 5.0)],
)
def test_short_chunks_every_mask(gpu, rng, dtype, mask, window, softcap):
    """Ragged multi-row chunks (a few new tokens per sequence over caches of 0 to ~900)."""
    _check(gpu, rng, dtype, 8, 32, 128, 16, [0, 200, 37, 900], [3, 1, 7, 2], width=80, mask=mask, window=window,
           softcap=softcap)


@pytest.mark.parametrize("splits", ["", "1", "3", "64"])
def test_long_contexts_and_the_split_knob(gpu, rng, splits):
    """Contexts of 4k-16k against one short one, whatever the most splits allowed."""
    spec = f"attention.splits={splits}" if splits else ""
    with tuning.override(spec):
        _check(gpu, rng, DType.bfloat16, 8, 32, 128, 64, [16383, 4095, 70, 9000], [1, 1, 1, 1], width=260, layers=1)


@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float16, DType.float32])
@pytest.mark.parametrize("ps", [1, 3, 16])
@pytest.mark.parametrize("splits", ["1", ""])
def test_page_id_windows_and_split_edges(gpu, rng, dtype, ps, splits):
    """Small pages under one split: each warp walks past many 32-page windows of page ids and
    its tiles straddle their ends. With the default splits a lone long sequence takes tens of
    splits whose edges fall inside pages, the last one a few keys that leave warps empty."""
    with tuning.override(f"attention.splits={splits}" if splits else ""):
        _check(gpu, rng, dtype, 8, 32, 128, ps, [2047, 1, 0, 613], [1, 1, 1, 1], width=-(-2100 // ps), layers=1)
        _check(gpu, rng, dtype, 2, 8, 64, ps, [4999], [1], width=-(-5000 // ps), layers=1)


def test_graph_replays_follow_the_lengths(gpu, rng):
    """A captured CUDA graph keeps its grid; the lengths it reads change on every call."""
    hkv, hq, d, ps, width = 8, 32, 128, 16, 256
    case = Case(rng, DType.bfloat16, hkv, d, ps, [width * ps] * 2, width, layers=1, layer=0)
    model = _model(gpu, DType.bfloat16, hq, case, "causal", None, 0.0, d**-0.5)
    with tuning.override(cuda_graphs="always"):
        for cached in ([3, 4000], [700, 1], [4095, 65], [128, 2048]):
            q = rng.standard_normal((2, hq, d)).astype(ml_dtypes.bfloat16)
            out, _ = _run(model, gpu, q, case, cached, [1, 1])
            keys = [case.rows(b, 0, c + 1) for b, c in enumerate(cached)]
            values = [case.rows(b, 1, c + 1) for b, c in enumerate(cached)]
            want = _reference(q, keys, values, cached, [1, 1], d**-0.5, "causal", None, 0.0, hq // hkv)
            np.testing.assert_allclose(out, want, rtol=TOL[DType.bfloat16], atol=TOL[DType.bfloat16])


@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float32])
def test_bad_pages_and_lengths_are_skipped(gpu, rng, dtype):
    """Page ids past the cache inside a sequence skip their keys; a length past the lookup
    table reads only the keys the table holds; neither faults."""
    hkv, hq, d, ps, width = 8, 32, 128, 16, 40
    cached = [500, 300, 10000]  # the last is longer than the table (640 keys)
    case = Case(rng, dtype, hkv, d, ps, [501, 301, width * ps], width)
    table = case.table.copy()
    table[0, 3] = BAD  # keys 48..63 of sequence 0
    table[1, 7] = len(case.blocks) + 5  # keys 112..127 of sequence 1
    scale = d**-0.5
    model = _model(gpu, dtype, hq, case, "causal", None, 0.0, scale)
    q = rng.standard_normal((3, hq, d)).astype(NP[dtype])
    out, _ = _run(model, gpu, q, case, cached, [1, 1, 1], table=table)
    totals = [501, 301, width * ps]
    keys = [case.rows(b, 0, t) for b, t in enumerate(totals)]
    values = [case.rows(b, 1, t) for b, t in enumerate(totals)]
    visible = [np.ones(t, bool) for t in totals]
    visible[0][48:64] = False
    visible[1][112:128] = False
    want = _reference(q, keys, values, cached, [1, 1, 1], scale, "causal", None, 0.0, hq // hkv, visible)
    np.testing.assert_allclose(out, want, rtol=_tol(dtype, d), atol=_tol(dtype, d))


@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float32])
@pytest.mark.parametrize("made_lengths", [False, True])
@pytest.mark.parametrize("ps,width,splits", [(16, 64, ""), (1, 1100, "1")])
def test_index_inputs_read_before_the_wait(gpu, rng, dtype, made_lengths, ps, width, splits):
    """After a kernel of its program (here the query's), an attention whose row offsets, cache
    lengths and lookup table are program inputs reads them before it waits for that kernel;
    lengths a kernel of the program makes are read after it. Replayed as a CUDA graph whose
    inputs change between calls (each replay's inputs are staged before it). Pages of one token
    under one split: a sequence's page ids span two windows (the first staged before the wait,
    the second in the key loop)."""
    hkv, hq, d = 8, 32, 128
    case = Case(rng, dtype, hkv, d, ps, [width * ps] * 2, width, layers=1, layer=0)
    ref = DeviceRef.from_device(gpu)
    types = [
        TensorType(dtype, [2, hq, d], ref),
        BufferType(dtype, case.blocks.shape, ref),
        TensorType(DType.uint32, [3], ref),
        TensorType(DType.uint32, [2], ref),
        TensorType(DType.uint32, [2, width], ref),
    ]

    def body(q, cache, offsets, lengths, table):
        q = q * 2  # a kernel before the attention
        if made_lengths:
            lengths = lengths + 0
        # (f32: the tensor-core kernel with pages of 16, the CUDA-core one with pages of 1)
        return kernels.paged_attention(q, cache, offsets, lengths, table, layer=0, scale=d**-0.5,
                                       f32_as_bf16=ps == 16)

    session = engine.InferenceSession(devices=[driver.CPU(), gpu])
    model = session.load(Graph("decode_early", body, input_types=types))
    launches = []  # the stepwise first call's and the capture's (replays launch nothing)
    with tuning.override("attention.splits=" + splits if splits else None, cuda_graphs="always"):
        for cached in ([3, 1000], [700, 1], [1023, 65], [128, 512]):
            q = rng.standard_normal((2, hq, d)).astype(NP[dtype])
            out, log = _run(model, gpu, q, case, cached, [1, 1])
            launches += log.records("attention")
            keys = [case.rows(b, 0, c + 1) for b, c in enumerate(cached)]
            values = [case.rows(b, 1, c + 1) for b, c in enumerate(cached)]
            want = _reference(q * 2, keys, values, cached, [1, 1], d**-0.5, "causal", None, 0.0, hq // hkv)
            tol = _tol(dtype, d, ps == 16)
            np.testing.assert_allclose(out, want, rtol=tol, atol=tol)
    assert launches and all(r["early"] == (0 if made_lengths else 1) for r in launches), launches
