"""Batch invariance (`numerics.batch_invariant`, docs/kernels/batch_invariance.md): with the knob
on, a row's result on the GPU has the same bits whatever other rows share its batch. The same
rows run alone and at 3, 8, 9, 32 and 64 rows (placed at random among fresh random ones)
through quantized products (f32 and bf16 activations, with a fused residual), 16-bit W^T
products (with a folded RMSNorm) and paged attention (decode rows at several context lengths,
alone, among other decodes and beside a prompt chunk); then SmolLM2 decodes prompts greedily
batched and alone, with the same tokens and the same logits. The registry test needs no GPU."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from max import driver, engine, tuning
from max.dtype import DType
from max.graph import BufferType, DeviceRef, Graph, TensorType, ops
from max.graph.quantization import QuantizationEncoding as Q
from max.nn import kernels

ON = "numerics.batch_invariant=1"
ROWS = [1, 3, 8, 9, 32, 64]
NP = {DType.float32: np.float32, DType.bfloat16: ml_dtypes.bfloat16}


def test_knob_is_registered_and_parsed():
    (k,) = [k for k in tuning.knobs() if k.name == "numerics.batch_invariant"]
    assert k.env is None and k.doc.strip()
    assert tuning.get("numerics.batch_invariant") == "0"
    with tuning.override(ON):
        assert tuning.get("numerics.batch_invariant") == "1"
    with tuning.override(**{"numerics.batch_invariant": "off"}):
        assert tuning.get("numerics.batch_invariant") == "0"
    with pytest.raises(ValueError, match="numerics.batch_invariant"):
        with tuning.override("numerics.batch_invariant=3"):
            pass


def _run(model, gpu, *arrays):
    args = [driver.Buffer.from_numpy(np.ascontiguousarray(x)).to(gpu) for x in arrays]
    return model.execute(*args)[0].to_numpy()


def _same_rows_in_every_batch(rng, gpu, model, shared, make_rest, extra=()):
    """Runs `shared` rows alone, then each of them among others at every row count of ROWS;
    every shared row's output must have the bits it has alone. `make_rest(m)` gives m random
    rows; `extra(rows)` the other inputs for a lhs of those rows (fixed ones: a tuple)."""
    alone = [_run(model, gpu, shared[i : i + 1], *extra(shared[i : i + 1], [i])) for i in range(len(shared))]
    for m in ROWS:
        lhs = make_rest(m)
        take = rng.choice(len(shared), min(m, len(shared)), replace=False)
        at = rng.choice(m, len(take), replace=False)
        lhs[at] = shared[take]
        rows = np.full(m, -1)
        rows[at] = take
        out = _run(model, gpu, lhs, *extra(lhs, rows))
        for pos, i in zip(at, take):
            got, want = out[pos : pos + 1], alone[i]
            assert got.view(np.uint8).tobytes() == want.view(np.uint8).tobytes(), f"row {i} at {pos} of {m} rows"


QUANT = [Q.Q4_0, Q.Q4_1, Q.Q8_0, Q.Q4_K, Q.Q6_K]


@pytest.mark.gpu
@pytest.mark.parametrize("enc", QUANT, ids=lambda e: e.value)
@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("k", [576, 1024])
def test_quantized_products(gpu, rng, enc, dtype, k):
    from test_quant import random_blocks

    if k % enc.elements_per_block:
        pytest.skip("K is not whole blocks")
    n = 200
    w = random_blocks(rng, enc, n, k // enc.elements_per_block)
    ref = DeviceRef.from_device(gpu)
    types = [TensorType(dtype, ("m", k), ref), TensorType(DType.uint8, w.shape, ref), TensorType(dtype, ("m", n), ref)]
    with Graph("q", input_types=types) as g:
        a, b, h = g.inputs
        g.output(h + ops.qmatmul(enc, None, a, b))  # the residual fuses into the product
    rand = lambda shape: rng.standard_normal(shape).astype(NP[dtype])  # noqa: E731
    shared, res = rand((8, k)), rand((8, n))

    def extra(lhs, rows):
        r = rand((len(lhs), n))
        for j, i in enumerate(rows):
            if i >= 0:
                r[j] = res[i]
        return (w, r)

    with tuning.override(ON, cuda_graphs="off"):
        model = engine.InferenceSession(devices=[driver.CPU(), gpu]).load(g)
        with tuning.record_launches() as log:
            _same_rows_in_every_batch(rng, gpu, model, shared, lambda m: rand((m, k)), extra)
    assert log.records("qgemv") and all(r["mma"] == 0 for r in log.records("qgemv"))


@pytest.mark.gpu
@pytest.mark.parametrize("k,nq,nkv,ffn", [(576, 576, 192, 1536), (2048, 2048, 512, 8192)])
def test_bf16_decoder_layer_products(gpu, rng, k, nq, nkv, ffn):
    """A decoder layer's products with W [n, k] as stored (gemv_nt): rms_norm -> q, k, v
    siblings, rms_norm -> silu(gate) * up, the down product plus the residual; the norms fold
    into the products (at K = 2048 with their scale after the products: ``_postnorm``). Every
    output row must have its bits alone."""
    from test_gpu_norm_gemv import layer, weights

    dtype = DType.bfloat16
    ws = weights(rng, dtype, k, nq, nkv, ffn)
    rand = lambda shape: (rng.standard_normal(shape) / 4).astype(ml_dtypes.bfloat16)  # noqa: E731
    xs, hs = rand((8, k)), rand((8, k))
    with tuning.override(ON, cuda_graphs="off"):
        model = engine.InferenceSession(devices=[driver.CPU(), gpu]).load(layer(dtype, k, ws))

        def run(x, h):
            args = [driver.Buffer.from_numpy(np.ascontiguousarray(v)).to(gpu) for v in (x, h)]
            return [o.to_numpy() for o in model.execute(*args)]

        alone = [run(xs[i : i + 1], hs[i : i + 1]) for i in range(8)]
        with tuning.record_launches() as log:
            for m in ROWS:
                x, h = rand((m, k)), rand((m, k))
                take = rng.choice(8, min(m, 8), replace=False)
                at = rng.choice(m, len(take), replace=False)
                x[at], h[at] = xs[take], hs[take]
                outs = run(x, h)
                for pos, i in zip(at, take):
                    for j, (got, want) in enumerate(zip(outs, alone[i])):
                        same = got[pos : pos + 1].view(np.uint8).tobytes() == want.view(np.uint8).tobytes()
                        assert same, f"output {j}, row {i} at {pos} of {m} rows"
    assert log.records("gemv_nt") and not log.records("gemm_sm90p") and not log.records("gemm_skinny")
    norm = "_postnorm" if k > 1024 else "_norm"
    assert any(r["kernel"].endswith(norm + "_gated") for r in log.records("gemv_nt")), log.records("gemv_nt")


def _attention(gpu, rng, hkv, hq, d, ps, dtype=DType.bfloat16):
    """A model of paged_attention over a cache of random pages, and a runner for a batch of
    (context, query rows) sequences with given queries: the output rows."""
    width, pages = 4200 // ps + 2, 70 * (4200 // ps + 2)
    blocks = rng.standard_normal((pages, 2, 1, ps, hkv, d)).astype(NP[dtype])
    ref = DeviceRef.from_device(gpu)
    types = [
        TensorType(dtype, ["t", hq, d], ref),
        BufferType(dtype, blocks.shape, ref),
        TensorType(DType.uint32, ["b1"], ref),
        TensorType(DType.uint32, ["b"], ref),
        TensorType(DType.uint32, ["b", width], ref),
    ]

    def body(q, cache, offsets, lengths, tab):
        return kernels.paged_attention(q, cache, offsets, lengths, tab, layer=0, scale=1.0 / np.sqrt(d), mask="causal")

    model = engine.InferenceSession(devices=[driver.CPU(), gpu]).load(Graph("attn", body, input_types=types))
    cache = driver.Buffer.from_numpy(blocks).to(gpu)

    def run(seqs, q, tables):
        offsets = np.concatenate([[0], np.cumsum([n for _, n in seqs])]).astype(np.uint32)
        lengths = np.array([c for c, _ in seqs], np.uint32)
        args = [driver.Buffer.from_numpy(np.ascontiguousarray(x)).to(gpu) for x in (q, offsets, lengths, tables)]
        return model.execute(args[0], cache, *args[1:])[0].to_numpy()

    return run, pages, width


@pytest.mark.gpu
@pytest.mark.parametrize("hkv,hq,d", [(3, 9, 64), (8, 32, 128)])
def test_decode_attention(gpu, rng, hkv, hq, d):
    """Decode rows over 5 to 4100 cached keys: alone, among other decodes (up to 64 rows in
    all) and beside a 96-row prompt chunk, whose row count would pick the prefill kernel."""
    ps = 16
    with tuning.override(ON, cuda_graphs="off"):
        run, pages, width = _attention(gpu, rng, hkv, hq, d, ps)
        contexts = [5, 100, 1000, 4100]
        table = lambda: rng.choice(pages, width, replace=False).astype(np.uint32)  # noqa: E731
        mine = [(c, rng.standard_normal((1, hq, d)).astype(ml_dtypes.bfloat16), table()) for c in contexts]
        alone = [run([(c, 1)], q, t[None]) for c, q, t in mine]
        with tuning.record_launches() as log:
            for m in ROWS + ["prompt"]:
                others = 0 if m == "prompt" else m - 1
                batch = [(int(rng.integers(1, 4000)), 1) for _ in range(others)] + ([(0, 96)] if m == "prompt" else [])
                qs = [rng.standard_normal((n, hq, d)).astype(ml_dtypes.bfloat16) for _, n in batch]
                tabs = [table() for _ in batch]
                for i, (c, q, t) in enumerate(mine):
                    at = int(rng.integers(0, len(batch) + 1))
                    seqs = batch[:at] + [(c, 1)] + batch[at:]
                    out = run(seqs, np.concatenate(qs[:at] + [q] + qs[at:]), np.stack(tabs[:at] + [t] + tabs[at:]))
                    row = sum(n for _, n in batch[:at])
                    got = out[row : row + 1]
                    assert got.view(np.uint8).tobytes() == alone[i].view(np.uint8).tobytes(), f"context {c}, batch {m}"
    # one split per (row, kv head), and never the prefill kernel
    assert log.records("attention") and all(r["splits"] == 1 for r in log.records("attention"))
    assert not log.records("attention_prefill")


@pytest.mark.gpu
def test_smollm2_greedy_decode_batched_equals_alone(gpu):
    """The real model end to end: greedy tokens of prompts decoded together (ragged prefill
    chunks beside decodes) equal each prompt's alone, and so do the step's logits, bit for bit."""
    from max.driver import DeviceSpec
    from max.interfaces import SamplingParams
    from max.pipelines import PipelineConfig
    from max.pipelines.lib.generate import Generator
    from max.pipelines.lib.pipeline import load_pipeline
    from models import smollm2_gguf

    prompts = ["The capital of France is", "Once upon a time, in a land far away,", "def fibonacci(n):",
               "Water boils at", "A list of prime numbers: 2, 3, 5,", "The quick brown fox"]
    sp = SamplingParams(top_k=1, max_new_tokens=16, ignore_eos=True)
    with tuning.override(ON):
        pipeline = load_pipeline(PipelineConfig(model_path=str(smollm2_gguf()), max_length=512, max_batch_size=8,
                                                max_batch_input_tokens=24, device_specs=[DeviceSpec.accelerator()]))
        alone = []
        for p in prompts:
            gen = Generator(pipeline)
            alone.append(gen.run([gen.context(p, sp)])[0].tokens)
        gen = Generator(pipeline)
        together = [r.tokens for r in gen.run([gen.context(p, sp) for p in prompts])]
        assert together == alone

        from max.pipelines.lib.context import TextContext

        rng = np.random.default_rng(7)
        ids = [rng.integers(100, 40000, n) for n in (5, 17, 9, 1, 40)]

        def logits_of(ctxs):
            for c in ctxs:
                pipeline.kv_manager.claim(c.request_id)
                pipeline.kv_manager.alloc(c)
            tokens = np.concatenate([c.next_tokens for c in ctxs])
            offsets = np.concatenate([[0], np.cumsum([c.active_length for c in ctxs])]).astype(np.uint32)
            (cache,) = pipeline.kv_manager.get_runtime_inputs([ctxs])
            out = pipeline.model.execute(tokens, offsets, list(cache)).to_numpy().copy()
            for c in ctxs:
                pipeline.release(c.request_id)
            return out

        together = logits_of([TextContext(max_length=512, tokens=p) for p in ids])
        for i, p in enumerate(ids):
            one = logits_of([TextContext(max_length=512, tokens=p)])[0]
            assert together[i].tobytes() == one.tobytes(), f"prompt {i}"
