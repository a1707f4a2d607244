"""A layer's rope + KV-cache store folded into its quantized q/k/v products
(engine/passes/fuse_qkv_rope_store.rs; qgemv_mma.cu and qgemv.cu store the products rotated into
rope(q) and the cache, launch/qgemv_fold.rs `QRope`): one launch at 1-2 tokens instead of two.
Checked: which steps the pass leaves (any machine); on a GPU, the tensor-core and the general
GEMV, f32 and bf16 activations, with and without a folded norm, at 1-2 tokens (one launch,
recorded with rope=1) and at 3-5 (the products, then rope_kv_store), and an encoding no folding
kernel takes (Q8_0 on the streaming GEMV): rope(q) and the cache bit for bit the unfused
graph's (fusion.qkv_rope_store=0) and within rounding of numpy float64 over the host's
dequantized weights; slots past the cache and positions past the table as the unfused store
treats them."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from engine_util import session
from test_gpu_rope_store import rope_ref
from test_quant import host_dequantize, random_blocks
from max import _core, driver, tuning
from max.dtype import DType
from max.graph import BufferType, DeviceRef, Graph, TensorType, Weight, ops
from max.graph.quantization import QuantizationEncoding as Q
from max.nn import kernels

NP = {DType.float32: np.float32, DType.bfloat16: ml_dtypes.bfloat16, DType.float16: np.float16}
BITS = {DType.float32: np.uint32, DType.bfloat16: np.uint16, DType.float16: np.uint16}
PAGES, LAYERS, PAGE, HQ, HKV, D, NPOS, EPS = 6, 2, 8, 4, 2, 64, 64, 1e-5


def qkv_rope_store_graph(name, where, dtype, k, products, norm=True, interleaved=True, rot=D,
                         freqs_dtype=DType.float32):
    """x [t, K] (rms_norm'd with gamma when `norm`), its q, k and v (`products(x)`, called inside
    the graph), their ropes (the first `rot` dims of each head) and their store into layer 1 of
    the cache; the graph's result is rope(q)."""
    types = [
        TensorType(dtype, ["t", k], where),
        BufferType(dtype, [PAGES, 2, LAYERS, PAGE, HKV, D], where),
        TensorType(freqs_dtype, [NPOS, rot], where),
        TensorType(DType.uint32, ["t"], where),
        TensorType(DType.uint32, ["t"], where),
        TensorType(dtype, [k], where),
    ]
    with Graph(name, input_types=types) as g:
        x, cache, freqs, pos, slots, gamma = g.inputs
        if norm:
            x = kernels.rms_norm(x, gamma, EPS)
        q, kk, v = products(x)
        q = kernels.rope(ops.reshape(q, ["t", HQ, D]), freqs, pos, interleaved=interleaved)
        kk = kernels.rope(ops.reshape(kk, ["t", HKV, D]), freqs, pos, interleaved=interleaved)
        kernels.kv_cache_store(cache, kk, ops.reshape(v, ["t", HKV, D]), slots, 1)
        g.output(q)
    return g


def attention_layer_steps(dtype, k, qkv, out, interleaved):
    """The marked steps (those joined with "+") of a layer as the models stage it: `qkv(x)` and
    `out(a)` its products (called inside the graph), rope_attention over layer 1 of a paged
    cache on the GPU."""
    from max.nn.attention.attention_with_rope import rope_attention
    from max.nn.kv_cache.cache_params import PagedCacheValues

    gpu, u32 = DeviceRef.GPU(), DType.uint32
    types = [TensorType(dtype, ["t", k], gpu), BufferType(dtype, [PAGES, 2, LAYERS, PAGE, HKV, D], gpu),
             TensorType(u32, ["b"], gpu), TensorType(u32, ["b", 4], gpu), TensorType(u32, ["t"], gpu),
             TensorType(u32, ["t"], gpu), TensorType(u32, ["b1"], gpu), TensorType(DType.float32, [NPOS, D], gpu)]
    with Graph("layer", input_types=types) as g:
        x, cache, lengths, table, positions, slots, offsets, freqs = g.inputs
        kv = PagedCacheValues(cache, lengths, table, None, positions, slots)
        g.output(rope_attention(x, qkv, out, kv, freqs, offsets, layer=1, n_heads=HQ, n_kv_heads=HKV,
                                head_dim=D, interleaved=interleaved, scale=D**-0.5))
    return [s for s in _core.engine._lowered_steps(g._ir, marks=True) if "+" in s]


def layer(where: DeviceRef, enc, dtype, ws, norm=True, interleaved=True, rot=D, freqs_dtype=DType.float32):
    """qkv_rope_store_graph over the quantized products of `ws` (raw blocks)."""
    weights = [Weight(f"w{i}", DType.uint8, w.shape, where, quantization_encoding=enc) for i, w in enumerate(ws)]
    k = ws[0].shape[1] // enc.block_size * enc.elements_per_block
    return qkv_rope_store_graph("qkv_rope_store", where, dtype, k,
                                lambda x: [ops.qmatmul(enc, None, x, w) for w in weights],
                                norm, interleaved, rot, freqs_dtype)


def raw_weights(rng, enc, k):
    return [random_blocks(rng, enc, n, k // enc.elements_per_block) for n in (HQ * D, HKV * D, HKV * D)]


def test_the_store_folds_into_the_gpu_products(rng):
    ws = raw_weights(rng, Q.Q4_0, 1024)

    def steps(where=DeviceRef.GPU(), interleaved=True, **knobs):
        skip = ("constant", "constant_external", "chain_create", "reshape")
        with tuning.override(**knobs):
            g = layer(where, Q.Q4_0, DType.float32, ws, interleaved=interleaved)
            return [s for s in _core.engine._lowered_steps(g._ir) if s not in skip]

    assert steps() == ["qmatmul+rope_store"]
    assert steps(**{"fusion.qkv_rope_store": False}) == ["qmatmul", "kv_cache_store"]
    # a rotation of halves (a pair 32 rows apart: other warps) and the host keep the store
    assert steps(interleaved=False) == ["qmatmul", "kv_cache_store"]
    host = steps(DeviceRef.CPU())
    assert "kv_cache_store" in host and not any("rope_store" in s for s in host), host


def test_the_folded_store_lets_the_attention_launch_early():
    """passes/mark_early_index.rs on a quantized layer as the models stage it (rope_attention,
    interleaved): the attention reads its index inputs early and the products with the store
    folded in are marked to let it launch early where the store runs apart (3+ tokens)."""
    gpu, k = DeviceRef.GPU(), 1024
    ws = raw_weights(np.random.default_rng(0), Q.Q4_0, k)
    wo = random_blocks(np.random.default_rng(1), Q.Q4_0, k, HQ * D // 32)
    weights = [Weight(f"w{i}", DType.uint8, w.shape, gpu, quantization_encoding=Q.Q4_0) for i, w in enumerate(ws)]
    w_out = Weight("wo", DType.uint8, wo.shape, gpu, quantization_encoding=Q.Q4_0)
    steps = attention_layer_steps(DType.float32, k, lambda a: tuple(ops.qmatmul(Q.Q4_0, None, a, w) for w in weights),
                                  lambda a: ops.qmatmul(Q.Q4_0, None, a, w_out), interleaved=True)
    assert steps == ["qmatmul+rope_store+early_next", "paged_attention+early_index"], steps


def normed(x, gamma, norm):
    """x in float64, rms_norm'd with gamma when `norm`."""
    n = x.astype(np.float64)
    if norm:
        n = n / np.sqrt(np.mean(n * n, -1, keepdims=True) + EPS) * gamma.astype(np.float64)
    return n


def products_reference(n, dense, freqs, pos, interleaved):
    """rope(q), k rotated (the first freqs.shape[1] dims of each head) and v in float64 from the
    lhs `n` and the float64 weights `dense`; and each element's scale (sum of |x| |w| over K, a
    rotated element's with its pair's), for the bound."""
    outs, scales = [], []
    f64 = freqs.astype(np.float64)
    rot = freqs.shape[1]
    for wd, heads, rotate in zip(dense, (HQ, HKV, HKV), (True, True, False)):
        y = (n @ wd.T).reshape(len(n), heads, D)
        s = (np.abs(n) @ np.abs(wd).T).reshape(len(n), heads, D)
        if rotate:
            y = rope_ref(y, f64, pos, interleaved)
            partner = s.copy()
            if interleaved:
                pairs = s[..., :rot].reshape(len(n), heads, rot // 2, 2)
                partner[..., :rot] = pairs[..., ::-1].reshape(len(n), heads, rot)
            else:
                h = rot // 2
                partner[..., :h], partner[..., h:rot] = s[..., h:rot], s[..., :h]
            s = s + np.where(np.arange(D) < rot, partner, 0)
        outs.append(y)
        scales.append(s)
    return outs, scales


def reference(enc, dtype, ws, x, gamma, norm, freqs, pos):
    """products_reference over the host's dequantized weights and the norm's values as stored."""
    n = normed(x, gamma, norm).astype(NP[dtype]).astype(np.float64)
    return products_reference(n, [host_dequantize(enc, w).astype(np.float64) for w in ws], freqs, pos, True)


def check(dtype, t, slots, fused, plain, ref, rel):
    """rope(q) and the cache of the fused graph (`fused`: q, cache) bit for bit the unfused
    graph's (`plain`), and within `rel` of each element's scale of the float64 `ref` (rope(q), k
    and v, their scales) at the tokens' `slots` of layer 1."""
    (qa, ca), (qb, cb) = fused, plain
    bits = BITS[dtype]
    assert np.array_equal(qa.view(bits), qb.view(bits)), f"rope(q), t={t}"
    assert np.array_equal(ca.view(bits), cb.view(bits)), f"cache, t={t}"
    wants, scales = ref
    got_k = np.stack([ca[s // PAGE, 0, 1, s % PAGE] for s in slots]).astype(np.float64)
    got_v = np.stack([ca[s // PAGE, 1, 1, s % PAGE] for s in slots]).astype(np.float64)
    for what, got, want, scale in zip("qkv", (qa.astype(np.float64), got_k, got_v), wants, scales):
        err = np.abs(got - want)
        assert (err <= rel * scale + 1e-30).all(), f"{what}, t={t}: worst {err.max()}"


def run(model, gpu, x, blocks, freqs, pos, slots, gamma):
    cache = driver.Buffer.from_numpy(blocks.copy()).to(gpu)
    args = [driver.Buffer.from_numpy(np.ascontiguousarray(a)).to(gpu) for a in (x, freqs, pos, slots, gamma)]
    with tuning.record_launches() as log:
        (q_out,) = model.execute(args[0], cache, *args[1:])
    return q_out.to_numpy(), cache.to(driver.CPU()).to_numpy(), log


# (encoding, K, the GEMV): Q4_0 and Q4_K rows on 16 bytes take the tensor-core kernel, or with
# qgemv.mma=0 the general one; Q4_1 at K = 576 (SmolLM2's 360-byte rows) the general one; Q6_K
# at K = 4096 its one-row tensor-core kernel (and the general one at two rows), Q5_K the
# byte-decoded general one; Q8_0 the streaming kernel (qgemv.stream), which folds nothing: the
# products, then rope_kv_store.
CASES = [(Q.Q4_0, 1024, "mma"), (Q.Q4_0, 1024, "general"), (Q.Q4_K, 1024, "mma"), (Q.Q4_1, 576, "general"),
         (Q.Q6_K, 4096, "mma"), (Q.Q5_K, 1024, "general"), (Q.Q8_0, 1024, "stream")]


@pytest.mark.gpu
@pytest.mark.parametrize("enc,k,kernel", CASES, ids=lambda c: getattr(c, "value", str(c)))
@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("norm", [True, False], ids=["norm", "plain"])
def test_folded_store_is_the_unfused_one(hopper, rng, enc, k, kernel, dtype, norm):
    ws = raw_weights(rng, enc, k)
    registry = {f"w{i}": w for i, w in enumerate(ws)}
    knobs = {"fusion.quantized": True, "qgemv.mma": kernel == "mma", "qgemv.stream": kernel == "stream"}
    with tuning.override(**knobs):
        fused = session(hopper).load(layer(DeviceRef.GPU(), enc, dtype, ws, norm), weights_registry=registry)
        with tuning.override(**{"fusion.qkv_rope_store": False}):
            plain = session(hopper).load(layer(DeviceRef.GPU(), enc, dtype, ws, norm), weights_registry=registry)
        angles = rng.uniform(0, 2 * np.pi, (NPOS, D // 2))
        freqs = np.stack([np.cos(angles), np.sin(angles)], -1).reshape(NPOS, D).astype(np.float32)
        gamma = (1 + rng.standard_normal(k) / 4).astype(NP[dtype])
        for t in (1, 2, 3, 5):
            x = (rng.standard_normal((t, k)) * 2).astype(NP[dtype])
            pos = rng.integers(0, NPOS, t).astype(np.uint32)
            slots = rng.permutation(PAGES * PAGE)[:t].astype(np.uint32)
            blocks = rng.standard_normal((PAGES, 2, LAYERS, PAGE, HKV, D)).astype(NP[dtype])
            qa, ca, log = run(fused, hopper, x, blocks, freqs, pos, slots, gamma)
            qb, cb, _ = run(plain, hopper, x, blocks, freqs, pos, slots, gamma)
            # (two rows of Q6_K at K = 4096 with a norm: past the general kernel's norm limit)
            one = kernel != "stream" and (t == 1 or (t == 2 and not (enc == Q.Q6_K and norm)))
            launches = (log.count("qgemv", rope=1), log.count("rope_kv_store"))
            assert launches == ((1, 0) if one else (0, 1)), log.records()
            rel = 2.0**-6 if dtype is DType.bfloat16 else 2.0**-16
            check(dtype, t, slots, (qa, ca), (qb, cb), reference(enc, dtype, ws, x, gamma, norm, freqs, pos), rel)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["mma", "general"])
@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float16], ids=lambda d: d.name)
def test_partial_rotation_and_a_table_of_the_activations_type(hopper, rng, kernel, dtype):
    """Rotary dims 32 of 64 (the rest passed through) and freqs_cis of the activations' dtype,
    at one and two tokens: one launch, bit for bit the unfused graph's."""
    enc, k, rot = Q.Q4_0, 1024, 32
    ws = raw_weights(rng, enc, k)
    registry = {f"w{i}": w for i, w in enumerate(ws)}
    with tuning.override(**{"fusion.quantized": True, "qgemv.mma": kernel == "mma"}):
        g = layer(DeviceRef.GPU(), enc, dtype, ws, rot=rot, freqs_dtype=dtype)
        fused = session(hopper).load(g, weights_registry=registry)
        with tuning.override(**{"fusion.qkv_rope_store": False}):
            g = layer(DeviceRef.GPU(), enc, dtype, ws, rot=rot, freqs_dtype=dtype)
            plain = session(hopper).load(g, weights_registry=registry)
        angles = rng.uniform(0, 2 * np.pi, (NPOS, rot // 2))
        freqs = np.stack([np.cos(angles), np.sin(angles)], -1).reshape(NPOS, rot).astype(NP[dtype])
        gamma = (1 + rng.standard_normal(k) / 4).astype(NP[dtype])
        for t in (1, 2):
            x = rng.standard_normal((t, k)).astype(NP[dtype])
            pos = rng.integers(0, NPOS, t).astype(np.uint32)
            slots = rng.permutation(PAGES * PAGE)[:t].astype(np.uint32)
            blocks = rng.standard_normal((PAGES, 2, LAYERS, PAGE, HKV, D)).astype(NP[dtype])
            qa, ca, log = run(fused, hopper, x, blocks, freqs, pos, slots, gamma)
            qb, cb, _ = run(plain, hopper, x, blocks, freqs, pos, slots, gamma)
            assert log.count("qgemv", rope=1) == 1 and log.count("rope_kv_store") == 0, log.records()
            assert np.array_equal(qa.view(np.uint16), qb.view(np.uint16)), f"rope(q), t={t}"
            assert np.array_equal(ca.view(np.uint16), cb.view(np.uint16)), f"cache, t={t}"


@pytest.mark.gpu
def test_products_viewed_as_more_tokens_are_not_folded(hopper, rng):
    """One row of products viewed as two tokens (W_q, W_k and W_v of twice the heads' rows; a
    valid graph): the store's rows are not the products' rows, so the products run, then the
    store, as the unfused graph does."""
    enc, k, dtype, gpu = Q.Q4_0, 1024, DType.float32, DeviceRef.GPU()
    ws = [random_blocks(rng, enc, 2 * n, k // 32) for n in (HQ * D, HKV * D, HKV * D)]
    registry = {f"w{i}": w for i, w in enumerate(ws)}
    weights = [Weight(f"w{i}", DType.uint8, w.shape, gpu, quantization_encoding=enc) for i, w in enumerate(ws)]
    types = [TensorType(dtype, [1, k], gpu), BufferType(dtype, [PAGES, 2, LAYERS, PAGE, HKV, D], gpu),
             TensorType(DType.float32, [NPOS, D], gpu), TensorType(DType.uint32, [2], gpu),
             TensorType(DType.uint32, [2], gpu), TensorType(dtype, [k], gpu)]

    def build():
        with Graph("stretched", input_types=types) as g:
            x, cache, freqs, pos, slots, _ = g.inputs
            q, kk, v = (ops.qmatmul(enc, None, x, w) for w in weights)
            q = kernels.rope(ops.reshape(q, [2, HQ, D]), freqs, pos, interleaved=True)
            kk = kernels.rope(ops.reshape(kk, [2, HKV, D]), freqs, pos, interleaved=True)
            kernels.kv_cache_store(cache, kk, ops.reshape(v, [2, HKV, D]), slots, 1)
            g.output(q)
        return g

    with tuning.override(**{"fusion.quantized": True, "qgemv.mma": True}):
        fused = session(hopper).load(build(), weights_registry=registry)
        with tuning.override(**{"fusion.qkv_rope_store": False}):
            plain = session(hopper).load(build(), weights_registry=registry)
        freqs = rng.uniform(-1, 1, (NPOS, D)).astype(np.float32)
        x = rng.standard_normal((1, k)).astype(np.float32)
        pos, slots = np.array([3, 9], np.uint32), np.array([5, 40], np.uint32)
        blocks = rng.standard_normal((PAGES, 2, LAYERS, PAGE, HKV, D)).astype(np.float32)
        qa, ca, log = run(fused, hopper, x, blocks, freqs, pos, slots, np.ones(k, np.float32))
        qb, cb, _ = run(plain, hopper, x, blocks, freqs, pos, slots, np.ones(k, np.float32))
    assert log.count("qgemv", rope=1) == 0 and log.count("rope_kv_store") == 1, log.records()
    assert np.array_equal(qa.view(np.uint32), qb.view(np.uint32))
    assert np.array_equal(ca.view(np.uint32), cb.view(np.uint32))


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["mma", "general"])
def test_folded_store_at_the_edges(hopper, rng, kernel):
    """Positions past the table (NaN in rope(q) and the keys) and a slot past the cache (k and v
    not stored, q still written), one launch: bit for bit the unfused graph's."""
    enc, k, dtype = Q.Q4_0, 1024, DType.bfloat16
    ws = raw_weights(rng, enc, k)
    registry = {f"w{i}": w for i, w in enumerate(ws)}
    with tuning.override(**{"fusion.quantized": True, "qgemv.mma": kernel == "mma"}):
        fused = session(hopper).load(layer(DeviceRef.GPU(), enc, dtype, ws), weights_registry=registry)
        with tuning.override(**{"fusion.qkv_rope_store": False}):
            plain = session(hopper).load(layer(DeviceRef.GPU(), enc, dtype, ws), weights_registry=registry)
        freqs = rng.uniform(-1, 1, (NPOS, D)).astype(np.float32)
        gamma = (1 + rng.standard_normal(k) / 4).astype(NP[dtype])
        x = rng.standard_normal((2, k)).astype(NP[dtype])
        pos = np.array([NPOS + 5, 3], np.uint32)
        slots = np.array([7, PAGES * PAGE], np.uint32)
        blocks = rng.standard_normal((PAGES, 2, LAYERS, PAGE, HKV, D)).astype(NP[dtype])
        qa, ca, log = run(fused, hopper, x, blocks, freqs, pos, slots, gamma)
        qb, cb, _ = run(plain, hopper, x, blocks, freqs, pos, slots, gamma)
    assert log.count("qgemv", rope=1) == 1 and log.count("rope_kv_store") == 0, log.records()
    assert np.array_equal(qa.view(np.uint16), qb.view(np.uint16))
    assert np.array_equal(ca.view(np.uint16), cb.view(np.uint16))
    assert np.isnan(qa[0].astype(np.float32)).all() and not np.isnan(qa[1].astype(np.float32)).any()
    assert np.isnan(ca[0, 0, 1, 7].astype(np.float32)).all()  # token 0's keys: past the table
    changed = (ca.view(np.uint16) != blocks.view(np.uint16)).reshape(PAGES, 2, LAYERS, PAGE, -1).any(-1)
    assert changed.sum() == 2 and changed[0, 0, 1, 7] and changed[0, 1, 1, 7]  # only token 0's k and v


@pytest.mark.gpu
@pytest.mark.parametrize("hidden", [64, 256])
def test_a_random_gguf_llama_decodes_the_same_greedy_tokens_with_and_without_the_fold(hopper, tmp_path, hidden):
    """Q4_0 at hidden 64 (36-byte rows: the general GEMV folds) and 256 (the tensor-core one);
    the logits of every step equal bit for bit."""
    from max.driver import DeviceSpec
    from max.interfaces import SamplingParams
    from max.pipelines import PipelineConfig
    from max.pipelines.lib.generate import Generator
    from max.pipelines.lib.pipeline import load_pipeline
    from reference.checkpoints import write_checkpoint
    from test_tensor_parallel import assert_greedy_agrees

    sizes = {"hidden_size": hidden, "intermediate_size": 2 * hidden}
    ckpt = write_checkpoint(directory=tmp_path, seed=13, arch="llama", gguf_quant="Q4_0", config_overrides=sizes)
    kw = dict(model_path=str(ckpt["gguf"]), max_length=64, kv_cache_page_size=16,
              device_specs=[DeviceSpec.accelerator(hopper.id)])
    with tuning.record_launches() as log:
        fused = load_pipeline(PipelineConfig(**kw))
        sp = SamplingParams(top_k=1, max_new_tokens=16, ignore_eos=True)
        prompt = np.random.default_rng(7).integers(5, ckpt["config"]["vocab_size"], 12).tolist()
        gen = Generator(fused)
        tokens = list(gen.run([gen.context(prompt, sp)])[0].tokens)
    assert log.count("qgemv", rope=1) > 0 and log.count("rope_kv_store") > 0, log.records("qgemv")
    with tuning.override(**{"fusion.qkv_rope_store": False}):
        plain = load_pipeline(PipelineConfig(**kw))
    # the same products and the same rotation either way: every step's logits bit for bit
    decisive = assert_greedy_agrees(fused, plain, prompt, tokens, rel=0.0)
    assert len(decisive) >= len(tokens) // 2, (decisive, tokens)
