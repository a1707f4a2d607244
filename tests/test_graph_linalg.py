"""Staging matmul and outer: the 1-D and batch broadcasting rules, symbolic and algebraic dims,
dtype promotion, and the documented errors."""

import numpy as np
import pytest

from max.dtype import DType
from max.graph import DeviceRef, Dim, ops

from staging import F16, F32, I32, I64, T, check, fails, stage


@pytest.mark.parametrize(
    ("lhs", "rhs", "out"),
    [
        ((2, 3), (3, 4), (2, 4)),
        (("m", "k"), ("k", "n"), ("m", "n")),
        ((3,), (3, 4), (4,)),
        ((2, 3), (3,), (2,)),
        (("k",), ("k",), ()),
        ((3,), ("b", 3, 4), ("b", 4)),
        (("b", 2, 3), (3,), ("b", 2)),
        (("b", 1, 2, 3), (5, 3, 4), ("b", 5, 2, 4)),
        ((6, 2, 3), (1, 3, "n"), (6, 2, "n")),
        (("b", "s", 8), (8, 16), ("b", "s", 16)),
        ((2, 1), (1, 4), (2, 4)),
    ],
)
def test_matmul_shapes(lhs, rhs, out):
    check(stage(ops.matmul, T(F32, *lhs), T(F32, *rhs)), F32, out)


def test_matmul_contracts_equal_algebraic_dims():
    k = Dim("k")
    out = stage(ops.matmul, T(F32, 2, k * 2), T(F32, k + k, 4))
    check(out, F32, [2, 4])
    out = stage(ops.matmul, T(F32, "b", k + 1), T(F32, k + 1, k * 3))
    check(out, F32, ["b", k * 3])


def test_matmul_operator_and_reflected_operator():
    check(stage(lambda a, b: a @ b, T(F32, 2, 3), T(F32, 3, 4)), F32, [2, 4])
    check(stage(lambda a: [[1.0, 2.0]] @ a, T(F32, 2, 3)), F32, [1, 3])


def test_matmul_constants_take_the_tensor_dtype():
    check(stage(lambda a: ops.matmul(a, [[1], [2], [3]]), T(F16, 2, 3)), F16, [2, 1])
    check(stage(lambda a: ops.matmul(np.eye(2, dtype=np.float64), a), T(F32, 2, 3)), F32, [2, 3])


@pytest.mark.parametrize(("a", "b", "out"), [(F32, F16, F32), (F16, F32, F32), (I32, I64, I64), (DType.bool, F32, F32)])
def test_matmul_promotes_dtypes(a, b, out):
    check(stage(ops.matmul, T(a, 2, 3), T(b, 3, 4)), out, [2, 4])


def test_matmul_rejects_dtypes_without_a_lossless_common_type():
    fails(ValueError, "matmul", "rhs", ops.matmul, T(DType.int8, 2, 3), T(DType.uint8, 3, 4))


@pytest.mark.parametrize(
    ("lhs", "rhs"),
    [((2, 3), (4, 4)), (("m", "k"), ("j", "n")), ((3,), (4,)), ((2, 3), (4,)), ((5,), (3, 4)), ((2, "k"), (3, 4))],
)
def test_matmul_contracted_dims_must_match(lhs, rhs):
    msg = fails(ValueError, "matmul", "rhs", ops.matmul, T(F32, *lhs), T(F32, *rhs))
    assert "contracted" in msg


def test_matmul_batch_dims_must_broadcast():
    msg = fails(ValueError, "matmul", "rhs", ops.matmul, T(F32, 2, 2, 3), T(F32, 5, 3, 4))
    assert "float32[2, 2, 3]" in msg
    fails(ValueError, "matmul", "rhs", ops.matmul, T(F32, "a", 2, 3), T(F32, "b", 3, 4))


def test_matmul_rejects_scalars_and_mixed_devices():
    fails(ValueError, "matmul", "lhs", ops.matmul, T(F32), T(F32, 3, 4))
    fails(ValueError, "matmul", "rhs", ops.matmul, T(F32, 3, 4), T(F32))
    fails(ValueError, "matmul", "rhs", ops.matmul, T(F32, 2, 3), T(F32, 3, 4, device=DeviceRef.GPU()))


def test_matmul_on_gpu():
    gpu = DeviceRef.GPU()
    out = stage(ops.matmul, T(F32, 2, 3, device=gpu), T(F32, 3, 4, device=gpu))
    check(out, F32, [2, 4])
    assert out.device == gpu


@pytest.mark.parametrize(
    ("lhs", "rhs", "out"),
    [
        ((3,), (4,), (3, 4)),
        (("n",), ("m",), ("n", "m")),
        ((2, 3), ("b", 4), (6, Dim("b") * 4)),
        ((), (5,), (1, 5)),
    ],
)
def test_outer_flattens_both_operands(lhs, rhs, out):
    check(stage(ops.outer, T(F32, *lhs), T(F32, *rhs)), F32, out)


def test_outer_dtypes_and_devices():
    check(stage(ops.outer, T(F16, 3), T(F32, 4)), F32, [3, 4])
    check(stage(lambda a: ops.outer(a, [1, 2]), T(I32, 3)), I32, [3, 2])
    fails(ValueError, "outer", "rhs", ops.outer, T(F32, 3), T(F32, 4, device=DeviceRef.GPU()))
    fails(ValueError, "outer", "rhs", ops.outer, T(DType.int64, 3), T(DType.uint64, 4))


@pytest.mark.parametrize(("lhs", "rhs"), [
    ((0, 2, 3), (3, 2)), ((2, 0, 2, 3), (3, 2)), ((3,), (0, 3, 2)), ((0, 2, 3), (3,)), ((2, 3), (0, 3, 4)),
    ((1, 2, 3), (0, 3, 4)), ((0, 1, 2, 3), (5, 3, 4)), ((0, 2, 3), (0, 3, 2)), ((2, 0), (0, 3)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_matmul_with_an_empty_batch_runs(device, lhs, rhs, dtype):
    """A batch dim of 0 against a broadcast one (or none) gives an empty result (it crashed the
    process: the output batch was taken as 1); K = 0 gives zeros."""
    from max import driver, engine
    from max.graph import Graph, TensorType

    a, b = np.ones(lhs, dtype), np.ones(rhs, dtype)
    ref = DeviceRef.from_device(device)
    dt = DType.from_numpy(np.dtype(dtype))
    with Graph("mm", input_types=[TensorType(dt, lhs, ref), TensorType(dt, rhs, ref)]) as g:
        g.output(ops.matmul(g.inputs[0].tensor, g.inputs[1].tensor))
    model = engine.InferenceSession(devices=[driver.CPU(), device]).load(g)
    out = model.execute(driver.Buffer.from_numpy(a).to(device), driver.Buffer.from_numpy(b).to(device))[0]
    np.testing.assert_array_equal(out.to(driver.CPU()).to_numpy(), a @ b)
