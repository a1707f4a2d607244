"""Programmatic dependent launch (crates/kernels-cuda/src/launch/pdl.rs, knob ``launch.pdl``):
the decode step's kernels may start while the previous one drains and wait on the device
(griddepcontrol.wait) before reading its results; the W^T GEMVs issue their first weight
loads before the wait. PDL moves launches, never arithmetic, so everything here must be equal
bit for bit with the knob on and off: a random bf16 Llama's greedy tokens and log-probabilities
(decode at one row and three, replayed from CUDA graphs), and a decoder layer's W^T products in
every fused form (``_norm``, ``_gated``, residual epilogue) at 1-4 rows, bf16 and f32, with K
that takes the vector and the element loads; and from 17 rows the Hopper GEMM, which loads its
first stages of constant weights before its wait. Skips without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from max import tuning
from max.dtype import DType
from test_gpu_norm_gemv import as_np, check, layer, reference, run, weights

pytestmark = pytest.mark.gpu
OFF = {"launch.pdl": False}


def _pipeline(ckpt):
    from max.driver import DeviceSpec
    from max.pipelines import PipelineConfig
    from max.pipelines.lib.pipeline import load_pipeline

    return load_pipeline(PipelineConfig(model_path=str(ckpt["hf_dir"]), max_length=64, kv_cache_page_size=16,
                                        max_batch_size=4, device_specs=[DeviceSpec.accelerator(0)]))


def _decode(pipeline, groups):
    from max.interfaces import SamplingParams
    from max.pipelines.lib.generate import Generator

    sp = SamplingParams(top_k=1, max_new_tokens=12, ignore_eos=True)
    out = []
    for group in groups:
        gen = Generator(pipeline)
        res = gen.run([gen.context(ids, sp, log_probabilities=3) for ids in group])
        out.append([(r.tokens, r.log_probabilities) for r in res])
    return out


def test_a_random_llama_decodes_bit_for_bit_the_same_with_and_without_pdl(gpu, tmp_path):
    from reference.checkpoints import write_checkpoint

    ckpt = write_checkpoint(directory=tmp_path, seed=11, arch="llama", dtype="bfloat16")
    rng = np.random.default_rng(5)
    prompts = [rng.integers(5, ckpt["config"]["vocab_size"], n).tolist() for n in (9, 4, 13)]
    groups = [prompts[:1], prompts]  # decode at one row, then three
    results, kernels = [], []
    for spec in ({}, OFF):
        # the knob is read when a kernel is launched, i.e. while the decode graph is captured:
        # load and run inside the override
        with tuning.override(**spec), tuning.record_launches() as log:
            results.append(_decode(_pipeline(ckpt), groups))
            kernels.append({(r["kernel"], r["pdl"]) for r in log.records("gemv_nt")})
    assert results[0] == results[1]
    assert kernels[0] and all(pdl == 1 for _, pdl in kernels[0]), kernels[0]
    assert kernels[1] and all(pdl == 0 for _, pdl in kernels[1]), kernels[1]
    assert any(k.endswith("_norm_gated") for k, _ in kernels[0]), kernels[0]


@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float32], ids=lambda d: d.name)
@pytest.mark.parametrize("k", [576, 100, 2056])  # 100: element loads
def test_layer_products_equal_with_and_without_pdl(rng, gpu, dtype, k):
    from engine_util import session

    nq, nkv, ffn = (576, 192, 1536) if k == 576 else (72, 24, 200)
    ws = weights(rng, dtype, k, nq, nkv, ffn)
    g = layer(dtype, k, ws)
    fold = {"fusion.norm_gemv_max_k": max(k, 1024)}  # the _norm kernels at every k tested
    specs = (fold, {**fold, **OFF})
    models = []
    for spec in specs:
        with tuning.override(**spec):
            models.append(session(gpu).load(g))
    for m in (1, 2, 3, 4):
        for _ in range(3):  # step by step, captured, replayed
            x = rng.standard_normal((m, k)).astype(as_np(dtype))
            h = rng.standard_normal((m, k)).astype(as_np(dtype))
            outs = []
            for spec, model in zip(specs, models):
                with tuning.override(**spec), tuning.record_launches() as log:
                    outs.append(run(model, gpu, x, h))
                pdl = {r["pdl"] for r in log.records("gemv_nt")}
                assert pdl in (set(), {0 if "launch.pdl" in spec else 1}), pdl
            for i, (u, v) in enumerate(zip(*outs)):
                assert np.array_equal(u.view(np.uint8), v.view(np.uint8)), f"k={k} m={m} output {i}"


@pytest.mark.parametrize("enc,m", [("Q8_0", 1), ("Q6_K", 2), ("Q4_0", 4), ("Q4_1", 8)])
def test_quantized_products_equal_with_and_without_pdl(rng, gpu, enc, m):
    """Two qmatmuls in a row through the CUDA-core GEMV (qgemv.cu), the second reading what the
    first wrote just before it: under PDL each copies its first weight stages (constants) into
    shared memory before it waits (`qgemv.early_weights`; off, it prefetches them into L2),
    then reads its lhs. The same bits with early copies, without them and without PDL, and the
    launches say which way they went."""
    from engine_util import session
    from test_quant import execute, random_blocks

    from max.graph import DeviceRef, Graph, TensorType, Weight, ops
    from max.graph.quantization import QuantizationEncoding as Q

    enc = Q[enc]
    # rows that are not whole 16-byte vectors keep 8-bit and 4-bit weights off the streaming
    # kernel (qgemv_stream.cu); Q6_K always takes qgemv.cu
    k, mid, n = (1024, 768, 333) if enc == Q.Q6_K else (1088, 800, 333)
    ws = {"w1": random_blocks(rng, enc, mid, k // enc.elements_per_block),
          "w2": random_blocks(rng, enc, n, mid // enc.elements_per_block)}
    where = DeviceRef.GPU()
    with Graph("chain", input_types=[TensorType(DType.float32, (m, k), where)]) as g:
        w1, w2 = (Weight(name, DType.uint8, w.shape, where, quantization_encoding=enc) for name, w in ws.items())
        g.output(ops.qmatmul(enc, None, ops.qmatmul(enc, None, g.inputs[0], w1), w2))
    outs = []
    for spec, pdl, early in (({}, 1, 1), ({"qgemv.early_weights": False}, 1, 0), (OFF, 0, 0)):
        with tuning.override(**spec):
            model = session(gpu).load(g, weights_registry=ws)
            x = np.random.default_rng(7).standard_normal((m, k)).astype(np.float32)
            with tuning.record_launches() as log:  # step by step (recorded), then captured, replayed
                (first,) = execute(model, [x], gpu)
            simt = [r for r in log.records("qgemv") if r["mma"] == 0 and r["streaming"] == 0]
            assert len(simt) == 2, log.records("qgemv")
            assert {(r["pdl"], r["early"]) for r in simt} == {(pdl, early)}, simt
            for _ in range(2):
                (out,) = execute(model, [x], gpu)
                assert np.array_equal(out.view(np.uint8), first.view(np.uint8)), enc
        outs.append(out)
    assert np.isfinite(outs[0]).all()
    for other in outs[1:]:
        assert np.array_equal(outs[0].view(np.uint8), other.view(np.uint8)), enc


def test_quantized_weights_of_a_graph_input_are_not_read_before_the_wait(rng, gpu):
    """A qmatmul whose weights are a graph input (not a fixed value of the model: what a kernel
    computes reaches a product the same way) copies nothing before griddepcontrol.wait; one of
    constant weights beside it does, and both equal the host's results. (Weights computed
    inside the program: the marks' unit test, mark_const_weights.rs.)"""
    from engine_util import session
    from test_quant import execute, random_blocks

    from max.graph import DeviceRef, Graph, TensorType, Weight, ops
    from max.graph.quantization import QuantizationEncoding as Q

    enc, k, n = Q.Q4_0, 1088, 333
    wc = random_blocks(rng, enc, n, k // enc.elements_per_block)
    wi = random_blocks(rng, enc, n, k // enc.elements_per_block)
    where = DeviceRef.GPU()
    types = [TensorType(DType.float32, (1, k), where), TensorType(DType.uint8, wi.shape, where)]
    with Graph("inputs", input_types=types) as g:
        w = Weight("wc", DType.uint8, wc.shape, where, quantization_encoding=enc)
        x, wv = g.inputs
        g.output(ops.qmatmul(enc, None, x, w), ops.qmatmul(enc, None, x, wv))
    model = session(gpu).load(g, weights_registry={"wc": wc})
    x = rng.standard_normal((1, k)).astype(np.float32)
    with tuning.record_launches() as log:
        const_out, input_out = execute(model, [x, wi], gpu)
    simt = [r for r in log.records("qgemv") if r["mma"] == 0 and r["streaming"] == 0]
    assert sorted(r["early"] for r in simt) == [0, 1], simt
    with Graph("host", input_types=[TensorType(DType.float32, (1, k), DeviceRef.CPU()),
                                    TensorType(DType.uint8, wi.shape, DeviceRef.CPU())]) as h:
        hx, hw = h.inputs
        hc = Weight("wc", DType.uint8, wc.shape, DeviceRef.CPU(), quantization_encoding=enc)
        h.output(ops.qmatmul(enc, None, hx, hc), ops.qmatmul(enc, None, hx, hw))
    from max import driver

    host = session().load(h, weights_registry={"wc": wc})
    for got, want in zip((const_out, input_out), execute(host, [x, wi], driver.CPU())):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


# Plans forced past the default one: clusters of two CTAs along M multicasting B, clusters of
# two by two (two along N multicasting A; the gated products, which multicast no B, one by two)
# before and after the wait, split-K, and a small grid whose CTAs take several units each (the
# ring runs on across units after the early stages).
PLANS = [{}, {"gemm.cluster": 2}, {"gemm.cluster": 2, "gemm.cluster_n": 2},
         {"gemm.splitk": 3}, {"gemm.grid": 8}]


def _ran_as_forced(plan, gemms):
    """Whether every launch took the forced plan (the records' cluster, splits and grid)."""
    if "gemm.splitk" in plan:
        return all(r["splits"] == plan["gemm.splitk"] for r in gemms)
    if "gemm.grid" in plan:
        g = plan["gemm.grid"]
        return all(r["grid"] <= g for r in gemms) and any(r["grid"] == g for r in gemms)
    if "gemm.cluster" in plan:
        cn = plan.get("gemm.cluster_n", 1)
        return all((r["cluster"], r["cluster_n"]) == ((1 if r["gated"] else plan["gemm.cluster"]) * cn, cn)
                   for r in gemms)
    return True


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "default")
def test_hopper_gemm_streams_constant_weights_before_its_wait(rng, gpu, plan):
    """From 17 rows a layer's W^T products run on the Hopper GEMM (64- and 128-row tiles), each
    right after the kernel that writes its A (a norm, the gated product). Under PDL with
    constant weights (`gemm.early_weights`) its producer issues the first stages' weight loads
    before griddepcontrol.wait and A's after it: the same bits with it on, off and without
    PDL, within float64's bounds, and the launches say which way they went."""
    from engine_util import session

    k = 1024  # 16 k-tiles: past the ring's 7, 9 or 12 stages where a unit takes all of K
    ws = weights(rng, DType.bfloat16, k, 1024, 256, 2816)
    specs = [{**plan, **s} for s in ({}, {"gemm.early_weights": False}, OFF)]
    models = []
    for spec in specs:
        with tuning.override(**spec):
            models.append(session(gpu).load(layer(DType.bfloat16, k, ws)))
    for m in (17, 64, 200) if not plan else (64, 200):
        x = rng.standard_normal((m, k)).astype(as_np(DType.bfloat16))
        h = rng.standard_normal((m, k)).astype(as_np(DType.bfloat16))
        outs = []
        for i, (spec, model) in enumerate(zip(specs, models)):
            with tuning.override(**spec):
                with tuning.record_launches() as log:  # step by step (recorded), then replayed
                    outs.append(run(model, gpu, x, h))
                outs.append(run(model, gpu, x, h))
            gemms = log.records("gemm_sm90p")
            if not gemms:
                pytest.skip("the Hopper GEMM does not run on this GPU")
            early = {r["early_b"] for r in gemms}
            assert early == ({1} if i == 0 else {0}), (spec, gemms)
            assert _ran_as_forced(plan, gemms), (spec, gemms)
        for got in outs[1:]:
            for j, (u, v) in enumerate(zip(outs[0], got)):
                assert np.array_equal(u.view(np.uint16), v.view(np.uint16)), f"m={m} output {j}"
        refs, bounds = reference(x, h, ws)
        for j, (o, r, b) in enumerate(zip(outs[0], refs, bounds)):
            check(o, r, b, DType.bfloat16, f"m={m} output {j}")
