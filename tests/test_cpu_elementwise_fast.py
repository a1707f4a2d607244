"""The float32/bfloat16/float16 path of the CPU elementwise kernel (cpu/elementwise/single.rs)
against numpy float64, through InferenceSession: every op it computes, for each of those dtypes
(float64 and the integers take the other path, and are here too where an op has them), at sizes
around the chunk and thread boundaries, with broadcasts, strided inputs, fused chains, special
values and a symbolic batch dim.

+ - * / and sqrt of float32, bfloat16 or float16 values are exact: numpy's arithmetic in those
dtypes (which ml_dtypes and numpy do in float32 and round) must give the same bits, chains
included, since the engine rounds after every op."""

import ml_dtypes
import numpy as np
import pytest
from scipy_free_erf import erf

from engine_util import build, cpu_type, run
from max.dtype import DType
from max.graph import ops

FAST = [DType.float32, DType.bfloat16, DType.float16]
FLOATS = FAST + [DType.float64]
TOL = {DType.float32: 1e-6, DType.float64: 1e-12, DType.float16: 1e-3, DType.bfloat16: 8e-3}
SIZES = [1, 1023, 1025, 4097]


def np_type(d):
    return ml_dtypes.bfloat16 if d is DType.bfloat16 else d.to_numpy()


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


UNARY = {
    "abs": np.abs, "negate": np.negative, "exp": np.exp, "log": np.log, "log1p": np.log1p, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "acos": np.arccos,
    "atanh": np.arctanh, "erf": erf, "floor": np.floor, "round": np.round, "trunc": np.trunc,
    "relu": lambda x: np.maximum(x, 0), "sigmoid": sigmoid, "silu": lambda x: x * sigmoid(x),
}
GELU = {
    "none": lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2))),
    "tanh": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
    "quick": lambda x: x * sigmoid(1.702 * x),
}
DOMAIN = {"log": (0.1, 5), "sqrt": (0.1, 5), "rsqrt": (0.1, 5), "log1p": (-0.5, 5), "acos": (-0.95, 0.95),
          "atanh": (-0.9, 0.9)}
BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum, "min": np.minimum,
    "pow": np.power, "mod": np.mod,
}
COMPARE = {"equal": np.equal, "not_equal": np.not_equal, "greater": np.greater, "greater_equal": np.greater_equal}


def values(rng, d, shape, lo=-4.0, hi=4.0):
    return rng.uniform(lo, hi, shape).astype(np_type(d))


def check(out, ref, d, *, gelu_none=False):
    """`out` against the float64 reference rounded to d, within d's tolerance."""
    ref = np.asarray(ref, np.float64)
    expect = ref.astype(np_type(d)).astype(np.float64)
    # 1 + erf(x) cancels for large negative x: the reference's own error is absolute there.
    atol = 1e-5 if gelu_none and d is DType.float32 else TOL[d]
    np.testing.assert_allclose(out.astype(np.float64), expect, rtol=TOL[d], atol=atol)


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_unary_at_chunk_boundaries(rng, name, dtype):
    g = build(lambda x: getattr(ops, name)(x), cpu_type(dtype, ("n",)))
    for n in SIZES:
        x = values(rng, dtype, (n,), *DOMAIN.get(name, (-4, 4)))
        (out,) = run(g, x)
        assert out.dtype == np_type(dtype) and out.shape == (n,)
        check(out, UNARY[name](x.astype(np.float64)), dtype)


@pytest.mark.parametrize("mode", sorted(GELU))
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_gelu_modes(rng, mode, dtype):
    g = build(lambda x: ops.gelu(x, approximate=mode), cpu_type(dtype, ("batch", 300)))
    for batch in [1, 7]:
        # Normal values, as activations, and the tails where erf switches formula (|x| >= 1.25 * sqrt 2).
        x = np.concatenate([rng.standard_normal((batch, 200)), rng.uniform(-9, 9, (batch, 100))], axis=1).astype(np_type(dtype))
        (out,) = run(g, x)
        check(out, GELU[mode](x.astype(np.float64)), dtype, gelu_none=mode == "none")


@pytest.mark.parametrize("dtype", FAST, ids=lambda d: d.name)
def test_arithmetic_is_exact_per_op(rng, dtype):
    """a * b + c, (a - b) / c and sqrt(|a|) give numpy's bits in the dtype itself, broadcasting."""
    def fn(a, b, c):
        return [a * b + c, (a - b) / c, ops.sqrt(ops.abs(a)), a + b]

    g = build(fn, cpu_type(dtype, ("batch", 1025)), cpu_type(dtype, (1025,)), cpu_type(dtype, ("batch", 1)))
    for batch in [1, 3]:
        a, b, c = values(rng, dtype, (batch, 1025)), values(rng, dtype, (1025,)), values(rng, dtype, (batch, 1), 0.5, 2)
        outs = run(g, a, b, c)
        with np.errstate(all="ignore"):
            refs = [a * b + c, (a - b) / c, np.sqrt(np.abs(a)), a + b]
        for o, r in zip(outs, refs):
            assert o.dtype == np_type(dtype)
            np.testing.assert_array_equal(o.view(np.uint16 if dtype is not DType.float32 else np.uint32),
                                          r.astype(np_type(dtype)).view(np.uint16 if dtype is not DType.float32 else np.uint32))


@pytest.mark.parametrize("dtype", FAST, ids=lambda d: d.name)
def test_a_million_elements_across_threads(rng, dtype):
    """1M + 1 elements (several tasks on the pool), a chain with a transcendental and a bias."""
    n = (1 << 20) + 1

    def fn(x, y):
        return [ops.relu(x * y + 1), ops.exp(ops.min(x, 3)), ops.sigmoid(x) * y]

    g = build(fn, cpu_type(dtype, ("n",)), cpu_type(dtype, (1,)))
    x, y = values(rng, dtype, (n,)), values(rng, dtype, (1,))
    r, e, s = run(g, x, y)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(r, np.maximum(x * y + np.array(1, np_type(dtype)), 0).astype(np_type(dtype)))
    xf, yf = x.astype(np.float64), y.astype(np.float64)
    check(e, np.exp(np.minimum(xf, 3)), dtype)
    check(s, (sigmoid(xf).astype(np_type(dtype)).astype(np.float64) * yf), dtype)


BROADCASTS = [
    ((64, 1024), (1024,)),        # a bias row
    ((64, 1), (1, 1024)),         # an outer sum
    ((1,), (3, 700)),             # a scalar
    ((5, 1, 9), (4, 1)),          # broadcasts on both sides
    ((2, 3, 1, 5), (3, 4, 1)),    # rank 4
]


@pytest.mark.parametrize("name", sorted(BINARY) + sorted(COMPARE))
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_binary_broadcast_patterns(rng, name, dtype):
    fn = BINARY.get(name) or COMPARE[name]
    lo = 0.5 if name in ("pow", "mod", "div") else -4
    for sa, sb in BROADCASTS:
        for s1, s2 in [(sa, sb), (sb, sa)]:
            g = build(lambda x, y: getattr(ops, name)(x, y), cpu_type(dtype, s1), cpu_type(dtype, s2))
            x, y = values(rng, dtype, s1, lo, 4), values(rng, dtype, s2, lo, 4)
            (out,) = run(g, x, y)
            ref = fn(x.astype(np.float64), y.astype(np.float64))
            if name in COMPARE:
                np.testing.assert_array_equal(out, ref)
            else:
                check(out, ref, dtype)


@pytest.mark.parametrize("dtype", FAST, ids=lambda d: d.name)
def test_strided_inputs(rng, dtype):
    """Transposed and reversed numpy views as inputs (the kernel reads them by strides)."""
    g = build(lambda x, y: ops.gelu(x * y, approximate="tanh") + y, cpu_type(dtype, (33, 70)), cpu_type(dtype, (33, 70)))
    x = values(rng, dtype, (70, 33)).T
    y = values(rng, dtype, (33, 140))[:, ::-2]
    (out,) = run(g, x, y)
    xf, yf = x.astype(np.float64), y.astype(np.float64)
    p = (xf * yf).astype(np_type(dtype)).astype(np.float64)
    gl = GELU["tanh"](p).astype(np_type(dtype)).astype(np.float64)
    check(out, gl + yf, dtype)


@pytest.mark.parametrize("dtype", FAST, ids=lambda d: d.name)
def test_where_comparisons_logic_and_casts(rng, dtype):
    def fn(x, y, m):
        c = ops.logical_and(x > y, m)
        return [
            ops.where(c, x, y * 0.5),
            ops.where(x > 0, x, 0),
            ops.logical_or(ops.logical_not(c), x == y),
            ops.cast(ops.cast(x, DType.float32), dtype),
            ops.cast(c, dtype) + x,
            ops.cast(x * y, DType.bool),
            ops.is_nan(x / y),
        ]

    g = build(fn, cpu_type(dtype, ("batch", 257)), cpu_type(dtype, (257,)), cpu_type(DType.bool, ("batch", 1)))
    for batch in [1, 6]:
        x, y = values(rng, dtype, (batch, 257)), values(rng, dtype, (257,))
        y[:5] = 0
        x[0, :3] = 0
        m = rng.integers(0, 2, (batch, 1)).astype(bool)
        w, relu, lo, cc, cb, nz, nan = run(g, x, y, m)
        t = np.dtype(np_type(dtype)).type
        c = (x > y) & m
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(w, np.where(c, x, (y * t(0.5)).astype(t)))
            np.testing.assert_array_equal(relu, np.where(x > 0, x, t(0)))
            np.testing.assert_array_equal(lo, ~c | (x == y))
            np.testing.assert_array_equal(cc, x)
            np.testing.assert_array_equal(cb, (c.astype(t) + x).astype(t))
            np.testing.assert_array_equal(nz, (x * y).astype(t) != 0)
            np.testing.assert_array_equal(nan, np.isnan((x / y).astype(t)))


@pytest.mark.parametrize("dtype", FAST, ids=lambda d: d.name)
def test_special_values(dtype):
    t = np_type(dtype)
    with np.errstate(over="ignore"):
        x = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e30, 3.0, -3.0], np.float32).astype(t)

    def fn(x):
        return [ops.relu(x), ops.max(x, 0), ops.exp(x), ops.tanh(x), ops.sigmoid(x), ops.gelu(x), ops.abs(x),
                ops.floor(x), ops.erf(x), x + x, ops.is_inf(x)]

    g = build(fn, cpu_type(dtype, (10,)))
    outs = run(g, x)
    xf = x.astype(np.float64)
    with np.errstate(all="ignore"):
        refs = [np.where(np.isnan(xf), xf, np.maximum(xf, 0)), np.maximum(xf, 0), np.exp(xf), np.tanh(xf), sigmoid(xf),
                GELU["none"](xf), np.abs(xf), np.floor(xf), erf(xf), xf + xf, np.isinf(xf)]
    for i, (o, r) in enumerate(zip(outs, refs)):
        np.testing.assert_array_equal(np.isnan(o.astype(np.float64)), np.isnan(r), err_msg=f"output {i}")
        ok = ~np.isnan(r)
        np.testing.assert_allclose(o.astype(np.float64)[ok], r.astype(t).astype(np.float64)[ok], rtol=TOL[dtype],
                                   atol=1e-30, err_msg=f"output {i}")
    # A NaN result is the canonical quiet NaN of the dtype, as the cast rules store it.
    bits = {DType.float32: 0x7FC00000, DType.bfloat16: 0x7FC0, DType.float16: 0x7E00}[dtype]
    view = np.uint32 if dtype is DType.float32 else np.uint16
    sign = 0x7FFFFFFF if dtype is DType.float32 else 0x7FFF
    y = np.array([bits | 5], view).view(t)  # a NaN with a payload
    for o in run(build(lambda v: [v + 1, ops.relu(v), ops.exp(v)], cpu_type(dtype, (1,))), y):
        assert int(o.view(view)[0]) & sign == bits


def test_integer_and_float64_groups_still_compute_in_64_bits(rng):
    """The other path (f64/i64 lanes) with a group that mixes dtypes: int32 arithmetic wraps,
    float64 keeps its precision, and a float32 result of float64 math is rounded once."""
    def fn(i, f):
        big = i * i * i
        return [big, ops.cast(f * f + 1, DType.float32), ops.cast(i, DType.float64) / 3]

    g = build(fn, cpu_type(DType.int32, ("n",)), cpu_type(DType.float64, ("n",)))
    i = rng.integers(-2000, 2000, 1025).astype(np.int32)
    f = rng.standard_normal(1025)
    big, c, d = run(g, i, f)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(big, i * i * i)
    np.testing.assert_array_equal(c, (f * f + 1).astype(np.float32))
    np.testing.assert_allclose(d, i / 3, rtol=1e-15)
