"""Staging the indexing ops: gather, gather_nd, scatter, scatter_nd, masked_scatter, nonzero.
Result dtypes and shapes (static, symbolic, algebraic) and the documented errors."""

import numpy as np
import pytest

from max.dtype import DType
from max.graph import DeviceRef, Dim, Graph, TensorType, ops

CPU = DeviceRef.CPU()


def T(dtype, shape, device=CPU):
    return TensorType(dtype, shape, device)


def staged(fn, *types):
    with Graph("g", input_types=types) as g:
        return fn(*g.inputs)


def shape_of(v):
    return list(v.type.shape)


def raises(exc, fn, *types, words=()):
    with pytest.raises(exc) as info:
        staged(fn, *types)
    for w in words:
        assert w in str(info.value), str(info.value)
    return info.value


# gather


def test_gather_inserts_the_index_shape_at_the_axis():
    out = staged(lambda x, i: ops.gather(x, i, axis=1), T(DType.float32, ["a", 5, 6]), T(DType.int64, [2, "k"]))
    assert out.dtype == DType.float32
    assert shape_of(out) == [Dim("a"), Dim(2), Dim("k"), Dim(6)]


def test_gather_negative_axis_and_scalar_index():
    out = staged(lambda x, i: ops.gather(x, i, axis=-1), T(DType.bfloat16, ["a", 5, 6]), T(DType.int32, [3]))
    assert shape_of(out) == [Dim("a"), Dim(5), Dim(3)]
    out = staged(lambda x, i: ops.gather(x, i, axis=0), T(DType.float32, ["a", 5]), T(DType.int32, []))
    assert shape_of(out) == [Dim(5)]


def test_gather_algebraic_dims_pass_through():
    out = staged(lambda x, i: ops.gather(x, i, axis=0), T(DType.float16, [Dim("n") * 2, 3]), T(DType.uint32, ["k"]))
    assert shape_of(out) == [Dim("k"), Dim(3)]
    out = staged(lambda x, i: ops.gather(x, i, axis=0), T(DType.float16, [3, Dim("n") * 2]), T(DType.int64, [4]))
    assert shape_of(out) == [Dim(4), Dim("n") * 2]


def test_gather_python_indices_become_int64_constants():
    out = staged(lambda x: ops.gather(x, [0, 2], axis=0), T(DType.float32, [4, "m"]))
    assert shape_of(out) == [Dim(2), Dim("m")]
    out = staged(lambda x: ops.gather(x, 1, axis=1), T(DType.float32, [4, "m"]))
    assert shape_of(out) == [Dim(4)]


def test_gather_errors():
    raises(IndexError, lambda x, i: ops.gather(x, i, axis=2), T(DType.float32, ["a", 5]), T(DType.int64, [3]), words=("gather", "axis"))
    raises(IndexError, lambda x, i: ops.gather(x, i, axis=0), T(DType.float32, []), T(DType.int64, [3]), words=("gather", "axis"))
    raises(ValueError, lambda x, i: ops.gather(x, i, axis=0), T(DType.float32, [4]), T(DType.float32, [3]), words=("gather", "indices", "float32"))
    raises(ValueError, lambda x, i: ops.gather(x, i, axis=0), T(DType.float32, [4]), T(DType.int64, [3], DeviceRef.GPU()), words=("gather", "indices", "device"))
    raises(TypeError, lambda x, i: ops.gather(x, i, axis=0.5), T(DType.float32, [4]), T(DType.int64, [3]), words=("gather", "axis"))


# gather_nd


def test_gather_nd_documented_example():
    out = staged(lambda x, i: ops.gather_nd(x, i, batch_dims=1), T(DType.bfloat16, ["a", "b", "c", "d", "e"]), T(DType.int32, ["a", "f", 3]))
    assert out.dtype == DType.bfloat16
    assert shape_of(out) == [Dim("a"), Dim("f"), Dim("e")]


@pytest.mark.parametrize(
    "input_shape, index_shape, batch, expected",
    [
        ([4, 5, 6], ["n", 2], 0, ["n", 6]),
        ([4, 5, 6], ["n", 3], 0, ["n"]),
        ([4, 5, 6], [2], 0, [6]),
        ([4, 5, 6], [2, 0], 0, [2, 4, 5, 6]),
        (["b", 5, 6], ["b", "i", "j", 1], 1, ["b", "i", "j", 6]),
    ],
)
def test_gather_nd_shapes(input_shape, index_shape, batch, expected):
    out = staged(lambda x, i: ops.gather_nd(x, i, batch), T(DType.float32, input_shape), T(DType.int64, index_shape))
    assert shape_of(out) == [Dim(d) for d in expected]


@pytest.mark.parametrize(
    "input_shape, index_shape, batch, arg",
    [
        ([4, 5, 6], ["n", "m"], 0, "indices"),  # the index vector must be static
        ([4, 5, 6], ["n", 4], 0, "input"),  # indexes more dims than there are
        ([4, 5, 6], [3, 1], 1, "indices"),  # batch dims differ
        (["a", 5], ["b", 1], 1, "indices"),
        ([4, 5, 6], [4, 1], -1, "batch_dims"),
        ([4, 5, 6], [4, 5], 2, "indices"),  # no index vector after the batch dims
        ([4, 5, 6], [], 0, "indices"),
    ],
)
def test_gather_nd_value_errors(input_shape, index_shape, batch, arg):
    raises(ValueError, lambda x, i: ops.gather_nd(x, i, batch), T(DType.float32, input_shape), T(DType.int64, index_shape), words=("gather_nd", arg))


def test_gather_nd_needs_integer_indices():
    raises(ValueError, lambda x, i: ops.gather_nd(x, i), T(DType.float32, [4, 5]), T(DType.float32, [2, 1]), words=("gather_nd", "indices"))


# scatter


def test_scatter_keeps_the_input_type():
    out = staged(lambda x, u, i: ops.scatter(x, u, i, axis=0), T(DType.float32, ["a", 5]), T(DType.float32, [2, 5]), T(DType.int64, [2, 5]))
    assert out.type == T(DType.float32, ["a", 5])
    out = staged(lambda x, u, i: ops.scatter(x, u, i), T(DType.int8, ["a", 5]), T(DType.int8, ["a", 3]), T(DType.int32, ["a", 3]))
    assert out.type == T(DType.int8, ["a", 5])


def test_scatter_errors():
    x, f, i64 = T(DType.float32, [3, 5]), DType.float32, DType.int64
    raises(ValueError, lambda x, u, i: ops.scatter(x, u, i, axis=0), x, T(DType.int32, [2, 5]), T(i64, [2, 5]), words=("scatter", "updates", "int32"))
    raises(ValueError, lambda x, u, i: ops.scatter(x, u, i, axis=0), x, T(f, [2, 5]), T(f, [2, 5]), words=("scatter", "indices", "int32 or int64"))
    raises(ValueError, lambda x, u, i: ops.scatter(x, u, i, axis=0), x, T(f, [2, 5]), T(DType.uint8, [2, 5]), words=("scatter", "indices"))
    raises(ValueError, lambda x, u, i: ops.scatter(x, u, i, axis=3), x, T(f, [2, 5]), T(i64, [2, 5]), words=("scatter", "axis"))
    raises(ValueError, lambda x, u, i: ops.scatter(x, u, i, axis=0), x, T(f, [2, 5]), T(i64, [3, 5]), words=("scatter", "indices", "shape of updates"))
    raises(ValueError, lambda x, u, i: ops.scatter(x, u, i, axis=0), x, T(f, [2]), T(i64, [2]), words=("scatter", "updates", "rank"))
    raises(ValueError, lambda x, u, i: ops.scatter(x, u, i, axis=0), x, T(f, [2, 7]), T(i64, [2, 7]), words=("scatter", "updates", "larger"))


# scatter_nd


@pytest.mark.parametrize(
    "updates, indices",
    [(["n", 6], ["n", 2]), (["n"], ["n", 3]), ([2, 3, 6], [2, 3, 2]), ([2, 5, 6], [2, 1]), ([2, 6], [2, "k"])],
)
def test_scatter_nd_keeps_the_input_type(updates, indices):
    x = T(DType.float32, [4, 5, 6])
    out = staged(ops.scatter_nd, x, T(DType.float32, updates), T(DType.int64, indices))
    assert out.type == x


def test_scatter_nd_errors():
    x = T(DType.float32, [4, 5, 6])
    raises(ValueError, ops.scatter_nd, x, T(DType.float32, ["n", 5]), T(DType.int64, ["n", 2]), words=("scatter_nd", "updates", "[n, 6]"))
    raises(ValueError, ops.scatter_nd, x, T(DType.float32, ["m", 6]), T(DType.int64, ["n", 2]), words=("scatter_nd", "updates"))
    raises(ValueError, ops.scatter_nd, x, T(DType.float32, [2]), T(DType.int64, [2, 4]), words=("scatter_nd", "indices"))
    raises(ValueError, ops.scatter_nd, x, T(DType.int32, ["n", 6]), T(DType.int64, ["n", 2]), words=("scatter_nd", "updates", "dtype"))
    raises(ValueError, ops.scatter_nd, x, T(DType.float32, ["n", 6]), T(DType.float32, ["n", 2]), words=("scatter_nd", "indices"))


# masked_scatter


def test_masked_scatter_keeps_the_input_type():
    x = T(DType.float32, ["a", 5])
    out = staged(lambda x, m, u: ops.masked_scatter(x, m, u, "n"), x, T(DType.bool, ["a", 5]), T(DType.float32, ["n"]))
    assert out.type == x
    out = staged(lambda x, m, u: ops.masked_scatter(x, m, u, 10), x, T(DType.bool, [5]), T(DType.float32, [3, 4]))
    assert out.type == x


def test_masked_scatter_errors():
    x = T(DType.float32, [4, 5])
    raises(ValueError, lambda x, m, u: ops.masked_scatter(x, m, u, 10), x, T(DType.bool, [3, 5]), T(DType.float32, [20]), words=("masked_scatter", "mask", "broadcast"))
    raises(ValueError, lambda x, m, u: ops.masked_scatter(x, m, u, 10), T(DType.float32, [5]), T(DType.bool, [4, 5]), T(DType.float32, [20]), words=("masked_scatter", "mask"))
    raises(ValueError, lambda x, m, u: ops.masked_scatter(x, m, u, 10), x, T(DType.bool, [4, 5]), T(DType.int32, [20]), words=("masked_scatter", "updates"))
    raises(TypeError, lambda x, m, u: ops.masked_scatter(x, m, u, 10), x, T(DType.float32, [4, 5]), T(DType.float32, [20]), words=("masked_scatter", "mask", "bool"))
    raises(ValueError, lambda x, m, u: ops.masked_scatter(x, m, u, -1), x, T(DType.bool, [4, 5]), T(DType.float32, [20]), words=("masked_scatter", "out_dim"))
    raises(ValueError, lambda x, m, u: ops.masked_scatter(x, m, u, 10), x, T(DType.bool, [4, 5]), T(DType.float32, [20], DeviceRef.GPU()), words=("masked_scatter", "updates", "device"))


# nonzero


@pytest.mark.parametrize("shape, out_dim", [(["a", 5], "nz"), ([4], 3), ([2, 3, 4], Dim("a") * 2)])
def test_nonzero_gives_int64_coordinates(shape, out_dim):
    out = staged(lambda x: ops.nonzero(x, out_dim), T(DType.float16, shape))
    assert out.dtype == DType.int64
    assert shape_of(out) == [Dim(out_dim), Dim(len(shape))]


def test_nonzero_errors():
    raises(ValueError, lambda x: ops.nonzero(x, "nz"), T(DType.float32, []), words=("nonzero", "x", "scalar"))
    raises(TypeError, lambda x: ops.nonzero(x, 1.5), T(DType.float32, [3]))


def test_indexing_ops_accept_numpy_values():
    out = staged(lambda x: ops.gather(x, np.array([1, 0, 1], dtype=np.int32), axis=0), T(DType.float32, [2, "m"]))
    assert shape_of(out) == [Dim(3), Dim("m")]
    out = staged(lambda x: ops.scatter(x, np.ones((1, 3), np.float64), np.zeros((1, 3), np.int64), axis=0), T(DType.float32, [2, 3]))
    assert out.type == T(DType.float32, [2, 3])
