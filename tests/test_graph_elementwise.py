"""Elementwise ops: dtype promotion, weak scalars, broadcasting (static and symbolic), errors."""

import numpy as np
import pytest

from max.dtype import DType
from max.graph import DeviceRef, Dim, Graph, TensorType, ops

CPU = DeviceRef.CPU()
UNARY = ["abs", "negate", "exp", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tanh", "acos", "atanh",
         "erf", "floor", "round", "trunc", "relu", "gelu", "sigmoid", "silu"]
BINARY = ["add", "sub", "mul", "div", "mod", "pow"]
COMPARE = ["equal", "not_equal", "greater", "greater_equal"]


def graph(*types):
    return Graph("t", input_types=[TensorType(d, s, CPU) for d, s in types])


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16, DType.float16])
def test_unary_keeps_type(name, dtype):
    with graph((dtype, ("batch", 7))) as g:
        y = getattr(ops, name)(g.inputs[0])
        assert y.type == TensorType(dtype, ["batch", 7], CPU)


@pytest.mark.parametrize("name", BINARY + COMPARE)
def test_binary_broadcasting(name):
    with graph((DType.float32, ("batch", 1, 5)), (DType.float32, (4, 1))) as g:
        y = getattr(ops, name)(*g.inputs)
        assert y.shape == ["batch", 4, 5]
        assert y.dtype is (DType.bool if name in COMPARE else DType.float32)


def test_symbolic_and_algebraic_dims_broadcast_when_equal():
    n = Dim("n")
    with graph((DType.float32, (n * 2, "m")), (DType.float32, (2 * n, 1))) as g:
        assert (g.inputs[0] + g.inputs[1]).shape == [n * 2, "m"]


@pytest.mark.parametrize("a, b", [(("a",), ("b",)), (("a",), (3,)), ((2, 3), (3, 2))])
def test_incompatible_shapes(a, b):
    with graph((DType.float32, a), (DType.float32, b)) as g:
        with pytest.raises(ValueError, match=r"add: rhs: .*cannot be broadcast.*inputs: lhs=float32"):
            ops.add(*g.inputs)


@pytest.mark.parametrize("a, b, out", [
    (DType.float16, DType.float32, DType.float32), (DType.int16, DType.float32, DType.float32),
    (DType.int8, DType.float16, DType.float16), (DType.bool, DType.float32, DType.float32),
    (DType.uint8, DType.int16, DType.int16), (DType.int32, DType.float64, DType.float64),
    (DType.bool, DType.bool, DType.bool),
])
def test_promotion(a, b, out):
    with graph((a, (3,)), (b, (3,))) as g:
        x, y = g.inputs
        assert (x + y).dtype is out and (y * x).dtype is out


@pytest.mark.parametrize("a, b", [
    (DType.int32, DType.float32), (DType.uint8, DType.int8), (DType.bfloat16, DType.float16),
    (DType.int64, DType.float64),
])
def test_promotion_refuses_lossy_pairs(a, b):
    with graph((a, (3,)), (b, (3,))) as g:
        with pytest.raises(ValueError, match=f"add: rhs: cannot combine {a.name} and {b.name}.*explicit cast"):
            g.inputs[0] + g.inputs[1]


def test_weak_scalars_and_arrays():
    with graph((DType.float16, (3,)), (DType.int32, (3,)), (DType.int8, (3,))) as g:
        h, i, b = g.inputs
        assert (h + 2).dtype is DType.float16 and (2 - h).dtype is DType.float16
        assert (h + 1e10).dtype is DType.float16
        assert (h + np.ones(3)).dtype is DType.float16
        assert (h + np.float64(2)).dtype is DType.float16
        assert (i + True).dtype is DType.int32
        assert (b + 127).dtype is DType.int8
        with pytest.raises(ValueError, match="add: rhs: a Python float does not combine with a tensor of int32"):
            i + 2.5
        with pytest.raises(ValueError, match="add: rhs: the Python int 300 does not fit in int8"):
            b + 300
        with pytest.raises(ValueError, match="does not fit in int32"):
            i + 2**40


def test_true_and_floor_division():
    with graph((DType.int32, ("b", 3)), (DType.float32, (3,))) as g:
        i, f = g.inputs
        assert (i / 2).dtype is DType.float64 and (i / i).dtype is DType.float64
        assert (i // 2).dtype is DType.int32 and (f / 2).dtype is DType.float32
        assert (2 / f).dtype is DType.float32


def test_comparisons_and_logic():
    with graph((DType.float32, (3,)), (DType.bool, (3,))) as g:
        f, b = g.inputs
        assert (f < 1).dtype is DType.bool and (f == 1).dtype is DType.bool and (1 >= f).dtype is DType.bool
        assert (b & b).dtype is DType.bool and (~b).dtype is DType.bool and ops.logical_xor(b, True).dtype is DType.bool
        with pytest.raises(TypeError, match="logical_and: lhs: logical_and needs bool inputs, got float32"):
            ops.logical_and(f, f)
        with pytest.raises(TypeError, match="logical_not: x:"):
            ops.logical_not(f)
        assert ops.is_nan(f).dtype is DType.bool and ops.is_inf(f).dtype is DType.bool
        with pytest.raises(TypeError, match="is_nan: x: expected a floating-point tensor"):
            ops.is_nan(ops.cast(f, DType.int32))


@pytest.mark.parametrize("name", ["exp", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tanh", "acos", "atanh", "erf",
                                  "gelu", "sigmoid", "silu"])
def test_maps_of_real_numbers_need_a_floating_point_tensor(name):
    """As MAX documents for sqrt, tanh and acos: an integer or bool tensor is refused (its result
    would be truncated), every floating-point dtype accepted."""
    op = getattr(ops, name)
    with graph((DType.int32, (3,)), (DType.uint8, (3,)), (DType.bool, (3,))) as g:
        for x in g.inputs:
            with pytest.raises(TypeError, match=f"{name}: x: expected a floating-point tensor, got {x.dtype.name.lower()}; cast"):
                op(x)
        for dt in (DType.float16, DType.bfloat16, DType.float32, DType.float64):
            assert op(ops.cast(g.inputs[0], dt)).type == TensorType(dt, [3], CPU)


def test_array_operands_name_the_op_and_argument():
    """An array or list beside a tensor that cannot take the tensor's dtype is reported as the
    op's argument (it was reported as ``constant: value``), floats beside integer tensors too."""
    with graph((DType.int32, (2,))) as g:
        (i,) = g.inputs
        for floats in (np.array([1.5, 2.5]), np.array([1.0, 2.0]), [1.0, 2]):  # (whole floats too, as scalars)
            with pytest.raises(ValueError, match="add: rhs: float values do not combine with a tensor of int32"):
                ops.add(i, floats)
        with pytest.raises(ValueError, match="div: rhs: a Python float does not combine with a tensor of int32"):
            ops.div(i, 2.0)
        with pytest.raises(ValueError, match="mul: rhs: nested lists must be rectangular"):
            ops.mul(i, [[1, 2], [3]])
        with pytest.raises(ValueError, match="constant: value: nested lists must be rectangular"):
            ops.constant([[1, 2], [3]], DType.int32, device=CPU)


def test_where():
    with graph((DType.bool, ("n", 1)), (DType.float32, (4,))) as g:
        c, x = g.inputs
        assert ops.where(c, x, 0).type == TensorType(DType.float32, ["n", 4], CPU)
        assert ops.where(c, 1.5, x).dtype is DType.float32
        with pytest.raises(TypeError, match="where: condition: expected a bool tensor"):
            ops.where(x, x, x)
        i = ops.cast(x, DType.int32)
        # dtypes that do not promote: the error names y, and the inputs by their own names
        with pytest.raises(ValueError, match=r"where: y: cannot combine float32 and int32.*"
                                             r"condition=bool\[n, 1\].*x=float32\[4\].*y=int32\[4\]"):
            ops.where(c, x, i)


def test_elementwise_max_min_and_gelu_modes():
    with graph((DType.float32, (2, 3)), (DType.float32, (3,))) as g:
        m, v = g.inputs
        assert ops.max(m, v).shape == [2, 3] and ops.min(v, m).shape == [2, 3]
        for mode in ["none", "tanh", "quick"]:
            assert ops.gelu(m, approximate=mode).shape == [2, 3]
        with pytest.raises(ValueError, match="gelu: approximate: must be"):
            ops.gelu(m, approximate="fast")


def test_devices_must_match():
    with Graph("d", input_types=[TensorType(DType.float32, (3,), CPU), TensorType(DType.float32, (3,), DeviceRef.GPU())]) as g:
        with pytest.raises(ValueError, match="add: rhs: input values must be on the same device"):
            g.inputs[0] + g.inputs[1]
        assert (g.inputs[1] * 2).device == DeviceRef.GPU()
