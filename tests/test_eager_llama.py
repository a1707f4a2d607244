"""The eager Llama block (max.nn.llama) against the graph block the pipelines build
(TransformerBlock of AttentionWithRope, MLP and RMSNorm over the paged KV cache), compiled with
InferenceSession: the same random weights and inputs through a ragged prompt and two decode
steps that read the cache; every output and the cache contents must agree bit for bit. A
float64 numpy block checks that both compute a Llama block at all."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType
from max.nn.attention import AttentionWithRope
from max.nn.kv_cache import KVCacheParams, PagedCacheValues
from max.nn.kv_cache.paged_cache import PagedKVCache
from max.nn.linear import MLP
from max.nn.llama import LlamaBlock
from max.nn.norm import RMSNorm
from max.nn.rope import freqs
from max.nn.rotary_embedding import RotaryEmbedding
from max.nn.transformer import TransformerBlock
from max.tensor import Tensor, default_device, default_dtype
from max._eager import compiled

NP = {DType.float32: np.float32, DType.bfloat16: ml_dtypes.bfloat16}
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN = 64, 4, 2, 16, 96
LAYERS, LAYER, PAGE, PAGES, MAX_SEQ = 2, 1, 4, 16, 64
EPS, THETA = 1e-5, 10000.0
PROMPTS = [5, 3, 6]  # ragged: pages of 4 fill and spill over
STEPS = [PROMPTS, [1, 1, 1], [1, 1, 1]]


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8 if a.dtype.itemsize == 1 else f"u{a.dtype.itemsize}")


def _assert_same_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype, got.shape, want.shape)
    diff = np.flatnonzero(_bits(got) != _bits(want))
    assert diff.size == 0, (
        f"{what}: {diff.size} of {got.size} elements differ, first at {diff[:5].tolist()}: "
        f"{got.reshape(-1)[diff[:3]]} vs {want.reshape(-1)[diff[:3]]}"
    )


def _weights(rng, dtype: DType) -> dict[str, np.ndarray]:
    def w(*shape, scale=None):
        scale = scale if scale is not None else 1.0 / np.sqrt(shape[-1])
        return (rng.standard_normal(shape) * scale).astype(NP[dtype])

    return {
        "self_attn.q_proj.weight": w(HEADS * HEAD_DIM, HIDDEN),
        "self_attn.k_proj.weight": w(KV_HEADS * HEAD_DIM, HIDDEN),
        "self_attn.v_proj.weight": w(KV_HEADS * HEAD_DIM, HIDDEN),
        "self_attn.o_proj.weight": w(HIDDEN, HEADS * HEAD_DIM),
        "mlp.gate_proj.weight": w(FFN, HIDDEN),
        "mlp.up_proj.weight": w(FFN, HIDDEN),
        "mlp.down_proj.weight": w(HIDDEN, FFN),
        "input_layernorm.weight": (1.0 + 0.1 * rng.standard_normal(HIDDEN)).astype(NP[dtype]),
        "post_attention_layernorm.weight": (1.0 + 0.1 * rng.standard_normal(HIDDEN)).astype(NP[dtype]),
    }


def _kv_params(dtype: DType, ref: DeviceRef) -> KVCacheParams:
    return KVCacheParams(dtype=dtype, n_kv_heads=KV_HEADS, head_dim=HEAD_DIM, num_layers=LAYERS, devices=[ref],
                         page_size=PAGE)


def _graph_block(dtype: DType, device: driver.Device, state: dict, clip_qkv: float | None = None) -> engine.Model:
    """The decoder layer as llama3's build() makes it, in a graph of one block."""
    ref = DeviceRef.from_device(device)
    kv_params = _kv_params(dtype, ref)
    rope = RotaryEmbedding(HIDDEN, HEADS, THETA, MAX_SEQ, HEAD_DIM, interleaved=False)
    attn = AttentionWithRope(rope=rope, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, hidden_size=HIDDEN,
                             kv_params=kv_params, devices=[ref], dtype=dtype, head_dim=HEAD_DIM, clip_qkv=clip_qkv)
    mlp = MLP(dtype, None, HIDDEN, FFN, [ref])
    block = TransformerBlock(attn, mlp, RMSNorm(HIDDEN, dtype, EPS), RMSNorm(HIDDEN, dtype, EPS))
    block.load_state_dict(state)
    types = [TensorType(dtype, ["total_seq_len", HIDDEN], ref), TensorType(DType.uint32, ["offsets_len"], ref),
             *kv_params.get_symbolic_inputs()[0]]
    with Graph("llama_block", input_types=types) as g:
        x, offsets, *cache = g.inputs
        kv = PagedCacheValues.from_values(cache)
        g.output(block(LAYER, x.tensor, kv, rope.freqs_cis_on(ref), offsets.tensor))
    devices = [driver.CPU()] if device.is_host else [driver.CPU(), device]
    return engine.InferenceSession(devices=devices).load(g, weights_registry=block.state_dict())


def _eager_block(dtype: DType, device: driver.Device, state: dict) -> LlamaBlock:
    with default_dtype(dtype), default_device(device):
        block = LlamaBlock(HIDDEN, HEADS, KV_HEADS, FFN, head_dim=HEAD_DIM, layer_idx=LAYER, rms_norm_eps=EPS)
    block.load_state_dict({k: Tensor.constant(v, dtype=dtype, device=device) for k, v in state.items()})
    return block


def _host(x: Tensor | driver.Buffer) -> np.ndarray:
    """Host values in the tensor's own dtype (bfloat16 stays bfloat16)."""
    buf = x.storage if isinstance(x, Tensor) else x
    return (buf if buf.device.is_host else buf.to(driver.CPU())).to_numpy()


def _reference_block(state: dict, xs: np.ndarray, hist: list, lens: list[int], n: list[int],
                     clip: float = np.inf) -> np.ndarray:
    """The block in float64 with Hugging Face's RoPE (dim i with dim i + head_dim/2); `hist`
    collects each sequence's keys and values across steps; q, k and v clamped to [-clip, clip]."""
    f = {k: v.astype(np.float64) for k, v in state.items()}

    def norm(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * w

    def rope(x, pos):
        inv = 1.0 / THETA ** (np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
        ang = pos[:, None, None] * inv
        a, b = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2:]
        return np.concatenate([a * np.cos(ang) - b * np.sin(ang), b * np.cos(ang) + a * np.sin(ang)], -1)

    x = xs.astype(np.float64)
    h_in = norm(x, f["input_layernorm.weight"])
    out = np.zeros_like(x)
    row = 0
    for s, (cached, count) in enumerate(zip(lens, n)):
        rows = slice(row, row + count)
        pos = np.arange(cached, cached + count, dtype=np.float64)
        proj = {w: np.clip(h_in[rows] @ f[f"self_attn.{w}_proj.weight"].T, -clip, clip) for w in "qkv"}
        q = rope(proj["q"].reshape(count, HEADS, HEAD_DIM), pos)
        k = rope(proj["k"].reshape(count, KV_HEADS, HEAD_DIM), pos)
        v = proj["v"].reshape(count, KV_HEADS, HEAD_DIM)
        hist[s][0].extend(k)
        hist[s][1].extend(v)
        keys, values = np.stack(hist[s][0]), np.stack(hist[s][1])
        for i in range(count):
            for head in range(HEADS):
                kv = head // (HEADS // KV_HEADS)
                scores = keys[: cached + i + 1, kv] @ q[i, head] / np.sqrt(HEAD_DIM)
                p = np.exp(scores - scores.max())
                out[row + i, head * HEAD_DIM:(head + 1) * HEAD_DIM] = (p / p.sum()) @ values[: cached + i + 1, kv]
        row += count
    h = x + out @ f["self_attn.o_proj.weight"].T
    m = norm(h, f["post_attention_layernorm.weight"])
    gate = m @ f["mlp.gate_proj.weight"].T
    act = gate / (1.0 + np.exp(-gate)) * (m @ f["mlp.up_proj.weight"].T)
    return h + act @ f["mlp.down_proj.weight"].T


@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16])
def test_eager_llama_block_matches_the_graph_block_bit_for_bit(device, rng, dtype):
    state = _weights(rng, dtype)
    model = _graph_block(dtype, device, state)
    block = _eager_block(dtype, device, state)
    table = freqs(HEAD_DIM, MAX_SEQ, THETA).to(device)
    cache = PagedKVCache(_kv_params(dtype, DeviceRef.from_device(device)), PAGES, device)
    for _ in PROMPTS:
        cache.add_sequence()
    graph_blocks = Tensor.zeros(cache.blocks.shape, dtype=dtype, device=device).storage
    hist: list = [([], []) for _ in PROMPTS]
    for i, n in enumerate(STEPS):
        lens = cache.lengths
        step = cache.step(n)
        x = (rng.standard_normal((sum(n), HIDDEN))).astype(NP[dtype])
        got = _host(block(Tensor.constant(x, dtype=dtype, device=device), step, table))
        idx = step.arrays()
        inputs = [x, idx["input_row_offsets"]]
        inputs = [driver.Buffer.from_numpy(a).to(device) for a in inputs]
        index = [driver.Buffer.from_numpy(idx[k]).to(device)
                 for k in ("cache_lengths", "lookup_table", "positions", "slots")]
        want = _host(model.execute(*inputs, graph_blocks, *index)[0])
        _assert_same_bits(got, want, f"step {i} output")
        _assert_same_bits(cache.blocks.to_numpy(), _host(graph_blocks), f"step {i} cache")
        ref = _reference_block(state, x, hist, lens, n)
        tol = 2e-4 if dtype == DType.float32 else 6e-2
        np.testing.assert_allclose(got.astype(np.float64), ref, rtol=tol, atol=tol)
    # A decode step reads the cache: the cached positions hold the rotated keys, not zeros.
    assert np.count_nonzero(cache.blocks.to_numpy()[:, 0, LAYER]) > 0


def test_clip_qkv_clamps_the_projections(rng):
    """AttentionWithRope(clip_qkv=c) clamps q, k and v to [-c, c] before the rope (OLMo's
    attention), against the float64 block with the same clamp; c at about the projections'
    median magnitude clamps half of them."""
    device = driver.CPU()
    state = _weights(rng, DType.float32)
    clip = 0.05
    model = _graph_block(DType.float32, device, state, clip_qkv=clip)
    cache = PagedKVCache(_kv_params(DType.float32, DeviceRef.CPU()), PAGES, device)
    for _ in PROMPTS:
        cache.add_sequence()
    blocks = Tensor.zeros(cache.blocks.shape, dtype=DType.float32, device=device).storage
    hist: list = [([], []) for _ in PROMPTS]
    for step, n in enumerate(STEPS[:2]):
        lens = cache.lengths
        idx = cache.step(n).arrays()
        x = rng.standard_normal((sum(n), HIDDEN)).astype(np.float32)
        index = [driver.Buffer.from_numpy(idx[k]) for k in ("cache_lengths", "lookup_table", "positions", "slots")]
        got = _host(model.execute(driver.Buffer.from_numpy(x), driver.Buffer.from_numpy(idx["input_row_offsets"]),
                                  blocks, *index)[0])
        ref = _reference_block(state, x, hist, lens, n, clip)
        np.testing.assert_allclose(got.astype(np.float64), ref, rtol=2e-4, atol=2e-4)
        if step == 0:  # (the clamp matters at this c: without it the first step differs)
            unclipped = _reference_block(state, x, [([], []) for _ in PROMPTS], lens, n)
            assert np.abs(unclipped - ref).max() > 1e-2
    with pytest.raises(ValueError, match="clip_qkv must be positive"):
        _graph_block(DType.float32, device, state, clip_qkv=0.0)


def test_eager_decode_steps_reuse_their_compiled_ops(rng):
    """Each sub-layer is one cached eager op: a second decode step of the same shapes (the
    sequence stays within its first page, so the page table keeps its width) compiles nothing."""
    device = driver.CPU()
    block = _eager_block(DType.float32, device, _weights(rng, DType.float32))
    table = freqs(HEAD_DIM, MAX_SEQ, THETA).to(device)
    cache = PagedKVCache(_kv_params(DType.float32, DeviceRef.CPU()), PAGES, device)
    cache.add_sequence()
    x = lambda n: Tensor.constant(rng.standard_normal((n, HIDDEN)), dtype=DType.float32, device=device)  # noqa: E731
    block(x(2), cache.step([2]), table)
    block(x(1), cache.step([1]), table)
    before = compiled.STATS["compiled"]
    block(x(1), cache.step([1]), table)
    assert compiled.STATS["compiled"] == before
    assert cache.lengths == [4]


def test_cache_buffer_cannot_be_staged():
    """The cache is written in place: using it inside F.functional is a clear error."""
    import max.functional as F

    device = driver.CPU()
    block = _eager_block(DType.float32, device, _weights(np.random.default_rng(0), DType.float32))
    cache = PagedKVCache(_kv_params(DType.float32, DeviceRef.CPU()), PAGES, device)
    cache.add_sequence()
    step = cache.step([2])
    x = Tensor.zeros([2, HIDDEN], dtype=DType.float32)
    with pytest.raises(TypeError, match="MutableBuffer"):
        F.functional(lambda v: block.self_attn(v, step, freqs(HEAD_DIM, MAX_SEQ, THETA)))(x)


def test_quantized_projections_let_float32_attention_read_bfloat16():
    """AttentionWithRope lets its float32 paged attention read bfloat16 (``f32_as_bf16``, the
    GPU's tensor-core decode kernel) only when a projection is GGUF-quantized, whose products
    carry bfloat16's error anyway; float32 projections keep float32 attention."""
    from max.graph.quantization import QuantizationEncoding

    ref = DeviceRef.CPU()
    kv_params = _kv_params(DType.float32, ref)
    rope = RotaryEmbedding(HIDDEN, HEADS, THETA, MAX_SEQ, HEAD_DIM, interleaved=False)
    types = [TensorType(DType.float32, ["tokens", HIDDEN], ref), TensorType(DType.uint32, ["offsets"], ref),
             *kv_params.get_symbolic_inputs()[0]]
    for encoding in (None, QuantizationEncoding.Q4_0):
        attn = AttentionWithRope(rope=rope, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, hidden_size=HIDDEN,
                                 kv_params=kv_params, devices=[ref], dtype=DType.float32, head_dim=HEAD_DIM,
                                 quantization_encoding=encoding)
        attn.state_dict()  # names the weights (q_proj.weight, ...)
        with Graph("attention", input_types=types) as g:
            x, offsets, *cache = g.inputs
            g.output(attn(LAYER, x.tensor, PagedCacheValues.from_values(cache), rope.freqs_cis_on(ref), offsets.tensor))
        ops = [line for line in str(g).splitlines() if "paged_attention(" in line]
        assert len(ops) == 1 and ("f32_as_bf16=true" in ops[0]) == (encoding is not None), ops
