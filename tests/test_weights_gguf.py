"""GGUFWeights on files written by the `gguf` package: plain tensors load as their dtype,
block tensors as uint8 [rows, bytes] with their encoding, byte for byte as gguf.GGUFReader
reads them and decoding to gguf.quants.dequantize's values (bit for bit, by our decoder and
by ops.dequantize in a model); every metadata type; alignment; GGUF v2; qmatmul on
allocated weights."""

from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as GT  # noqa: E402
from gguf import quants  # noqa: E402

from max import driver, engine  # noqa: E402
from max._core import weights as core_weights  # noqa: E402
from max.dtype import DType  # noqa: E402
from max.graph import DeviceRef, Graph, TensorType, ops  # noqa: E402
from max.graph.quantization import QuantizationEncoding as Q  # noqa: E402
from max.graph.weights import GGUFWeights, load_weights  # noqa: E402
from weights_util import ENCODINGS, patched, quantized, raw_bytes, write_gguf  # noqa: E402

PLAIN = {
    GT.F32: (np.float32, DType.float32),
    GT.F16: (np.float16, DType.float16),
    GT.F64: (np.float64, DType.float64),
    GT.I8: (np.int8, DType.int8),
    GT.I16: (np.int16, DType.int16),
    GT.I32: (np.int32, DType.int32),
    GT.I64: (np.int64, DType.int64),
}


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype == np.float32
    bad = got.view(np.uint32) != want.view(np.uint32)
    assert not bad.any(), f"{bad.sum()} of {got.size} differ; first at {np.argwhere(bad)[0]}"


@pytest.fixture
def gguf_file(tmp_path, rng):
    """A file with every plain type, BF16, every MAX block encoding and Q5_0 (readable but
    not computable); returns (path, {name: (array written, ggml type)})."""
    tensors = []
    for t, (np_dt, _) in PLAIN.items():
        arr = (rng.standard_normal((3, 8)) * 10).astype(np_dt)
        tensors.append((f"blk.0.{t.name.lower()}", arr, None))
    x = rng.standard_normal((2, 32)).astype(np.float32)
    tensors.append(("blk.0.bf16", quants.quantize(x, GT.BF16), GT.BF16))
    for enc, t in ENCODINGS.items():
        tensors.append((f"blk.1.{enc.value.lower()}", quantized(rng, t, 3, 512), t))
    tensors.append(("blk.1.q5_0", quants.quantize(rng.standard_normal((2, 64)).astype(np.float32), GT.Q5_0), GT.Q5_0))
    path = write_gguf(tmp_path / "model.gguf", tensors)
    return path, {n: (a, raw) for n, a, raw in tensors}


def test_tensors_match_the_gguf_reader(gguf_file):
    path, written = gguf_file
    w = load_weights([path])
    assert isinstance(w, GGUFWeights)
    reader = gguf.GGUFReader(str(path))
    assert [n for n, _ in w.items()] == [t.name for t in reader.tensors]
    for t in reader.tensors:
        if t.tensor_type == GT.Q5_0:
            continue
        d = w[t.name].data()
        assert raw_bytes(d.data) == t.data.tobytes(), t.name
        if t.tensor_type in PLAIN:
            np_dt, dt = PLAIN[t.tensor_type]
            assert (d.dtype, list(d.shape), d.quantization_encoding) == (dt, list(t.data.shape), None)
            assert np.array_equal(d.data.to_numpy(), written[t.name][0])
        elif t.tensor_type == GT.BF16:
            assert (d.dtype, list(d.shape)) == (DType.bfloat16, [2, 32])
            np.testing.assert_array_equal(d.data.to_numpy().astype(np.float32), quants.dequantize(t.data, GT.BF16))
        else:
            enc = Q(t.tensor_type.name)
            assert (d.dtype, list(d.shape), d.quantization_encoding) == (DType.uint8, list(t.data.shape), enc)
            assert list(d.shape) == [3, 512 // enc.elements_per_block * enc.block_size]


def test_block_tensors_decode_like_gguf(gguf_file):
    path, written = gguf_file
    w = GGUFWeights(path)
    sess = engine.InferenceSession(devices=[driver.CPU()])
    for enc, t in ENCODINGS.items():
        node = w.blk[1][enc.value.lower()]
        d = node.data()
        want = quants.dequantize(written[node.name][0], t)
        same_bits(core_weights.dequantize(d.data, enc.value).to_numpy(), want)
        weight = node.allocate(quantization_encoding=enc, shape=[3, 512])
        with Graph(f"deq_{enc.value}", input_types=[]) as g:
            g.output(ops.dequantize(enc, weight))
        out = sess.load(g, weights_registry=w.allocated_weights).execute()[0].to_numpy()
        same_bits(out, want)


def test_qmatmul_on_allocated_weights(gguf_file, rng):
    path, written = gguf_file
    w = GGUFWeights(path)
    x = rng.standard_normal((2, 512)).astype(np.float32)
    sess = engine.InferenceSession(devices=[driver.CPU()])
    for enc, t in ENCODINGS.items():
        weight = w.blk[1][enc.value.lower()].allocate()
        assert weight.quantization_encoding is enc and weight.dtype == DType.uint8
        with Graph(f"qmm_{enc.value}", input_types=[TensorType(DType.float32, [2, 512], DeviceRef.CPU())]) as g:
            g.output(ops.qmatmul(enc, None, g.inputs[0], weight))
        out = sess.load(g, weights_registry=w.allocated_weights).execute(x)[0].to_numpy()
        deq = quants.dequantize(written[weight.name][0], t).astype(np.float64)
        want = x.astype(np.float64) @ deq.T
        # The CPU quantizes x in two 8-bit planes (values and residual) per block of 32
        # (K-quants: 256) values: half a step of the residual plane per value at most.
        block = 256 if enc in (Q.Q4_K, Q.Q5_K, Q.Q6_K) else 32
        amax = np.abs(x).reshape(2, -1, block).max(-1)
        bound = amax / 254**2 @ np.abs(deq).reshape(deq.shape[0], -1, block).sum(-1).T
        assert (np.abs(out - want) <= bound + 1e-5 * np.abs(want).max()).all()


def test_allocate_checks_encoding_dtype_and_shape(gguf_file):
    path, _ = gguf_file
    w = GGUFWeights(path)
    q = w.blk[1].q4_k
    with pytest.raises(ValueError, match=r"allocate: quantization_encoding: weight 'blk.1.q4_k' holds Q4_K blocks, not Q6_K"):
        q.allocate(quantization_encoding=Q.Q6_K)
    with pytest.raises(ValueError, match="allocate: dtype: weight 'blk.1.q4_k' holds uint8, not float32"):
        q.allocate(DType.float32)
    with pytest.raises(ValueError, match=r"has shape \[3, 288\] or \[3, 512\], not \[512, 3\]"):
        q.allocate(shape=[512, 3])
    assert list(q.allocate(shape=[3, 288]).shape) == [3, 288]
    with pytest.raises(ValueError, match="holds plain float16 values, not Q8_0"):
        w.blk[0].f16.allocate(quantization_encoding=Q.Q8_0)
    # A type MAX cannot compute with is listed, but cannot be used.
    assert w.blk[1].q5_0.exists()
    with pytest.raises(ValueError, match="'blk.1.q5_0' in .*: its GGML type Q5_0 is not one MAX computes with"):
        w.blk[1].q5_0.data()
    with pytest.raises(KeyError, match="Did you mean 'blk.1.q4_k'"):
        w.blk[1].q4k.allocate()
    assert set(w.allocated_weights) == {"blk.1.q4_k"}


def test_every_metadata_type(tmp_path):
    def meta(wr):
        wr.add_uint8("t.u8", 200)
        wr.add_int8("t.i8", -100)
        wr.add_uint16("t.u16", 60000)
        wr.add_int16("t.i16", -30000)
        wr.add_uint32("t.u32", 4_000_000_000)
        wr.add_int32("t.i32", -2_000_000_000)
        wr.add_float32("t.f32", 0.1)
        wr.add_uint64("t.u64", 2**64 - 1)
        wr.add_int64("t.i64", -(2**63))
        wr.add_float64("t.f64", 0.1)
        wr.add_bool("t.bool", False)
        wr.add_string("t.str", "日本語 text")
        wr.add_array("t.strs", ["a", "", "ccc"])
        wr.add_array("t.ints", [1, -2, 3])
        wr.add_array("t.floats", [0.5, 1.25])
        wr.add_array("t.bools", [True, False])
        wr.add_array("t.bytes", b"\x00\xff")
        wr.add_array("t.nested", [[1, 2], [3]])

    path = write_gguf(tmp_path / "meta.gguf", [("w", np.ones(4, np.float32), None)], meta)
    w = GGUFWeights(path)
    got = {k: (w.metadata_types[k], v) for k, v in w.metadata.items()}
    assert got == w._metadata
    reader = gguf.GGUFReader(str(path))
    for field in reader.fields.values():
        if field.name.startswith("GGUF."):
            continue
        kind, value = got[field.name]
        types = [gguf.GGUFValueType(t).name for t in field.types]
        assert kind == "[".join(types) + "]" * (len(types) - 1), field.name
        if types[0] == "ARRAY" and len(types) == 2:
            assert value == list(field.contents()), field.name
        elif types[0] != "ARRAY":
            assert value == field.contents(), field.name
    assert got["t.f32"] == ("FLOAT32", float(np.float32(0.1))) and got["t.f64"] == ("FLOAT64", 0.1)
    assert got["t.nested"] == ("ARRAY[ARRAY[INT32]]", [[1, 2], [3]])
    assert list(got)[:2] == ["general.architecture", "t.u8"]


def test_alignment_and_version_2(tmp_path, rng):
    x = rng.standard_normal((4, 8)).astype(np.float32)
    q = quants.quantize(rng.standard_normal((2, 64)).astype(np.float32), GT.Q8_0)
    path = write_gguf(tmp_path / "a.gguf", [("odd", np.ones(3, np.int8), None), ("x", x, None), ("q", q, GT.Q8_0)],
                      alignment=256)
    f = core_weights.GgufFile(path)
    assert (f.version, f.alignment, f.data_offset % 256) == (3, 256, 0)
    assert all(row[6] % 256 == 0 for row in f.tensors())
    v2 = patched(path, tmp_path / "v2.gguf", [(4, "<I", 2)])
    for p in (path, v2):
        w = GGUFWeights(p)
        assert np.array_equal(w.x.data().data.to_numpy(), x)
        assert raw_bytes(w.q.data().data) == q.tobytes()
    assert core_weights.GgufFile(v2).version == 2


def test_gguf_reader_as_source(gguf_file):
    path, _ = gguf_file
    w = GGUFWeights(gguf.GGUFReader(str(path)), tensors={"blk.0.f32": None})
    assert [n for n, _ in w.items()] == ["blk.0.f32"]
    with pytest.raises(TypeError, match="GGUFWeights: source: expected a path or a gguf.GGUFReader"):
        GGUFWeights(3)
    with pytest.raises(ValueError, match=r"GGUFWeights: tensors: \['nope'\] are not in"):
        GGUFWeights(path, tensors={"nope": None})
    with pytest.raises(FileNotFoundError, match="GGUFWeights: source: No such file"):
        GGUFWeights(path.parent / "missing.gguf")
    with pytest.raises(ValueError, match="a GGUF checkpoint is one file, got 2"):
        load_weights([path, path])
