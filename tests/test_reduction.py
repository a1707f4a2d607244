"""The reduction ops on each device (sum, mean, max, min, argmax, argmin, softmax, logsoftmax,
layer_norm, cumsum, top_k, argsort) against float64 numpy references: every float, integer and
bool dtype, along the last axis (rows of 1 to 100000 elements: the GPU's warp, block,
register-cached and split/streamed paths), a middle axis and axis 0 (inner > 1), on symbolic
batch dims at two sizes, with NaN, infinity, ties and integer wrap-around."""

import numpy as np
import pytest

from engine_util import build, session
from helpers import VALUE_TYPES
from max import driver
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops

FLOATS = [DType.float32, DType.bfloat16, DType.float16, DType.float64]
SIGNED = [DType.int8, DType.int16, DType.int32, DType.int64]
UNSIGNED = [DType.uint8, DType.uint16, DType.uint32, DType.uint64]
INTS = SIGNED + UNSIGNED
ALL = FLOATS + INTS + [DType.bool]
# Relative tolerance of a result of each float dtype (its rounding, plus f32 accumulation).
TOL = {DType.float32: 1e-5, DType.float64: 1e-12, DType.float16: 2e-3, DType.bfloat16: 1.6e-2}


def ids(v):
    return v.name if isinstance(v, DType) else str(v)


def f64(a):
    return np.asarray(a).astype(np.float64)


def random(rng, dtype, shape, lo=None, hi=None):
    """Normal floats; integers over [lo, hi] (default: the full range); bools."""
    t = VALUE_TYPES[dtype]
    if dtype is DType.bool:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.is_integral():
        info = np.iinfo(t)
        lo = info.min if lo is None else max(lo, info.min)
        hi = info.max if hi is None else min(hi, info.max)
        return rng.integers(lo, hi, size=shape, dtype=t, endpoint=True)
    return rng.standard_normal(shape).astype(t)


def tied(rng, dtype, shape):
    """Values from a small set, so that extremes and sort keys tie (exact in every dtype)."""
    if dtype.is_float():
        return (np.round(rng.standard_normal(shape) * 3) / 4).astype(VALUE_TYPES[dtype])
    return random(rng, dtype, shape, -4, 4)


def model(fn, types, device):
    """`fn` compiled for `device`; `types` are (dtype, shape) per input, a str dim symbolic."""
    where = DeviceRef.from_device(device)
    return session(device).load(build(fn, *[TensorType(d, s, where) for d, s in types]))


def execute(m, *inputs, device):
    args = [driver.Buffer.from_numpy(np.ascontiguousarray(x) if np.ndim(x) else np.asarray(x)).to(device) for x in inputs]
    return [o.to_numpy() for o in m.execute(*args)]


def run(fn, types, *inputs, device):
    return execute(model(fn, types, device), *inputs, device=device)


def close(out, ref, dtype, scale=None):
    """out (of `dtype`) against the float64 `ref`; `scale` bounds the rounding error of sums
    whose terms cancel (default |ref|). NaNs and infinities must match."""
    tol = TOL[dtype]
    floor = 2.0**-24 if dtype is DType.float16 else 1e-300  # float16 subnormals step by 2**-24
    atol = tol * (np.abs(ref) if scale is None else scale) + floor
    o = f64(out)
    with np.errstate(invalid="ignore"):
        ok = (o == ref) | (np.abs(o - ref) <= atol + tol * np.abs(ref)) | (np.isnan(ref) & np.isnan(o))
    assert ok.all(), f"{(~ok).sum()} mismatches, e.g. got {o[~ok][:5]} want {ref[~ok][:5]}"


def ordered(x):
    """x in a dtype numpy orders natively (float64 for the floats: exact, NaN and -0 kept)."""
    return f64(x) if x.dtype.kind not in "biu" else x


def same(a, b):
    """Exact equality (NaN equal to NaN), dtype included."""
    b = np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    np.testing.assert_array_equal(ordered(a), ordered(b))


def truncated(out, exact, dtype):
    """An integer or bool result computed in floating point and cast (float -> int truncates and
    saturates, float -> bool is `!= 0`) against the exact float64 value. Where the exact value
    lies within rounding of an integer, the computed one may land on either side."""
    assert out.dtype == VALUE_TYPES[dtype] and out.shape == exact.shape
    if dtype is DType.bool:
        np.testing.assert_array_equal(out, exact != 0)
        return
    info = np.iinfo(VALUE_TYPES[dtype])
    ref = np.clip(np.trunc(exact), info.min, info.max)
    near = np.abs(exact - np.round(exact)) <= 1e-6 * np.maximum(1.0, np.abs(exact))
    np.testing.assert_array_equal(np.where(near, 0, out.astype(np.float64)), np.where(near, 0, ref))
    assert np.all(np.abs(out.astype(np.float64) - ref) <= 1)


# Layouts: (shape with a symbolic batch dim first, axis, the batch sizes to run).
LAYOUTS = [(("batch", n), -1, (3, 1)) for n in [1, 7, 31, 1024, 5000, 100_000]] + [
    (("batch", 37, 129), 1, (2, 1)),      # middle axis, wide inner
    (("batch", 5000, 3), 1, (2, 1)),      # middle axis, narrow inner, long axis
    (("batch", 6, 3), 1, (4, 1)),
    (("batch", 1, 9), 2, (3, 1)),
    (("batch", 6, 3), 0, (4, 1)),         # axis 0: the symbolic dim itself
    (("batch", 33), 0, (70, 1)),
    (("batch", 2, 3, 4), 2, (3, 1)),      # small everything
]


def concrete(shape, batch):
    return (batch, *shape[1:])


# -- sum, mean, max, min, argmax, argmin ------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL, ids=ids)
@pytest.mark.parametrize(("shape", "axis", "batches"), LAYOUTS, ids=ids)
def test_reductions(rng, device, dtype, shape, axis, batches):
    def fn(x):
        return [ops.sum(x, axis), ops.mean(x, axis), ops.max(x, axis=axis), ops.min(x, axis=axis),
                ops.argmax(x, axis), ops.argmin(x, axis)]  # fmt: skip

    m = model(fn, [(dtype, shape)], device)
    for batch in batches:
        # Ties, which must resolve to the first index.
        x = tied(rng, dtype, concrete(shape, batch))
        s, mean, mx, mn, amx, amn = execute(m, x, device=device)
        same(mx, np.max(ordered(x), axis=axis, keepdims=True).astype(x.dtype))
        same(mn, np.min(ordered(x), axis=axis, keepdims=True).astype(x.dtype))
        same(amx, np.argmax(ordered(x), axis=axis, keepdims=True))
        same(amn, np.argmin(ordered(x), axis=axis, keepdims=True))
        if dtype.is_float():
            scale = np.abs(f64(x)).sum(axis=axis, keepdims=True)
            assert s.dtype == x.dtype and mean.dtype == x.dtype
            close(s, f64(x).sum(axis=axis, keepdims=True), dtype, scale)
            close(mean, f64(x).mean(axis=axis, keepdims=True), dtype, scale / x.shape[axis])
        elif dtype is DType.bool:
            same(s, x.any(axis=axis, keepdims=True))
            same(mean, x.all(axis=axis, keepdims=True))
        else:
            tot = x.astype(np.int64).sum(axis=axis, keepdims=True)
            same(s, tot.astype(x.dtype))
            same(mean, (np.sign(tot) * (np.abs(tot) // x.shape[axis])).astype(x.dtype))


SHAPES = [((5, 7), -1), ((4, 6, 3), 1), ((4, 6, 3), 0), ((3, 1, 9), 2)]


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
@pytest.mark.parametrize(("shape", "axis"), SHAPES, ids=ids)
def test_sum_mean_floats(rng, device, dtype, shape, axis):
    m = model(lambda x: [ops.sum(x, axis), ops.mean(x, axis)], [(dtype, ("batch", *shape[1:]))], device)
    for batch in (shape[0], 1):
        x = random(rng, dtype, (batch, *shape[1:]))
        s, mean = execute(m, x, device=device)
        for out, fn in [(s, np.sum), (mean, np.mean)]:
            ref = fn(f64(x), axis=axis, keepdims=True)
            assert out.shape == ref.shape and out.dtype == x.dtype
            close(out, ref, dtype, fn(np.abs(f64(x)), axis=axis, keepdims=True))


WRAP_LAYOUTS = [(("batch", 7), -1, (5, 2)), (("batch", 6, 3), 1, (4, 2)), (("batch", 6, 3), 0, (4, 2)),
                (("batch", 5000), -1, (4,)), (("batch", 700, 5), 1, (3,)), (("batch",), 0, (40_000,))]  # fmt: skip


@pytest.mark.parametrize("dtype", INTS + [DType.bool], ids=ids)
@pytest.mark.parametrize(("shape", "axis", "batches"), WRAP_LAYOUTS, ids=ids)
def test_integer_sums_wrap(rng, device, dtype, shape, axis, batches):
    m = model(lambda x: ops.sum(x, axis), [(dtype, shape)], device)
    for batch in batches:
        x = random(rng, dtype, concrete(shape, batch))
        (out,) = execute(m, x, device=device)
        if dtype is DType.bool:
            same(out, x.any(axis=axis, keepdims=True))
            continue
        acc = np.uint64 if dtype.is_unsigned_integral() else np.int64
        with np.errstate(over="ignore"):
            same(out, x.astype(acc).sum(axis=axis, keepdims=True, dtype=acc).astype(x.dtype))


@pytest.mark.parametrize("dtype", INTS + [DType.bool], ids=ids)
def test_mean_integers_truncate(rng, device, dtype):
    m = model(lambda x: ops.mean(x, 1), [(dtype, ("batch", 7, 3))], device)
    for batch in (4, 1):
        x = random(rng, dtype, (batch, 7, 3), -1000, 1000)
        (out,) = execute(m, x, device=device)
        if dtype is DType.bool:
            same(out, x.all(axis=1, keepdims=True))
        else:
            s = x.astype(np.int64).sum(axis=1, keepdims=True)
            same(out, (np.sign(s) * (np.abs(s) // 7)).astype(x.dtype))


def test_max_and_argmax_with_nan(device):
    fn = lambda x: [ops.max(x, axis=-1), ops.argmax(x, -1), ops.argmin(x, -1)]  # noqa: E731
    x = np.array([[1, np.nan, 5, np.nan], [3, -1, 7, 7]], np.float32)
    mx, amax, amin = run(fn, [(DType.float32, (2, 4))], x, device=device)
    np.testing.assert_array_equal(mx, [[np.nan], [7]])
    np.testing.assert_array_equal(amax, [[1], [2]])
    np.testing.assert_array_equal(amin, [[1], [1]])


@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16, DType.float64], ids=ids)
@pytest.mark.parametrize("n", [7, 1024, 5000, 100_000], ids=ids)
def test_nan_and_inf_in_extremes(rng, device, dtype, n):
    def fn(x):
        return [ops.max(x, axis=-1), ops.min(x, axis=-1), ops.argmax(x, -1), ops.argmin(x, -1), ops.sum(x, -1)]

    x = tied(rng, dtype, (5, n))
    x[0, n // 2] = np.nan                 # one NaN in the middle
    x[1, [n - 1, n // 3]] = np.nan        # two NaNs: the first one is the arg
    x[2, n - 1] = np.inf                  # +inf at the end
    x[3, 0] = -np.inf
    x[3, n - 1] = np.inf                  # sum: inf - inf = NaN
    mx, mn, amx, amn, s = run(fn, [(dtype, (5, n))], x, device=device)
    same(mx, np.max(f64(x), axis=-1, keepdims=True).astype(x.dtype))
    same(mn, np.min(f64(x), axis=-1, keepdims=True).astype(x.dtype))
    same(amx, np.argmax(f64(x), axis=-1, keepdims=True))
    same(amn, np.argmin(f64(x), axis=-1, keepdims=True))
    assert np.isnan(f64(s[[0, 1, 3]])).all() and f64(s[2, 0]) == np.inf
    close(s[4], f64(x[4]).sum(keepdims=True), dtype, np.abs(f64(x[4])).sum(keepdims=True))


@pytest.mark.parametrize(("shape", "axis"), [((3, 300_001), -1), ((1, 1 << 21), -1), ((70_001, 5), 0),
                                             ((2, 130_000, 3), 1), ((20_000, 61), -1)], ids=ids)  # fmt: skip
def test_long_float32_reductions_stay_accurate(rng, device, shape, axis):
    def fn(x):
        return [ops.sum(x, axis), ops.mean(x, axis), ops.argmax(x, axis), ops.min(x, axis=axis)]

    # Positive values with a large mean: naive float32 accumulation loses ~1e-4 here.
    x = (rng.random(shape) + 10).astype(np.float32)
    s, m, am, mn = run(fn, [(DType.float32, shape)], x, device=device)
    np.testing.assert_allclose(s, f64(x).sum(axis=axis, keepdims=True), rtol=2e-6)
    np.testing.assert_allclose(m, f64(x).mean(axis=axis, keepdims=True), rtol=2e-6)
    same(am, np.argmax(x, axis=axis, keepdims=True))
    same(mn, np.min(x, axis=axis, keepdims=True))


def test_empty_axis(device):
    s, m = run(lambda x: [ops.sum(x, -1), ops.mean(x, -1)], [(DType.float32, (2, "n"))], np.zeros((2, 0), np.float32), device=device)
    same(s, np.zeros((2, 1), np.float32))
    assert m.shape == (2, 1) and np.isnan(m).all()
    with pytest.raises(ValueError, match="argmax: cannot reduce an axis of size 0"):
        run(lambda x: ops.argmax(x, -1), [(DType.float32, (2, "n"))], np.zeros((2, 0), np.float32), device=device)
    with pytest.raises(ValueError, match="mean: "):
        run(lambda x: ops.mean(x, -1), [(DType.int32, (2, "n"))], np.zeros((2, 0), np.int32), device=device)


@pytest.mark.parametrize("op,name", [(ops.max, "max"), (ops.min, "min"), (ops.argmax, "argmax"),
                                     (ops.argmin, "argmin")])
def test_an_extreme_of_a_static_empty_axis_fails_at_staging(op, name):
    from max.graph import DeviceRef, Graph, TensorType

    with Graph("g", input_types=[TensorType(DType.float32, (2, 0, 3), DeviceRef.CPU())]) as g:
        with pytest.raises(ValueError, match=rf"^{name}: .*cannot reduce axis 1 of size 0 \(shape \[2, 0, 3\]\)"):
            op(g.inputs[0].tensor, axis=1)
        op(g.inputs[0].tensor, axis=2)  # (another axis is fine: the result is empty)


# -- softmax, logsoftmax, layer_norm ----------------------------------------------------------


def softmax_ref(x, axis):
    with np.errstate(invalid="ignore", over="ignore"):
        z = x - x.max(axis=axis, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=axis, keepdims=True), z - np.log(e.sum(axis=axis, keepdims=True))


SOFTMAX_LAYOUTS = LAYOUTS + [(("batch", n), -1, (3, 1)) for n in (1000, 4096, 16_384, 20_000)] + [
    (("batch", 256), -1, (8192, 2)),      # many rows: many GPU blocks of 8 warps
]


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
@pytest.mark.parametrize(("shape", "axis", "batches"), SOFTMAX_LAYOUTS, ids=ids)
def test_softmax_logsoftmax(rng, device, dtype, shape, axis, batches):
    m = model(lambda x: [ops.softmax(x, axis), ops.logsoftmax(x, axis)], [(dtype, shape)], device)
    for batch in batches:
        # Large offsets: a softmax that did not subtract the max would overflow.
        x = (rng.standard_normal(concrete(shape, batch)) * 4 + 80).astype(VALUE_TYPES[dtype])
        sm, lsm = execute(m, x, device=device)
        ref_sm, ref_lsm = softmax_ref(f64(x), axis)
        assert sm.dtype == x.dtype and lsm.dtype == x.dtype and lsm.shape == x.shape
        close(sm, ref_sm, dtype, 1e-300)
        close(lsm, ref_lsm, dtype, np.abs(ref_lsm).max(axis=axis, keepdims=True))


@pytest.mark.parametrize(("shape", "axis"), [((2, 37, 129), 1), ((33, 5), 0), ((4, 17, 17), 1)], ids=ids)
def test_softmax_when_the_last_column_tile_is_one_wide(rng, device, shape, axis):
    # inner sizes of 16k + 1 leave the host's tiles a one-column tile: it must still be read
    # with its stride
    x = rng.standard_normal(shape).astype(np.float32)
    sm, lsm = run(lambda x: [ops.softmax(x, axis), ops.logsoftmax(x, axis)], [(DType.float32, shape)], x, device=device)
    ref_sm, ref_lsm = softmax_ref(f64(x), axis)
    close(sm, ref_sm, DType.float32, 1e-300)
    close(lsm, ref_lsm, DType.float32, np.abs(ref_lsm).max(axis=axis, keepdims=True))


def test_softmax_edge_values(device):
    x = np.array([[-np.inf, 0, 0], [1e30, -1e30, 1e30], [2, 2, 2]], np.float32)
    sm, lsm = run(lambda x: [ops.softmax(x, -1), ops.logsoftmax(x, -1)], [(DType.float32, (3, 3))], x, device=device)
    np.testing.assert_allclose(sm, [[0, 0.5, 0.5], [0.5, 0, 0.5], [1 / 3] * 3], rtol=1e-6)
    np.testing.assert_allclose(lsm[2], [-np.log(3)] * 3, rtol=1e-6)
    assert lsm[0, 0] == -np.inf and lsm[1, 1] < -1e29
    sm, lsm = run(lambda x: [ops.softmax(x), ops.logsoftmax(x)], [(DType.float32, ())], np.float32(3.5), device=device)
    assert sm == 1 and lsm == 0


@pytest.mark.parametrize("n", [3, 1024, 5000], ids=ids)
@pytest.mark.parametrize("axis", [-1, 0], ids=ids)
def test_softmax_edge_rows(device, n, axis):
    rows = np.zeros((6, n), np.float32)
    rows[0, 0] = -np.inf                       # exactly zero weight
    rows[1, :] = -np.inf                       # every element -inf: NaN
    rows[2, n - 1] = np.inf                    # +inf: NaN
    rows[3, n // 2] = np.nan                   # NaN: NaN
    rows[4, :] = 2.0                           # uniform
    rows[5, :] = np.linspace(-1e30, 1e30, n)   # huge range
    x = np.ascontiguousarray(rows if axis == -1 else rows.T)
    sm, lsm = run(lambda x: [ops.softmax(x, axis), ops.logsoftmax(x, axis)], [(DType.float32, x.shape)], x, device=device)
    ref_sm, ref_lsm = softmax_ref(f64(x), axis)
    close(sm, ref_sm, DType.float32, 1e-300)
    close(lsm, ref_lsm, DType.float32)
    if axis == -1:
        assert np.isnan(sm[1:4]).all() and np.isnan(lsm[1:4]).all()
        assert sm[0, 0] == 0 and lsm[0, 0] == -np.inf


@pytest.mark.parametrize("dtype", INTS + [DType.bool], ids=ids)
def test_softmax_of_integers_is_refused(dtype):
    """A distribution over an integer or bool tensor is an error naming the op (its values,
    computed in floating point, were truncated back to 0 and 1), as for exp."""
    for op in (ops.softmax, ops.logsoftmax):
        with Graph("s", input_types=[TensorType(dtype, ["batch", 5], DeviceRef.CPU())]) as g:
            with pytest.raises(TypeError, match=f"{op.__name__}: value: expected a floating-point tensor"):
                op(g.inputs[0], -1)


def layer_norm_ref(x, g, b, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + b


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
@pytest.mark.parametrize("shape", [(4, 1), (2, 1), (4, 7), (4, 31), (4, 768), (300, 1024), (3, 5000), (2, 100_000),
                                   (3, 5, 64), (2, 2000), (2, 20_000)], ids=ids)  # fmt: skip
def test_layer_norm(rng, device, dtype, shape):
    eps = 1e-5
    d = shape[-1]
    types = [(dtype, ("batch", *shape[1:])), (dtype, (d,)), (dtype, (d,))]
    m = model(lambda x, gm, bt: ops.layer_norm(x, gm, bt, eps), types, device)
    for batch in (shape[0], 1):
        # A large common offset: a one-pass E[x^2] - E[x]^2 variance would cancel badly.
        x = (rng.standard_normal((batch, *shape[1:])) + 300).astype(VALUE_TYPES[dtype])
        gm, bt = random(rng, dtype, (d,)), random(rng, dtype, (d,))
        (out,) = execute(m, x, gm, bt, device=device)
        ref = layer_norm_ref(f64(x), f64(gm), f64(bt), eps)
        scale = 4 * (np.abs(f64(gm)) + np.abs(f64(bt)))
        if dtype is DType.float32:
            scale = scale * 300  # the input itself carries float32 rounding relative to 300
        assert out.dtype == x.dtype
        close(out, ref, dtype, scale)


@pytest.mark.parametrize("d", [6, 2000], ids=ids)
def test_layer_norm_integers(rng, device, d):
    types = [(DType.int32, ("batch", d)), (DType.int32, (d,)), (DType.int32, (d,))]
    m = model(lambda x, gm, bt: ops.layer_norm(x, gm, bt, 0.5), types, device)
    for batch in (3, 5):
        x = random(rng, DType.int32, (batch, d), -50, 50)
        gm, bt = random(rng, DType.int32, (d,), -9, 9), random(rng, DType.int32, (d,), -9, 9)
        (out,) = execute(m, x, gm, bt, device=device)
        truncated(out, layer_norm_ref(f64(x), f64(gm), f64(bt), 0.5), DType.int32)


# -- cumsum -----------------------------------------------------------------------------------


def cumsum_ref(x, axis, exclusive, reverse, acc):
    y = np.flip(x, axis) if reverse else x
    with np.errstate(over="ignore"):
        c = np.cumsum(y.astype(acc), axis=axis, dtype=acc)
    if exclusive:
        c = np.concatenate([np.zeros_like(np.take(c, [0], axis=axis)), np.delete(c, -1, axis=axis)], axis=axis)
    return np.flip(c, axis) if reverse else c


FLAGS = [(False, False), (True, False), (False, True), (True, True)]
SCAN_LAYOUTS = [(("batch", n), -1, (3, 1)) for n in (1, 9, 31, 256, 1000, 5000, 100_000)] + [
    (("batch", 37, 5), 1, (2, 1)),
    (("batch", 5, 4), 1, (3, 2)),
    (("batch", 6), 0, (9, 1)),
    (("batch", 2), 0, (6, 2)),
]


@pytest.mark.parametrize("dtype", ALL, ids=ids)
@pytest.mark.parametrize(("shape", "axis", "batches"), SCAN_LAYOUTS, ids=ids)
def test_cumsum(rng, device, dtype, shape, axis, batches):
    m = model(lambda x: [ops.cumsum(x, axis, e, r) for e, r in FLAGS], [(dtype, shape)], device)
    for batch in batches:
        x = random(rng, dtype, concrete(shape, batch))
        for (e, r), out in zip(FLAGS, execute(m, x, device=device)):
            assert out.dtype == x.dtype and out.shape == x.shape
            if dtype.is_float():
                scale = cumsum_ref(np.abs(f64(x)), axis, e, r, np.float64)
                close(out, cumsum_ref(f64(x), axis, e, r, np.float64), dtype, scale)
            elif dtype is DType.bool:
                same(out, cumsum_ref(x, axis, e, r, np.int64) != 0)
            else:
                acc = np.uint64 if dtype.is_unsigned_integral() else np.int64
                same(out, cumsum_ref(x, axis, e, r, acc).astype(x.dtype))


def test_long_cumsum_is_accurate(rng, device):
    x = (rng.random((2, 200_000)) + 1).astype(np.float32)
    fn = lambda x: [ops.cumsum(x, -1), ops.cumsum(x, -1, True, True)]  # noqa: E731
    inc, exr = run(fn, [(DType.float32, x.shape)], x, device=device)
    np.testing.assert_allclose(inc, np.cumsum(f64(x), axis=-1), rtol=1e-6)
    np.testing.assert_allclose(exr, cumsum_ref(f64(x), -1, True, True, np.float64), rtol=1e-6, atol=1e-6)


# -- top_k, argsort ---------------------------------------------------------------------------


def desc_order(x, axis):
    """Indices sorting `x` descending along `axis`, ties by the lower index, NaN first: a stable
    ascending sort of the reversed array, reversed."""
    n = x.shape[axis]
    return n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)


TOPK_CASES = [
    (("batch", 1), -1, 1, (3, 1)),
    (("batch", 9), -1, 3, (4, 1)),
    (("batch", 8), 1, 0, (2, 1)),             # k = 0: empty results
    (("batch", 31), -1, 5, (3, 1)),
    (("batch", 31), -1, 31, (3, 1)),
    (("batch", 300), -1, 100, (3,)),          # k > 64: select, then sort (host)
    (("batch", 300), -1, 300, (3,)),
    (("batch", 1024), -1, 100, (3, 1)),
    (("batch", 5000), -1, 10, (3, 1)),        # longer than a block sort: streamed (GPU)
    (("batch", 5000), -1, 3000, (2, 1)),      # k too large to stream: merge sort (GPU)
    (("batch", 100_000), -1, 5, (3,)),
    (("batch", 100_000), -1, 64, (2, 1)),
    (("batch", 100_000), -1, 2049, (2, 1)),   # merge sort over several passes (GPU)
    (("batch", 6, 4), 1, 6, (3, 1)),
    (("batch", 300, 7), 1, 10, (2, 1)),
    (("batch", 3), 0, 1, (5, 1)),
    (("batch", 33), 0, 2, (6, 2)),
]


@pytest.mark.parametrize("dtype", ALL, ids=ids)
@pytest.mark.parametrize(("shape", "axis", "k", "batches"), TOPK_CASES, ids=ids)
def test_top_k(rng, device, dtype, shape, axis, k, batches):
    m = model(lambda x: list(ops.top_k(x, k, axis)), [(dtype, shape)], device)
    for batch in batches:
        x = tied(rng, dtype, concrete(shape, batch))
        if dtype.is_float():
            flat = x.reshape(-1)
            flat[rng.integers(0, flat.size, 3)] = np.nan
            flat[rng.integers(0, flat.size, 3)] = -0.0
        vals, idx = execute(m, x, device=device)
        ref = np.take(desc_order(ordered(x), axis), np.arange(k), axis=axis)
        same(idx, ref.astype(np.int64))
        same(vals, np.take_along_axis(x, ref, axis=axis))


@pytest.mark.parametrize("dtype", ALL, ids=ids)
@pytest.mark.parametrize("n", [1, 31, 37, 1000, 4096, 5000, 50_000, 100_000], ids=ids)
def test_argsort(rng, device, dtype, n):
    x = tied(rng, dtype, (n,)) if n % 2 else random(rng, dtype, (n,))
    if dtype.is_float() and n > 2:
        x[[0, n // 2]] = np.nan
        x[[1, n - 1]] = -0.0
    asc, desc = run(lambda x: [ops.argsort(x, True), ops.argsort(x, False)], [(dtype, ("n",))], x, device=device)
    same(asc, np.argsort(ordered(x), kind="stable").astype(np.int64))
    same(desc, desc_order(ordered(x), 0).astype(np.int64))


def test_argsort_large(rng, device):
    x = np.round(rng.standard_normal(1 << 20) * 100).astype(np.float32)  # ties
    (out,) = run(lambda x: ops.argsort(x), [(DType.float32, ("n",))], x, device=device)
    same(out, np.argsort(x, kind="stable").astype(np.int64))
