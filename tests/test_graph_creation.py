"""Creation ops: constant, constant_external, range, shape_to_tensor, cast, rebind."""

import ml_dtypes
import numpy as np
import pytest

from max import driver
from max.dtype import DType
from max.graph import DeviceRef, Dim, Graph, TensorType, ops

CPU = DeviceRef.CPU()


def test_constants():
    with Graph("c"):
        assert ops.constant(np.ones((2, 3), np.float32)).type == TensorType(DType.float32, [2, 3], CPU)
        assert ops.constant([1, 2, 3], DType.float32, CPU).shape == [3]
        assert ops.constant(3, DType.int8, CPU).type == TensorType(DType.int8, [], CPU)
        assert ops.constant(2.5).dtype is DType.float32 and ops.constant(7).dtype is DType.int64
        assert ops.constant(True).dtype is DType.bool
        assert ops.constant(np.arange(4.0), DType.bfloat16, DeviceRef.GPU()).type == TensorType(DType.bfloat16, [4], DeviceRef.GPU())
        assert ops.constant(np.zeros(2, ml_dtypes.bfloat16)).dtype is DType.bfloat16
        assert ops.constant(driver.Buffer.from_numpy(np.arange(5, dtype=np.int16))).type == TensorType(DType.int16, [5], CPU)
        assert ops.constant(np.float64(2.0), DType.int32, driver.CPU()).dtype is DType.int32
        with pytest.raises(ValueError, match="constant: value: 300 does not fit in int8"):
            ops.constant(300, DType.int8, CPU)
        with pytest.raises(ValueError, match="non-integral values cannot be loaded as int32"):
            ops.constant([1.5], DType.int32, CPU)
        with pytest.raises(TypeError, match="constant: value must be numeric"):
            ops.constant(["a", object()], DType.int32, CPU)
        with pytest.raises(TypeError, match="dtype must be a max.dtype.DType"):
            ops.constant(1, "int32", CPU)


def test_constants_of_wide_ints_and_numpy_scalars():
    """Python ints past int64 go to float dtypes (2**64 fits float32) and are range errors for
    integer ones; a list mixing them with small ints keeps every value exact (numpy would round
    it through float64); numpy scalars keep their own dtype, as arrays do."""
    from max import engine

    session = engine.InferenceSession(devices=[driver.CPU()])

    def value(v, dtype=None):
        return session.load(Graph("c", lambda: ops.constant(v, dtype, CPU))).execute()[0].to_numpy()

    assert value(2**64, DType.float32) == np.float32(2**64)
    assert value([[1, 2**64], [3, 4]], DType.float64).tolist() == [[1.0, 2.0**64], [3.0, 4.0]]
    assert value([2**64 - 1, 1], DType.uint64).tolist() == [2**64 - 1, 1]
    assert value([2**63 + 1, 1], DType.uint64).tolist() == [2**63 + 1, 1]
    for v, dtype, bad in ((2**64, DType.uint64, 2**64), ([2**63, 1], None, 2**63), ([1, 2**70], DType.int64, 2**70)):
        with pytest.raises(ValueError, match=rf"constant: value: {bad} does not fit in (u?int64)"):
            value(v, dtype)
    with pytest.raises(ValueError, match="does not fit in float32"):
        value(2**1100, DType.float32)
    for scalar in (np.uint64(2**64 - 1), np.float64(0.1), np.int8(-2), np.float16(1.5)):
        out = value(scalar)
        assert out.dtype == scalar.dtype and out == scalar
    with Graph("w", input_types=[TensorType(DType.float32, [2], CPU)]) as g:
        assert (g.inputs[0].tensor * 2**70).dtype is DType.float32
        # a shape's dims are int64, an empty shape's too (an empty list stays float32)
        from max.graph import Shape

        assert ops.constant(Shape([])).dtype is DType.int64 and ops.constant(Shape([2, 3])).dtype is DType.int64
        assert ops.constant([]).dtype is DType.float32


def test_constant_data_is_exact():
    with Graph("c") as g:
        v = ops.constant(np.array([[1, -2], [3, 4]], np.int64), DType.int16, CPU)
        g.output(v)
    assert "int16[2, 2]" in str(g)


def test_constant_external():
    with Graph("e") as g:
        w = ops.constant_external("w", TensorType(DType.float32, ("n", 3), CPU))
        assert w.type == TensorType(DType.float32, ["n", 3], CPU)
        with pytest.raises(ValueError, match="align: must be a positive power of two"):
            ops.constant_external("w2", TensorType(DType.float32, (3,), CPU), align=3)
        with pytest.raises(TypeError):
            ops.constant_external("w3", DType.float32)


def test_range():
    with Graph("r", input_types=[TensorType(DType.float32, ("a",), CPU)]) as g:
        assert ops.range(0, 10, 2, dtype=DType.int32, device=CPU).type == TensorType(DType.int32, [5], CPU)
        assert ops.range(0, 10, 3, dtype=DType.int64, device=CPU).shape == [4]
        assert ops.range(0.0, 1.0, 0.25, dtype=DType.float32, device=CPU).shape == [4]
        assert ops.range(10, 0, -3, dtype=DType.int32, device=CPU).shape == [4]
        a = g.inputs[0].shape[0]
        assert ops.range(0, a, 1, dtype=DType.int64, device=CPU).shape == [a]
        assert ops.range(0, a, 2, dtype=DType.int64, device=CPU).shape == [(a + 1) // 2]
        assert ops.range(0, 5, 1, out_dim="k", dtype=DType.int64, device=CPU).shape == ["k"]
        with pytest.raises(ValueError, match="step must be non-zero"):
            ops.range(0, 10, 0, dtype=DType.int32, device=CPU)
        with pytest.raises(ValueError, match="must be zero or have the sign of step"):
            ops.range(0, 10, -1, dtype=DType.int32, device=CPU)
        with pytest.raises(ValueError, match="range: out_dim is 4, but start, stop and step give 5 elements"):
            ops.range(0, 5, 1, out_dim=4, dtype=DType.int32, device=CPU)


def test_shape_to_tensor_cast_rebind():
    with Graph("s", input_types=[TensorType(DType.float32, ("a", 3), CPU)]) as g:
        x = g.inputs[0].tensor
        assert ops.shape_to_tensor(x.shape).type == TensorType(DType.int64, [2], CPU)
        assert ops.cast(x, DType.bfloat16).type == TensorType(DType.bfloat16, ["a", 3], CPU)
        assert x.cast(DType.int8).dtype is DType.int8
        assert ops.rebind(x, ["z", 3]).shape == ["z", 3]
        assert x.rebind([Dim("q"), 3], message="checked").shape == ["q", 3]
        with pytest.raises(ValueError, match="rebind: shape: rank 1 does not match"):
            ops.rebind(x, ["z"])
        with pytest.raises(ValueError, match="dimension 1 is 3 and can never be 4"):
            ops.rebind(x, ["z", 4])
        with pytest.raises(TypeError):
            ops.cast(x, "float16")
