"""A decoder layer's RMSNorms folded into the W^T products they feed and its gated MLP's
``act(gate) * up`` joined into the gate and up products (engine/passes/fuse_norm_gemv.rs and
fuse_gated_gemv.rs; gemv_nt.cu's skinny_nt ``_norm``/``_gated`` kernels): one launch for
``rms_norm -> q, k, v`` and one for ``rms_norm -> silu(gate) * up`` at 1-4 rows, the unfused
kernels through the step's scratch values at more rows. Rows longer than
fusion.norm_gemv_max_k take the ``_postnorm`` kernels, which scale the products of ``A * g`` by
1 / rms at the end. Checked: which steps the passes make
(any machine); on a GPU, bf16 (both norm kernels) and f32 layers against numpy float64 at 1-5 and 64 rows with K
not a multiple of the kernels' 256-element step nor of 8 (element loads); bf16 results equal
bit for bit to the unfused graph's (fusion.norm_gemv=0, fusion.gated_gemv=0) where the rms_norm
kernel sums like the fused prologue (rows of at most 1024 elements, 16-byte vectors); and a
random bf16 Llama decoding the same greedy tokens with and without the folds (those and the
rope/KV-store fold of test_gpu_rope_store.py)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from engine_util import session
from max import _core, driver, tuning
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops
from max.nn import kernels

GPU = DeviceRef.GPU()
EPS = 1e-5
OFF = {"fusion.norm_gemv": False, "fusion.gated_gemv": False, "fusion.rope_store": False}
# 2-4 rows on gemv_nt.cu only (not gemv_mma.cu's tensor cores), whose fused and unfused kernels sum alike
NT = {"gemv_mma.min_rows": 17}
# bf16: one rounding (2^-9, taken as 2^-8); f32: the sums' rounding over K in the thousands
UNIT = {DType.bfloat16: 2.0**-8, DType.float32: 3e-5}


def as_np(d):
    return ml_dtypes.bfloat16 if d is DType.bfloat16 else np.float32


def weights(rng, dtype, k, nq, nkv, ffn):
    shapes = dict(g1=(k,), wq=(nq, k), wk=(nkv, k), wv=(nkv, k), g2=(k,), wg=(ffn, k), wu=(ffn, k), wd=(k, ffn))
    ws = {name: (rng.standard_normal(s) / np.sqrt(s[-1])).astype(as_np(dtype)) for name, s in shapes.items()}
    for name in ("g1", "g2"):
        ws[name] = (1.0 + rng.standard_normal(k) / 4).astype(as_np(dtype))
    return ws


def layer(dtype, k, ws, device=GPU):
    """q, k, v = rms_norm(x) @ W^T; m = silu(n @ Wg^T) * (n @ Wu^T), n = rms_norm(h); m @ Wd^T + h."""
    types = [TensorType(dtype, ("m", k), device), TensorType(dtype, ("m", k), device)]
    with Graph("layer", input_types=types) as g:
        x, h = g.inputs

        def c(name):
            return ops.constant(ws[name], dtype, device)

        n1 = kernels.rms_norm(x, c("g1"), EPS)
        qkv = [ops.matmul(n1, c(w).T) for w in ("wq", "wk", "wv")]
        n2 = kernels.rms_norm(h, c("g2"), EPS)
        m = ops.silu(ops.matmul(n2, c("wg").T)) * ops.matmul(n2, c("wu").T)
        g.output(*qkv, m, ops.matmul(m, c("wd").T) + h)
    return g


def lowered(g):
    return [s for s in _core.engine._lowered_steps(g._ir) if s != "constant"]


# ---- structure (any machine) -----------------------------------------------------------------


def test_the_layer_folds_into_three_steps_on_the_gpu():
    ws = weights(np.random.default_rng(0), DType.bfloat16, 64, 32, 16, 96)
    assert lowered(layer(DType.bfloat16, 64, ws)) == [
        "gemm[rms_norm+matmul_wt]",
        "gemm[rms_norm+matmul_wt+silu+gated]",
        "gemm[matmul_wt+residual]",
    ]
    with tuning.override(**OFF):
        assert lowered(layer(DType.bfloat16, 64, ws)) == [
            "rms_norm", "gemm[matmul_wt]", "rms_norm", "gemm[matmul_wt+silu]", "gemm[matmul_wt]", "mul",
            "gemm[matmul_wt+residual]",
        ]
    # long rows fold as well (the scale after the products), unless fusion.norm_gemv_post is off
    ws2k = weights(np.random.default_rng(0), DType.bfloat16, 2048, 32, 16, 96)
    folded = ["gemm[rms_norm+matmul_wt]", "gemm[rms_norm+matmul_wt+silu+gated]"]
    assert lowered(layer(DType.bfloat16, 2048, ws2k))[:2] == folded
    with tuning.override(**{"fusion.norm_gemv_post": False}):
        assert lowered(layer(DType.bfloat16, 2048, ws2k)).count("rms_norm") == 2
    # f32 products do not read W as stored on the GPU, and the host never folds
    ws32 = weights(np.random.default_rng(0), DType.float32, 64, 32, 16, 96)
    assert lowered(layer(DType.float32, 64, ws32)).count("rms_norm") == 2
    assert lowered(layer(DType.bfloat16, 64, ws, DeviceRef.CPU())).count("rms_norm") == 2


# ---- numbers (GPU) ---------------------------------------------------------------------------


def reference(x, h, ws):
    """The layer in float64, and each output's tolerance for `unit` (see check)."""
    f = {name: w.astype(np.float64) for name, w in ws.items()}
    x, h = x.astype(np.float64), h.astype(np.float64)

    def rms(a, g):
        return a / np.sqrt(np.mean(a * a, -1, keepdims=True) + EPS) * g

    n1, n2 = rms(x, f["g1"]), rms(h, f["g2"])
    outs, bounds = [], []
    for w in ("wq", "wk", "wv"):
        outs.append(n1 @ f[w].T)
        bounds.append((np.abs(outs[-1]), np.abs(n1) @ np.abs(f[w]).T))
    gate, up = n2 @ f["wg"].T, n2 @ f["wu"].T
    mag_g, mag_u = np.abs(n2) @ np.abs(f["wg"]).T, np.abs(n2) @ np.abs(f["wu"]).T
    sig = 1 / (1 + np.exp(-gate))
    s = gate * sig
    m = s * up
    outs.append(m)
    # |silu'| <= 1.1; the rounded normalised rows move gate and up by at most unit * mag
    bounds.append((3 * np.abs(m), 1.1 * mag_g * np.abs(up) + np.abs(s) * mag_u))
    d = m @ f["wd"].T + h
    outs.append(d)
    err_m = bounds[-1][0] + bounds[-1][1]
    bounds.append((np.abs(d) + np.abs(h), (err_m + np.abs(m)) @ np.abs(f["wd"]).T))
    return outs, bounds


def check(got, ref, bound, dtype, what):
    got = np.asarray(got).astype(np.float64)
    assert got.shape == ref.shape, what
    rel, mag = bound
    tol = UNIT[dtype] * (rel + 1.01 * mag) + 1e-6
    bad = ~(np.abs(got - ref) <= tol)
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, np.abs(got - ref) - tol, -np.inf)), ref.shape)
        pytest.fail(f"{what}: {bad.sum()} of {bad.size} wrong, e.g. at {i}: {got[i]} vs {ref[i]} (tol {tol[i]})")


def run(model, gpu, *arrays):
    args = [driver.Buffer.from_numpy(np.ascontiguousarray(a)).to(gpu) for a in arrays]
    return [o.to_numpy() for o in model.execute(*args)]


@pytest.mark.gpu
@pytest.mark.parametrize("k", [576, 100, 2056])
@pytest.mark.parametrize(  # (f32 products do not fold long rows: the _postnorm kernels are 16-bit)
    "dtype,post", [(DType.bfloat16, False), (DType.bfloat16, True), (DType.float32, False)],
    ids=["bfloat16-norm", "bfloat16-postnorm", "float32-norm"])
def test_layer_matches_float64(rng, gpu, dtype, k, post):
    ws = weights(rng, dtype, k, 72, 24, 200)
    # the first pass over A at every k tested, or the scale after the products at every k
    with tuning.override(**{"fusion.norm_gemv_max_k": 8 if post else max(k, 1024)}):
        model = session(gpu).load(layer(dtype, k, ws))
    norm = "_postnorm" if post else "_norm"
    for m in (1, 2, 3, 4, 5, 64):
        x = rng.standard_normal((m, k)).astype(as_np(dtype))
        h = rng.standard_normal((m, k)).astype(as_np(dtype))
        with tuning.record_launches() as log:
            got = run(model, gpu, x, h)
        if dtype is DType.bfloat16 and m <= 4:  # the folded kernels ran
            kernels_run = [r["kernel"] for r in log.records("gemv_nt")]
            assert any(n.endswith(norm) for n in kernels_run), kernels_run
            assert any(n.endswith(norm + "_gated") for n in kernels_run), kernels_run
        refs, bounds = reference(x, h, ws)
        for i, (o, r, b) in enumerate(zip(got, refs, bounds)):
            check(o, r, b, dtype, f"{dtype.name} k={k} m={m} output {i}")


@pytest.mark.gpu
@pytest.mark.parametrize("k", [576, 64])
def test_bf16_layer_equals_the_unfused_graph_bit_for_bit(rng, gpu, k):
    nq, nkv, ffn = (576, 192, 1536) if k == 576 else (64, 32, 160)  # SmolLM2-135M's layer, a small one
    ws = weights(rng, DType.bfloat16, k, nq, nkv, ffn)
    fused = session(gpu).load(layer(DType.bfloat16, k, ws))
    with tuning.override(**OFF):
        plain = session(gpu).load(layer(DType.bfloat16, k, ws))
    for m in (1, 2, 3, 4):
        x = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
        h = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
        with tuning.override(**NT):  # the unfused products on gemv_nt too
            a, b = run(fused, gpu, x, h), run(plain, gpu, x, h)
        for i, (u, v) in enumerate(zip(a, b)):
            assert np.array_equal(u.view(np.uint16), v.view(np.uint16)), f"k={k} m={m} output {i}"


@pytest.mark.gpu
def test_a_random_llama_decodes_the_same_greedy_tokens_with_and_without_the_folds(gpu, tmp_path):
    from max.driver import DeviceSpec
    from max.interfaces import SamplingParams
    from max.pipelines import PipelineConfig
    from max.pipelines.lib.generate import Generator
    from max.pipelines.lib.pipeline import load_pipeline
    from reference.checkpoints import write_checkpoint

    ckpt = write_checkpoint(directory=tmp_path, seed=9, arch="llama", dtype="bfloat16")
    kw = dict(model_path=str(ckpt["hf_dir"]), max_length=64, kv_cache_page_size=16, max_batch_size=4,
              device_specs=[DeviceSpec.accelerator(0)])
    with tuning.record_launches() as log, tuning.override(**NT):
        fused = load_pipeline(PipelineConfig(**kw))
        with tuning.override(**OFF):
            plain = load_pipeline(PipelineConfig(**kw))
        sp = SamplingParams(top_k=1, max_new_tokens=12, ignore_eos=True)
        rng = np.random.default_rng(4)
        prompts = [rng.integers(5, ckpt["config"]["vocab_size"], n).tolist() for n in (7, 3, 11)]
        for group in (prompts[:1], prompts):  # decode at one row, then three
            toks = []
            for p in (fused, plain):
                gen = Generator(p)
                toks.append([r.tokens for r in gen.run([gen.context(ids, sp) for ids in group])])
            assert toks[0] == toks[1], f"{len(group)} prompts"
    kernels_run = {r["kernel"] for r in log.records("gemv_nt")}
    assert any(n.endswith("_norm_gated") for n in kernels_run), kernels_run
