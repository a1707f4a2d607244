"""The reduction ops on the GPU (sum, mean, max, min, argmax, argmin, softmax, logsoftmax,
layer_norm, cumsum, top_k, argsort) against the CPU backend and float64 numpy references: every
op in float32, bfloat16, float16, float64 and the integer and bool dtypes staging takes, along
the last axis (rows of 1, 31, 1024, 5000 and 100000 elements: warp, block, register-cached and
split/streamed paths), a middle axis and axis 0 (inner > 1), on a symbolic batch dim at two
sizes, with NaN, infinity and tie cases. Every test skips without a GPU."""

import numpy as np
import pytest

from engine_util import run
from helpers import VALUE_TYPES
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops

pytestmark = pytest.mark.gpu
GPU, CPU = DeviceRef.GPU(), DeviceRef.CPU()

FLOATS = [DType.float32, DType.bfloat16, DType.float16, DType.float64]
INTS = [DType.int32, DType.int64, DType.uint8]
ALL = FLOATS + INTS + [DType.bool]
# Relative tolerance of a result of each float dtype (its rounding, plus f32 accumulation).
TOL = {DType.float32: 1e-5, DType.float64: 1e-12, DType.float16: 2e-3, DType.bfloat16: 1.6e-2}
ROWS = [1, 31, 1024, 5000, 100_000]


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


def both(fn, types, *inputs, gpu):
    """Runs `fn` as a graph with CPU inputs and as one with GPU inputs; returns both results.
    `types` are (dtype, shape) per input; a str dim is symbolic."""
    cpu_graph = Graph("cpu", fn, input_types=[TensorType(d, s, CPU) for d, s in types])
    gpu_graph = Graph("gpu", fn, input_types=[TensorType(d, s, GPU) for d, s in types])
    return run(cpu_graph, *inputs), run(gpu_graph, *inputs, device=gpu)


def close(out, ref, dtype, scale=None):
    """out (of `dtype`) against the float64 `ref`; `scale` bounds the rounding error of sums
    whose terms cancel (default |ref|). NaNs must match."""
    tol = TOL[dtype]
    floor = 2.0**-24 if dtype is DType.float16 else 1e-300
    atol = tol * (np.abs(ref) if scale is None else scale) + floor
    o = f64(out)
    err = np.abs(o - ref)
    bad = ~(err <= atol + tol * np.abs(ref)) & ~(np.isnan(ref) & np.isnan(o))
    bad |= np.isnan(ref) != np.isnan(o)
    assert not bad.any(), f"{bad.sum()} mismatches, e.g. got {o[bad][:5]} want {ref[bad][:5]}"


def ordered(x):
    """x in a dtype numpy orders natively (float64 for the floats: exact, NaN and -0 kept)."""
    return f64(x) if x.dtype.kind not in "biu" else x


def same(a, b):
    """Exact equality (NaN equal to NaN), dtype included."""
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    np.testing.assert_array_equal(ordered(a), ordered(b))


# Layouts: (shape with a symbolic batch dim first, axis, the two batch sizes to run).
LAYOUTS = [(("batch", n), -1, (3, 1)) for n in ROWS] + [
    (("batch", 37, 129), 1, (2, 1)),      # middle axis, wide inner
    (("batch", 5000, 3), 1, (2, 1)),      # middle axis, narrow inner, long axis
    (("batch", 33), 0, (70, 1)),          # axis 0
    (("batch", 2, 3, 4), 2, (3, 1)),      # small everything
]


def concrete(shape, batch):
    return (batch, *shape[1:])


# -- sum, mean, max, min, argmax, argmin ------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL, ids=ids)
@pytest.mark.parametrize(("shape", "axis", "batches"), LAYOUTS, ids=ids)
def test_reductions(rng, gpu, dtype, shape, axis, batches):
    def fn(x):
        return [ops.sum(x, axis), ops.mean(x, axis), ops.max(x, axis=axis), ops.min(x, axis=axis),
                ops.argmax(x, axis), ops.argmin(x, axis)]

    for batch in batches:
        x = tied(rng, dtype, concrete(shape, batch))
        cpu, gpu_out = both(fn, [(dtype, shape)], x, gpu=gpu)
        s, m, mx, mn, amx, amn = gpu_out
        # Integers and extremes are exact; float sums within rounding of sum |x|.
        for c, g in zip(cpu[2:], gpu_out[2:]):
            same(g, c)
        same(mx, np.max(ordered(x), axis=axis, keepdims=True).astype(x.dtype))
        same(mn, np.min(ordered(x), axis=axis, keepdims=True).astype(x.dtype))
        same(amx, np.argmax(ordered(x), axis=axis, keepdims=True))
        same(amn, np.argmin(ordered(x), axis=axis, keepdims=True))
        if dtype.is_float():
            scale = np.abs(f64(x)).sum(axis=axis, keepdims=True)
            close(s, f64(x).sum(axis=axis, keepdims=True), dtype, scale)
            close(s, f64(cpu[0]), dtype, scale)
            close(m, f64(x).mean(axis=axis, keepdims=True), dtype, scale / x.shape[axis])
        else:
            same(s, cpu[0])
            same(m, cpu[1])
            if dtype is DType.bool:
                same(s, x.any(axis=axis, keepdims=True))
                same(m, x.all(axis=axis, keepdims=True))
            else:
                tot = x.astype(np.int64).sum(axis=axis, keepdims=True)
                same(s, tot.astype(x.dtype))
                same(m, (np.sign(tot) * (np.abs(tot) // x.shape[axis])).astype(x.dtype))


@pytest.mark.parametrize("dtype", INTS + [DType.int8, DType.uint32], ids=ids)
@pytest.mark.parametrize(("shape", "axis"), [((4, 5000), -1), ((3, 700, 5), 1), ((40_000,), 0)], ids=ids)
def test_integer_sums_wrap(rng, gpu, dtype, shape, axis):
    x = random(rng, dtype, shape)
    (c,), (g,) = both(lambda x: ops.sum(x, axis), [(dtype, shape)], x, gpu=gpu)
    acc = np.uint64 if dtype.is_unsigned_integral() else np.int64
    with np.errstate(over="ignore"):
        ref = x.astype(acc).sum(axis=axis, keepdims=True, dtype=acc).astype(x.dtype)
    same(g, c)
    same(g, ref)


@pytest.mark.parametrize(("shape", "axis"), [((3, 300_001), -1), ((1, 1 << 21), -1), ((70_001, 5), 0),
                                             ((2, 130_000, 3), 1), ((20_000, 61), -1)], ids=ids)
def test_long_float32_reductions_stay_accurate(rng, gpu, shape, axis):
    def fn(x):
        return [ops.sum(x, axis), ops.mean(x, axis), ops.argmax(x, axis), ops.min(x, axis=axis)]

    # Positive values with a large mean: naive float32 accumulation loses ~1e-4 here.
    x = (rng.random(shape) + 10).astype(np.float32)
    cpu, (s, m, am, mn) = both(fn, [(DType.float32, shape)], x, gpu=gpu)
    np.testing.assert_allclose(s, f64(x).sum(axis=axis, keepdims=True), rtol=2e-6)
    np.testing.assert_allclose(m, f64(x).mean(axis=axis, keepdims=True), rtol=2e-6)
    same(am, np.argmax(x, axis=axis, keepdims=True))
    same(mn, np.min(x, axis=axis, keepdims=True))
    same(am, cpu[2])


@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16, DType.float64], ids=ids)
@pytest.mark.parametrize("n", [7, 1024, 5000, 100_000], ids=ids)
def test_nan_and_inf_in_extremes(rng, gpu, dtype, n):
    def fn(x):
        return [ops.max(x, axis=-1), ops.min(x, axis=-1), ops.argmax(x, -1), ops.argmin(x, -1), ops.sum(x, -1)]

    x = tied(rng, dtype, (5, n))
    x[0, n // 2] = np.nan                 # one NaN in the middle
    x[1, [n - 1, n // 3]] = np.nan        # two NaNs: the first one is the arg
    x[2, n - 1] = np.inf                  # +inf at the end
    x[3, 0] = -np.inf
    x[3, n - 1] = np.inf                  # sum: inf - inf = NaN
    cpu, gpu_out = both(fn, [(dtype, (5, n))], x, gpu=gpu)
    for c, g in zip(cpu[:4], gpu_out[:4]):
        same(g, c)
    same(gpu_out[2], np.argmax(f64(x), axis=-1, keepdims=True))
    same(gpu_out[3], np.argmin(f64(x), axis=-1, keepdims=True))
    assert np.isnan(f64(gpu_out[4][[0, 1, 3]])).all() and f64(gpu_out[4][2, 0]) == np.inf


def test_empty_axis(gpu):
    t = [(DType.float32, (2, "n"))]
    (s, m), (gs, gm) = both(lambda x: [ops.sum(x, -1), ops.mean(x, -1)], t, np.zeros((2, 0), np.float32), gpu=gpu)
    same(gs, s)
    same(gs, np.zeros((2, 1), np.float32))
    assert np.isnan(gm).all() and np.isnan(m).all()
    g = Graph("e", lambda x: ops.argmax(x, -1), input_types=[TensorType(DType.float32, (2, "n"), GPU)])
    with pytest.raises(ValueError, match="argmax: cannot reduce an axis of size 0"):
        run(g, np.zeros((2, 0), np.float32), device=gpu)
    g = Graph("e", lambda x: ops.mean(x, -1), input_types=[TensorType(DType.int32, (2, "n"), GPU)])
    with pytest.raises(ValueError, match="mean: "):
        run(g, np.zeros((2, 0), np.int32), device=gpu)


# -- softmax, logsoftmax, layer_norm ----------------------------------------------------------


def softmax_ref(x, axis):
    z = x - x.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True), z - np.log(e.sum(axis=axis, keepdims=True))


SOFTMAX_LAYOUTS = LAYOUTS + [(("batch", n), -1, (3, 1)) for n in (1000, 16_384, 20_000)] + [
    (("batch", 256), -1, (8192, 2)),      # many rows: many blocks of 8 warps
]


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
@pytest.mark.parametrize(("shape", "axis", "batches"), SOFTMAX_LAYOUTS, ids=ids)
def test_softmax_logsoftmax(rng, gpu, dtype, shape, axis, batches):
    def fn(x):
        return [ops.softmax(x, axis), ops.logsoftmax(x, axis)]

    for batch in batches:
        # Large offsets: a softmax that did not subtract the max would overflow.
        x = (rng.standard_normal(concrete(shape, batch)) * 4 + 80).astype(VALUE_TYPES[dtype])
        (csm, clsm), (sm, lsm) = both(fn, [(dtype, shape)], x, gpu=gpu)
        ref_sm, ref_lsm = softmax_ref(f64(x), axis)
        assert sm.dtype == x.dtype and lsm.shape == x.shape
        lscale = np.abs(ref_lsm).max(axis=axis, keepdims=True)
        close(sm, ref_sm, dtype, 1e-300)
        close(lsm, ref_lsm, dtype, lscale)
        close(sm, f64(csm), dtype, 1e-300)
        close(lsm, f64(clsm), dtype, lscale)


@pytest.mark.parametrize("n", [3, 1024, 5000], ids=ids)
@pytest.mark.parametrize("axis", [-1, 0], ids=ids)
def test_softmax_edge_values(gpu, n, axis):
    rows = np.zeros((6, n), np.float32)
    rows[0, 0] = -np.inf                       # exactly zero weight
    rows[1, :] = -np.inf                       # every element -inf: NaN
    rows[2, n - 1] = np.inf                    # +inf: NaN
    rows[3, n // 2] = np.nan                   # NaN: NaN
    rows[4, :] = 2.0                           # uniform
    rows[5, :] = np.linspace(-1e30, 1e30, n)   # huge range
    x = np.ascontiguousarray(rows if axis == -1 else rows.T)
    t = [(DType.float32, x.shape)]
    (csm, clsm), (sm, lsm) = both(lambda x: [ops.softmax(x, axis), ops.logsoftmax(x, axis)], t, x, gpu=gpu)
    np.testing.assert_allclose(sm, csm, rtol=1e-5, atol=1e-30, equal_nan=True)
    np.testing.assert_allclose(lsm, clsm, rtol=1e-5, equal_nan=True)
    if axis == -1:
        assert np.isnan(sm[1:4]).all() and np.isnan(lsm[1:4]).all()
        assert sm[0, 0] == 0 and lsm[0, 0] == -np.inf
        np.testing.assert_allclose(sm[4], 1 / n, rtol=1e-5)


@pytest.mark.parametrize("dtype", [DType.int32, DType.int64, DType.uint8, DType.bool], ids=ids)
@pytest.mark.parametrize("n", [5, 2000], ids=ids)
def test_softmax_integers_truncate(rng, gpu, dtype, n):
    """Computed in f32, truncated to the integer type: the same integers as the CPU, except where
    the exact value lies within f32 rounding of an integer, where the two exp implementations may
    land on either side (a row whose top element leads by about 17 has a softmax of 1 - 4e-8)."""
    x = random(rng, dtype, (6, n), 0, 120)
    cpu, out = both(lambda x: [ops.softmax(x, -1), ops.logsoftmax(x, -1)], [(dtype, ("batch", n))], x, gpu=gpu)
    f = x.astype(np.float64)
    lse = np.log(np.exp(f - f.max(-1, keepdims=True)).sum(-1, keepdims=True)) + f.max(-1, keepdims=True)
    for c, g, exact in zip(cpu, out, (np.exp(f - lse), f - lse)):
        assert g.dtype == c.dtype and g.shape == c.shape
        near = np.abs(exact - np.round(exact)) <= 1e-6 * np.maximum(1.0, np.abs(exact))
        np.testing.assert_array_equal(np.where(near, 0, g), np.where(near, 0, c))
        assert np.all(np.abs(g.astype(np.int64) - c.astype(np.int64)) <= 1)


def layer_norm_ref(x, g, b, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + b


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
@pytest.mark.parametrize("shape", [(4, 1), (4, 31), (4, 768), (300, 1024), (3, 5000), (2, 100_000), (3, 5, 64),
                                   (2, 2000), (2, 20_000)], ids=ids)
def test_layer_norm(rng, gpu, dtype, shape):
    eps = 1e-5
    d = shape[-1]
    fn = lambda x, gm, bt: ops.layer_norm(x, gm, bt, eps)  # noqa: E731
    types = [(dtype, ("batch", *shape[1:])), (dtype, (d,)), (dtype, (d,))]
    for batch in (shape[0], 1):
        # A large common offset: a one-pass E[x^2] - E[x]^2 variance would cancel badly.
        x = (rng.standard_normal((batch, *shape[1:])) + 300).astype(VALUE_TYPES[dtype])
        gm, bt = random(rng, dtype, (d,)), random(rng, dtype, (d,))
        (c,), (out,) = both(fn, types, x, gm, bt, gpu=gpu)
        ref = layer_norm_ref(f64(x), f64(gm), f64(bt), eps)
        scale = 4 * (np.abs(f64(gm)) + np.abs(f64(bt)))
        if dtype is DType.float32:
            scale = scale * 300  # the input itself carries float32 rounding relative to 300
        assert out.dtype == x.dtype
        close(out, ref, dtype, scale)
        close(out, f64(c), dtype, scale)


@pytest.mark.parametrize("d", [6, 2000], ids=ids)
def test_layer_norm_integers(rng, gpu, d):
    fn = lambda x, gm, bt: ops.layer_norm(x, gm, bt, 0.5)  # noqa: E731
    types = [(DType.int32, ("batch", d)), (DType.int32, (d,)), (DType.int32, (d,))]
    x, gm, bt = random(rng, DType.int32, (5, d), -50, 50), random(rng, DType.int32, (d,), -9, 9), random(rng, DType.int32, (d,), -9, 9)
    (c,), (g,) = both(fn, types, x, gm, bt, gpu=gpu)
    same(g, c)


# -- cumsum -----------------------------------------------------------------------------------


def cumsum_ref(x, axis, exclusive, reverse, acc):
    y = np.flip(x, axis) if reverse else x
    with np.errstate(over="ignore"):
        c = np.cumsum(y.astype(acc), axis=axis, dtype=acc)
    if exclusive:
        c = np.concatenate([np.zeros_like(np.take(c, [0], axis=axis)), np.delete(c, -1, axis=axis)], axis=axis)
    return np.flip(c, axis) if reverse else c


FLAGS = [(False, False), (True, False), (False, True), (True, True)]
SCAN_LAYOUTS = [(("batch", n), -1, (3, 1)) for n in (1, 31, 256, 1000, 5000, 100_000)] + [
    (("batch", 37, 5), 1, (2, 1)),
    (("batch", 6), 0, (9, 1)),
]


@pytest.mark.parametrize("dtype", ALL, ids=ids)
@pytest.mark.parametrize(("shape", "axis", "batches"), SCAN_LAYOUTS, ids=ids)
def test_cumsum(rng, gpu, dtype, shape, axis, batches):
    def fn(x):
        return [ops.cumsum(x, axis, e, r) for e, r in FLAGS]

    for batch in batches:
        x = random(rng, dtype, concrete(shape, batch))
        cpu, out = both(fn, [(dtype, shape)], x, gpu=gpu)
        for (e, r), c, g in zip(FLAGS, cpu, out):
            assert g.dtype == x.dtype and g.shape == x.shape
            if dtype.is_float():
                ref = cumsum_ref(f64(x), axis, e, r, np.float64)
                scale = cumsum_ref(np.abs(f64(x)), axis, e, r, np.float64)
                close(g, ref, dtype, scale)
                close(g, f64(c), dtype, scale)
            elif dtype is DType.bool:
                same(g, cumsum_ref(x, axis, e, r, np.int64) != 0)
                same(g, c)
            else:
                acc = np.uint64 if dtype.is_unsigned_integral() else np.int64
                same(g, cumsum_ref(x, axis, e, r, acc).astype(x.dtype))
                same(g, c)


def test_long_cumsum_is_accurate(rng, gpu):
    x = (rng.random((2, 200_000)) + 1).astype(np.float32)
    fn = lambda x: [ops.cumsum(x, -1), ops.cumsum(x, -1, True, True)]  # noqa: E731
    _, (inc, exr) = both(fn, [(DType.float32, x.shape)], x, gpu=gpu)
    np.testing.assert_allclose(inc, np.cumsum(f64(x), axis=-1), rtol=1e-6)
    np.testing.assert_allclose(exr, cumsum_ref(f64(x), -1, True, True, np.float64), rtol=1e-6, atol=1e-6)


# -- top_k, argsort ---------------------------------------------------------------------------


def desc_order(x, axis):
    """Indices sorting `x` descending along `axis`, ties by the lower index, NaN first."""
    n = x.shape[axis]
    return n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)


TOPK_CASES = [
    (("batch", 1), -1, 1, (3, 1)),
    (("batch", 31), -1, 5, (3, 1)),
    (("batch", 31), -1, 31, (3, 1)),
    (("batch", 1024), -1, 100, (3, 1)),
    (("batch", 5000), -1, 10, (3, 1)),        # longer than a block sort: streamed
    (("batch", 5000), -1, 3000, (2, 1)),      # k too large to stream: merge sort
    (("batch", 100_000), -1, 64, (2, 1)),
    (("batch", 100_000), -1, 2049, (2, 1)),   # merge sort over several passes
    (("batch", 300, 7), 1, 10, (2, 1)),
    (("batch", 33), 0, 2, (6, 2)),
]


@pytest.mark.parametrize("dtype", ALL, ids=ids)
@pytest.mark.parametrize(("shape", "axis", "k", "batches"), TOPK_CASES, ids=ids)
def test_top_k(rng, gpu, dtype, shape, axis, k, batches):
    for batch in batches:
        x = tied(rng, dtype, concrete(shape, batch))
        if dtype.is_float():
            flat = x.reshape(-1)
            flat[rng.integers(0, flat.size, 3)] = np.nan
            flat[rng.integers(0, flat.size, 3)] = -0.0
        (cv, ci), (gv, gi) = both(lambda x: list(ops.top_k(x, k, axis)), [(dtype, shape)], x, gpu=gpu)
        ref = np.take(desc_order(ordered(x), axis), np.arange(k), axis=axis)
        same(gi, ref)
        same(gi, ci)
        same(gv, np.take_along_axis(x, ref, axis=axis))


@pytest.mark.parametrize("dtype", ALL, ids=ids)
@pytest.mark.parametrize("n", [1, 31, 1000, 4096, 5000, 100_000], ids=ids)
def test_argsort(rng, gpu, dtype, n):
    x = tied(rng, dtype, (n,)) if n % 2 else random(rng, dtype, (n,))
    if dtype.is_float() and n > 2:
        x[[0, n // 2]] = np.nan
        x[[1, n - 1]] = -0.0
    fn = lambda x: [ops.argsort(x, True), ops.argsort(x, False)]  # noqa: E731
    (ca, cd), (ga, gd) = both(fn, [(dtype, ("n",))], x, gpu=gpu)
    same(ga, np.argsort(ordered(x), kind="stable").astype(np.int64))
    same(gd, desc_order(ordered(x), 0).astype(np.int64))
    same(ga, ca)
    same(gd, cd)


def test_argsort_large(rng, gpu):
    x = np.round(rng.standard_normal(1 << 20) * 100).astype(np.float32)  # ties
    (ga,) = run(Graph("s", lambda x: ops.argsort(x), input_types=[TensorType(DType.float32, ("n",), GPU)]), x, device=gpu)
    same(ga, np.argsort(x, kind="stable").astype(np.int64))
