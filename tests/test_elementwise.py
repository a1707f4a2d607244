"""Every elementwise op on each device, for every dtype it takes, against numpy in float64: the
float32/bfloat16/float16 path (the host's single.rs, the GPU's fused kernels computing in f32)
and float64 and the integers (64-bit lanes), at sizes around the host's chunk and thread
boundaries and the GPU's block boundaries, with broadcasts, strided inputs, fused chains,
special values and symbolic dims. Both devices round every node to its dtype, so the host and
the GPU are held to the same references.

+ - * / and sqrt of float32, bfloat16 or float16 values are exact: numpy's arithmetic in those
dtypes (which ml_dtypes and numpy do in float32 and round) must give the same bits, chains
included, since the engine rounds after every op."""

import ml_dtypes
import numpy as np
import pytest
from scipy_free_erf import erf

from engine_util import build, run
from max.dtype import DType
from max.graph import DeviceRef, TensorType, ops

FAST = [DType.float32, DType.bfloat16, DType.float16]
FLOATS = FAST + [DType.float64]
TOL = {DType.float32: 1e-6, DType.float64: 1e-12, DType.float16: 1e-3, DType.bfloat16: 8e-3}
SIZES = [1, 5, 45, 1023, 1025, 4097]
INTS = [DType.int8, DType.int16, DType.int32, DType.int64, DType.uint8, DType.uint16, DType.uint32, DType.uint64]


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


def on(device, dtype, shape) -> TensorType:
    return TensorType(dtype, shape, DeviceRef.from_device(device))


def values(rng, d, shape, lo=-4.0, hi=4.0):
    return rng.uniform(lo, hi, shape).astype(np_type(d))


def inputs(rng, d, shape, lo=-3.0, hi=3.0):
    if d is DType.bool:
        return rng.integers(0, 2, shape).astype(bool)
    if d.is_integral():
        info = np.iinfo(d.to_numpy())
        return rng.integers(max(info.min, -100), min(info.max, 100), shape).astype(d.to_numpy())
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
def test_unary_at_chunk_boundaries(rng, name, dtype, device):
    g = build(lambda x: getattr(ops, name)(x), on(device, dtype, ("n",)))
    for n in SIZES:
        x = values(rng, dtype, (n,), *DOMAIN.get(name, (-4, 4)))
        (out,) = run(g, x, device=device)
        assert out.dtype == np_type(dtype) and out.shape == (n,)
        check(out, UNARY[name](x.astype(np.float64)), dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_acos_clamps_to_its_domain(rng, dtype, device):
    """As MAX documents: inputs outside [-1, 1] are clamped to it; NaN stays NaN."""
    g = build(lambda x: ops.acos(x), on(device, dtype, ("n",)))
    x = np.concatenate([values(rng, dtype, (64,), -3, 3), np.array([np.nan, np.inf, -np.inf, 1.0, -1.0])])
    x = x.astype(np_type(dtype))
    (out,) = run(g, x, device=device)
    check(out, np.arccos(np.clip(x.astype(np.float64), -1, 1)), dtype)
    assert np.isnan(out[64].astype(np.float64)) and not np.isnan(out[65:].astype(np.float64)).any()


@pytest.mark.parametrize("mode", sorted(GELU))
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_gelu_modes(rng, mode, dtype, device):
    g = build(lambda x: ops.gelu(x, approximate=mode), on(device, dtype, ("batch", 300)))
    for batch in [1, 7]:
        # Normal values, as activations, and the tails where erf switches formula (|x| >= 1.25 * sqrt 2).
        x = np.concatenate([rng.standard_normal((batch, 200)), rng.uniform(-9, 9, (batch, 100))], axis=1).astype(np_type(dtype))
        (out,) = run(g, x, device=device)
        check(out, GELU[mode](x.astype(np.float64)), dtype, gelu_none=mode == "none")



@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.name)
def test_unary_integers(rng, dtype, device):
    signed = dtype.is_signed_integral()
    g = build(lambda x: [ops.abs(x), ops.negate(x), ops.relu(x)], on(device, dtype, ("batch", 4)))
    x = inputs(rng, dtype, (6, 4))
    a, n, r = run(g, x, device=device)
    with np.errstate(over="ignore"):
        # numpy wraps negation and abs in the array's own dtype, as the engine does
        np.testing.assert_array_equal(a, np.abs(x) if signed else x)
        np.testing.assert_array_equal(n, np.negative(x))
    np.testing.assert_array_equal(r, np.maximum(x, 0))



@pytest.mark.parametrize("dtype", FAST, ids=lambda d: d.name)
def test_arithmetic_is_exact_per_op(rng, dtype, device):
    """a * b + c, (a - b) / c and sqrt(|a|) give numpy's bits in the dtype itself, broadcasting."""
    def fn(a, b, c):
        return [a * b + c, (a - b) / c, ops.sqrt(ops.abs(a)), a + b]

    g = build(fn, on(device, dtype, ("batch", 1025)), on(device, dtype, (1025,)), on(device, dtype, ("batch", 1)))
    for batch in [1, 3]:
        a, b, c = values(rng, dtype, (batch, 1025)), values(rng, dtype, (1025,)), values(rng, dtype, (batch, 1), 0.5, 2)
        outs = run(g, a, b, c, device=device)
        with np.errstate(all="ignore"):
            refs = [a * b + c, (a - b) / c, np.sqrt(np.abs(a)), a + b]
        for o, r in zip(outs, refs):
            assert o.dtype == np_type(dtype)
            np.testing.assert_array_equal(o.view(np.uint16 if dtype is not DType.float32 else np.uint32),
                                          r.astype(np_type(dtype)).view(np.uint16 if dtype is not DType.float32 else np.uint32))



@pytest.mark.parametrize("dtype", FAST, ids=lambda d: d.name)
def test_a_million_elements(rng, dtype, device):
    """1M + 1 elements (several tasks on the host's pool, many GPU blocks), a chain with a
    transcendental and a bias."""
    n = (1 << 20) + 1

    def fn(x, y):
        return [ops.relu(x * y + 1), ops.exp(ops.min(x, 3)), ops.sigmoid(x) * y]

    g = build(fn, on(device, dtype, ("n",)), on(device, dtype, (1,)))
    x, y = values(rng, dtype, (n,)), values(rng, dtype, (1,))
    r, e, s = run(g, x, y, device=device)
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
    ((5, 1, 4), (3, 4)),          # a broadcast leading dim
]



@pytest.mark.parametrize("name", sorted(BINARY) + sorted(COMPARE))
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_binary_broadcast_patterns(rng, name, dtype, device):
    fn = BINARY.get(name) or COMPARE[name]
    lo = 0.5 if name in ("pow", "mod", "div") else -4
    for sa, sb in BROADCASTS:
        for s1, s2 in [(sa, sb), (sb, sa)]:
            g = build(lambda x, y: getattr(ops, name)(x, y), on(device, dtype, s1), on(device, dtype, s2))
            x, y = values(rng, dtype, s1, lo, 4), values(rng, dtype, s2, lo, 4)
            (out,) = run(g, x, y, device=device)
            ref = fn(x.astype(np.float64), y.astype(np.float64))
            if name in COMPARE:
                np.testing.assert_array_equal(out, ref)
            else:
                check(out, ref, dtype)



@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.name)
def test_binary_integers(rng, dtype, device):
    def fn(x, y):
        return [x + y, x - y, x * y, ops.max(x, y), ops.min(x, y), x // y, x % y, x == y, x > y, x >= y, x != y]

    g = build(fn, on(device, dtype, ("batch", 4)), on(device, dtype, (4,)))
    x = inputs(rng, dtype, (7, 4))
    y = inputs(rng, dtype, (4,))
    y[y == 0] = 3
    outs = run(g, x, y, device=device)
    with np.errstate(over="ignore"):
        refs = [x + y, x - y, x * y, np.maximum(x, y), np.minimum(x, y), x // y, x % y, x == y, x > y, x >= y, x != y]
    for o, r in zip(outs, refs):
        np.testing.assert_array_equal(o, r)



@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=lambda d: d.name)
def test_comparisons_where_and_casts(rng, dtype, device):
    def fn(x, y):
        m = x > y
        return [ops.where(m, x, y), ops.equal(x, y), ops.greater_equal(x, y), ops.cast(x, DType.float64), ops.cast(m, dtype)]

    g = build(fn, on(device, dtype, ("b", 3)), on(device, dtype, (3,)))
    x, y = inputs(rng, dtype, (4, 3)), inputs(rng, dtype, (3,))
    w, e, ge, c, mb = run(g, x, y, device=device)
    np.testing.assert_array_equal(w.astype(np.float64), np.where(x > y, x, y).astype(np.float64))
    np.testing.assert_array_equal(e, x == y)
    np.testing.assert_array_equal(ge, x >= y)
    np.testing.assert_array_equal(c, x.astype(np.float64))
    np.testing.assert_array_equal(mb.astype(np.float64), (x > y).astype(np.float64))



@pytest.mark.parametrize("dtype", FAST, ids=lambda d: d.name)
def test_where_comparisons_logic_and_casts(rng, dtype, device):
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

    g = build(fn, on(device, dtype, ("batch", 257)), on(device, dtype, (257,)), on(device, DType.bool, ("batch", 1)))
    for batch in [1, 6]:
        x, y = values(rng, dtype, (batch, 257)), values(rng, dtype, (257,))
        y[:5] = 0
        x[0, :3] = 0
        m = rng.integers(0, 2, (batch, 1)).astype(bool)
        w, relu, lo, cc, cb, nz, nan = run(g, x, y, m, device=device)
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



def test_logical_ops(rng, device):
    def fn(a, b):
        return [ops.logical_and(a, b), ops.logical_or(a, b), ops.logical_xor(a, b), ops.logical_not(a)]

    g = build(fn, on(device, DType.bool, ("n", 4)), on(device, DType.bool, (4,)))
    a, b = inputs(rng, DType.bool, (5, 4)), inputs(rng, DType.bool, (4,))
    out = run(g, a, b, device=device)
    for o, r in zip(out, [a & b, a | b, a ^ b, ~a]):
        np.testing.assert_array_equal(o, r)



def test_nan_and_inf_predicates(device):
    g = build(lambda x: [ops.is_nan(x), ops.is_inf(x)], on(device, DType.float32, (5,)))
    x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], np.float32)
    nan, inf = run(g, x, device=device)
    assert nan.tolist() == [False, True, False, False, False] and inf.tolist() == [False, False, True, True, False]



def test_true_division_of_integers_is_float64(rng, device):
    g = build(lambda x, y: x / y, on(device, DType.int32, (6,)), on(device, DType.int32, (6,)))
    x, y = rng.integers(-50, 50, 6).astype(np.int32), rng.integers(1, 9, 6).astype(np.int32)
    (out,) = run(g, x, y, device=device)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, x / y)



@pytest.mark.parametrize("dtype", FAST, ids=lambda d: d.name)
def test_strided_inputs(rng, dtype, device):
    """Transposed and reversed numpy views as inputs (the kernel reads them by strides)."""
    g = build(lambda x, y: ops.gelu(x * y, approximate="tanh") + y, on(device, dtype, (33, 70)), on(device, dtype, (33, 70)))
    x = values(rng, dtype, (70, 33)).T
    y = values(rng, dtype, (33, 140))[:, ::-2]
    (out,) = run(g, x, y, device=device)
    xf, yf = x.astype(np.float64), y.astype(np.float64)
    p = (xf * yf).astype(np_type(dtype)).astype(np.float64)
    gl = GELU["tanh"](p).astype(np_type(dtype)).astype(np.float64)
    check(out, gl + yf, dtype)



@pytest.mark.parametrize("dtype", FAST, ids=lambda d: d.name)
def test_special_values(dtype, device):
    t = np_type(dtype)
    with np.errstate(over="ignore"):
        x = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e30, 3.0, -3.0], np.float32).astype(t)

    def fn(x):
        return [ops.relu(x), ops.max(x, 0), ops.exp(x), ops.tanh(x), ops.sigmoid(x), ops.gelu(x), ops.abs(x),
                ops.floor(x), ops.erf(x), x + x, ops.is_inf(x)]

    g = build(fn, on(device, dtype, (10,)))
    outs = run(g, x, device=device)
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
    for o in run(build(lambda v: [v + 1, ops.relu(v), ops.exp(v)], on(device, dtype, (1,))), y, device=device):
        assert int(o.view(view)[0]) & sign == bits



def test_integer_and_float64_groups_still_compute_in_64_bits(rng, device):
    """The other path (f64/i64 lanes) with a group that mixes dtypes: int32 arithmetic wraps,
    float64 keeps its precision, and a float32 result of float64 math is rounded once."""
    def fn(i, f):
        big = i * i * i
        return [big, ops.cast(f * f + 1, DType.float32), ops.cast(i, DType.float64) / 3]

    g = build(fn, on(device, DType.int32, ("n",)), on(device, DType.float64, ("n",)))
    i = rng.integers(-2000, 2000, 1025).astype(np.int32)
    f = rng.standard_normal(1025)
    big, c, d = run(g, i, f, device=device)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(big, i * i * i)
    np.testing.assert_array_equal(c, (f * f + 1).astype(np.float32))
    np.testing.assert_allclose(d, i / 3, rtol=1e-15)
