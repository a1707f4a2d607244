"""Every elementwise op on the CPU, for every dtype it takes, against numpy in float64, through
InferenceSession, with broadcasting and a symbolic batch dim."""

import ml_dtypes
import numpy as np
import pytest
from scipy_free_erf import erf

from engine_util import build, cpu_type, run
from max.dtype import DType
from max.graph import ops

FLOATS = [DType.float32, DType.float64, DType.float16, DType.bfloat16]
INTS = [DType.int8, DType.int16, DType.int32, DType.int64, DType.uint8, DType.uint16, DType.uint32, DType.uint64]
TOL = {DType.float32: 1e-6, DType.float64: 1e-12, DType.float16: 1e-3, DType.bfloat16: 8e-3}


def np_type(d):
    return ml_dtypes.bfloat16 if d is DType.bfloat16 else d.to_numpy()


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


UNARY = {
    "abs": np.abs, "negate": np.negative, "exp": np.exp, "log": np.log, "log1p": np.log1p, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "acos": np.arccos,
    "atanh": np.arctanh, "erf": erf, "floor": np.floor, "round": np.round, "trunc": np.trunc,
    "relu": lambda x: np.maximum(x, 0), "sigmoid": sigmoid, "silu": lambda x: x * sigmoid(x),
    "gelu": lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2))),
}
DOMAIN = {"log": (0.1, 5), "sqrt": (0.1, 5), "rsqrt": (0.1, 5), "log1p": (-0.5, 5), "acos": (-0.95, 0.95), "atanh": (-0.9, 0.9)}


def inputs(rng, d, shape, lo=-3.0, hi=3.0):
    if d is DType.bool:
        return rng.integers(0, 2, shape).astype(bool)
    if d.is_integral():
        info = np.iinfo(d.to_numpy())
        return rng.integers(max(info.min, -100), min(info.max, 100), shape).astype(d.to_numpy())
    return rng.uniform(lo, hi, shape).astype(np_type(d))


def check(out, ref, d):
    ref = np.asarray(ref, np.float64)
    if d in TOL:
        # the result is rounded to d: compare against the float64 value rounded the same way
        ref_rounded = ref.astype(np_type(d)).astype(np.float64)
        np.testing.assert_allclose(out.astype(np.float64), ref_rounded, rtol=TOL[d], atol=TOL[d])
    else:
        np.testing.assert_array_equal(out.astype(np.float64), ref)


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_unary_floats(rng, name, dtype):
    g = build(lambda x: getattr(ops, name)(x), cpu_type(dtype, ("batch", 5)))
    for batch in [1, 9]:
        x = inputs(rng, dtype, (batch, 5), *DOMAIN.get(name, (-3, 3)))
        (out,) = run(g, x)
        check(out, UNARY[name](x.astype(np.float64)), dtype)


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.name)
def test_unary_integers(rng, dtype):
    signed = dtype.is_signed_integral()
    g = build(lambda x: [ops.abs(x), ops.negate(x), ops.relu(x)], cpu_type(dtype, ("batch", 4)))
    x = inputs(rng, dtype, (6, 4))
    a, n, r = run(g, x)
    with np.errstate(over="ignore"):
        # numpy wraps negation and abs in the array's own dtype, as the engine does
        np.testing.assert_array_equal(a, np.abs(x) if signed else x)
        np.testing.assert_array_equal(n, np.negative(x))
    np.testing.assert_array_equal(r, np.maximum(x, 0))


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum, "min": np.minimum,
    "pow": np.power, "mod": np.mod,
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_binary_floats_broadcast(rng, name, dtype):
    g = build(lambda x, y: getattr(ops, name)(x, y), cpu_type(dtype, ("batch", 1, 4)), cpu_type(dtype, (3, 4)))
    for batch in [2, 5]:
        x = inputs(rng, dtype, (batch, 1, 4), 0.5, 3.0)
        y = inputs(rng, dtype, (3, 4), 0.5, 3.0)
        (out,) = run(g, x, y)
        check(out, BINARY[name](x.astype(np.float64), y.astype(np.float64)), dtype)


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.name)
def test_binary_integers(rng, dtype):
    def fn(x, y):
        return [x + y, x - y, x * y, ops.max(x, y), ops.min(x, y), x // y, x % y, x == y, x > y, x >= y, x != y]

    g = build(fn, cpu_type(dtype, ("batch", 4)), cpu_type(dtype, (4,)))
    x = inputs(rng, dtype, (7, 4))
    y = inputs(rng, dtype, (4,))
    y[y == 0] = 3
    outs = run(g, x, y)
    with np.errstate(over="ignore"):
        refs = [x + y, x - y, x * y, np.maximum(x, y), np.minimum(x, y), x // y, x % y, x == y, x > y, x >= y, x != y]
    for o, r in zip(outs, refs):
        np.testing.assert_array_equal(o, r)


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=lambda d: d.name)
def test_comparisons_where_and_casts(rng, dtype):
    def fn(x, y):
        m = x > y
        return [ops.where(m, x, y), ops.equal(x, y), ops.greater_equal(x, y), ops.cast(x, DType.float64), ops.cast(m, dtype)]

    g = build(fn, cpu_type(dtype, ("b", 3)), cpu_type(dtype, (3,)))
    x, y = inputs(rng, dtype, (4, 3)), inputs(rng, dtype, (3,))
    w, e, ge, c, mb = run(g, x, y)
    np.testing.assert_array_equal(w.astype(np.float64), np.where(x > y, x, y).astype(np.float64))
    np.testing.assert_array_equal(e, x == y)
    np.testing.assert_array_equal(ge, x >= y)
    np.testing.assert_array_equal(c, x.astype(np.float64))
    np.testing.assert_array_equal(mb.astype(np.float64), (x > y).astype(np.float64))


def test_logical_ops(rng):
    def fn(a, b):
        return [ops.logical_and(a, b), ops.logical_or(a, b), ops.logical_xor(a, b), ops.logical_not(a)]

    g = build(fn, cpu_type(DType.bool, ("n", 4)), cpu_type(DType.bool, (4,)))
    a, b = inputs(rng, DType.bool, (5, 4)), inputs(rng, DType.bool, (4,))
    out = run(g, a, b)
    for o, r in zip(out, [a & b, a | b, a ^ b, ~a]):
        np.testing.assert_array_equal(o, r)


def test_nan_and_inf_predicates():
    g = build(lambda x: [ops.is_nan(x), ops.is_inf(x)], cpu_type(DType.float32, (5,)))
    x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], np.float32)
    nan, inf = run(g, x)
    assert nan.tolist() == [False, True, False, False, False] and inf.tolist() == [False, False, True, True, False]


def test_true_division_of_integers_is_float64(rng):
    g = build(lambda x, y: x / y, cpu_type(DType.int32, (6,)), cpu_type(DType.int32, (6,)))
    x, y = rng.integers(-50, 50, 6).astype(np.int32), rng.integers(1, 9, 6).astype(np.int32)
    (out,) = run(g, x, y)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, x / y)


def test_gelu_approximations(rng):
    g = build(lambda x: [ops.gelu(x, approximate="tanh"), ops.gelu(x, approximate="quick")], cpu_type(DType.float64, (50,)))
    x = rng.uniform(-4, 4, 50)
    t, q = run(g, x)
    np.testing.assert_allclose(t, 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))), rtol=1e-10, atol=1e-15)  # 1 + tanh cancels for x < 0
    np.testing.assert_allclose(q, x * sigmoid(1.702 * x), rtol=1e-10, atol=1e-15)
