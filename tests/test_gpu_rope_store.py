"""An attention layer's ropes of q and k folded into its KV-cache store (engine/passes/
fuse_rope_store.rs; attention.cu's rope_kv_store): one launch instead of three on the GPU.
Checked: which steps the pass leaves (any machine); on a GPU, bf16 and f32 at 1-4 and 37 tokens,
both rope layouts, head dims 32 and 128 and partial rotary dims (the kernel's 16-byte form and
its element-wise one), rope(q) and the cache against numpy float64 and bit for bit against the
unfused graph (fusion.rope_store=0)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from max import _core, driver, engine, tuning
from max.dtype import DType
from max.graph import BufferType, DeviceRef, Graph, TensorType
from max.nn import kernels

GPU = DeviceRef.GPU()
NP = {DType.float32: np.float32, DType.bfloat16: ml_dtypes.bfloat16, DType.float16: np.float16}
PAGES, LAYERS, PAGE, HQ, HKV, D, NPOS = 6, 2, 8, 6, 2, 32, 64


def graph(dtype, rot_interleaved, device=GPU, d=D, freqs_dtype=DType.float32):
    types = [
        BufferType(dtype, [PAGES, 2, LAYERS, PAGE, HKV, d], device),
        TensorType(dtype, ["t", HQ, d], device),
        TensorType(dtype, ["t", HKV, d], device),
        TensorType(dtype, ["t", HKV, d], device),
        TensorType(freqs_dtype, [NPOS, "r"], device),
        TensorType(DType.uint32, ["t"], device),
        TensorType(DType.uint32, ["t"], device),
    ]

    def body(cache, q, k, v, freqs, positions, slots):
        q = kernels.rope(q, freqs, positions, interleaved=rot_interleaved)
        k = kernels.rope(k, freqs, positions, interleaved=rot_interleaved)
        kernels.kv_cache_store(cache, k, v, slots, 1)
        return q

    return Graph("rope_store", body, input_types=types)


def lowered(g):
    return [s for s in _core.engine._lowered_steps(g._ir) if s not in ("constant", "chain_create")]


def test_the_ropes_fold_into_the_gpu_store():
    assert lowered(graph(DType.bfloat16, False)) == ["kv_cache_store"]
    with tuning.override(**{"fusion.rope_store": False}):
        assert lowered(graph(DType.bfloat16, False)) == ["rope", "rope", "kv_cache_store"]
    assert lowered(graph(DType.bfloat16, False, DeviceRef.CPU())) == ["rope", "rope", "kv_cache_store"]


def rope_ref(x, freqs, pos, interleaved):
    """x [T, H, D] float64 rotated by rows `pos` of freqs [NPOS, rot] ((cos, sin) pairs)."""
    rot = freqs.shape[1]
    c, s = freqs[pos, 0::2][:, None, :], freqs[pos, 1::2][:, None, :]
    out = x.copy()
    if interleaved:
        a, b = x[..., 0:rot:2], x[..., 1:rot:2]
        out[..., 0:rot:2], out[..., 1:rot:2] = a * c - b * s, b * c + a * s
    else:
        a, b = x[..., : rot // 2], x[..., rot // 2 : rot]
        out[..., : rot // 2], out[..., rot // 2 : rot] = a * c - b * s, b * c + a * s
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("d, rot", [(D, 32), (D, 24), (128, 128), (128, 64)])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float32], ids=lambda d: d.name)
def test_rope_store_matches_float64_and_the_unfused_graph(rng, gpu, dtype, interleaved, d, rot):
    session = engine.InferenceSession(devices=[driver.CPU(), gpu])
    fused = session.load(graph(dtype, interleaved, d=d))
    with tuning.override(**{"fusion.rope_store": False}):
        plain = session.load(graph(dtype, interleaved, d=d))
    angles = rng.uniform(0, 2 * np.pi, (NPOS, rot // 2))
    freqs = np.stack([np.cos(angles), np.sin(angles)], -1).reshape(NPOS, rot).astype(np.float32)
    tol = 2.0**-7 if dtype is DType.bfloat16 else 1e-6
    for t in (1, 2, 3, 4, 37):
        q = rng.standard_normal((t, HQ, d)).astype(NP[dtype])
        k = rng.standard_normal((t, HKV, d)).astype(NP[dtype])
        v = rng.standard_normal((t, HKV, d)).astype(NP[dtype])
        pos = rng.integers(0, NPOS, t).astype(np.uint32)
        slots = rng.permutation(PAGES * PAGE)[:t].astype(np.uint32)
        blocks = rng.standard_normal((PAGES, 2, LAYERS, PAGE, HKV, d)).astype(NP[dtype])
        got = []
        for model in (fused, plain):
            cache = driver.Buffer.from_numpy(blocks.copy()).to(gpu)
            args = [driver.Buffer.from_numpy(np.ascontiguousarray(a)).to(gpu) for a in (q, k, v, freqs, pos, slots)]
            (q_out,) = model.execute(cache, *args)
            got.append((q_out.to_numpy(), cache.to(driver.CPU()).to_numpy()))
        (qa, ca), (qb, cb) = got
        bits = np.uint16 if dtype is DType.bfloat16 else np.uint32
        assert np.array_equal(qa.view(bits), qb.view(bits)), f"rope(q), t={t}"
        assert np.array_equal(ca.view(bits), cb.view(bits)), f"cache, t={t}"
        f64 = freqs.astype(np.float64)
        want_q = rope_ref(q.astype(np.float64), f64, pos, interleaved)
        np.testing.assert_allclose(qa.astype(np.float64), want_q, rtol=tol, atol=tol)
        want = blocks.astype(np.float64)
        keys = rope_ref(k.astype(np.float64), f64, pos, interleaved)
        for i, s in enumerate(slots):
            want[s // PAGE, 0, 1, s % PAGE] = keys[i]
            want[s // PAGE, 1, 1, s % PAGE] = v[i].astype(np.float64)
        np.testing.assert_allclose(ca.astype(np.float64), want, rtol=tol, atol=tol)


@pytest.mark.gpu
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float16, DType.float32], ids=lambda d: d.name)
def test_rope_store_pieces_at_the_edges(rng, gpu, dtype, interleaved):
    """The 16-byte form (recorded as vec=1) with a freqs table of the activations' type,
    positions past the table (NaN in the rotary dims, the rest passed through) and slots past
    the cache (k and v skipped, q still written): bit for bit the unfused graph's."""
    d, rot = 128, 64
    session = engine.InferenceSession(devices=[driver.CPU(), gpu])
    fused = session.load(graph(dtype, interleaved, d=d, freqs_dtype=dtype))
    with tuning.override(**{"fusion.rope_store": False}):
        plain = session.load(graph(dtype, interleaved, d=d, freqs_dtype=dtype))
    angles = rng.uniform(0, 2 * np.pi, (NPOS, rot // 2))
    freqs = np.stack([np.cos(angles), np.sin(angles)], -1).reshape(NPOS, rot).astype(NP[dtype])
    t = 9
    q = rng.standard_normal((t, HQ, d)).astype(NP[dtype])
    k = rng.standard_normal((t, HKV, d)).astype(NP[dtype])
    v = rng.standard_normal((t, HKV, d)).astype(NP[dtype])
    pos = rng.integers(0, NPOS, t).astype(np.uint32)
    pos[[2, 5]] = [NPOS, NPOS + 1000]
    slots = rng.permutation(PAGES * PAGE)[:t].astype(np.uint32)
    slots[[1, 5]] = [PAGES * PAGE, 2**32 - 1]
    blocks = rng.standard_normal((PAGES, 2, LAYERS, PAGE, HKV, d)).astype(NP[dtype])
    got = []
    for model in (fused, plain):
        cache = driver.Buffer.from_numpy(blocks.copy()).to(gpu)
        args = [driver.Buffer.from_numpy(np.ascontiguousarray(a)).to(gpu) for a in (q, k, v, freqs, pos, slots)]
        with tuning.record_launches() as log:
            (q_out,) = model.execute(cache, *args)
        got.append((q_out.to_numpy(), cache.to(driver.CPU()).to_numpy(), log))
    (qa, ca, log), (qb, cb, _) = got
    assert log.last("rope_kv_store")["vec"] == 1, log.records()
    bits = {DType.bfloat16: np.uint16, DType.float16: np.uint16, DType.float32: np.uint32}[dtype]
    assert np.array_equal(qa.view(bits), qb.view(bits)) and np.array_equal(ca.view(bits), cb.view(bits))
    assert np.isnan(qa[2, :, :rot].astype(np.float32)).all() and not np.isnan(qa[2, :, rot:].astype(np.float32)).any()
    assert np.array_equal(qa[2, :, rot:].view(bits), q[2, :, rot:].view(bits))
    untouched = np.ones(PAGES * PAGE, bool)
    untouched[slots[slots < PAGES * PAGE]] = False
    flat = lambda a: a[:, :, 1].transpose(0, 2, 1, 3, 4).reshape(PAGES * PAGE, 2, HKV, d)  # noqa: E731
    assert np.array_equal(flat(ca)[untouched].view(bits), flat(blocks)[untouched].view(bits))


def decode_layer(stores_before: bool):
    """A decoder layer's attention as the models stage it (rope_attention: q/k/v products, ropes,
    store, paged attention, output product) on GPU types; `stores_before`: q, k and v are inputs
    and another store into the same cache comes right before the layer's."""
    from max.graph import ops
    from max.nn.attention.attention_with_rope import rope_attention
    from max.nn.kv_cache.cache_params import PagedCacheValues

    bf, u32, hidden = DType.bfloat16, DType.uint32, HQ * D
    types = [
        TensorType(bf, ["t", hidden], GPU),
        BufferType(bf, [PAGES, 2, LAYERS, PAGE, HKV, D], GPU),
        TensorType(u32, ["b"], GPU),
        TensorType(u32, ["b", 4], GPU),
        TensorType(u32, ["t"], GPU),
        TensorType(u32, ["t"], GPU),
        TensorType(u32, ["b1"], GPU),
        TensorType(DType.float32, [NPOS, D], GPU),
        TensorType(bf, [hidden, hidden], GPU),
        TensorType(bf, [HKV * D, hidden], GPU),
        TensorType(bf, ["t", HKV, D], GPU),
    ]

    def body(x, cache, lengths, table, positions, slots, offsets, freqs, w, wkv, other):
        def qkv(x):
            if stores_before:
                kernels.kv_cache_store(cache, other, other, slots, 0)
                return x, ops.reshape(other, ["t", HKV * D]), ops.reshape(other, ["t", HKV * D])
            return x @ w.T, x @ wkv.T, x @ wkv.T

        kv = PagedCacheValues(cache, lengths, table, None, positions, slots)
        return rope_attention(x, qkv, lambda a: a @ w.T, kv, freqs, offsets, layer=1, n_heads=HQ,
                              n_kv_heads=HKV, head_dim=D, interleaved=False, scale=D**-0.5)

    return Graph("layer", body, input_types=types)


def test_the_store_lets_the_attention_launch_early_only_after_a_kernel_leaving_the_cache():
    """passes/mark_early_index.rs on a layer as the models stage it: the attention reads its
    index inputs and older keys early, and the fused store before it lets it launch before the
    store waits (the kernel before the store, the product, does not touch the cache). With
    another store right before the layer's, the store waits first."""
    steps = [s for s in _core.engine._lowered_steps(decode_layer(False)._ir, marks=True) if "+early" in s]
    assert steps == ["kv_cache_store+early_next", "paged_attention+early_index"]
    steps = [s for s in _core.engine._lowered_steps(decode_layer(True)._ir, marks=True) if "+early" in s]
    assert steps == ["paged_attention+early_index"]
