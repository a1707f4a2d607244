"""paged_attention's tensor-core prefill kernels against numpy float64 on fresh random inputs:
ragged batches mixing 1-row sequences with long ones (row counts that are not multiples of 64
or 128, cached prefixes of every size), GQA 4:1 and 1:1, head dims 64 and 128, pages of
16/64/128 tokens in random order, every mask, softcap, bf16, f16 and f32 read as bf16
(`f32_as_bf16`: the kernel rounds Q, K and V to bf16 as it stages them: the mma.sync kernel's f32
form whatever the knobs; without it f32 prompts keep f32 products on the decode kernels). Every case runs three
times (`kernel`): with the default choice (the wgmma kernel of attention_prefill_sm90.cu on an
sm_90a GPU, attention_prefill.cu's mma.sync kernel elsewhere), with attention.prefill_wgmma=0
(the mma.sync kernel everywhere) and with attention.prefill_pingpong=1 (the wgmma kernel's
ping-pong form on sm_90a), and checks from the launch log which kernel ran; with pages of a
multiple of 64 keys the wgmma kernel loads K and V by TMA, and the cases of such pages also run
with attention.prefill_tma=0 (`cpasync`: its cp.async producer), the log telling which producer
ran. Every test skips without a GPU."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from max import driver, engine, tuning
from max.dtype import DType
from max.graph import BufferType, DeviceRef, Graph, TensorType
from max.nn import kernels

pytestmark = pytest.mark.gpu

NP = {DType.float16: np.float16, DType.bfloat16: ml_dtypes.bfloat16, DType.float32: np.float32}
# P is rounded to the 16-bit type before P V (as FlashAttention does), on top of the output's
# own rounding: bounds relative to the largest output magnitude. f32 runs the bf16 products
# (Q, K and V rounded to bf16 as the kernel stages them; the output stays f32).
TOL = {DType.float16: 4e-3, DType.bfloat16: 2.5e-2, DType.float32: 2.5e-2}


def reference(q, keys, values, seqs, scale, mask, window, softcap, group):
    """q [T, Hq, D] float64; keys/values: per sequence [total, Hkv, D] float64; seqs: (cached,
    rows) per sequence. The visible keys of a query at pos are Mask::range's."""
    out = np.zeros(q.shape, np.float64)
    row = 0
    for b, (cached, n) in enumerate(seqs):
        total = cached + n
        pos = cached + np.arange(n)
        j = np.arange(total)
        hi = np.full(n, total) if mask == "null" else pos + 1
        lo = np.maximum(0, pos + 1 - window) if mask == "sliding_window" else np.zeros(n, np.int64)
        visible = (j[None, :] >= lo[:, None]) & (j[None, :] < hi[:, None])
        for h in range(q.shape[1]):
            s = q[row : row + n, h] @ keys[b][:, h // group].T * scale
            if softcap:
                s = softcap * np.tanh(s / softcap)
            s = np.where(visible, s, -np.inf)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            out[row : row + n, h] = (p / p.sum(axis=1, keepdims=True)) @ values[b][:, h // group]
        row += n
    return out


KERNELS = ["default", "mma", "pingpong"]
# With the cp.async producer forced (the same kernels): for pages that TMA would otherwise load.
KERNELS_TMA = [*KERNELS, "cpasync"]
SPECS = {
    "default": "",
    "mma": ",attention.prefill_wgmma=0",
    "pingpong": ",attention.prefill_pingpong=1",
    "cpasync": ",attention.prefill_tma=0",
    "f32off": ",attention.prefill_f32=0,attention.decode_f32_mma=0",
}


def attend(
    gpu, rng, dtype, seqs, *, hkv, hq, d, ps, kernel, mask="causal", window=None, softcap=0.0, layers=2, layer=1,
    f32_as_bf16=True,
):
    """Runs paged_attention over a cache holding `seqs` (cached, rows) with pages shuffled
    across sequences, on the prefill kernel `kernel` picks (see KERNELS); returns (got, want,
    launch log)."""
    width = max(c + n for c, n in seqs) // ps + 2
    pages = len(seqs) * width + 3
    table = rng.permutation(pages)[: len(seqs) * width].astype(np.uint32).reshape(len(seqs), width)
    np_t = NP[dtype]
    blocks = rng.standard_normal((pages, 2, layers, ps, hkv, d)).astype(np_t)
    tokens = sum(n for _, n in seqs)
    q = rng.standard_normal((tokens, hq, d)).astype(np_t)
    offsets = np.concatenate([[0], np.cumsum([n for _, n in seqs])]).astype(np.uint32)
    lengths = np.array([c for c, _ in seqs], np.uint32)
    scale = 1.0 / np.sqrt(d)

    ref = DeviceRef.from_device(gpu)
    types = [
        TensorType(dtype, ["t", hq, d], ref),
        BufferType(dtype, blocks.shape, ref),
        TensorType(DType.uint32, ["b1"], ref),
        TensorType(DType.uint32, ["b"], ref),
        TensorType(DType.uint32, ["b", width], ref),
    ]

    def body(q, cache, offsets, lengths, tab):
        return kernels.paged_attention(
            q, cache, offsets, lengths, tab, layer=layer, scale=scale, mask=mask, window=window, softcap=softcap,
            f32_as_bf16=f32_as_bf16 and dtype is DType.float32,
        )

    graph = Graph("prefill", body, input_types=types)
    with tuning.override("attention.prefill_rows=1" + SPECS[kernel], cuda_graphs="off"):
        model = engine.InferenceSession(devices=[driver.CPU(), gpu]).load(graph)
        args = [driver.Buffer.from_numpy(np.ascontiguousarray(x)).to(gpu) for x in (q, blocks, offsets, lengths, table)]
        with tuning.record_launches() as log:
            got = model.execute(*args)[0].to_numpy().astype(np.float64)

    def rows(b, kv):
        n = seqs[b][0] + seqs[b][1]
        return np.concatenate([blocks[table[b, p], kv, layer] for p in range(n // ps + 1)])[:n].astype(np.float64)

    keys = [rows(b, 0) for b in range(len(seqs))]
    values = [rows(b, 1) for b in range(len(seqs))]
    want = reference(q.astype(np.float64), keys, values, seqs, scale, mask, window, softcap, hq // hkv)
    return got, want, log


def check(got, want, log, dtype, d, gpu, kernel, ps, softcap=0.0):
    ty = {DType.bfloat16: "bf16", DType.float16: "f16", DType.float32: "f32"}[dtype]
    if dtype is DType.float32:  # the mma.sync kernel's f32 form on every GPU
        name = f"attention_prefill_d{d}_f32"
    elif kernel != "mma" and gpu.architecture_name == "sm_90a":
        form = "_cap" if softcap else "_pp" if kernel == "pingpong" else ""
        name = f"attention_prefill_sm90_d{d}_{ty}{form}"
    else:
        name = f"attention_prefill_d{d}_{ty}"
    assert [r["kernel"] for r in log.records("attention_prefill")] == [name]
    if name.startswith("attention_prefill_sm90"):
        # The TMA producer for pages of a multiple of 64 keys, unless forced off.
        tma = kernel != "cpasync" and ps % 64 == 0
        assert [r["tma"] for r in log.records("attention_prefill")] == [int(tma)]
    assert np.isfinite(got).all()
    err = np.abs(got - want).max()
    assert err <= TOL[dtype] * np.abs(want).max(), f"max error {err}"


RAGGED = [
    [(0, 200), (37, 1), (500, 64), (5, 130), (0, 1), (70, 63)],
    [(0, 1), (1000, 65), (3, 1), (0, 129)],
    # Whole and broken 128-row tiles (the wgmma kernel's), at offsets that are not multiples of 128.
    [(0, 128), (130, 256), (7, 127), (0, 1), (300, 383)],
]


@pytest.mark.parametrize("kernel", KERNELS_TMA)
@pytest.mark.parametrize("dtype", list(NP))
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("hkv,hq", [(2, 8), (4, 4)])
@pytest.mark.parametrize("ps", [16, 64, 128])
@pytest.mark.parametrize("seqs", RAGGED)
def test_causal_ragged(gpu, rng, kernel, dtype, d, hkv, hq, ps, seqs):
    if kernel == "cpasync" and ps % 64:
        pytest.skip("the cp.async producer is the default for these pages")
    got, want, log = attend(gpu, rng, dtype, seqs, hkv=hkv, hq=hq, d=d, ps=ps, kernel=kernel)
    check(got, want, log, dtype, d, gpu, kernel, ps)


@pytest.mark.parametrize("kernel", KERNELS_TMA)
@pytest.mark.parametrize("dtype", list(NP))
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("hkv,hq", [(2, 8), (4, 4)])
@pytest.mark.parametrize("ps", [16, 128])
@pytest.mark.parametrize("seqs", RAGGED)
def test_null_ragged(gpu, rng, kernel, dtype, d, hkv, hq, ps, seqs):
    if kernel == "cpasync" and ps % 64:
        pytest.skip("the cp.async producer is the default for these pages")
    got, want, log = attend(gpu, rng, dtype, seqs, hkv=hkv, hq=hq, d=d, ps=ps, kernel=kernel, mask="null")
    check(got, want, log, dtype, d, gpu, kernel, ps)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", list(NP))
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("ps", [16, 64])
@pytest.mark.parametrize(
    "mask,window,softcap",
    [("sliding_window", 1, 0.0), ("sliding_window", 50, 0.0), ("sliding_window", 200, 0.0), ("null", None, 0.0),
     ("causal", None, 5.0), ("null", None, 3.0)],
)
def test_masks_and_softcap(gpu, rng, kernel, dtype, d, ps, mask, window, softcap):
    seqs = [(0, 300), (90, 1), (150, 77), (0, 64)]
    got, want, log = attend(
        gpu, rng, dtype, seqs, hkv=2, hq=8, d=d, ps=ps, kernel=kernel, mask=mask, window=window, softcap=softcap
    )
    check(got, want, log, dtype, d, gpu, kernel, ps, softcap)


@pytest.mark.parametrize("kernel", KERNELS_TMA)
@pytest.mark.parametrize("dtype", list(NP))
@pytest.mark.parametrize("mask", ["causal", "null"])
def test_one_long_prompt_after_a_long_prefix(gpu, rng, kernel, dtype, mask):
    """An 8B-shaped chunk: 1000 new rows after 3000 cached keys, 32 query heads over 8."""
    got, want, log = attend(
        gpu, rng, dtype, [(3000, 1000)], hkv=8, hq=32, d=128, ps=128, kernel=kernel, mask=mask, layers=1, layer=0
    )
    check(got, want, log, dtype, 128, gpu, kernel, 128)


@pytest.mark.parametrize("kernel", KERNELS_TMA)
@pytest.mark.parametrize("ps", [16, 64])
def test_pages_past_the_cache_are_skipped(gpu, rng, kernel, ps):
    """Table entries past the cache's pages: their keys are left out (as attention.cu does), and
    a row that sees no other key stores 0."""
    if kernel == "cpasync" and ps % 64:
        pytest.skip("the cp.async producer is the default for these pages")
    seqs = [(0, 300), (200, 70)]
    hkv, hq, d = 2, 8, 128
    np_t = NP[DType.bfloat16]
    width = 40
    pages = 2 * width
    table = rng.permutation(pages).astype(np.uint32).reshape(2, width)
    table[0, 0] = pages + 5  # sequence 0's first page of keys: no page
    table[1, 3 * 16 // ps] = 0xFFFFFFFF  # keys 48..63 of sequence 1 (and the rest of its page): no page
    blocks = rng.standard_normal((pages, 2, 1, ps, hkv, d)).astype(np_t)
    tokens = sum(n for _, n in seqs)
    q = rng.standard_normal((tokens, hq, d)).astype(np_t)
    offsets = np.array([0, 300, 370], np.uint32)
    lengths = np.array([0, 200], np.uint32)
    ref = DeviceRef.from_device(gpu)
    types = [
        TensorType(DType.bfloat16, ["t", hq, d], ref),
        BufferType(DType.bfloat16, blocks.shape, ref),
        TensorType(DType.uint32, ["b1"], ref),
        TensorType(DType.uint32, ["b"], ref),
        TensorType(DType.uint32, ["b", width], ref),
    ]
    graph = Graph(
        "missing",
        lambda q_, c, o, l, t: kernels.paged_attention(q_, c, o, l, t, layer=0, scale=d**-0.5),
        input_types=types,
    )
    with tuning.override("attention.prefill_rows=1" + SPECS[kernel], cuda_graphs="off"):
        model = engine.InferenceSession(devices=[driver.CPU(), gpu]).load(graph)
        args = [driver.Buffer.from_numpy(np.ascontiguousarray(x)).to(gpu) for x in (q, blocks, offsets, lengths, table)]
        with tuning.record_launches() as log:
            got = model.execute(*args)[0].to_numpy().astype(np.float64)
    want = np.zeros(got.shape)
    row = 0
    for b, (cached, n) in enumerate(seqs):
        total = cached + n
        keys = np.zeros((total, hkv, d))
        values = np.zeros((total, hkv, d))
        has = np.zeros(total, bool)
        for j in range(total):
            page = int(table[b, j // ps])
            if page < pages:
                keys[j], values[j], has[j] = blocks[page, 0, 0, j % ps], blocks[page, 1, 0, j % ps], True
        for i in range(n):
            vis = has & (np.arange(total) <= cached + i)
            for h in range(hq):
                if not vis.any():
                    continue
                s = keys[vis, h // (hq // hkv)] @ q[row + i, h].astype(np.float64) * d**-0.5
                p = np.exp(s - s.max())
                want[row + i, h] = p @ values[vis, h // (hq // hkv)] / p.sum()
        row += n
    check(got, want, log, DType.bfloat16, d, gpu, kernel, ps)


def test_decode_batches_keep_the_decode_kernels(gpu, rng):
    """One row per sequence stays on attention.cu under the default threshold."""
    ref = DeviceRef.from_device(gpu)
    types = [
        TensorType(DType.bfloat16, ["t", 8, 64], ref),
        BufferType(DType.bfloat16, (8, 2, 1, 16, 2, 64), ref),
        TensorType(DType.uint32, ["b1"], ref),
        TensorType(DType.uint32, ["b"], ref),
        TensorType(DType.uint32, ["b", 2], ref),
    ]
    graph = Graph(
        "decode",
        lambda q, c, o, l, t: kernels.paged_attention(q, c, o, l, t, layer=0, scale=0.125),
        input_types=types,
    )
    q = rng.standard_normal((4, 8, 64)).astype(ml_dtypes.bfloat16)
    blocks = rng.standard_normal((8, 2, 1, 16, 2, 64)).astype(ml_dtypes.bfloat16)
    inputs = (q, blocks, np.arange(5, dtype=np.uint32), np.full(4, 3, np.uint32), np.arange(8, dtype=np.uint32).reshape(4, 2))
    with tuning.override(cuda_graphs="off"):
        model = engine.InferenceSession(devices=[driver.CPU(), gpu]).load(graph)
        args = [driver.Buffer.from_numpy(np.ascontiguousarray(x)).to(gpu) for x in inputs]
        with tuning.record_launches() as log:
            model.execute(*args)
    assert log.records("attention_prefill") == []


def test_f32_prompts_without_the_bf16_staging(gpu, rng):
    """attention.prefill_f32=0 (and decode_f32_mma=0): f32 prompts that may read bf16 stay on the
    f32 decode kernels, to f32's precision."""
    got, want, log = attend(gpu, rng, DType.float32, RAGGED[0], hkv=2, hq=8, d=64, ps=16, kernel="f32off")
    assert log.records("attention_prefill") == []
    err = np.abs(got - want).max()
    assert err <= 1e-4 * np.abs(want).max(), f"max error {err}"


def test_f32_prompts_not_read_as_bf16_keep_f32(gpu, rng):
    """Without f32_as_bf16 f32 prompts stay on the f32 decode kernels whatever the knobs."""
    got, want, log = attend(gpu, rng, DType.float32, RAGGED[0], hkv=2, hq=8, d=128, ps=64, kernel="default",
                            f32_as_bf16=False)
    assert log.records("attention_prefill") == []
    err = np.abs(got - want).max()
    assert err <= 1e-4 * np.abs(want).max(), f"max error {err}"
