"""Staging the buffer ops: buffer_create, buffer_load, buffer_store, buffer_store_slice (and
BufferValue.__setitem__), their result types, chain ordering and the documented errors."""

import numpy as np
import pytest

from engine_util import session
from max import driver
from max.dtype import DType
from max.graph import BufferType, BufferValue, DeviceRef, Dim, Graph, TensorType, TensorValue, ops
from max.graph.value import _ChainValue

CPU = DeviceRef.CPU()


def T(dtype, shape, device=CPU):
    return TensorType(dtype, shape, device)


def B(dtype, shape, device=CPU):
    return BufferType(dtype, shape, device)


def test_buffer_create_gives_a_buffer_of_the_type():
    with Graph("b"):
        b = ops.buffer_create(B(DType.float32, [2, "n"]))
        assert isinstance(b, BufferValue)
        assert b.type == B(DType.float32, [2, "n"])


def test_buffer_create_needs_a_buffer_type():
    with Graph("b"):
        with pytest.raises(TypeError, match="buffer_create: type"):
            ops.buffer_create(T(DType.float32, [2, 3]))


def test_buffer_load_gives_a_tensor_and_advances_the_chain():
    with Graph("b", input_types=[B(DType.bfloat16, ["n", 3])]) as g:
        (buf,) = g.inputs
        c0 = g._current_chain
        x = ops.buffer_load(buf)
        assert isinstance(x, TensorValue) and x.type == T(DType.bfloat16, ["n", 3])
        c1 = g._current_chain
        assert isinstance(c1, _ChainValue) and c1 is not c0
        g.output(x)
        g._verify()


def test_buffer_load_needs_a_buffer():
    with Graph("b", input_types=[T(DType.float32, [3])]) as g:
        with pytest.raises(TypeError, match="buffer_load: x"):
            ops.buffer_load(g.inputs[0])


def test_buffer_store_orders_loads_and_stores():
    with Graph("b", input_types=[B(DType.float32, ["n", 3])]) as g:
        (buf,) = g.inputs
        x = ops.buffer_load(buf)
        after_load = g._current_chain
        assert ops.buffer_store(buf, x * 2) is None
        after_store = g._current_chain
        y = ops.buffer_load(buf)
        g.output(y)
        g._verify()
        text = str(g)
        assert f"buffer_store(%{after_load._id}, " in text
        assert f"buffer_load(%{after_store._id}, " in text


def test_buffer_store_converts_numbers_and_arrays_to_the_buffer_dtype(rng):
    """A float64 array stored into a float16 buffer and a Python int into an int32 one: the
    buffers keep their dtypes and hold the values rounded once to them."""
    values = rng.standard_normal((2, 3)) * 100
    with Graph("b", input_types=[B(DType.float16, [2, 3]), B(DType.int32, [])]) as g:
        a, s = g.inputs
        ops.buffer_store(a, values)
        ops.buffer_store(s, 7)
        g.output()
        g._verify()
    fa = driver.Buffer.from_numpy(np.zeros((2, 3), np.float16))
    fs = driver.Buffer.from_numpy(np.zeros((), np.int32))
    session().load(g).execute(fa, fs)
    stored, count = fa.to_numpy(), fs.to_numpy()
    assert stored.dtype == np.float16 and count.dtype == np.int32
    np.testing.assert_array_equal(stored, values.astype(np.float16))
    assert count.item() == 7


@pytest.mark.parametrize(
    "source, words",
    [
        (T(DType.float32, [3, 3]), ("source", "[2, 3]")),
        (T(DType.float32, [3]), ("source",)),
        (T(DType.int32, [2, 3]), ("source", "int32")),
        (T(DType.float32, [2, 3], DeviceRef.GPU()), ("device",)),
    ],
)
def test_buffer_store_errors(source, words):
    with Graph("b", input_types=[B(DType.float32, [2, 3]), source]) as g:
        with pytest.raises(ValueError) as info:
            ops.buffer_store(*g.inputs)
        for w in ("buffer_store", *words):
            assert w in str(info.value)


def test_buffer_store_symbolic_mismatch_needs_a_rebind():
    with Graph("b", input_types=[B(DType.float32, ["n", 3]), T(DType.float32, ["m", 3])]) as g:
        with pytest.raises(ValueError, match="rebind"):
            ops.buffer_store(*g.inputs)


def test_buffer_store_destination_must_be_a_buffer():
    with Graph("b", input_types=[T(DType.float32, [2]), T(DType.float32, [2])]) as g:
        with pytest.raises(TypeError, match="buffer_store: destination"):
            ops.buffer_store(*g.inputs)


@pytest.mark.parametrize(
    "dest, source, indices",
    [
        ([4, 3], [3], [0]),
        ([4, 3], [3], [-1]),
        ([4, 3], [2, 3], [slice(1, 3)]),
        ([4, 3], [4], [slice(None), 1]),
        ([4, 3], [4], [..., 0]),
        ([4, 3], [2, 3], [slice(None, None, 2)]),
        ([4, 3], [4, 3], [slice(None, None, -1)]),
        ([4, 3], [0, 3], [slice(3, 1)]),
        ([4, 3], [4, 3], [slice(-10, 10)]),
        ([2, 4, 3], [2, 3], [slice(None), 2, ...]),
        (["n", 3], [Dim("n") - 1, 3], [slice(1, None)]),
        (["n", 3], [Dim("n") - 2, 3], [slice(1, -1)]),
        (["n", 3], ["k", 3], [(slice(0, Dim("k")), "k")]),
        (["n", 3], ["k", 3], [slice(0, Dim("k"))]),
        (["n"], [(Dim("n") + 1) // 2], [slice(None, None, 2)]),
        (["n", 3], [3], [2]),
    ],
)
def test_buffer_store_slice_shapes(dest, source, indices):
    with Graph("b", input_types=[B(DType.float32, dest), T(DType.float32, source)]) as g:
        buf, src = g.inputs
        before = g._current_chain
        assert ops.buffer_store_slice(buf, src, indices) is None
        assert g._current_chain is not before
        g.output()
        g._verify()


def test_buffer_store_slice_with_a_tensor_index():
    with Graph("b", input_types=[B(DType.float32, ["n", 3]), T(DType.float32, [3]), T(DType.int64, [])]) as g:
        buf, src, i = g.inputs
        ops.buffer_store_slice(buf, src, [i])
        g.output()
        g._verify()


def test_buffer_setitem_stores_a_slice():
    with Graph("b", input_types=[B(DType.float32, [4, 3]), T(DType.float32, [3])]) as g:
        buf, src = g.inputs
        before = g._current_chain
        buf[1] = src
        buf[2, :] = src
        buf[:, 0] = np.zeros(4, np.float32)
        assert g._current_chain is not before
        assert str(g).count("buffer_store_slice") == 3
        with pytest.raises(ValueError, match="buffer_store_slice: source"):
            buf[1:3] = src


@pytest.mark.parametrize(
    "source, indices, exc, arg",
    [
        ([3, 3], [slice(1, 3)], ValueError, "source"),
        ([3], [slice(1, 3)], ValueError, "source"),
        ([3], [4], IndexError, "indices"),
        ([3], [-5], IndexError, "indices"),
        ([], [0, 0, 0], ValueError, "indices"),
        ([1, 3], [None, 0], ValueError, "indices"),
        ([3], [..., ..., 0], ValueError, "indices"),
        ([3], [slice(0, 2, 0)], ValueError, "indices"),
        ([3], ["a"], TypeError, "indices"),
        ([2, 3], [(slice(1, 3), 3)], ValueError, "indices"),
    ],
)
def test_buffer_store_slice_errors(source, indices, exc, arg):
    with Graph("b", input_types=[B(DType.float32, [4, 3]), T(DType.float32, source)]) as g:
        with pytest.raises(exc) as info:
            ops.buffer_store_slice(*g.inputs, indices)
        assert "buffer_store_slice" in str(info.value) and arg in str(info.value)


def test_buffer_store_slice_dtype_and_index_tensor_errors():
    with Graph("b", input_types=[B(DType.float32, [4, 3]), T(DType.int32, [3]), T(DType.float32, [])]) as g:
        buf, src, f = g.inputs
        with pytest.raises(ValueError, match="buffer_store_slice: source"):
            ops.buffer_store_slice(buf, src, [0])
        with pytest.raises(ValueError, match="buffer_store_slice: indices"):
            ops.buffer_store_slice(buf, src.cast(DType.float32), [f])
