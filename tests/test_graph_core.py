"""max.graph core: devices and types, Graph staging (context manager and forward=), values,
weights, and the text form."""

import numpy as np
import pytest

from max import driver
from max.dtype import DType
from max.graph import (
    BufferType, BufferValue, DeviceKind, DeviceRef, Dim, Graph, Shape, TensorType, TensorValue, Value,
    Weight, ops,
)

CPU = DeviceRef.CPU()


def test_device_refs():
    assert str(DeviceRef.GPU()) == "gpu:0" and str(DeviceRef.CPU(id=1)) == "cpu:1"
    assert DeviceRef.GPU(1).is_gpu() and not DeviceRef.GPU().is_cpu()
    assert DeviceRef.from_device(driver.CPU()) == CPU
    assert DeviceRef.from_device(CPU) is CPU
    assert DeviceRef("gpu", 2) == DeviceRef.GPU(2) and DeviceRef.GPU().device_type is DeviceKind.GPU
    assert DeviceKind.from_string("cpu") is DeviceKind.CPU
    assert CPU.to_device() == driver.CPU()
    with pytest.raises(TypeError):
        DeviceRef.from_device("cpu")
    with pytest.raises(ValueError):
        DeviceRef("tpu")


def test_tensor_and_buffer_types():
    t = TensorType(DType.float32, ("batch", 3), device=CPU)
    assert t.dtype is DType.float32 and t.shape == ["batch", 3] and t.rank == 2 and t.device == CPU
    assert isinstance(t.shape, Shape) and isinstance(t.shape[0], Dim)
    assert t.as_buffer() == BufferType(DType.float32, ["batch", 3], CPU)
    assert t.as_buffer().as_tensor() == t
    assert TensorType(DType.int8, (2,)).device == CPU
    assert repr(t) == "TensorType(dtype=float32, shape=[Dim('batch'), Dim(3)], device=cpu:0)"
    assert t == TensorType(DType.float32, [Dim("batch"), 3], CPU) and hash(t) == hash(TensorType(DType.float32, ["batch", 3], CPU))
    with pytest.raises(TypeError):
        TensorType("float32", (2,))


def test_graph_with_forward_and_context_manager():
    def forward(x, y):
        return x * y + 1

    types = [TensorType(DType.float32, ("n",), CPU)] * 2
    g = Graph("fwd", forward, input_types=types)
    assert g.name == "fwd" and len(g.inputs) == 2
    assert g.output_types == [TensorType(DType.float32, ["n"], CPU)]
    with Graph("ctx", input_types=types) as h:
        assert Graph.current is h
        a, b = (v.tensor for v in h.inputs)
        h.output(a - b, 3)
    assert [t.rank for t in h.output_types] == [1, 0]
    with pytest.raises(LookupError, match="no graph is being staged"):
        Graph.current
    with pytest.raises(TypeError, match="input_types"):
        Graph("bad", input_types=[DType.float32])


def test_nested_graphs_and_values_from_another_graph():
    t = TensorType(DType.float32, (2,), CPU)
    with Graph("outer", input_types=[t]) as outer:
        x = outer.inputs[0].tensor
        with Graph("inner", input_types=[t]) as inner:
            assert Graph.current is inner
            with pytest.raises(ValueError, match="belongs to graph 'outer'"):
                inner.output(x)
        assert Graph.current is outer


def test_values():
    with Graph("v", input_types=[TensorType(DType.int32, ("a", 4), CPU), BufferType(DType.float32, (3,), CPU)]) as g:
        x, buf = g.inputs
        assert isinstance(x, Value) and isinstance(x, TensorValue) and x.tensor is x
        assert isinstance(buf, BufferValue) and buf.buffer is buf
        with pytest.raises(TypeError):
            x.buffer
        with pytest.raises(TypeError):
            buf.tensor
        assert x.dtype is DType.int32 and x.rank == 2 and x.device == CPU and x.shape == ["a", 4]
        assert x.type == TensorType(DType.int32, ["a", 4], CPU)
        assert repr(x) == "TensorValue(dtype=int32, shape=[Dim('a'), Dim(4)], device=cpu:0)"
        assert TensorValue(x) is x and isinstance(TensorValue(np.ones(2, np.float32)), TensorValue)
        assert buf.dtype is DType.float32 and buf.shape == [3]
        with pytest.raises(TypeError, match="truth value"):
            bool(x)
        g.output(x)


def test_weights_join_the_graph_once():
    w = Weight("layer.weight", DType.float32, (4, 3), CPU)
    assert w.type == TensorType(DType.float32, [4, 3], CPU) and w.shape == [4, 3]
    with Graph("w", input_types=[TensorType(DType.float32, ("b", 4), CPU)]) as g:
        x = g.inputs[0].tensor
        v1 = g.add_weight(w)
        v2 = g.add_weight(w)
        assert v1 is v2 and v1.type == w.type
        y = x + ops.constant(np.zeros(4, np.float32), DType.float32, CPU)
        assert (w + 1).shape == [4, 3]
        g.output(y, w)
        with pytest.raises(ValueError, match="already exists"):
            g.add_weight(Weight("layer.weight", DType.int8, (2,), CPU))
    assert "constant_external" in str(g) and str(g).count("constant_external") == 1
    with pytest.raises(ValueError):
        Weight("", DType.float32, (1,))


def test_text_form_names_every_op_and_type():
    with Graph("text", input_types=[TensorType(DType.float32, ("batch", 3), CPU)]) as g:
        x = g.inputs[0].tensor
        g.output(ops.relu(x * 2))
    text = str(g)
    assert text.startswith("graph @text(%0: float32[batch, 3] on cpu:0) -> (float32[batch, 3] on cpu:0)")
    assert "relu(" in text and "mul(" in text and "output %" in text
    g._verify()


def test_shapes_types_and_devices_name_what_is_wrong():
    """A shape that is not a sequence, a negative static dim in a rebind, a negative device id
    and T of a tensor of rank under 2 are errors naming the argument; Shape.is_static says no
    to a negative size."""
    with pytest.raises(TypeError, match="a shape is a sequence of dims, got int 3"):
        Shape(3)
    with pytest.raises(TypeError, match="TensorType: shape must be a sequence of dims, got 5"):
        TensorType(DType.float32, 5, DeviceRef.CPU())
    with pytest.raises(ValueError, match="DeviceRef id must be >= 0, got -1"):
        DeviceRef.GPU(-1)
    assert not Shape.is_static(Shape([-1, 4])) and Shape.is_static(Shape([0, 4]))
    with Graph("g", input_types=[TensorType(DType.float32, (), DeviceRef.CPU()),
                                 TensorType(DType.float32, (3,), DeviceRef.CPU())]) as g:
        s, v = (i.tensor for i in g.inputs)
        with pytest.raises(TypeError, match="rebind: shape: expected a sequence of dims, got 3"):
            v.rebind(3)
        for bad in ((-1,), [-(2**63)]):
            with pytest.raises(ValueError, match="rebind: shape: static dimensions must be non-negative"):
                v.rebind(bad)
        assert v.rebind(iter([3])).shape == [3]
        for t, rank in ((s, 0), (v, 1)):
            with pytest.raises(IndexError, match=f"T swaps the last two dims; a tensor of rank {rank}"):
                t.T


def test_the_always_ready_chain_is_created_once_and_never_advanced():
    from max import engine

    with Graph("g", input_types=[BufferType(DType.float32, (2, 3), CPU)]) as g:
        ready = g.always_ready_chain
        g.inputs[0].buffer[0] = np.ones(3, np.float32)
        assert g.always_ready_chain._id == ready._id
        g.output()
    b = driver.Buffer.from_numpy(np.zeros((2, 3), np.float32))
    engine.InferenceSession(devices=[driver.CPU()]).load(g).execute(b)
    assert b.to_numpy().tolist() == [[1, 1, 1], [0, 0, 0]]
