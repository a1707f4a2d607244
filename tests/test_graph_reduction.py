"""Staging the reduction ops: inferred dtypes and shapes (static, symbolic, algebraic) and the
documented errors, with messages naming the op and the argument."""

import numpy as np
import pytest

from max.dtype import DType
from max.graph import DeviceRef, Dim, ops

from staging import B, F16, F32, I32, I64, T, check, fails, stage


REDUCTIONS = [ops.sum, ops.mean, ops.argmax, ops.argmin]


@pytest.mark.parametrize("op", REDUCTIONS, ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    ("shape", "axis", "expected"),
    [
        ((2, 3), -1, (2, 1)),
        ((2, 3), 0, (1, 3)),
        (("batch", 3, "seq"), 1, ("batch", 1, "seq")),
        (("batch", 3, "seq"), -1, ("batch", 3, 1)),
        ((Dim("n") * 2, 5), -2, (1, 5)),
        ((7,), 0, (1,)),
    ],
)
def test_reductions_keep_the_axis_with_size_one(op, shape, axis, expected):
    out = stage(lambda x: op(x, axis), T(F16, *shape))
    check(out, I64 if op in (ops.argmax, ops.argmin) else F16, expected)


def test_default_axis_is_the_last():
    check(stage(ops.sum, T(F32, "b", 3)), F32, ["b", 1])
    check(stage(ops.argmin, T(F32, "b", 3)), I64, ["b", 1])


@pytest.mark.parametrize("dtype", [I32, DType.uint8, B, DType.bfloat16])
def test_reductions_keep_the_input_dtype(dtype):
    # MAX computes the mean of an integer tensor in its own dtype.
    check(stage(ops.mean, T(dtype, 2, 3)), dtype, [2, 1])
    check(stage(ops.sum, T(dtype, 2, 3)), dtype, [2, 1])
    check(stage(ops.argmax, T(dtype, 2, 3)), I64, [2, 1])


def test_one_tensor_max_and_min_reduce():
    check(stage(lambda x: ops.max(x), T(F32, "b", 3)), F32, ["b", 1])
    check(stage(lambda x: ops.min(x, axis=0), T(I32, "b", 3)), I32, [1, 3])
    check(stage(lambda x: x.max(), T(F32, 4, 3)), F32, [4, 1])
    check(stage(lambda x: x.min(0), T(F32, 4, 3)), F32, [1, 3])


def test_tensor_value_methods():
    check(stage(lambda x: x.mean(0), T(F32, "b", 3)), F32, [1, 3])
    check(stage(lambda x: x.argmax(), T(F32, "b", 3)), I64, ["b", 1])
    check(stage(lambda x: x.var(), T(F32, "b", 3)), F32, ["b", 1])


@pytest.mark.parametrize("op", REDUCTIONS + [ops.softmax, ops.logsoftmax, ops.cumsum], ids=lambda f: f.__name__)
@pytest.mark.parametrize("axis", [2, -3, 10])
def test_axis_out_of_range_is_an_index_error(op, axis):
    msg = fails(IndexError, op.__name__, "axis", lambda x: op(x, axis), T(F32, "b", 3))
    assert "float32[b, 3]" in msg


@pytest.mark.parametrize(("public", "call"), [("max", lambda x: ops.max(x, axis=5)), ("min", lambda x: x.min(-4))])
def test_max_min_errors_name_the_public_op(public, call):
    fails(IndexError, public, "axis", call, T(F32, 2, 3))


@pytest.mark.parametrize("op", REDUCTIONS, ids=lambda f: f.__name__)
def test_reducing_a_scalar_has_no_axis(op):
    fails(IndexError, op.__name__, "axis", op, T(F32))


@pytest.mark.parametrize("axis", [1.0, None, "0", True])
def test_axis_must_be_an_int(axis):
    fails(TypeError, "sum", "axis", lambda x: ops.sum(x, axis), T(F32, 2, 3))
    fails(TypeError, "softmax", "axis", lambda x: ops.softmax(x, axis), T(F32, 2, 3))


def test_axis_accepts_numpy_ints():
    check(stage(lambda x: ops.sum(x, np.int64(0)), T(F32, 2, 3)), F32, [1, 3])


@pytest.mark.parametrize("op", [ops.softmax, ops.logsoftmax], ids=lambda f: f.__name__)
def test_softmax_keeps_the_type(op):
    check(stage(op, T(F16, "b", 10)), F16, ["b", 10])
    check(stage(lambda x: op(x, 0), T(F32, Dim("b") + 1, 10)), F32, [Dim("b") + 1, 10])
    check(stage(lambda x: op(x, axis=-2), T(F32, 2, 3, 4, device=DeviceRef.GPU())), F32, [2, 3, 4])
    # MAX stages a scalar softmax (a one-element distribution).
    check(stage(op, T(F32)), F32, [])


def test_cumsum():
    check(stage(ops.cumsum, T(I32, "b", 5)), I32, ["b", 5])
    out = stage(lambda x: ops.cumsum(x, axis=0, exclusive=True, reverse=True), T(F32, "b", 5))
    check(out, F32, ["b", 5])
    fails(TypeError, "cumsum", "exclusive", lambda x: ops.cumsum(x, exclusive=1), T(F32, 3))
    fails(TypeError, "cumsum", "reverse", lambda x: ops.cumsum(x, reverse="yes"), T(F32, 3))
    fails(IndexError, "cumsum", "axis", ops.cumsum, T(F32))


def test_top_k_returns_values_and_indices():
    values, indices = stage(lambda x: ops.top_k(x, 2), T(F32, "b", 5))
    check(values, F32, ["b", 2])
    check(indices, I64, ["b", 2])
    values, indices = stage(lambda x: ops.top_k(x, 3, axis=0), T(I32, 3, "n"))
    check(values, I32, [3, "n"])
    check(indices, I64, [3, "n"])


def test_top_k_on_a_symbolic_axis():
    values, indices = stage(lambda x: ops.top_k(x, 4), T(F32, 2, "vocab"))
    check(values, F32, [2, 4])
    check(indices, I64, [2, 4])


def test_top_k_errors():
    msg = fails(ValueError, "top_k", "k", lambda x: ops.top_k(x, 6), T(F32, 3, 5))
    assert "5" in msg
    fails(ValueError, "top_k", "k", lambda x: ops.top_k(x, -1), T(F32, 3, 5))
    fails(IndexError, "top_k", "axis", lambda x: ops.top_k(x, 1, axis=2), T(F32, 3, 5))
    fails(TypeError, "top_k", "k", lambda x: ops.top_k(x, 2.0), T(F32, 3, 5))
    values, _ = stage(lambda x: ops.top_k(x, 5), T(F32, 3, 5))
    check(values, F32, [3, 5])


def test_argsort():
    check(stage(ops.argsort, T(F32, 7)), I64, [7])
    check(stage(lambda x: ops.argsort(x, ascending=False), T(I32, "n")), I64, ["n"])
    msg = fails(ValueError, "argsort", "x", ops.argsort, T(F32, 2, 5))
    assert "rank" in msg
    fails(ValueError, "argsort", "x", ops.argsort, T(F32))
    fails(TypeError, "argsort", "ascending", lambda x: ops.argsort(x, ascending=None), T(F32, 5))


def test_layer_norm_shapes():
    ln = lambda x, g, b: ops.layer_norm(x, g, b, 1e-5)  # noqa: E731
    check(stage(ln, T(F32, "b", 4), T(F32, 4), T(F32, 4)), F32, ["b", 4])
    check(stage(ln, T(F16, "b", "s", "h"), T(F16, "h"), T(F16, "h")), F16, ["b", "s", "h"])


def test_layer_norm_accepts_arrays_for_gamma_and_beta():
    out = stage(lambda x: ops.layer_norm(x, np.ones(3, np.float32), [0.0, 0.0, 0.0], 1), T(F16, 2, 3))
    check(out, F16, [2, 3])


@pytest.mark.parametrize(
    ("arg", "gamma", "beta"),
    [("gamma", (3,), (4,)), ("beta", (4,), (3,)), ("gamma", (1, 4), (4,)), ("gamma", ("h",), (4,)), ("beta", (4,), ())],
)
def test_layer_norm_rejects_mismatched_parameters(arg, gamma, beta):
    ln = lambda x, g, b: ops.layer_norm(x, g, b, 1e-5)  # noqa: E731
    msg = fails(ValueError, "layer_norm", arg, ln, T(F32, "b", 4), T(F32, *gamma), T(F32, *beta))
    assert "last dimension" in msg


@pytest.mark.parametrize("eps", [0.0, -1e-5, float("nan")])
def test_layer_norm_needs_a_positive_epsilon(eps):
    ln = lambda x, g, b: ops.layer_norm(x, g, b, eps)  # noqa: E731
    fails(ValueError, "layer_norm", "epsilon", ln, T(F32, 2, 4), T(F32, 4), T(F32, 4))


def test_layer_norm_type_and_device_errors():
    fails(TypeError, "layer_norm", "epsilon", lambda x, g, b: ops.layer_norm(x, g, b, "1e-5"), T(F32, 2, 4), T(F32, 4), T(F32, 4))
    fails(TypeError, "layer_norm", "gamma", lambda x, g, b: ops.layer_norm(x, g, b, 1e-5), T(F32, 2, 4), T(F16, 4), T(F32, 4))
    gpu = DeviceRef.GPU()
    fails(ValueError, "layer_norm", "gamma", lambda x, g, b: ops.layer_norm(x, g, b, 1e-5), T(F32, 2, 4), T(F32, 4, device=gpu), T(F32, 4))
    fails(ValueError, "layer_norm", "input", lambda x, g, b: ops.layer_norm(x, g, b, 1e-5), T(F32), T(F32, 4), T(F32, 4))
