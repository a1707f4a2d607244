"""Elementwise ops: unary functions, binary arithmetic and comparisons with broadcasting and
weak scalars, logical ops, and ``where``."""

from __future__ import annotations

from typing import Any

from max.graph.ops._stage import as_tensor, stage1
from max.graph.value import TensorValue

_ARGS = {"max": ("x", "y"), "min": ("x", "y")}


def _binary(name: str, lhs: Any, rhs: Any) -> TensorValue:
    a_name, b_name = _ARGS.get(name, ("lhs", "rhs"))
    if isinstance(lhs, TensorValue):
        rhs = as_tensor(rhs, like=lhs, op=name, arg=b_name)
    elif isinstance(rhs, TensorValue):
        lhs = as_tensor(lhs, like=rhs, op=name, arg=a_name)
    else:
        lhs = as_tensor(lhs, op=name, arg=a_name)
        rhs = as_tensor(rhs, like=lhs, op=name, arg=b_name)
    ir = lhs._graph._ir
    target = ir.promote(name, lhs._id, rhs._id)
    if ir.value_summary(lhs._id)[1] != target:
        lhs = stage1("cast", [lhs], {"dtype": ("dtype", target)})
    if ir.value_summary(rhs._id)[1] != target:
        rhs = stage1("cast", [rhs], {"dtype": ("dtype", target)})
    return stage1(name, [lhs, rhs])


def _unary(name: str, x: Any, attrs: dict | None = None) -> TensorValue:
    return stage1(name, [as_tensor(x, op=name, arg="x")], attrs)


def add(lhs: Any, rhs: Any) -> TensorValue:
    """Elementwise ``lhs + rhs`` (Python's ``+``), broadcasting the two and promoting their dtypes."""
    return _binary("add", lhs, rhs)


def sub(lhs: Any, rhs: Any) -> TensorValue:
    """Elementwise ``lhs - rhs`` (Python's ``-``), broadcasting the two and promoting their dtypes."""
    return _binary("sub", lhs, rhs)


def mul(lhs: Any, rhs: Any) -> TensorValue:
    """Elementwise ``lhs * rhs`` (Python's ``*``), broadcasting the two and promoting their dtypes."""
    return _binary("mul", lhs, rhs)


def div(lhs: Any, rhs: Any) -> TensorValue:
    """True division (Python's ``/``): integer operands are divided in float64."""
    return _binary("div", lhs, rhs)


def mod(lhs: Any, rhs: Any) -> TensorValue:
    """Elementwise remainder with the sign of `rhs` (Python's ``%``), broadcasting and promoting."""
    return _binary("mod", lhs, rhs)


def pow(lhs: Any, rhs: Any) -> TensorValue:  # noqa: A001 - MAX's name
    """Elementwise `lhs` raised to the power `rhs` (Python's ``**``), broadcasting and promoting."""
    return _binary("pow", lhs, rhs)


def equal(lhs: Any, rhs: Any) -> TensorValue:
    """Elementwise ``lhs == rhs`` as a bool tensor (the two broadcast)."""
    return _binary("equal", lhs, rhs)


def not_equal(lhs: Any, rhs: Any) -> TensorValue:
    """Elementwise ``lhs != rhs`` as a bool tensor (the two broadcast)."""
    return _binary("not_equal", lhs, rhs)


def greater(lhs: Any, rhs: Any) -> TensorValue:
    """Elementwise ``lhs > rhs`` as a bool tensor (the two broadcast)."""
    return _binary("greater", lhs, rhs)


def greater_equal(lhs: Any, rhs: Any) -> TensorValue:
    """Elementwise ``lhs >= rhs`` as a bool tensor (the two broadcast)."""
    return _binary("greater_equal", lhs, rhs)


def logical_and(lhs: Any, rhs: Any) -> TensorValue:
    """Elementwise AND of two bool tensors (Python's ``&`` on bool values)."""
    return _binary("logical_and", lhs, rhs)


def logical_or(lhs: Any, rhs: Any) -> TensorValue:
    """Elementwise OR of two bool tensors (Python's ``|`` on bool values)."""
    return _binary("logical_or", lhs, rhs)


def logical_xor(lhs: Any, rhs: Any) -> TensorValue:
    """Elementwise exclusive OR of two bool tensors (Python's ``^`` on bool values)."""
    return _binary("logical_xor", lhs, rhs)


def logical_not(x: Any) -> TensorValue:
    """Elementwise NOT of a bool tensor (Python's ``~`` on a bool value)."""
    return _unary("logical_not", x)


def abs(x: Any) -> TensorValue:  # noqa: A001 - MAX's name
    """Elementwise absolute value, in the input's dtype."""
    return _unary("abs", x)


def negate(x: Any) -> TensorValue:
    """Elementwise ``-x`` (Python's unary ``-``)."""
    return _unary("negate", x)


def exp(x: Any) -> TensorValue:
    """Elementwise e raised to `x` (floating-point inputs)."""
    return _unary("exp", x)


def log(x: Any) -> TensorValue:
    """Elementwise natural logarithm (floating-point inputs; ``log(0)`` is ``-inf``)."""
    return _unary("log", x)


def log1p(x: Any) -> TensorValue:
    """Elementwise ``log(1 + x)``, accurate for `x` near zero."""
    return _unary("log1p", x)


def sqrt(x: Any) -> TensorValue:
    """Elementwise square root (floating-point inputs; negative values give NaN)."""
    return _unary("sqrt", x)


def rsqrt(x: Any) -> TensorValue:
    """Elementwise reciprocal square root ``1 / sqrt(x)``."""
    return _unary("rsqrt", x)


def sin(x: Any) -> TensorValue:
    """Elementwise sine of `x` in radians."""
    return _unary("sin", x)


def cos(x: Any) -> TensorValue:
    """Elementwise cosine of `x` in radians."""
    return _unary("cos", x)


def tanh(x: Any) -> TensorValue:
    """Elementwise hyperbolic tangent."""
    return _unary("tanh", x)


def acos(x: Any) -> TensorValue:
    """Elementwise arc cosine, in radians in [0, pi]; inputs outside [-1, 1] are clamped to it
    (NaN stays NaN), as MAX documents."""
    t = as_tensor(x, op="acos", arg="x")
    return _unary("acos", min(max(t, -1), 1) if t.dtype.is_float() else t)  # (others: _unary's error)


def atanh(x: Any) -> TensorValue:
    """Elementwise inverse hyperbolic tangent (infinite at -1 and 1, NaN outside)."""
    return _unary("atanh", x)


def erf(x: Any) -> TensorValue:
    """Elementwise Gauss error function."""
    return _unary("erf", x)


def floor(x: Any) -> TensorValue:
    """Elementwise largest integer not greater than `x`, in the input's dtype."""
    return _unary("floor", x)


def round(x: Any) -> TensorValue:  # noqa: A001 - MAX's name
    """Rounds half to even, elementwise."""
    return _unary("round", x)


def trunc(x: Any) -> TensorValue:
    """Elementwise rounding toward zero, in the input's dtype."""
    return _unary("trunc", x)


def relu(x: Any) -> TensorValue:
    """Elementwise rectified linear unit ``max(x, 0)``."""
    return _unary("relu", x)


def gelu(x: Any, approximate: str = "none") -> TensorValue:
    """GELU; ``approximate`` is "none" (erf), "tanh" or "quick" (x * sigmoid(1.702 x))."""
    return _unary("gelu", x, {"approximate": approximate})


def sigmoid(x: Any) -> TensorValue:
    """Elementwise logistic function ``1 / (1 + exp(-x))``."""
    return _unary("sigmoid", x)


def silu(x: Any) -> TensorValue:
    """Elementwise SiLU (swish): ``x * sigmoid(x)``."""
    return _unary("silu", x)


def is_nan(x: Any) -> TensorValue:
    """Elementwise test for NaN, as a bool tensor."""
    return _unary("is_nan", x)


def is_inf(x: Any) -> TensorValue:
    """Elementwise test for positive or negative infinity, as a bool tensor."""
    return _unary("is_inf", x)


def max(x: Any, y: Any = None, /, axis: int | None = None) -> TensorValue:  # noqa: A001
    """Elementwise maximum of two tensors, or the maximum of one along `axis` (default -1)."""
    if y is not None:
        return _binary("max", x, y)
    from max.graph.ops.reduction import _reduce

    return _reduce("reduce_max", x, -1 if axis is None else axis, public="max")


def min(x: Any, y: Any = None, /, axis: int | None = None) -> TensorValue:  # noqa: A001
    """Elementwise minimum of two tensors, or the minimum of one along `axis` (default -1)."""
    if y is not None:
        return _binary("min", x, y)
    from max.graph.ops.reduction import _reduce

    return _reduce("reduce_min", x, -1 if axis is None else axis, public="min")


def where(condition: Any, x: Any, y: Any) -> TensorValue:
    """Elements of `x` where `condition` is true, else of `y` (all three broadcast)."""
    cond = as_tensor(condition, op="where", arg="condition")
    if isinstance(x, TensorValue) or not isinstance(y, TensorValue):
        x = as_tensor(x, op="where", arg="x")
        y = as_tensor(y, like=x, op="where", arg="y")
    else:
        x = as_tensor(x, like=y, op="where", arg="x")
    ir = x._graph._ir
    target = ir.promote("where", x._id, y._id, cond._id)
    if ir.value_summary(x._id)[1] != target:
        x = stage1("cast", [x], {"dtype": ("dtype", target)})
    if ir.value_summary(y._id)[1] != target:
        y = stage1("cast", [y], {"dtype": ("dtype", target)})
    return stage1("where", [cond, x, y])


__all__ = [
    "abs", "acos", "add", "atanh", "cos", "div", "equal", "erf", "exp", "floor", "gelu", "greater",
    "greater_equal", "is_inf", "is_nan", "log", "log1p", "logical_and", "logical_not", "logical_or",
    "logical_xor", "max", "min", "mod", "mul", "negate", "not_equal", "pow", "relu", "round",
    "rsqrt", "sigmoid", "silu", "sin", "sqrt", "sub", "tanh", "trunc", "where",
]

