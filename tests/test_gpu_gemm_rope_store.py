"""A layer's rope + KV-cache store folded into its 16-bit q/k/v products read as stored
(engine/passes/fuse_qkv_rope_store.rs's `Gemm` form; gemv_nt.cu's `_rope` kernels,
launch/gemv_nt.rs `NtRope`): one launch at one token instead of the products and rope_kv_store.
Checked: the steps the pass leaves and the attention's PDL marks (any machine); on a GPU, bf16
and f16 (f32 products read their weights transposed, so their store stays apart), with and
without a folded norm (before or after the products), rotations of halves (neox) and of
adjacent pairs, whole and partial: at one token one launch, at 2-3 tokens the
products and then rope_kv_store, and either way rope(q) and the cache bit for bit the unfused
graph's (fusion.qkv_rope_store=0; its products' plain launch not splitting K, which the folded
one never does) and within rounding of numpy float64; a slot past the cache and a position past
the table as the unfused store treats them."""

from __future__ import annotations

import numpy as np
import pytest

from engine_util import session
from test_gpu_qkv_rope_store import BITS, D, EPS, HKV, HQ, LAYERS, NP, NPOS, PAGE, PAGES
from test_gpu_qkv_rope_store import run as run_qkv
from test_gpu_rope_store import rope_ref
from max import _core, tuning
from max.dtype import DType
from max.graph import BufferType, DeviceRef, Graph, TensorType, ops
from max.nn import kernels
# the products' plain kernel at one row without a split of K (gemv_nt.split_k), so that the
# unfused graph's sums are the fused launch's
PLAIN_SUMS = {"gemv_nt.split_k": 1}


def layer(where, dtype, ws, norm=True, interleaved=False, rot=D, freqs_dtype=DType.float32):
    """x [t, K] (rms_norm'd with gamma when `norm`) times W_q, W_k, W_v ([n, K] as stored), the
    products' ropes (the first `rot` dims of each head) and their store into layer 1 of the
    cache; the graph's result is rope(q)."""
    k = ws[0].shape[1]
    types = [
        TensorType(dtype, ["t", k], where),
        BufferType(dtype, [PAGES, 2, LAYERS, PAGE, HKV, D], where),
        TensorType(freqs_dtype, [NPOS, rot], where),
        TensorType(DType.uint32, ["t"], where),
        TensorType(DType.uint32, ["t"], where),
        TensorType(dtype, [k], where),
    ]
    with Graph("gemm_rope_store", input_types=types) as g:
        x, cache, freqs, pos, slots, gamma = g.inputs
        if norm:
            x = kernels.rms_norm(x, gamma, EPS)
        q, kk, v = (ops.matmul(x, ops.transpose(ops.constant(w, dtype, where), 0, 1)) for w in ws)
        q = kernels.rope(ops.reshape(q, ["t", HQ, D]), freqs, pos, interleaved=interleaved)
        kk = kernels.rope(ops.reshape(kk, ["t", HKV, D]), freqs, pos, interleaved=interleaved)
        kernels.kv_cache_store(cache, kk, ops.reshape(v, ["t", HKV, D]), slots, 1)
        g.output(q)
    return g


def weights(rng, k):
    return [(rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32) for n in (HQ * D, HKV * D, HKV * D)]


def lowered(g, marks=False):
    skip = ("constant", "constant_external", "chain_create", "reshape", "transpose")
    return [s for s in _core.engine._lowered_steps(g._ir, marks=marks) if s not in skip]


@pytest.mark.parametrize("interleaved", [False, True])
def test_the_store_folds_into_the_gpu_products(interleaved):
    ws = weights(np.random.default_rng(0), 256)
    bf16 = DType.bfloat16
    assert lowered(layer(DeviceRef.GPU(), bf16, ws, interleaved=interleaved)) == [
        "gemm[rms_norm+matmul_wt+rope_store]"
    ]
    assert lowered(layer(DeviceRef.GPU(), bf16, ws, norm=False, interleaved=interleaved)) == [
        "gemm[matmul_wt+rope_store]"
    ]
    with tuning.override(**{"fusion.qkv_rope_store": False}):
        assert lowered(layer(DeviceRef.GPU(), bf16, ws, interleaved=interleaved)) == [
            "gemm[rms_norm+matmul_wt]",
            "kv_cache_store",
        ]
    host = lowered(layer(DeviceRef.CPU(), bf16, ws, interleaved=interleaved))
    assert "kv_cache_store" in host and not any("rope_store" in s for s in host), host
    f32 = lowered(layer(DeviceRef.GPU(), DType.float32, ws, interleaved=interleaved))
    assert "kv_cache_store" in f32 and not any("rope_store" in s for s in f32), f32


def test_the_folded_store_lets_the_attention_launch_early():
    """passes/mark_early_index.rs on a bf16 layer as the models stage it (rope_attention, a
    rotation of halves): the attention reads its index inputs early and the products with the
    store folded in are marked to let it launch early where the store runs apart."""
    from max.nn.attention.attention_with_rope import rope_attention
    from max.nn.kv_cache.cache_params import PagedCacheValues

    gpu, bf16, u32, k = DeviceRef.GPU(), DType.bfloat16, DType.uint32, 256
    ws = weights(np.random.default_rng(0), k)
    wo = (np.random.default_rng(1).standard_normal((k, HQ * D)) / 16).astype(np.float32)
    types = [TensorType(bf16, ["t", k], gpu), BufferType(bf16, [PAGES, 2, LAYERS, PAGE, HKV, D], gpu),
             TensorType(u32, ["b"], gpu), TensorType(u32, ["b", 4], gpu), TensorType(u32, ["t"], gpu),
             TensorType(u32, ["t"], gpu), TensorType(u32, ["b1"], gpu), TensorType(DType.float32, [NPOS, D], gpu)]
    with Graph("layer", input_types=types) as g:
        x, cache, lengths, table, positions, slots, offsets, freqs = g.inputs
        kv = PagedCacheValues(cache, lengths, table, None, positions, slots)
        const = [ops.transpose(ops.constant(w, bf16, gpu), 0, 1) for w in (*ws, wo)]
        g.output(rope_attention(x, lambda a: tuple(ops.matmul(a, w) for w in const[:3]),
                                lambda a: ops.matmul(a, const[3]), kv, freqs, offsets, layer=1,
                                n_heads=HQ, n_kv_heads=HKV, head_dim=D, interleaved=False, scale=D**-0.5))
    steps = [s for s in lowered(g, marks=True) if "+" in s]
    assert steps == ["gemm[matmul_wt+rope_store]+early_next", "paged_attention+early_index"], steps


def reference(dtype, ws, x, gamma, norm, freqs, pos, interleaved):
    """rope(q), k rotated and v in float64 over the weights as stored in `dtype`; and each
    element's scale (sum of |x| |w| over K, a rotated element's with its pair's), for the bound."""
    n = x.astype(np.float64)
    if norm:
        n = n / np.sqrt(np.mean(n * n, -1, keepdims=True) + EPS) * gamma.astype(np.float64)
    outs, scales = [], []
    f64 = freqs.astype(np.float64)
    rot = freqs.shape[1]
    for w, heads, rotate in zip(ws, (HQ, HKV, HKV), (True, True, False)):
        wd = w.astype(NP[dtype]).astype(np.float64)
        y = (n @ wd.T).reshape(len(x), heads, D)
        s = (np.abs(n) @ np.abs(wd).T).reshape(len(x), heads, D)
        if rotate:
            y = rope_ref(y, f64, pos, interleaved)
            partner = s.copy()
            if interleaved:
                pairs = s[..., :rot].reshape(len(x), heads, rot // 2, 2)
                partner[..., :rot] = pairs[..., ::-1].reshape(len(x), heads, rot)
            else:
                h = rot // 2
                partner[..., :h], partner[..., h:rot] = s[..., h:rot], s[..., :h]
            s = s + np.where(np.arange(D) < rot, partner, 0)
        outs.append(y)
        scales.append(s)
    return outs, scales


def run(model, gpu, *args):
    """test_gpu_qkv_rope_store's run (rope(q), the cache, the launches) with PLAIN_SUMS."""
    with tuning.override(**PLAIN_SUMS):
        return run_qkv(model, gpu, *args)


# (rotation of adjacent pairs, rotary dims, a table of the activations' type)
ROPES = [(False, D, False), (True, D, False), (False, 32, False), (True, 32, True), (False, D, True)]


@pytest.mark.gpu
@pytest.mark.parametrize("interleaved,rot,act_freqs", ROPES, ids=["neox", "pairs", "neox32", "pairs32_t", "neox_t"])
@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float16], ids=lambda d: d.name)
@pytest.mark.parametrize("norm", ["norm", "postnorm", "plain"])
def test_folded_store_is_the_unfused_one(hopper, rng, interleaved, rot, act_freqs, dtype, norm):
    # K = 2048 folds the norm after the products (fusion.norm_gemv_max_k) for 16-bit types
    k = 2048 if norm == "postnorm" else 576
    ws = weights(rng, k)
    freqs_dtype = dtype if act_freqs else DType.float32
    load = lambda: session(hopper).load(  # noqa: E731
        layer(DeviceRef.GPU(), dtype, ws, norm != "plain", interleaved, rot=rot, freqs_dtype=freqs_dtype))
    fused = load()
    with tuning.override(**{"fusion.qkv_rope_store": False}):
        plain = load()
    angles = rng.uniform(0, 2 * np.pi, (NPOS, rot // 2))
    freqs = np.stack([np.cos(angles), np.sin(angles)], -1).reshape(NPOS, rot).astype(NP[freqs_dtype])
    gamma = (1 + rng.standard_normal(k) / 4).astype(NP[dtype])
    for t in (1, 2, 3):
        x = (rng.standard_normal((t, k)) * 2).astype(NP[dtype])
        pos = rng.integers(0, NPOS, t).astype(np.uint32)
        slots = rng.permutation(PAGES * PAGE)[:t].astype(np.uint32)
        blocks = rng.standard_normal((PAGES, 2, LAYERS, PAGE, HKV, D)).astype(NP[dtype])
        qa, ca, log = run(fused, hopper, x, blocks, freqs, pos, slots, gamma)
        qb, cb, _ = run(plain, hopper, x, blocks, freqs, pos, slots, gamma)
        launches = (log.count("gemv_nt", rope=1), log.count("rope_kv_store"))
        assert launches == ((1, 0) if t == 1 else (0, 1)), log.records()
        if t == 1:
            names = [r["kernel"] for r in log.records() if r.get("family") == "gemv_nt"]
            want = {"norm": "_vec_norm_rope", "postnorm": "_postnorm_rope", "plain": "_vec_rope"}[norm]
            assert names[0].endswith(want), names
        bits = BITS[dtype]
        assert np.array_equal(qa.view(bits), qb.view(bits)), f"rope(q), t={t}"
        assert np.array_equal(ca.view(bits), cb.view(bits)), f"cache, t={t}"
        (want_q, want_k, want_v), scales = reference(dtype, ws, x, gamma, norm != "plain", freqs, pos, interleaved)
        rel = {DType.bfloat16: 2.0**-6, DType.float16: 2.0**-9}[dtype]
        got_k = np.stack([ca[s // PAGE, 0, 1, s % PAGE] for s in slots]).astype(np.float64)
        got_v = np.stack([ca[s // PAGE, 1, 1, s % PAGE] for s in slots]).astype(np.float64)
        for what, got, want, scale in zip("qkv", (qa.astype(np.float64), got_k, got_v), (want_q, want_k, want_v),
                                          scales):
            err = np.abs(got - want)
            assert (err <= rel * scale + 1e-30).all(), f"{what}, t={t}: worst {err.max()}"


@pytest.mark.gpu
@pytest.mark.parametrize("interleaved", [False, True])
def test_a_slot_past_the_cache_and_a_position_past_the_table(hopper, rng, interleaved):
    """At one token: no row stored for a slot past the cache's, NaN rotations (and the dims
    past `rot` as they are) for a position past the table: the unfused graph's bits."""
    dtype, k, rot = DType.bfloat16, 576, 32
    ws = weights(rng, k)
    load = lambda: session(hopper).load(layer(DeviceRef.GPU(), dtype, ws, True, interleaved, rot=rot))  # noqa: E731
    fused = load()
    with tuning.override(**{"fusion.qkv_rope_store": False}):
        plain = load()
    freqs = rng.standard_normal((NPOS, rot)).astype(np.float32)
    gamma = (1 + rng.standard_normal(k) / 4).astype(NP[dtype])
    x = rng.standard_normal((1, k)).astype(NP[dtype])
    blocks = rng.standard_normal((PAGES, 2, LAYERS, PAGE, HKV, D)).astype(NP[dtype])
    for pos, slot in ((NPOS + 3, 5), (7, PAGES * PAGE + 1)):
        args = (x, blocks, freqs, np.array([pos], np.uint32), np.array([slot], np.uint32), gamma)
        qa, ca, log = run(fused, hopper, *args)
        qb, cb, _ = run(plain, hopper, *args)
        assert log.count("gemv_nt", rope=1) == 1, log.records()
        assert np.array_equal(qa.view(np.uint16), qb.view(np.uint16)), (pos, slot)
        assert np.array_equal(ca.view(np.uint16), cb.view(np.uint16)), (pos, slot)
        if pos >= NPOS:
            q = qa.astype(np.float32)
            assert np.isnan(q[..., :rot]).all() and not np.isnan(q[..., rot:]).any()
        else:
            assert np.array_equal(ca.view(np.uint16), blocks.view(np.uint16))
