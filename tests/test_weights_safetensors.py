"""SafetensorWeights and the Weights API on files written by the `safetensors` package: every
dtype's bytes, sharded checkpoints, hierarchical names, allocate and its checks, WeightData,
and weights flowing into InferenceSession.load without a copy on the host."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

st_numpy = pytest.importorskip("safetensors.numpy")
from safetensors import safe_open  # noqa: E402

from max import driver, engine  # noqa: E402
from max.dtype import DType  # noqa: E402
from max.graph import DeviceRef, Graph, TensorType, Weight, ops  # noqa: E402
from max.graph.quantization import QuantizationEncoding as Q  # noqa: E402
from max.graph.weights import (  # noqa: E402
    SafetensorWeights,
    WeightData,
    Weights,
    WeightsFormat,
    load_weights,
    weights_format,
)
from weights_util import raw_bytes  # noqa: E402

DTYPES = {
    "bool": (np.bool_, DType.bool),
    "u8": (np.uint8, DType.uint8),
    "i8": (np.int8, DType.int8),
    "u16": (np.uint16, DType.uint16),
    "i16": (np.int16, DType.int16),
    "u32": (np.uint32, DType.uint32),
    "i32": (np.int32, DType.int32),
    "u64": (np.uint64, DType.uint64),
    "i64": (np.int64, DType.int64),
    "f16": (np.float16, DType.float16),
    "bf16": (ml_dtypes.bfloat16, DType.bfloat16),
    "f32": (np.float32, DType.float32),
    "f64": (np.float64, DType.float64),
    "f8e4m3": (ml_dtypes.float8_e4m3fn, DType.float8_e4m3fn),
    "f8e5m2": (ml_dtypes.float8_e5m2, DType.float8_e5m2),
}


def array(rng, np_dtype, shape) -> np.ndarray:
    if np_dtype is np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if np.dtype(np_dtype).kind in "iu":
        info = np.iinfo(np_dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), size=shape).astype(np_dtype)
    return rng.standard_normal(shape).astype(np_dtype)


@pytest.fixture
def model(tmp_path, rng):
    """A BERT-like checkpoint: name -> array, and its file."""
    tensors = {
        "embeddings.word_embeddings.weight": array(rng, np.float32, (10, 4)),
        "encoder.layer.0.attention.query.weight": array(rng, np.float32, (4, 4)),
        "encoder.layer.0.attention.query.bias": array(rng, np.float32, (4,)),
        "encoder.layer.1.attention.query.weight": array(rng, np.float16, (4, 4)),
        "pooler.scale": np.array(2.5, dtype=np.float64),
    }
    path = tmp_path / "model.safetensors"
    st_numpy.save_file(tensors, str(path))
    return tensors, path


def test_every_dtype_reads_back_byte_for_byte(tmp_path, rng):
    tensors = {f"t.{k}": array(rng, np_dt, (3, 5)) for k, (np_dt, _) in DTYPES.items()}
    tensors["t.scalar"] = np.array(7, dtype=np.int32)
    tensors["t.empty"] = np.zeros((0, 4), dtype=np.float32)
    path = tmp_path / "all.safetensors"
    st_numpy.save_file(tensors, str(path))
    w = SafetensorWeights([path])
    with safe_open(str(path), "np") as f:
        readable = set(f.keys())
    for key, (np_dt, dt) in DTYPES.items():
        d = w.t[key].data()
        assert (d.name, d.dtype, list(d.shape), d.quantization_encoding) == (f"t.{key}", dt, [3, 5], None)
        assert isinstance(d.data, driver.Buffer) and d.data.dtype == dt and d.data.shape == (3, 5)
        assert raw_bytes(d.data) == tensors[f"t.{key}"].tobytes(), key
        if key.startswith("f8"):
            continue  # safetensors.numpy writes float8 but cannot read it back
        ref = safe_open(str(path), "np").get_tensor(f"t.{key}")
        assert f"t.{key}" in readable and raw_bytes(d.data) == ref.tobytes(), key
    assert w.t.scalar.data().data.to_numpy() == 7 and list(w.t.scalar.data().shape) == []
    assert w.t.empty.data().data.shape == (0, 4)


def test_sharded_checkpoints_span_files(tmp_path, rng):
    a = {"model.layers.0.w": array(rng, np.float32, (2, 3)), "model.embed": array(rng, np.float32, (4, 3))}
    b = {"model.layers.1.w": array(rng, np.float16, (2, 3)), "lm_head": array(rng, np.float32, (3, 4))}
    paths = [tmp_path / "model-00001-of-00002.safetensors", tmp_path / "model-00002-of-00002.safetensors"]
    st_numpy.save_file(a, str(paths[0]))
    st_numpy.save_file(b, str(paths[1]))
    w = load_weights(paths)
    assert isinstance(w, SafetensorWeights) and isinstance(w, Weights)
    assert [n for n, _ in w.items()] == ["model.embed", "model.layers.0.w", "lm_head", "model.layers.1.w"]
    for name, arr in {**a, **b}.items():
        assert np.array_equal(w[name].data().data.to_numpy(), arr)
    assert np.array_equal(w.model.layers[1].w.data().data.to_numpy(), b["model.layers.1.w"])
    # The same name in two shards is ambiguous.
    st_numpy.save_file({"model.embed": a["model.embed"]}, str(tmp_path / "dup.safetensors"))
    with pytest.raises(ValueError, match=r"'model.embed' is in both .*model-00001-of-00002.safetensors"):
        SafetensorWeights([paths[0], tmp_path / "dup.safetensors"])
    # tensors= restricts the names; tensors_to_file_idx must agree with the files.
    only = SafetensorWeights(paths, tensors={"lm_head"}, tensors_to_file_idx={"lm_head": 1})
    assert [n for n, _ in only.items()] == ["lm_head"] and not only.model.embed.exists()
    with pytest.raises(ValueError, match="tensors_to_file_idx: tensor 'lm_head' is not in file 0"):
        SafetensorWeights(paths, tensors_to_file_idx={"lm_head": 0})
    with pytest.raises(ValueError, match=r"tensors: \['nope'\] are not in the files"):
        SafetensorWeights(paths, tensors={"nope"})


def test_hierarchical_names_exists_and_items(model):
    tensors, path = model
    w = SafetensorWeights([path])
    assert w.name == ""
    q = w.encoder.layer[0].attention.query
    assert q.name == "encoder.layer.0.attention.query"
    assert w.encoder.layer["0"].attention.name == w.encoder["layer"][np.int64(0)].attention.name
    assert not q.exists() and q.weight.exists() and q.weight.name == "encoder.layer.0.attention.query.weight"
    assert [n for n, _ in q.items()] == ["bias", "weight"]
    assert [(n, x.name) for n, x in w.encoder.layer[1].items()] == [
        ("attention.query.weight", "encoder.layer.1.attention.query.weight")
    ]
    assert sorted(n for n, _ in w.items()) == sorted(tensors)
    # A prefix matches whole components only.
    assert list(w.encoder.lay.items()) == []
    with pytest.raises(TypeError, match="expected an int or a str"):
        w.encoder.layer[1.5]
    with pytest.raises(AttributeError):
        w.encoder._private
    assert "SafetensorWeights" in repr(q)


def test_unknown_names_raise_key_error_with_a_hint(model):
    _, path = model
    w = SafetensorWeights([path])
    with pytest.raises(KeyError, match=r"'encoder.layer.0.attention.query.wieght' is not a weight in .*model.safetensors. "
                                       r"Did you mean 'encoder.layer.0.attention.query.weight'"):
        w.encoder.layer[0].attention.query.wieght.data()
    with pytest.raises(KeyError, match=r"'encoder.layer.0.nothing.here' .* Weights under 'encoder.layer.0': "
                                       r"'encoder.layer.0.attention.query.bias'"):
        w.encoder.layer[0].nothing.here.allocate()
    with pytest.raises(KeyError, match="It holds 5 weights"):
        w.zzz.data()


def test_allocate_checks_and_records(model):
    tensors, path = model
    w = SafetensorWeights([path])
    weight = w.encoder.layer[0].attention.query.weight.allocate()
    assert isinstance(weight, Weight)
    assert (weight.name, weight.dtype, list(weight.shape), weight.device) == (
        "encoder.layer.0.attention.query.weight", DType.float32, [4, 4], DeviceRef.CPU())
    gpu = w.encoder.layer[1].attention.query.weight.allocate(DType.float16, (4, 4), device=DeviceRef.GPU(0))
    assert gpu.device == DeviceRef.GPU(0) and gpu.quantization_encoding is None
    with pytest.raises(ValueError, match=r"allocate: dtype: weight 'pooler.scale' holds float64, not float32"):
        w.pooler.scale.allocate(DType.float32)
    with pytest.raises(ValueError, match=r"allocate: shape: weight 'pooler.scale' has shape \[\], not \[1\]"):
        w.pooler.scale.allocate(shape=[1])
    with pytest.raises(ValueError, match="allocate: shape: weights have static shapes"):
        w.pooler.scale.allocate(shape=["batch"])
    with pytest.raises(ValueError, match="allocate: quantization_encoding: .* holds plain float64 values, not Q4_0"):
        w.pooler.scale.allocate(quantization_encoding=Q.Q4_0)
    with pytest.raises(TypeError, match="allocate: dtype: expected a max.dtype.DType"):
        w.pooler.scale.allocate(np.float64)
    # Every accessor of the checkpoint sees the same record.
    assert set(w.encoder.allocated_weights) == {
        "encoder.layer.0.attention.query.weight", "encoder.layer.1.attention.query.weight"}
    for name, buf in w.allocated_weights.items():
        assert isinstance(buf, driver.Buffer) and np.array_equal(buf.to_numpy(), tensors[name])
    raw = w.embeddings.word_embeddings.weight.allocate_as_bytes()
    assert (raw.dtype, list(raw.shape)) == (DType.uint8, [10, 16])
    assert raw_bytes(w.allocated_weights["embeddings.word_embeddings.weight"]) == tensors[
        "embeddings.word_embeddings.weight"].tobytes()
    assert list(w.pooler.scale.allocate_as_bytes().shape) == [8]
    with pytest.raises(ValueError, match="allocate_as_bytes: dtype"):
        w.pooler.scale.allocate_as_bytes(DType.float16)


def test_data_is_a_view_of_the_mapped_file(model):
    tensors, path = model
    w = SafetensorWeights([path])
    a = w.embeddings.word_embeddings.weight.data().data.to_numpy()
    b = w.embeddings.word_embeddings.weight.data().data.to_numpy()
    # Both views start at the same address in the map: no copy was made.
    assert a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    assert not a.flags.owndata
    # Writes go to this process's private copy of the page, never to the file.
    before = path.read_bytes()
    a[0, 0] = 1234.0
    assert path.read_bytes() == before


def test_weight_data(model):
    tensors, path = model
    w = SafetensorWeights([path])
    d = w.encoder.layer[1].attention.query.weight.data()
    assert repr(d) == "WeightData(DType.float16, [Dim(4), Dim(4)])"
    f32 = d.astype(DType.float32)
    assert f32.dtype == DType.float32 and f32.name == d.name
    assert np.array_equal(f32.data.to_numpy(), tensors["encoder.layer.1.attention.query.weight"].astype(np.float32))
    bf = d.astype(DType.bfloat16)
    assert bf.data.dtype == DType.bfloat16 and d.astype(DType.float16) is d
    n = WeightData.from_numpy(np.arange(6, dtype=np.int32).reshape(2, 3), "x")
    assert (n.name, n.dtype, list(n.shape)) == ("x", DType.int32, [2, 3]) and isinstance(n.data, np.ndarray)
    assert np.array_equal(np.from_dlpack(n), n.data) and np.array_equal(np.from_dlpack(d), d.data.to_numpy())
    assert n.to_buffer().to_numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(TypeError, match="WeightData.from_numpy: arr"):
        WeightData.from_numpy([1, 2], "x")
    q = WeightData(np.zeros((1, 18), np.uint8), "q", DType.uint8, [1, 18], Q.Q4_0)
    with pytest.raises(ValueError, match="holds Q4_0 blocks; decode them with ops.dequantize"):
        q.astype(DType.float32)


def test_allocated_weights_run_in_a_model(model):
    tensors, path = model
    w = SafetensorWeights([path])
    wq = w.encoder.layer[0].attention.query.weight.allocate()
    bq = w.encoder.layer[0].attention.query.bias.allocate()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with Graph("linear", input_types=[TensorType(DType.float32, [2, 4], DeviceRef.CPU())]) as g:
        g.output(ops.matmul(g.inputs[0], ops.transpose(wq, 0, 1)) + bq)
    sess = engine.InferenceSession(devices=[driver.CPU()])
    want = x @ tensors["encoder.layer.0.attention.query.weight"].T + tensors["encoder.layer.0.attention.query.bias"]
    out = sess.load(g, weights_registry=w.allocated_weights).execute(x)[0].to_numpy()
    np.testing.assert_allclose(out, want, rtol=1e-6)
    # WeightData is accepted in the registry as well.
    registry = {n: w[n].data() for n in w.allocated_weights}
    out = sess.load(g, weights_registry=registry).execute(x)[0].to_numpy()
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_host_weights_are_not_copied_by_the_session(model):
    """The model reads the mapped file's memory itself: a change made through another view of
    the same tensor after loading shows in its results (the process-private copy of the page;
    the file is untouched)."""
    tensors, path = model
    w = SafetensorWeights([path])
    bias = w.encoder.layer[0].attention.query.bias.allocate()
    with Graph("add_bias", input_types=[TensorType(DType.float32, [4], DeviceRef.CPU())]) as g:
        g.output(g.inputs[0] + bias)
    m = engine.InferenceSession(devices=[driver.CPU()]).load(g, weights_registry=w.allocated_weights)
    x = np.zeros(4, np.float32)
    np.testing.assert_array_equal(m.execute(x)[0].to_numpy(), tensors["encoder.layer.0.attention.query.bias"])
    view = w.encoder.layer[0].attention.query.bias.data().data.to_numpy()
    view[:] = [1, 2, 3, 4]
    np.testing.assert_array_equal(m.execute(x)[0].to_numpy(), [1, 2, 3, 4])


def test_load_weights_and_format_errors(tmp_path, model):
    _, path = model
    with pytest.raises(ValueError, match="load_weights: paths: no paths given"):
        load_weights([])
    with pytest.raises(FileNotFoundError, match="load_weights: paths: No such file"):
        load_weights([tmp_path / "missing.safetensors"])
    with pytest.raises(TypeError, match="expected a list of paths"):
        load_weights(path)
    other = tmp_path / "x.bin"
    other.write_bytes(b"\0" * 16)
    with pytest.raises(ValueError, match="unsupported extension"):
        load_weights([other])
    gguf_file = tmp_path / "x.gguf"
    gguf_file.write_bytes(b"GGUF")
    with pytest.raises(ValueError, match="mixed formats"):
        load_weights([path, gguf_file])
    assert weights_format([path]) is WeightsFormat.safetensors and str(WeightsFormat.gguf) == "WeightsFormat.gguf"
    with pytest.raises(FileNotFoundError, match="SafetensorWeights: filepaths: No such file"):
        SafetensorWeights([tmp_path / "nope.safetensors"])
    with pytest.raises(TypeError, match="expected a sequence of paths"):
        SafetensorWeights(path)
    w = SafetensorWeights([path])
    buf = w.pooler.scale.data().data
    w.close()
    with pytest.raises(ValueError, match="the files were closed"):
        w.pooler.scale.data()
    assert buf.to_numpy() == 2.5  # Buffers handed out keep their mapping.
