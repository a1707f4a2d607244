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
from test_gpu_qkv_rope_store import D, HKV, HQ, LAYERS, NP, NPOS, PAGE, PAGES
from test_gpu_qkv_rope_store import attention_layer_steps, check, normed, products_reference, qkv_rope_store_graph
from test_gpu_qkv_rope_store import run as run_qkv
from max import _core, tuning
from max.dtype import DType
from max.graph import DeviceRef, ops
# the products' plain kernel at one row without a split of K (gemv_nt.split_k), so that the
# unfused graph's sums are the fused launch's
PLAIN_SUMS = {"gemv_nt.split_k": 1}


def layer(where, dtype, ws, norm=True, interleaved=False, rot=D, freqs_dtype=DType.float32):
    """qkv_rope_store_graph over the 16-bit products of `ws` ([n, K] as stored)."""
    def products(x):
        return [ops.matmul(x, ops.transpose(ops.constant(w, dtype, where), 0, 1)) for w in ws]

    return qkv_rope_store_graph("gemm_rope_store", where, dtype, ws[0].shape[1], products, norm, interleaved, rot,
                                freqs_dtype)


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
    gpu, bf16, k = DeviceRef.GPU(), DType.bfloat16, 256
    ws = weights(np.random.default_rng(0), k)
    wo = (np.random.default_rng(1).standard_normal((k, HQ * D)) / 16).astype(np.float32)

    def const(w):
        return ops.transpose(ops.constant(w, bf16, gpu), 0, 1)

    steps = attention_layer_steps(bf16, k, lambda a: tuple(ops.matmul(a, const(w)) for w in ws),
                                  lambda a: ops.matmul(a, const(wo)), interleaved=False)
    assert steps == ["gemm[matmul_wt+rope_store]+early_next", "paged_attention+early_index"], steps


def reference(dtype, ws, x, gamma, norm, freqs, pos, interleaved):
    """products_reference over the weights as stored in `dtype`."""
    dense = [w.astype(NP[dtype]).astype(np.float64) for w in ws]
    return products_reference(normed(x, gamma, norm), dense, freqs, pos, interleaved)


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
        rel = {DType.bfloat16: 2.0**-6, DType.float16: 2.0**-9}[dtype]
        ref = reference(dtype, ws, x, gamma, norm != "plain", freqs, pos, interleaved)
        check(dtype, t, slots, (qa, ca), (qb, cb), ref, rel)


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
