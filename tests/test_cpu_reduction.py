"""The reduction ops on the CPU through InferenceSession, against float64 numpy references
written here: sum, mean, max, min, argmax, argmin, softmax, logsoftmax, cumsum, top_k, argsort
and layer_norm, for every dtype staging accepts, on symbolic batch dims at two sizes."""

import ml_dtypes
import numpy as np
import pytest

from engine_util import build, cpu_type, session
from helpers import VALUE_TYPES
from max.dtype import DType
from max.graph import ops

FLOATS = [DType.float32, DType.float64, DType.float16, DType.bfloat16]
SIGNED = [DType.int8, DType.int16, DType.int32, DType.int64]
UNSIGNED = [DType.uint8, DType.uint16, DType.uint32, DType.uint64]
INTS = SIGNED + UNSIGNED
ALL = FLOATS + INTS + [DType.bool]
RTOL = {DType.float32: 1e-6, DType.float64: 1e-12, DType.float16: 1e-2, DType.bfloat16: 1e-2}


def ids(d):
    return d.name if isinstance(d, DType) else str(d)


def random(rng, dtype, shape, lo=None, hi=None):
    """Random values of `dtype`: normal floats, integers over [lo, hi] (default: the full
    range), bools."""
    t = VALUE_TYPES[dtype]
    if dtype is DType.bool:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.is_integral():
        info = np.iinfo(t)
        lo = info.min if lo is None else max(lo, info.min)
        hi = info.max if hi is None else min(hi, info.max)
        return rng.integers(lo, hi, size=shape, dtype=t, endpoint=True)
    return rng.standard_normal(shape).astype(t)


def f64(a):
    return np.asarray(a).astype(np.float64)


def execute(graph, *inputs):
    model = session().load(graph)
    return [o.to_numpy() for o in model.execute(*inputs)]


def close(out, ref, dtype, scale=None):
    """out (of `dtype`) against the float64 `ref`; `scale` (broadcastable) bounds the rounding
    error of sums whose terms cancel."""
    tol = RTOL[dtype]
    # float16 results below 2**-14 are subnormal, with absolute steps of 2**-24.
    floor = 2.0**-24 if dtype is DType.float16 else 1e-300
    atol = tol * (np.abs(ref) if scale is None else scale) + floor
    err = np.abs(f64(out) - ref)
    bad = ~(err <= atol + tol * np.abs(ref)) & ~(np.isnan(ref) & np.isnan(f64(out)))
    assert not bad.any(), f"{bad.sum()} mismatches, e.g. got {f64(out)[bad][:5]} want {ref[bad][:5]}"


def wrap(ref_i64, dtype):
    """int64/uint64 numpy results (wrapped mod 2**64) as `dtype`, wrapping again."""
    return ref_i64.astype(VALUE_TYPES[dtype])


def int_sum(x, axis):
    acc = np.uint64 if x.dtype.kind in "ub" else np.int64
    with np.errstate(over="ignore"):
        return x.astype(acc).sum(axis=axis, keepdims=True, dtype=acc)


# -- sum, mean, max, min, argmax, argmin ------------------------------------------------------

SHAPES = [((5, 7), -1), ((5, 7), 1), ((4, 6, 3), 1), ((4, 6, 3), 0), ((3, 1, 9), 2)]


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
@pytest.mark.parametrize(("shape", "axis"), SHAPES, ids=ids)
def test_sum_mean_floats(rng, dtype, shape, axis):
    for op, fn in [(ops.sum, np.sum), (ops.mean, np.mean)]:
        g = build(lambda x: op(x, axis), cpu_type(dtype, ("batch", *shape[1:])))
        model = session().load(g)
        for batch in (shape[0], 1):
            x = random(rng, dtype, (batch, *shape[1:]))
            (out,) = [o.to_numpy() for o in model.execute(x)]
            ref = fn(f64(x), axis=axis, keepdims=True)
            scale = fn(np.abs(f64(x)), axis=axis, keepdims=True)
            assert out.shape == ref.shape and out.dtype == x.dtype
            close(out, ref, dtype, scale)


@pytest.mark.parametrize("dtype", INTS + [DType.bool], ids=ids)
@pytest.mark.parametrize(("shape", "axis"), SHAPES[:4], ids=ids)
def test_sum_integers_wrap(rng, dtype, shape, axis):
    g = build(lambda x: ops.sum(x, axis), cpu_type(dtype, ("batch", *shape[1:])))
    model = session().load(g)
    for batch in (shape[0], 2):
        x = random(rng, dtype, (batch, *shape[1:]))
        (out,) = [o.to_numpy() for o in model.execute(x)]
        if dtype is DType.bool:
            ref = x.any(axis=axis, keepdims=True)
        else:
            ref = wrap(int_sum(x, axis), dtype)
        assert out.dtype == ref.dtype
        np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("dtype", INTS + [DType.bool], ids=ids)
def test_mean_integers_truncate(rng, dtype):
    g = build(lambda x: ops.mean(x, 1), cpu_type(dtype, ("batch", 7, 3)))
    model = session().load(g)
    for batch in (4, 1):
        x = random(rng, dtype, (batch, 7, 3), -1000, 1000)
        (out,) = [o.to_numpy() for o in model.execute(x)]
        if dtype is DType.bool:
            ref = x.all(axis=1, keepdims=True)
        else:
            s = x.astype(np.int64).sum(axis=1, keepdims=True)
            ref = (np.sign(s) * (np.abs(s) // 7)).astype(x.dtype)
        np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("dtype", ALL, ids=ids)
@pytest.mark.parametrize(("shape", "axis"), SHAPES, ids=ids)
def test_max_min_argmax_argmin(rng, dtype, shape, axis):
    cases = [
        (lambda x: ops.max(x, axis=axis), np.max),
        (lambda x: ops.min(x, axis=axis), np.min),
        (lambda x: ops.argmax(x, axis), np.argmax),
        (lambda x: ops.argmin(x, axis), np.argmin),
    ]
    g = build(lambda x: [op(x) for op, _ in cases], cpu_type(dtype, ("batch", *shape[1:])))
    model = session().load(g)
    for batch in (shape[0], 1):
        # A narrow range makes ties, which must resolve to the first index.
        x = random(rng, dtype, (batch, *shape[1:]), -3, 3)
        if dtype.is_float():
            x = np.round(f64(x) * 2).astype(x.dtype)
        outs = [o.to_numpy() for o in model.execute(x)]
        for out, (_, fn) in zip(outs, cases):
            ref = fn(x, axis=axis, keepdims=True)
            assert out.dtype == ref.dtype, fn.__name__
            np.testing.assert_array_equal(out, ref, err_msg=fn.__name__)


def test_max_and_argmax_with_nan():
    g = build(lambda x: [ops.max(x, axis=-1), ops.argmax(x, -1), ops.argmin(x, -1)], cpu_type(DType.float32, (2, 4)))
    x = np.array([[1, np.nan, 5, np.nan], [3, -1, 7, 7]], np.float32)
    mx, amax, amin = execute(g, x)
    np.testing.assert_array_equal(mx, [[np.nan], [7]])
    np.testing.assert_array_equal(amax, [[1], [2]])
    np.testing.assert_array_equal(amin, [[1], [1]])


@pytest.mark.parametrize(("shape", "axis"), [((3, 300_001), -1), ((70_001, 5), 0), ((2, 130_000, 3), 1)], ids=ids)
def test_long_float32_sums_stay_accurate(rng, shape, axis):
    g = build(
        lambda x: [ops.sum(x, axis), ops.mean(x, axis), ops.argmax(x, axis), ops.min(x, axis=axis)],
        cpu_type(DType.float32, shape),
    )
    # Positive values with a large mean: naive float32 accumulation loses ~1e-4 here.
    x = (rng.random(shape) + 10).astype(np.float32)
    s, m, am, mn = execute(g, x)
    xd = f64(x)
    np.testing.assert_allclose(s, xd.sum(axis=axis, keepdims=True), rtol=2e-6)
    np.testing.assert_allclose(m, xd.mean(axis=axis, keepdims=True), rtol=2e-6)
    np.testing.assert_array_equal(am, np.argmax(x, axis=axis, keepdims=True))
    np.testing.assert_array_equal(mn, np.min(x, axis=axis, keepdims=True))


def test_empty_axis():
    g = build(lambda x: [ops.sum(x, -1), ops.mean(x, -1)], cpu_type(DType.float32, (2, "n")))
    s, m = execute(g, np.zeros((2, 0), np.float32))
    np.testing.assert_array_equal(s, np.zeros((2, 1)))
    assert np.isnan(m).all()
    g = build(lambda x: ops.argmax(x, -1), cpu_type(DType.float32, (2, "n")))
    with pytest.raises(ValueError, match="argmax: cannot reduce an axis of size 0"):
        execute(g, np.zeros((2, 0), np.float32))
    g = build(lambda x: ops.mean(x, -1), cpu_type(DType.int32, (2, "n")))
    with pytest.raises(ValueError, match="mean: "):
        execute(g, np.zeros((2, 0), np.int32))


# -- softmax, logsoftmax, layer_norm ----------------------------------------------------------


def softmax_ref(x, axis):
    z = x - x.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True), z - np.log(e.sum(axis=axis, keepdims=True))


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
@pytest.mark.parametrize(("shape", "axis"), SHAPES + [((2, 1000), -1)], ids=ids)
def test_softmax_logsoftmax_floats(rng, dtype, shape, axis):
    g = build(
        lambda x: [ops.softmax(x, axis), ops.logsoftmax(x, axis)], cpu_type(dtype, ("batch", *shape[1:]))
    )
    model = session().load(g)
    for batch in (shape[0], 3):
        # Large offsets: a softmax that did not subtract the max would overflow.
        x = (rng.standard_normal((batch, *shape[1:])) * 4 + 80).astype(VALUE_TYPES[dtype])
        sm, lsm = [o.to_numpy() for o in model.execute(x)]
        ref_sm, ref_lsm = softmax_ref(f64(x), axis)
        assert sm.dtype == x.dtype and lsm.shape == x.shape
        close(sm, ref_sm, dtype, 1e-300)
        close(lsm, ref_lsm, dtype, np.abs(ref_lsm).max(axis=axis, keepdims=True))


@pytest.mark.parametrize(("shape", "axis"), [((2, 37, 129), 1), ((33, 5), 0), ((4, 17, 17), 1)], ids=ids)
def test_softmax_when_the_last_column_tile_is_one_wide(rng, shape, axis):
    # inner sizes of 16k + 1 leave a one-column tile: it must still be read with its stride
    g = build(lambda x: [ops.softmax(x, axis), ops.logsoftmax(x, axis)], cpu_type(DType.float32, shape))
    x = rng.standard_normal(shape).astype(np.float32)
    sm, lsm = execute(g, x)
    ref_sm, ref_lsm = softmax_ref(f64(x), axis)
    close(sm, ref_sm, DType.float32, 1e-300)
    close(lsm, ref_lsm, DType.float32, np.abs(ref_lsm).max(axis=axis, keepdims=True))


def test_softmax_edge_values():
    g = build(lambda x: [ops.softmax(x, -1), ops.logsoftmax(x, -1)], cpu_type(DType.float32, (3, 3)))
    x = np.array([[-np.inf, 0, 0], [1e30, -1e30, 1e30], [2, 2, 2]], np.float32)
    sm, lsm = execute(g, x)
    np.testing.assert_allclose(sm, [[0, 0.5, 0.5], [0.5, 0, 0.5], [1 / 3] * 3], rtol=1e-6)
    np.testing.assert_allclose(lsm[2], [-np.log(3)] * 3, rtol=1e-6)
    assert lsm[0, 0] == -np.inf and lsm[1, 1] < -1e29
    g = build(lambda x: [ops.softmax(x), ops.logsoftmax(x)], cpu_type(DType.float32, ()))
    sm, lsm = execute(g, np.float32(3.5))
    assert sm == 1 and lsm == 0


@pytest.mark.parametrize("dtype", INTS, ids=ids)
def test_softmax_integers_truncate(rng, dtype):
    g = build(lambda x: [ops.softmax(x, -1), ops.logsoftmax(x, -1)], cpu_type(dtype, ("batch", 5)))
    model = session().load(g)
    for batch in (6, 2):
        x = random(rng, dtype, (batch, 5), 0, 120)
        x[0] = [0, 100, 20, 40, 120][: 5]  # one dominant element: softmax gives exactly 1
        sm, lsm = [o.to_numpy() for o in model.execute(x)]
        ref_sm, ref_lsm = softmax_ref(f64(x), -1)
        info = np.iinfo(x.dtype)  # float -> int truncates and saturates (the cast rules)
        np.testing.assert_array_equal(sm, np.trunc(ref_sm).astype(x.dtype))
        np.testing.assert_array_equal(lsm, np.clip(np.trunc(ref_lsm), info.min, info.max).astype(x.dtype))


def layer_norm_ref(x, g, b, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + b


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
@pytest.mark.parametrize("shape", [(4, 7), (3, 5, 64), (2, 1)], ids=ids)
def test_layer_norm_floats(rng, dtype, shape):
    eps = 1e-5
    d = shape[-1]
    g = build(
        lambda x, gm, bt: ops.layer_norm(x, gm, bt, eps),
        cpu_type(dtype, ("batch", *shape[1:])), cpu_type(dtype, (d,)), cpu_type(dtype, (d,)),
    )
    model = session().load(g)
    for batch in (shape[0], 1):
        # A large common offset: a one-pass E[x^2] - E[x]^2 variance would cancel badly.
        x = (rng.standard_normal((batch, *shape[1:])) + 300).astype(VALUE_TYPES[dtype])
        gm, bt = random(rng, dtype, (d,)), random(rng, dtype, (d,))
        (out,) = [o.to_numpy() for o in model.execute(x, gm, bt)]
        ref = layer_norm_ref(f64(x), f64(gm), f64(bt), eps)
        scale = 4 * (np.abs(f64(gm)) + np.abs(f64(bt)))
        if dtype is DType.float32:
            # The input itself carries float32 rounding relative to its offset of 300.
            scale = scale * 300
        close(out, ref, dtype, scale)


def test_layer_norm_integers(rng):
    g = build(
        lambda x, gm, bt: ops.layer_norm(x, gm, bt, 0.5),
        cpu_type(DType.int32, ("batch", 6)), cpu_type(DType.int32, (6,)), cpu_type(DType.int32, (6,)),
    )
    model = session().load(g)
    for batch in (3, 5):
        x, gm, bt = random(rng, DType.int32, (batch, 6), -50, 50), random(rng, DType.int32, (6,), -9, 9), random(rng, DType.int32, (6,), -9, 9)
        (out,) = [o.to_numpy() for o in model.execute(x, gm, bt)]
        np.testing.assert_array_equal(out, np.trunc(layer_norm_ref(f64(x), f64(gm), f64(bt), 0.5)).astype(np.int32))


# -- cumsum, top_k, argsort -------------------------------------------------------------------


def cumsum_ref(x, axis, exclusive, reverse, acc):
    y = np.flip(x, axis) if reverse else x
    with np.errstate(over="ignore"):
        c = np.cumsum(y.astype(acc), axis=axis, dtype=acc)
    if exclusive:
        c = np.concatenate([np.zeros_like(np.take(c, [0], axis=axis)), np.delete(c, -1, axis=axis)], axis=axis)
    return np.flip(c, axis) if reverse else c


@pytest.mark.parametrize("dtype", ALL, ids=ids)
@pytest.mark.parametrize(("exclusive", "reverse"), [(False, False), (True, False), (False, True), (True, True)], ids=ids)
@pytest.mark.parametrize(("shape", "axis"), [((4, 9), -1), ((3, 5, 4), 1), ((6, 2), 0)], ids=ids)
def test_cumsum(rng, dtype, exclusive, reverse, shape, axis):
    g = build(lambda x: ops.cumsum(x, axis, exclusive, reverse), cpu_type(dtype, ("batch", *shape[1:])))
    model = session().load(g)
    for batch in (shape[0], 2):
        x = random(rng, dtype, (batch, *shape[1:]))
        (out,) = [o.to_numpy() for o in model.execute(x)]
        if dtype.is_float():
            ref = cumsum_ref(f64(x), axis, exclusive, reverse, np.float64)
            scale = cumsum_ref(np.abs(f64(x)), axis, exclusive, reverse, np.float64)
            close(out, ref, dtype, scale)
        elif dtype is DType.bool:
            ref = cumsum_ref(x, axis, exclusive, reverse, np.int64) != 0
            np.testing.assert_array_equal(out, ref)
        else:
            acc = np.uint64 if dtype in UNSIGNED else np.int64
            np.testing.assert_array_equal(out, wrap(cumsum_ref(x, axis, exclusive, reverse, acc), dtype))


def test_long_cumsum_is_compensated(rng):
    g = build(lambda x: ops.cumsum(x, -1), cpu_type(DType.float32, (200_000,)))
    x = (rng.random(200_000) + 1).astype(np.float32)
    (out,) = execute(g, x)
    np.testing.assert_allclose(out, np.cumsum(f64(x)), rtol=1e-6)


def desc_order(x, axis):
    """Indices sorting `x` descending along `axis`, ties by the lower index (exact for every
    dtype): a stable ascending sort of the reversed array, reversed."""
    n = x.shape[axis]
    rev = np.flip(x, axis)
    return n - 1 - np.flip(np.argsort(rev, axis=axis, kind="stable"), axis)


@pytest.mark.parametrize("dtype", ALL, ids=ids)
@pytest.mark.parametrize(("shape", "axis", "k"), [((4, 9), -1, 3), ((3, 6, 4), 1, 6), ((5, 3), 0, 1), ((2, 8), 1, 0)], ids=ids)
def test_top_k(rng, dtype, shape, axis, k):
    g = build(lambda x: list(ops.top_k(x, k, axis)), cpu_type(dtype, ("batch", *shape[1:])))
    model = session().load(g)
    for batch in (shape[0], 1):
        if axis == 0 and batch < k:
            continue
        x = random(rng, dtype, (batch, *shape[1:]), -4, 4)  # many ties
        if dtype.is_float():
            x = np.round(f64(x) * 2).astype(x.dtype)
        vals, idx = [o.to_numpy() for o in model.execute(x)]
        ref_idx = np.take(desc_order(x, axis), np.arange(k), axis=axis)
        assert idx.dtype == np.int64 and vals.dtype == x.dtype
        np.testing.assert_array_equal(idx, ref_idx)
        np.testing.assert_array_equal(vals, np.take_along_axis(x, ref_idx, axis=axis))


@pytest.mark.parametrize(("n", "k"), [(100_000, 5), (300, 100), (300, 300)], ids=ids)
def test_top_k_large(rng, n, k):
    # k <= 64 keeps a running list; larger k selects, then sorts.
    g = build(lambda x: list(ops.top_k(x, k, -1)), cpu_type(DType.float32, (3, n)))
    x = np.round(rng.standard_normal((3, n)) * 8).astype(np.float32)  # ties
    vals, idx = execute(g, x)
    ref = desc_order(x, -1)[:, :k]
    np.testing.assert_array_equal(idx, ref)
    np.testing.assert_array_equal(vals, np.take_along_axis(x, ref, axis=-1))


@pytest.mark.parametrize("dtype", ALL, ids=ids)
@pytest.mark.parametrize("ascending", [True, False], ids=ids)
def test_argsort(rng, dtype, ascending):
    g = build(lambda x: ops.argsort(x, ascending), cpu_type(dtype, ("n",)))
    model = session().load(g)
    for n in (37, 1, 50_000):
        x = random(rng, dtype, (n,), -20, 20) if n < 100 else random(rng, dtype, (n,))
        (out,) = [o.to_numpy() for o in model.execute(x)]
        ref = np.argsort(x, kind="stable") if ascending else desc_order(x, 0)
        assert out.dtype == np.int64
        np.testing.assert_array_equal(out, ref)
