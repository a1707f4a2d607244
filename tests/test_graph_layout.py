"""Staging the layout ops: inferred dtypes and shapes (static, symbolic and algebraic dims) and
the documented errors. Expected shapes marked "reference" were confirmed against MAX 26.7."""

from contextlib import contextmanager

import numpy as np
import pytest

from max import driver
from max.dtype import DType
from max.graph import DeviceRef, Dim, Graph, TensorType, ops

CPU = DeviceRef.CPU()


def T(*shape, dtype=DType.float32, device=CPU):  # noqa: N802
    return TensorType(dtype, shape, device)


@contextmanager
def inputs(*types):
    with Graph("layout", input_types=types) as g:
        yield [v.tensor for v in g.inputs]


def dims(*ds):
    return [Dim(d) for d in ds]


def shape(v):
    return list(v.shape)


def raises(exc, fn, *needles):
    with pytest.raises(exc) as info:
        fn()
    msg = str(info.value)
    for n in needles:
        assert n in msg, msg
    return msg


def const(value, dtype=DType.int64):
    return ops.constant(value, dtype, CPU)


# reshape


def test_reshape_infers_minus_one():
    with inputs(T("batch", 3), T("b", 6, dtype=DType.int8), T(0, 6), T()) as (x, y, z, s):
        assert shape(ops.reshape(x, [-1])) == [Dim("batch") * 3]  # reference
        assert shape(ops.reshape(x, [3, -1])) == dims(3, "batch")  # reference
        out = ops.reshape(y, ["b", 2, -1])
        assert shape(out) == dims("b", 2, 3) and out.dtype == DType.int8
        assert shape(ops.reshape(y, [Dim("b") * 6])) == [Dim("b") * 6]
        assert shape(ops.reshape(z, [-1])) == dims(0)
        assert shape(s.reshape([1, 1])) == dims(1, 1)
        assert shape(x.reshape([np.int64(3), "batch"])) == dims(3, "batch")


def test_reshape_errors():
    with inputs(T(2, 6), T("b", 6), T(0, 6)) as (x, y, z):
        raises(ValueError, lambda: ops.reshape(x, [5, 2]), "reshape: shape:", "number of elements", "float32[2, 6]")
        raises(ValueError, lambda: ops.reshape(x, [5, -1]), "reshape: shape:", "number of elements")
        raises(ValueError, lambda: ops.reshape(y, ["c", 6]), "reshape: shape:", "rebind")
        raises(ValueError, lambda: ops.reshape(y, [Dim("b") * 5]), "reshape: shape:")
        raises(ValueError, lambda: ops.reshape(x, [-1, -1]), "reshape: shape:", "at most one -1")
        raises(ValueError, lambda: ops.reshape(x, [-2, -6]), "reshape: shape:", "non-negative")
        raises(ValueError, lambda: ops.reshape(z, [0, -1]), "reshape: shape:", "another dimension is 0")
        raises(TypeError, lambda: ops.reshape(x, [1.5]), "reshape: shape:")
        raises(TypeError, lambda: ops.reshape(x, "12"), "reshape: shape:")


# flatten, squeeze, unsqueeze


def test_flatten():
    with inputs(T("b", 3, 4, dtype=DType.bool), T()) as (x, s):
        out = ops.flatten(x)
        assert shape(out) == [Dim("b") * 12] and out.dtype == DType.bool  # reference
        assert shape(ops.flatten(x, 1)) == dims("b", 12)
        assert shape(x.flatten(-3, -2)) == [Dim("b") * 3, Dim(4)]
        assert shape(ops.flatten(x, 1, 1)) == dims("b", 3, 4)
        assert shape(ops.flatten(s)) == dims(1)
        raises(ValueError, lambda: ops.flatten(x, 2, 1), "flatten: start_dim:")
        raises(IndexError, lambda: ops.flatten(x, 0, 5), "flatten: end_dim:")
        raises(IndexError, lambda: ops.flatten(x, -4), "flatten: start_dim:")
        raises(TypeError, lambda: ops.flatten(x, 0.5), "flatten: start_dim:")


def test_squeeze_and_unsqueeze():
    with inputs(T("b", 1, 4), T("b", 4, dtype=DType.int32), T()) as (x, y, s):
        assert shape(ops.squeeze(x, 1)) == dims("b", 4)
        assert shape(ops.squeeze(x, -2)) == dims("b", 4)
        raises(ValueError, lambda: ops.squeeze(x, 0), "squeeze: axis:", "must be 1")
        raises(ValueError, lambda: ops.squeeze(x, 2), "squeeze: axis:")
        raises(IndexError, lambda: ops.squeeze(x, 3), "squeeze: axis:")
        out = ops.unsqueeze(y, 0)
        assert shape(out) == dims(1, "b", 4) and out.dtype == DType.int32
        assert shape(ops.unsqueeze(y, -1)) == dims("b", 4, 1)
        assert shape(ops.unsqueeze(y, 2)) == dims("b", 4, 1)
        assert shape(ops.unsqueeze(y, -3)) == dims(1, "b", 4)
        assert shape(ops.unsqueeze(s, 0)) == dims(1)
        raises(ValueError, lambda: ops.unsqueeze(y, 3), "unsqueeze: axis:")  # reference: ValueError
        raises(ValueError, lambda: ops.unsqueeze(y, -4), "unsqueeze: axis:")


# transpose, permute


def test_transpose_and_permute():
    with inputs(T("b", 3, 4)) as (x,):
        assert shape(ops.transpose(x, 0, -1)) == dims(4, 3, "b")
        assert shape(x.T) == dims("b", 4, 3)
        assert shape(x.transpose(1, 0)) == dims(3, "b", 4)
        raises(IndexError, lambda: ops.transpose(x, 0, 3), "transpose: axis_2:")
        raises(IndexError, lambda: ops.transpose(x, -4, 0), "transpose: axis_1:")
        assert shape(ops.permute(x, [2, 0, 1])) == dims(4, "b", 3)
        assert shape(x.permute([-1, 0, 1])) == dims(4, "b", 3)
        raises(ValueError, lambda: ops.permute(x, [0, 0, 1]), "permute: dims:")
        raises(ValueError, lambda: ops.permute(x, [0, 1]), "permute: dims:", "rank 3")
        raises(IndexError, lambda: ops.permute(x, [0, 1, 3]), "permute: dims:")


# broadcast_to


def test_broadcast_to():
    with inputs(T("b", 1), T(1, 3, dtype=DType.float16), T("b", 3), T(2)) as (x, y, z, w):
        assert shape(ops.broadcast_to(x, [2, "b", 3])) == dims(2, "b", 3)  # reference
        out = y.broadcast_to([Dim("c") * 2, 3])
        assert shape(out) == [Dim("c") * 2, Dim(3)] and out.dtype == DType.float16
        assert shape(ops.broadcast_to(z, ["b", 3])) == dims("b", 3)
        out = ops.broadcast_to(y, const([2, 3]), out_dims=["n", 3])
        assert shape(out) == dims("n", 3)
        raises(ValueError, lambda: ops.broadcast_to(z, ["c", 3]), "broadcast_to: shape:", "must be 1 or equal")
        raises(ValueError, lambda: ops.broadcast_to(w, [3]), "broadcast_to: shape:")
        raises(ValueError, lambda: ops.broadcast_to(y, [3]), "broadcast_to: shape:", "rank")
        raises(TypeError, lambda: ops.broadcast_to(y, [-1, 3]), "broadcast_to: shape:")  # reference: TypeError
        raises(ValueError, lambda: ops.broadcast_to(y, const([2, 3])), "broadcast_to: out_dims:")
        raises(ValueError, lambda: ops.broadcast_to(y, const([2, 3]), out_dims=["n", 4]), "broadcast_to: out_dims:")
        raises(ValueError, lambda: ops.broadcast_to(y, const([2, 3]), out_dims=["n", "m", 3]), "broadcast_to: out_dims:")
        raises(TypeError, lambda: ops.broadcast_to(y, const([2.0, 3.0], DType.float32), out_dims=["n", 3]), "broadcast_to: shape:")


# concat, stack


def test_concat():
    with inputs(T("batch", 3), T("b", 3), T("b", "c"), T("a", 3), T(2, 3, dtype=DType.int32)) as (x, b3, bc, a3, i):
        assert shape(ops.concat([x, x])) == [Dim("batch") * 2, Dim(3)]
        assert shape(ops.concat([b3, bc], axis=-1)) == [Dim("b"), Dim("c") + 3]  # reference
        assert shape(ops.concat([a3, b3], 0)) == [Dim("a") + Dim("b"), Dim(3)]  # reference
        assert shape(ops.concat([b3])) == dims("b", 3)
        out = ops.concat([i, [[1, 2, 3]], np.zeros((1, 3), np.int64)])
        assert shape(out) == dims(4, 3) and out.dtype == DType.int32


def test_concat_errors():
    with inputs(T("a", 3), T("b", 4), T(3), T(3, dtype=DType.int32), T(3, 1), T(3, device=DeviceRef.GPU())) as vals:
        a3, b4, f, i, r2, g = vals
        raises(ValueError, lambda: ops.concat([a3, b4]), "concat: original_vals[1]:", "non-concat axis 1")
        raises(ValueError, lambda: ops.concat([f, i]), "concat: original_vals[1]:", "dtype")  # reference: ValueError
        raises(ValueError, lambda: ops.concat([f, r2]), "concat: original_vals[1]:", "rank")
        raises(ValueError, lambda: ops.concat([]), "concat: original_vals:")
        raises(IndexError, lambda: ops.concat([a3, a3], axis=2), "concat: axis:")
        raises(ValueError, lambda: ops.concat([f, g]), "concat: original_vals[1]:", "same device")
        raises(TypeError, lambda: ops.concat(a3), "concat: original_vals:")


def test_stack():
    with inputs(T("b", 3), T("b", 3), T(), T("c", 3), T("b", 3, dtype=DType.int32)) as (x, y, s, c, i):
        assert shape(ops.stack([x, y])) == dims(2, "b", 3)  # reference
        assert shape(ops.stack([x, y], axis=-1)) == dims("b", 3, 2)
        assert shape(ops.stack([x, y, x], axis=1)) == dims("b", 3, 3)
        assert shape(ops.stack([s, s])) == dims(2)
        raises(IndexError, lambda: ops.stack([x, y], axis=3), "stack: axis:")
        raises(IndexError, lambda: ops.stack([x, y], axis=-4), "stack: axis:")
        raises(ValueError, lambda: ops.stack([x, c]), "stack: values[1]:", "same shape")
        raises(ValueError, lambda: ops.stack([x, i]), "stack: values[1]:", "dtype")  # reference: ValueError
        raises(ValueError, lambda: ops.stack([]), "stack: values:")


# split, chunk


def test_split():
    with inputs(T(3, 4), T("b", 4), T(0, 4)) as (x, y, z):
        out = ops.split(x, [1, 2])
        assert [shape(o) for o in out] == [dims(1, 4), dims(2, 4)]  # reference
        assert [shape(o) for o in ops.split(x, [2, 2], axis=-1)] == [dims(3, 2), dims(3, 2)]
        assert [shape(o) for o in ops.split(x, [0, 3])] == [dims(0, 4), dims(3, 4)]
        assert [shape(o) for o in ops.split(y, [Dim("b") - 1, 1])] == [[Dim("b") - 1, Dim(4)], dims(1, 4)]
        assert ops.split(z, []) == []
        raises(ValueError, lambda: ops.split(x, [1, 1]), "split: split_sizes:", "add up")  # reference
        raises(ValueError, lambda: ops.split(y, [1, 2]), "split: split_sizes:")  # reference
        raises(ValueError, lambda: ops.split(x, [4, -1]), "split: split_sizes:")
        raises(IndexError, lambda: ops.split(x, [2, 2], axis=2), "split: axis:")
        raises(TypeError, lambda: ops.split(x, [1.0, 2.0]), "split: split_sizes:")


def test_chunk():
    with inputs(T(3, 4), T(Dim("b") * 2, 4), T("b", 4), T(5)) as (x, y, z, w):
        out = ops.chunk(x, 3)
        assert [shape(o) for o in out] == [dims(1, 4)] * 3  # reference
        assert [shape(o) for o in ops.chunk(x, 2, axis=1)] == [dims(3, 2)] * 2
        assert [shape(o) for o in ops.chunk(y, 2)] == [dims("b", 4)] * 2
        raises(ValueError, lambda: ops.chunk(x, 2), "chunk: chunks:", "statically divide")  # reference
        raises(ValueError, lambda: ops.chunk(w, 2), "chunk: chunks:")  # the docs' example dim
        raises(ValueError, lambda: ops.chunk(z, 2), "chunk: chunks:")
        raises(ValueError, lambda: ops.chunk(x, 0), "chunk: chunks:")
        raises(IndexError, lambda: ops.chunk(x, 1, axis=2), "chunk: axis:")


# tile, pad, repeat_interleave


def test_tile():
    with inputs(T("b", 3, dtype=DType.uint8)) as (x,):
        out = ops.tile(x, [2, 3])
        assert shape(out) == [Dim("b") * 2, Dim(9)] and out.dtype == DType.uint8  # reference
        assert shape(ops.tile(x, ["n", 1])) == [Dim("b") * Dim("n"), Dim(3)]
        raises(ValueError, lambda: ops.tile(x, [0, 3]), "tile: repeats:", "positive")
        raises(ValueError, lambda: ops.tile(x, [3]), "tile: repeats:")


def test_pad():
    with inputs(T("b", 3), T("b", 3, dtype=DType.int32), T()) as (x, i, s):
        assert shape(ops.pad(x, [1, 2, 0, 3])) == [Dim("b") + 3, Dim(6)]  # reference
        assert shape(ops.pad(x, [1, 2, 0, 3], value=1.5)) == [Dim("b") + 3, Dim(6)]
        out = ops.pad(i, [0, 0, 1, 1], value=7)
        assert shape(out) == dims("b", 5) and out.dtype == DType.int32
        out = ops.pad(x, [1, 1, 1, 1], value=const(7, DType.int32))
        assert shape(out) == [Dim("b") + 2, Dim(5)] and out.dtype == DType.float32
        assert shape(ops.pad(s, [])) == []
        raises(ValueError, lambda: ops.pad(x, [1, 2]), "pad: paddings:")
        raises(ValueError, lambda: ops.pad(x, [-1, 2, 0, 0]), "pad: paddings:", "non-negative")
        raises(ValueError, lambda: ops.pad(x, [1, 2, 0, 0], mode="reflect"), "pad: mode:")
        raises(ValueError, lambda: ops.pad(x, [1, 2, 0, 0], value=const([1.0, 2.0], DType.float32)), "pad: value:")
        raises(ValueError, lambda: ops.pad(i, [1, 2, 0, 0], value=1.5), "pad: value:")
        # paddings whose sum (or the padded size) passes 2^63 - 1 (they wrapped to a negative dim)
        raises(ValueError, lambda: ops.pad(x, [0, 0, 2**62, 2**62]), "pad: paddings:", "overflows a 64-bit")
        raises(ValueError, lambda: ops.pad(x, [0, 0, 2**63 - 2, 0]), "pad: paddings:", "overflows a 64-bit")


def test_repeat_interleave():
    with inputs(T(2, 2), T("b", 2, dtype=DType.int16), T()) as (x, y, s):
        assert shape(ops.repeat_interleave(x, 2)) == dims(8)
        assert shape(ops.repeat_interleave(y, 2)) == [Dim("b") * 4]  # reference
        out = ops.repeat_interleave(y, 2, axis=0)
        assert shape(out) == [Dim("b") * 2, Dim(2)] and out.dtype == DType.int16
        assert shape(ops.repeat_interleave(y, 3, -1)) == dims("b", 6)
        assert shape(ops.repeat_interleave(s, 2)) == dims(2)
        assert shape(ops.repeat_interleave(x, const([2, 3]), axis=0, out_dim=5)) == dims(5, 2)
        assert shape(ops.repeat_interleave(x, const([2, 3]), axis=0, out_dim="n")) == dims("n", 2)
        assert shape(ops.repeat_interleave(x, [1, 2, 1, 1], out_dim="n")) == dims("n")
        raises(ValueError, lambda: ops.repeat_interleave(y, 0, 0), "repeat_interleave: repeats:", "positive")
        raises(ValueError, lambda: ops.repeat_interleave(y, -1, 0), "repeat_interleave: repeats:")
        raises(ValueError, lambda: ops.repeat_interleave(y, 3, 2), "repeat_interleave: axis:")  # documented
        raises(ValueError, lambda: ops.repeat_interleave(x, const([2, 3]), axis=0), "repeat_interleave: out_dim:")
        raises(ValueError, lambda: ops.repeat_interleave(x, const([2, 3, 4]), 0, "n"), "repeat_interleave: repeats:")
        bad = lambda: ops.repeat_interleave(x, const([2.0, 3.0], DType.float32), 0, "n")  # noqa: E731
        raises(TypeError, bad, "repeat_interleave: repeats:")


# slice_tensor


def test_slice_symbolic_dims():
    with inputs(T("a"), T("a", 3)) as (x, y):
        assert shape(x[2:]) == [Dim("a") - 2]  # reference
        assert shape(x[:-2]) == [Dim("a") - 2]  # reference
        assert shape(x[1:-1]) == [Dim("a") - 2]
        assert shape(x[-3:]) == dims(3)  # reference
        assert shape(x[::2]) == [(Dim("a") + 1) // 2]  # reference
        assert shape(x[1::2]) == [Dim("a") // 2]  # reference
        assert shape(y[: Dim("a") // 2]) == [Dim("a") // 2, Dim(3)]  # reference
        assert shape(y[Dim("a") // 2 :]) == [Dim("a") - Dim("a") // 2, Dim(3)]  # reference
        assert shape(y[:, : Dim(2)]) == dims("a", 2)
        assert shape(x[Dim("a") :]) == dims(0)
        assert shape(x[::-1]) == dims("a")
        assert shape(x[Dim("a") - 1 :: -1]) == dims("a")


def test_slice_static_and_negative_steps():
    with inputs(T(5), T(10, dtype=DType.int64)) as (x, y):
        assert shape(x[2:]) == dims(3)
        assert shape(x[5:]) == dims(0)
        assert shape(x[4:2]) == dims(0)  # numpy: empty (the reference rejects crossing bounds)
        assert shape(y[1:7:2]) == dims(3)
        assert y[1:8:3].dtype == DType.int64
        assert shape(ops.slice_tensor(x, [slice(None, None, -1)])) == dims(5)  # the docs' example
        assert shape(x[::-2]) == dims(3)
        assert shape(x[3:0:-1]) == dims(3)
        assert shape(x[:-6:-1]) == dims(5)
        assert shape(x[-6::-1]) == dims(0)
        assert shape(x[np.int64(1) :]) == dims(4)


def test_slice_indices_ellipsis_new_axes_and_tensors():
    with inputs(T("a", 3, 4), T(5, 3), T()) as (x, y, s):
        assert shape(x[..., 0]) == dims("a", 3)  # reference
        assert shape(ops.slice_tensor(x, [..., None, slice(None)])) == dims("a", 3, 1, 4)  # the docs' example
        assert shape(x[None]) == dims(1, "a", 3, 4)
        assert shape(x[:, None, 1]) == dims("a", 1, 4)
        assert shape(x[1, ..., 1]) == dims(3)
        assert shape(y[-1]) == dims(3)
        assert shape(x[-1]) == dims(3, 4)
        assert shape(s[...]) == []
        assert shape(s[None]) == dims(1)
        assert shape(x[()]) == dims("a", 3, 4)
        assert shape(x[const(1)]) == dims(3, 4)
        assert shape(x[const(1, DType.int32), 2]) == dims(4)
        assert shape(ops.slice_tensor(x, [(slice(1, None), "n")])) == dims("n", 3, 4)
        assert shape(ops.slice_tensor(x, [(slice(const(1), const(3)), 2)])) == dims(2, 3, 4)
        assert shape(ops.slice_tensor(y, [(slice(1, 3), 2)])) == dims(2, 3)


def test_slice_errors():
    with inputs(T(5, 3), T("a", 3)) as (x, y):
        raises(ValueError, lambda: x[2:10], "slice_tensor: indices:", "out of range")  # the docs' restriction
        raises(ValueError, lambda: x[2:6], "slice_tensor: indices:", "out of range")  # reference
        raises(ValueError, lambda: x[-6:], "slice_tensor: indices:")  # reference
        raises(ValueError, lambda: x[:-6], "slice_tensor: indices:")  # reference
        raises(ValueError, lambda: x[5::-1], "slice_tensor: indices:", "[-dim - 1, dim - 1]")
        raises(ValueError, lambda: x[:-7:-1], "slice_tensor: indices:")
        raises(ValueError, lambda: x[5], "slice_tensor: indices:", "index 5 is out of range")  # reference
        raises(ValueError, lambda: x[-6], "slice_tensor: indices:")  # reference
        raises(ValueError, lambda: y[Dim("a") + 1 :], "slice_tensor: indices:")
        raises(ValueError, lambda: x[::0], "slice_tensor: indices:", "zero")  # reference
        raises(ValueError, lambda: x[..., ...], "slice_tensor: indices:", "Ellipsis")  # reference
        raises(ValueError, lambda: x[0, 0, 0], "slice_tensor: indices:", "rank 2")  # reference
        raises(ValueError, lambda: ops.slice_tensor(x, [(slice(1, 3), 5)]), "slice_tensor: indices:")
        raises(TypeError, lambda: y["a"], "slice_tensor: indices:")  # reference
        raises(TypeError, lambda: y[1.5], "slice_tensor: indices:")  # reference
        raises(TypeError, lambda: y[True], "slice_tensor: indices:")
        raises(TypeError, lambda: y[const(1):], "slice_tensor: indices:", "out_dim")  # reference: TypeError
        raises(ValueError, lambda: y[const([0, 1])], "slice_tensor: indices:", "scalar")  # reference
        raises(TypeError, lambda: y[const(1.0, DType.float32)], "slice_tensor: indices:", "integer dtype")
        raises(TypeError, lambda: ops.slice_tensor(y, 1), "slice_tensor: indices:")


# as_interleaved_complex, band_part, transfer_to


def test_as_interleaved_complex():
    with inputs(T("b", 8), T("b", Dim("c") * 2), T("b", 7), T("b", "c"), T(4, dtype=DType.int32)) as (x, y, odd, sym, i):
        assert shape(ops.as_interleaved_complex(x)) == dims("b", 4, 2)  # reference
        assert shape(ops.as_interleaved_complex(y)) == dims("b", "c", 2)
        out = ops.as_interleaved_complex(i)
        assert shape(out) == dims(2, 2) and out.dtype == DType.int32
        raises(ValueError, lambda: ops.as_interleaved_complex(odd), "as_interleaved_complex: x:", "even")  # reference
        raises(TypeError, lambda: ops.as_interleaved_complex(sym), "as_interleaved_complex: x:", "static")  # reference


def test_band_part():
    with inputs(T("b", 3, 4), T(3, 3, dtype=DType.bool), T(4), T("m", "n")) as (x, m, v, s):
        out = ops.band_part(x, 1, 2)
        assert shape(out) == dims("b", 3, 4) and out.dtype == DType.float32
        assert shape(ops.band_part(x)) == dims("b", 3, 4)
        out = ops.band_part(m, 0, 0, exclude=True)
        assert shape(out) == dims(3, 3) and out.dtype == DType.bool
        assert shape(ops.band_part(s, 100, 100)) == dims("m", "n")
        raises(ValueError, lambda: ops.band_part(v, 1, 2), "band_part: x:", "rank 2")  # documented
        raises(ValueError, lambda: ops.band_part(x, 3, 0), "band_part: num_lower:", "out of bounds")  # documented
        raises(ValueError, lambda: ops.band_part(x, 0, 4), "band_part: num_upper:", "out of bounds")  # documented
        raises(ValueError, lambda: ops.band_part(x, -2, 0), "band_part: num_lower:")  # reference
        raises(TypeError, lambda: ops.band_part(x, 1, 1, exclude="yes"), "band_part: exclude:")


def test_transfer_to():
    with inputs(T("b", 3, dtype=DType.bfloat16), T(2, device=DeviceRef.GPU())) as (x, g):
        out = ops.transfer_to(x, DeviceRef.GPU())
        assert out.device == DeviceRef.GPU() and shape(out) == dims("b", 3) and out.dtype == DType.bfloat16
        assert ops.transfer_to(x, DeviceRef.GPU(1)).device == DeviceRef.GPU(1)
        assert ops.transfer_to(g, driver.CPU()).device == CPU
        assert x.to(DeviceRef.CPU()).device == CPU
        raises(TypeError, lambda: ops.transfer_to(x, "gpu"), "transfer_to: device:")
