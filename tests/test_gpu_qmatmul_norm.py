"""A decoder layer's RMSNorm folded into the quantized products it feeds
(engine/passes/fuse_norm_gemv.rs on qmatmul steps; qgemv_mma.cu and qgemv.cu normalise the lhs
as they stage it), and its MLP's ``silu(gate) * up`` into the gate/up sibling launch
(fuse_gated_gemv.rs): at 1-2 rows one launch for ``rms_norm -> q, k, v`` (siblings), a single
product or ``rms_norm -> silu(gate) * up``; the rms_norm kernel, the plain products and the
fused elementwise step elsewhere (more rows, the streaming GEMV's encodings). Checked on a GPU with fresh random inputs, bf16 and f16: against numpy float64 for
each encoding the kernels take; equal bit for bit to the unfused graph (fusion.norm_gemv=0)
where the rms_norm kernel sums like the fold (rows of at most 1024 elements); and a random
GGUF Llama giving the same greedy tokens with the folds on and off."""

import ml_dtypes
import numpy as np
import pytest

from gguf_blocks import decode
from test_quant import F16_FIELDS, execute, on, random_blocks
from engine_util import session
from max import tuning
from max.dtype import DType
from max.graph import DeviceRef, Graph, Weight, ops
from max.graph.quantization import QuantizationEncoding as Q
from max.nn import kernels


@pytest.fixture(autouse=True)
def quantized_folds():
    """The quantized folds and the early weight stages (fusion.quantized, qgemv.early_weights),
    on whatever the defaults, and the tensor-core and streaming GEMVs at these small shapes
    (qgemv.mma, qgemv.stream)."""
    spec = {"fusion.quantized": True, "qgemv.early_weights": True, "qgemv.mma": True, "qgemv.stream": True}
    with tuning.override(**spec):
        yield

NP = {DType.bfloat16: ml_dtypes.bfloat16, DType.float16: np.float16, DType.float32: np.float32}
# One rounding to the dtype, relative, doubled: 2^-8 for bf16, 2^-10 for f16; and absolute, in
# the subnormal range: half the smallest subnormal (a result of 3.5e-8 is stored in f16 as
# 2^-24 = 6e-8, an error 2^-10 of it does not cover).
ROUND = {DType.bfloat16: 2.0**-8, DType.float16: 2.0**-10}
TINY = {DType.bfloat16: 2.0**-134, DType.float16: 2.0**-25}
EPS = 1e-5
dtypes = pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float16], ids=lambda d: d.name)


def normed_products(device, enc, dtype, gamma, ws, m, mbc=True, gated=False):
    """rms_norm(x, gamma) times each raw weight of `ws` (the sibling products of one norm);
    gated: silu(product 0) * product 1. gamma None: no norm."""
    where = DeviceRef.from_device(device)
    weights = [Weight(f"w{i}", DType.uint8, w.shape, where, quantization_encoding=enc) for i, w in enumerate(ws)]
    k = ws[0].shape[1] // enc.block_size * enc.elements_per_block
    with Graph("normed", input_types=on(device, [(dtype, (m, k))])) as g:
        n = g.inputs[0]
        if gamma is not None:
            n = kernels.rms_norm(n, ops.constant(gamma, dtype, where), EPS, multiply_before_cast=mbc)
        outs = [ops.qmatmul(enc, None, n, w) for w in weights]
        g.output(ops.silu(outs[0]) * outs[1] if gated else outs[0], *([] if gated else outs[1:]))
    return session(device).load(g, weights_registry={f"w{i}": w for i, w in enumerate(ws)})


def run(device, enc, dtype, gamma, ws, x, mbc=True, gated=False):
    model = normed_products(device, enc, dtype, gamma, ws, x.shape[0], mbc, gated)
    with tuning.record_launches() as log:
        outs = execute(model, [x], device)
    return outs, log


def check(got, x, gamma, w, dtype):
    """`got` is rms_norm(x) @ w^T: the normalised values rounded to dtype (ROUND of |n| per
    element), an f32 sum over K, the result's one rounding."""
    assert got.dtype == NP[dtype], got.dtype
    x64, g64, w64 = x.astype(np.float64), gamma.astype(np.float64), w.astype(np.float64)
    n = x64 / np.sqrt(np.mean(x64 * x64, -1, keepdims=True) + EPS) * g64
    ref = n @ w64.T
    k = x.shape[-1]
    tol = (ROUND[dtype] + 2 * k * 2.0**-24) * (np.abs(n) @ np.abs(w64).T) + ROUND[dtype] * np.abs(ref) + TINY[dtype]
    err = np.abs(got.astype(np.float64) - ref)
    bad = err > tol + 1e-30
    assert not bad.any(), f"{bad.sum()} of {bad.size} wrong; worst {err.max()} (bound there {tol.flat[err.argmax()]})"


def weights(rng, enc, n, k):
    """Random blocks; the K-quants' f16 scales divided by 64 (their sub-block scales, up to 63
    and 127, would take products of unit rows past f16's range)."""
    raw = random_blocks(rng, enc, n, k // enc.elements_per_block)
    if enc in (Q.Q4_K, Q.Q6_K):
        b = raw.reshape(n, -1, enc.block_size)
        for off in F16_FIELDS[enc]:
            f = np.ascontiguousarray(b[:, :, off : off + 2]).view(np.float16) / np.float16(64)
            b[:, :, off : off + 2] = f.astype(np.float16).view(np.uint8)
    return raw


def inputs(rng, enc, dtype, k, ns, scale=1.0):
    """Two lhs rows, a norm weight (both times `scale`) and raw weights of `ns` rows."""
    x = (rng.standard_normal((2, k)) * 3 * scale).astype(NP[dtype])
    gamma = ((1 + rng.standard_normal(k) / 4) * scale).astype(NP[dtype])
    return x, gamma, [weights(rng, enc, n, k) for n in ns]


# (encoding, K, the kernel that folds): 16-byte weight rows of Q4_0/Q4_1/Q4_K take the
# tensor-core GEMV at any K; Q4_1 at K = 576 (SmolLM2: 360-byte rows) and Q6_K the general one
# up to fusion.norm_gemv_max_k
CASES = [(Q.Q4_0, 4096, "mma"), (Q.Q4_1, 1536, "mma"), (Q.Q4_K, 1024, "mma"), (Q.Q4_1, 576, "general"),
         (Q.Q6_K, 768, "general"), (Q.Q4_0, 608, "general")]


@pytest.mark.gpu
@pytest.mark.parametrize("enc,k,kernel", CASES, ids=lambda c: getattr(c, "value", str(c)))
@dtypes
@pytest.mark.parametrize("siblings", [1, 3])
def test_folded_norm_matches_float64(hopper, rng, enc, k, kernel, dtype, siblings):
    ns = (384, 128, 128)[:siblings]
    x, gamma, ws = inputs(rng, enc, dtype, k, ns)
    for m in (1, 2):
        for mbc in (True, False):
            outs, log = run(hopper, enc, dtype, gamma, ws, x[:m], mbc)
            folded = log.records("qgemv")
            assert len(folded) == 1 and folded[0]["norm"] == 1 and folded[0]["mma"] == (kernel == "mma"), folded
            assert folded[0]["segments"] == siblings, folded
            for out, w in zip(outs, ws):
                check(out, x[:m], gamma, decode(enc, w), dtype)


@pytest.mark.gpu
@dtypes
def test_unfolded_shapes_run_the_norm_then_the_products(hopper, rng, dtype):
    """Three rows, and Q8_0 siblings (the streaming GEMV, which folds a norm into one product
    of one chunk of K only): the rms_norm kernel into the step's scratch value, then the plain
    products."""
    for enc, m in ((Q.Q4_0, 3), (Q.Q8_0, 1)):
        x, gamma, ws = inputs(rng, enc, dtype, 1024, (256, 64))
        x = np.concatenate([x, x[:1] * 2])[:m]
        outs, log = run(hopper, enc, dtype, gamma, ws, x)
        assert all(r.get("norm", 0) == 0 for r in log.records("qgemv")), log.records()
        for out, w in zip(outs, ws):
            check(out, x, gamma, decode(enc, w), dtype)


def silu_mul(gate, up, dtype):
    """silu(gate) * up in float64 from the float64 products, with the bound on its error where
    gate and up each are within `bg`, `bu` (|silu'| <= 1.1) and the three roundings to dtype."""
    (g, bg), (u, bu) = gate, up
    s = g / (1 + np.exp(-g))
    m = s * u
    return m, 1.1 * bg * np.abs(u) + np.abs(s) * bu + bg * bu * 1.1 + 3 * (ROUND[dtype] * np.abs(m) + TINY[dtype])


def product_and_bound(x, gamma, w, dtype):
    """The float64 product of the (normalised) lhs and `w`, and check's bound on it."""
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    n = x64 if gamma is None else x64 / np.sqrt(np.mean(x64 * x64, -1, keepdims=True) + EPS) * gamma.astype(np.float64)
    ref = n @ w64.T
    k = x.shape[-1]
    unit = (0 if gamma is None else ROUND[dtype]) + 2 * k * 2.0**-24
    return ref, unit * (np.abs(n) @ np.abs(w64).T) + ROUND[dtype] * np.abs(ref) + TINY[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("enc,k,kernel", CASES, ids=lambda c: getattr(c, "value", str(c)))
@dtypes
@pytest.mark.parametrize("norm", [True, False], ids=["norm", "plain"])
def test_gated_pair_matches_float64(hopper, rng, enc, k, kernel, dtype, norm):
    """silu(x W_gate^T) * (x W_up^T), with and without the norm before it, at 1 and 2 rows: one
    launch (the general kernel's row limit holds for the norm only)."""
    # gate * up well within f16's range: at scale 1/32 one seed's Q6_K pair reached 83,000 (inf in
    # f16); at 1/128 the largest over 1,800 draws of these cases is about 9,600
    x, gamma, ws = inputs(rng, enc, dtype, k, (200, 200), scale=1 / 128)
    gamma = gamma if norm else None
    for m in (1, 2):
        (out,), log = run(hopper, enc, dtype, gamma, ws, x[:m], gated=True)
        launches = log.records("qgemv")
        assert len(launches) == 1 and launches[0]["gated"] == 1 and launches[0]["norm"] == int(norm), launches
        assert launches[0]["mma"] == (kernel == "mma"), launches
        assert log.count("fused") == 0, log.records()
        pg, pu = (product_and_bound(x[:m], gamma, decode(enc, w), dtype) for w in ws)
        ref, tol = silu_mul(pg, pu, dtype)
        err = np.abs(out.astype(np.float64) - ref)
        bad = err > tol + 1e-30
        assert not bad.any(), f"m={m}: {bad.sum()} of {bad.size} wrong; worst {err.max()}"


@pytest.mark.gpu
@dtypes
def test_q6k_one_row_folds_on_tensor_cores(hopper, rng, dtype):
    """One row of Q6_K over 16-byte rows (K a multiple of 2048: a Q4_K_M model's output
    projection, its norm folded; a gated pair with its norm): the tensor-core GEMV, to the
    float64 bound."""
    k = 2048
    x, gamma, ws = inputs(rng, Q.Q6_K, dtype, k, (384,))
    with tuning.override(**{"qgemv.mma": True}):  # weights this small take qgemv.cu by default
        outs, log = run(hopper, Q.Q6_K, dtype, gamma, ws, x[:1])
    (rec,) = log.records("qgemv")
    assert rec["norm"] == 1 and rec["mma"] == 1, rec
    check(outs[0], x[:1], gamma, decode(Q.Q6_K, ws[0]), dtype)
    x, gamma, ws = inputs(rng, Q.Q6_K, dtype, k, (200, 200), scale=1 / 128)
    with tuning.override(**{"qgemv.mma": True}):
        (out,), log = run(hopper, Q.Q6_K, dtype, gamma, ws, x[:1], gated=True)
    (rec,) = log.records("qgemv")
    assert rec["gated"] == 1 and rec["norm"] == 1 and rec["mma"] == 1, rec
    pg, pu = (product_and_bound(x[:1], gamma, decode(Q.Q6_K, w), dtype) for w in ws)
    ref, tol = silu_mul(pg, pu, dtype)
    err = np.abs(out.astype(np.float64) - ref)
    bad = err > tol + 1e-30
    assert not bad.any(), f"{bad.sum()} of {bad.size} wrong; worst {err.max()}"


@pytest.mark.gpu
@pytest.mark.parametrize("enc,k", [(Q.Q4_0, 1024), (Q.Q4_1, 576), (Q.Q4_K, 512)], ids=lambda c: str(c))
@dtypes
def test_gated_pair_equals_the_unfused_graph_bit_for_bit(hopper, rng, enc, k, dtype):
    """The store rounds gate, up and silu(gate) as the separate products and the fused
    elementwise step store them. (One warp per tile: the tensor-core GEMV's K parts per tile
    follow the tile count, which the gated launch's 8-row tiles double, and the parts' sums
    round in their own order.)"""
    x, gamma, ws = inputs(rng, enc, dtype, k, (3 * k // 2, 3 * k // 2), scale=1 / 32)
    for m in (1, 2):
        with tuning.override(**{"qgemv.split": 1}):
            a, log = run(hopper, enc, dtype, gamma, ws, x[:m], gated=True)
        assert log.count("qgemv", gated=1, norm=1) == 1, log.records()
        with tuning.override(**{"fusion.norm_gemv": False, "fusion.gated_gemv": False, "qgemv.split": 1}):
            b, log = run(hopper, enc, dtype, gamma, ws, x[:m], gated=True)
        assert log.count("qgemv", gated=1) == 0 and log.count("fused") == 1, log.records()
        assert np.array_equal(a[0].view(np.uint16), b[0].view(np.uint16)), f"m={m}"
    # three rows: the norm, the products and the fused step, as the unfused graph
    a, log = run(hopper, enc, dtype, gamma, ws, np.concatenate([x, x[:1]]), gated=True)
    assert log.count("qgemv", gated=1) == 0 and log.count("fused") == 1, log.records()


@pytest.mark.gpu
@pytest.mark.parametrize("enc,k", [(Q.Q4_0, 1024), (Q.Q4_1, 576), (Q.Q4_K, 512), (Q.Q4_0, 608)], ids=lambda c: str(c))
@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float16, DType.float32], ids=lambda d: d.name)
def test_folded_norm_equals_the_unfused_graph_bit_for_bit(hopper, rng, enc, k, dtype):
    """Rows of at most 1024 elements: the rms_norm kernel sums each row in a warp, as the fold
    does (qgemv.cu from the row held whole in shared memory, qgemv_mma.cu from global memory),
    so the products see the same normalised values; f32 activations (a GGUF model's) too."""
    x, gamma, ws = inputs(rng, enc, dtype, k, (k, k // 4, k // 4))
    for m in (1, 2):
        a, log = run(hopper, enc, dtype, gamma, ws, x[:m])
        assert log.count("qgemv", norm=1) == 1, log.records()
        with tuning.override(**{"fusion.norm_gemv": False}):
            b, _ = run(hopper, enc, dtype, gamma, ws, x[:m])
        bits = np.uint32 if dtype == DType.float32 else np.uint16
        for u, v in zip(a, b):
            assert np.array_equal(u.view(bits), v.view(bits)), f"m={m}"


@pytest.mark.gpu
@dtypes
def test_early_weight_stages_change_nothing(hopper, rng, dtype):
    """qgemv_mma with its first weight copies before the wait (the default) and after it."""
    x, gamma, ws = inputs(rng, Q.Q4_0, dtype, 2048, (1024, 256, 256))
    a, log = run(hopper, Q.Q4_0, dtype, gamma, ws, x)
    assert log.count("qgemv", mma=1, early=1) == 1, log.records()
    with tuning.override(**{"qgemv.early_weights": False}):
        b, log = run(hopper, Q.Q4_0, dtype, gamma, ws, x)
    assert log.count("qgemv", mma=1, early=0) == 1, log.records()
    for u, v in zip(a, b):
        assert np.array_equal(u.view(np.uint16), v.view(np.uint16))


@pytest.mark.gpu
@pytest.mark.parametrize("quant,hidden", [("Q4_1", 64), ("Q4_0", 256)])
def test_a_random_gguf_llama_decodes_the_same_greedy_tokens_with_and_without_the_folds(hopper, tmp_path, quant, hidden):
    """Hidden 64 (36- and 40-byte rows: the general GEMV folds) and 256 (144-byte Q4_0 rows: the
    tensor-core GEMV folds)."""
    from max.driver import DeviceSpec
    from max.interfaces import SamplingParams
    from max.pipelines import PipelineConfig
    from max.pipelines.lib.generate import Generator
    from max.pipelines.lib.pipeline import load_pipeline
    from reference.checkpoints import write_checkpoint
    from test_tensor_parallel import assert_greedy_agrees

    sizes = {"hidden_size": hidden, "intermediate_size": 2 * hidden}
    ckpt = write_checkpoint(directory=tmp_path, seed=11, arch="llama", gguf_quant=quant, config_overrides=sizes)
    kw = dict(model_path=str(ckpt["gguf"]), max_length=64, kv_cache_page_size=16,
              device_specs=[DeviceSpec.accelerator(hopper.id)])
    with tuning.record_launches() as log:
        fused = load_pipeline(PipelineConfig(**kw))
        sp = SamplingParams(top_k=1, max_new_tokens=16, ignore_eos=True)
        prompt = np.random.default_rng(5).integers(5, ckpt["config"]["vocab_size"], 12).tolist()
        gen = Generator(fused)
        tokens = list(gen.run([gen.context(prompt, sp)])[0].tokens)
    assert log.count("qgemv", norm=1) > 0 and log.count("qgemv", norm=1, gated=1) > 0, log.records("qgemv")
    with tuning.override(**{"fusion.norm_gemv": False, "fusion.gated_gemv": False}):
        plain = load_pipeline(PipelineConfig(**kw))
    decisive = assert_greedy_agrees(fused, plain, prompt, tokens, rel=1e-2)
    assert len(decisive) >= len(tokens) // 2, (decisive, tokens)
