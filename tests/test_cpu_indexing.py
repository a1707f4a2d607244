"""The indexing ops on the CPU through InferenceSession: gather, gather_nd, scatter,
scatter_nd, masked_scatter and nonzero against numpy references, for every dtype, with
negative indices, symbolic batch dims, and the run-time out-of-range errors."""

import numpy as np
import pytest

from engine_util import build, cpu_type, run, session
from helpers import CAST_DTYPES, VALUE_TYPES, random_values
from max.dtype import DType
from max.graph import ops

ALL = CAST_DTYPES  # every dtype the host kernels move (data movement is by element bytes)
INDEX_DTYPES = [DType.int8, DType.int16, DType.int32, DType.int64, DType.uint8, DType.uint16, DType.uint32, DType.uint64]
NP = {d: VALUE_TYPES[d] for d in INDEX_DTYPES}


def bits(a: np.ndarray) -> np.ndarray:
    """The raw bytes of an array, for exact comparisons (NaN patterns included)."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).reshape(a.shape + (a.dtype.itemsize,))


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    # to_numpy gives float8 as its uint8 bits: compare element bytes.
    assert got.dtype.itemsize == want.dtype.itemsize, (got.dtype, want.dtype)
    np.testing.assert_array_equal(bits(got), bits(want))


def indices(rng, dtype: DType, size: int, shape, negative: bool = True) -> np.ndarray:
    """Random indices into a dim of `size`: negative ones too where the dtype is signed."""
    lo = -size if negative and not dtype.name.startswith("uint") else 0
    hi = min(size - 1, np.iinfo(NP[dtype]).max)
    lo = max(lo, np.iinfo(NP[dtype]).min)
    return rng.integers(lo, hi, size=shape, endpoint=True).astype(NP[dtype])


# gather


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_matches_take(rng, dtype, axis):
    g = build(lambda x, i: ops.gather(x, i, axis=axis), cpu_type(dtype, ("batch", 5, 3)), cpu_type(DType.int64, ("n", 2)))
    model = session().load(g)
    for batch, n in [(4, 3), (9, 1)]:
        x = random_values(rng, dtype, (batch, 5, 3))
        idx = indices(rng, DType.int64, x.shape[axis], (n, 2))
        (out,) = model.execute(x, idx)
        assert_same(out.to_numpy(), np.take(x, idx, axis=axis))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
def test_gather_index_dtypes_and_scalar_index(rng, index_dtype):
    x = random_values(rng, DType.float32, (6, 7))
    idx = indices(rng, index_dtype, 7, (4,))
    (out,) = run(build(lambda a, i: ops.gather(a, i, axis=1), cpu_type(DType.float32, (6, 7)), cpu_type(index_dtype, (4,))), x, idx)
    assert_same(out, np.take(x, idx.astype(np.int64), axis=1))
    scalar = np.array(-2, dtype=np.int32)
    (out,) = run(build(lambda a, i: ops.gather(a, i, axis=0), cpu_type(DType.float32, (6, 7)), cpu_type(DType.int32, ())), x, scalar)
    assert_same(out, x[-2])


@pytest.mark.parametrize("bad", [5, -6, 1000])
def test_gather_index_out_of_range_is_a_value_error(bad):
    g = build(lambda x, i: ops.gather(x, i, axis=1), cpu_type(DType.float32, (2, 5)), cpu_type(DType.int64, (3,)))
    model = session().load(g)
    x = np.zeros((2, 5), np.float32)
    with pytest.raises(ValueError, match=rf"gather: index {bad} is out of range for axis 1 of size 5 \(expected -5..=4\)"):
        model.execute(x, np.array([0, bad, 1], np.int64))
    (out,) = model.execute(x, np.array([0, 4, -5], np.int64))  # still usable
    assert out.shape == (2, 3)


def test_large_gathers_take_the_parallel_path(rng):
    x = random_values(rng, DType.float32, (1000, 64))
    idx = indices(rng, DType.int64, 1000, (900,))
    (out,) = run(build(lambda a, i: ops.gather(a, i, axis=0), cpu_type(DType.float32, x.shape), cpu_type(DType.int64, idx.shape)), x, idx)
    assert_same(out, x[idx])
    idx = indices(rng, DType.int64, 64, (1000, 300, 1))
    g = build(lambda a, i: ops.gather_nd(a, i, batch_dims=1), cpu_type(DType.float32, x.shape), cpu_type(DType.int64, idx.shape))
    (out,) = run(g, x, idx)
    assert_same(out, np.take_along_axis(x, idx[..., 0] % 64, axis=1))


def test_gather_huge_unsigned_index_does_not_wrap():
    g = build(lambda x, i: ops.gather(x, i, axis=0), cpu_type(DType.int32, (4,)), cpu_type(DType.uint64, (1,)))
    with pytest.raises(ValueError, match="gather: index 9223372036854775807 is out of range"):
        run(g, np.arange(4, dtype=np.int32), np.array([2**64 - 1], np.uint64))


# gather_nd


def gather_nd_ref(x: np.ndarray, idx: np.ndarray, batch_dims: int) -> np.ndarray:
    bshape = x.shape[:batch_dims]
    k = idx.shape[-1]
    out = np.empty(idx.shape[:-1] + x.shape[batch_dims + k :], dtype=x.dtype)
    for pos in np.ndindex(*idx.shape[:-1]):
        b = pos[:batch_dims]
        out[pos] = x[b + tuple(int(v) for v in idx[pos])]
    assert out.shape[:batch_dims] == bshape
    return out


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_gather_nd_batch_dims(rng, dtype):
    # The documented example's shape pattern: input [a, b, c, d], indices [a, f, 2], batch_dims=1.
    g = build(
        lambda x, i: ops.gather_nd(x, i, batch_dims=1),
        cpu_type(dtype, ("batch", 4, 5, 3)),
        cpu_type(DType.int32, ("batch", "f", 2)),
    )
    model = session().load(g)
    for batch, f in [(3, 2), (5, 4)]:
        x = random_values(rng, dtype, (batch, 4, 5, 3))
        idx = np.stack([indices(rng, DType.int32, 4, (batch, f)), indices(rng, DType.int32, 5, (batch, f))], axis=-1)
        (out,) = model.execute(x, idx)
        assert_same(out.to_numpy(), gather_nd_ref(x, idx, 1))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_gather_nd_without_batch_dims(rng, k):
    shape = (4, 5, 3)
    x = random_values(rng, DType.int16, shape)
    idx = np.stack([indices(rng, DType.int64, shape[t], (2, 3)) for t in range(k)], axis=-1)
    g = build(lambda a, i: ops.gather_nd(a, i), cpu_type(DType.int16, shape), cpu_type(DType.int64, (2, 3, k)))
    (out,) = run(g, x, idx)
    assert_same(out, gather_nd_ref(x, idx, 0))
    assert_same(out, x[tuple(idx[..., t] for t in range(k))])


def test_gather_nd_index_out_of_range():
    g = build(lambda a, i: ops.gather_nd(a, i), cpu_type(DType.float32, (4, 5)), cpu_type(DType.int64, (2, 2)))
    with pytest.raises(ValueError, match=r"gather_nd: index -6 is out of range for dimension 1 of the input of size 5"):
        run(g, np.zeros((4, 5), np.float32), np.array([[0, 0], [3, -6]], np.int64))


# scatter


def scatter_ref(x, updates, idx, axis):
    out = x.copy()
    for pos in np.ndindex(*updates.shape):
        target = list(pos)
        target[axis] = int(idx[pos])
        out[tuple(target)] = updates[pos]  # in row-major order: later duplicates win
    return out


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("index_dtype", [DType.int32, DType.int64], ids=str)
def test_scatter_along_the_last_axis(rng, dtype, index_dtype):
    g = build(
        lambda x, u, i: ops.scatter(x, u, i, axis=-1),
        cpu_type(dtype, ("batch", 6)),
        cpu_type(dtype, ("batch", 9)),
        cpu_type(index_dtype, ("batch", 9)),
    )
    model = session().load(g)
    for batch in [2, 5]:
        x = random_values(rng, dtype, (batch, 6))
        u = random_values(rng, dtype, (batch, 9))
        idx = indices(rng, index_dtype, 6, (batch, 9))  # 9 writes into 6 slots: duplicates
        (out,) = model.execute(x, u, idx)
        assert_same(out.to_numpy(), scatter_ref(x, u, idx, 1))


def test_scatter_updates_smaller_than_the_input(rng):
    x = random_values(rng, DType.float64, (5, 4, 3))
    u = random_values(rng, DType.float64, (7, 2, 3))
    idx = indices(rng, DType.int64, 5, (7, 2, 3))
    g = build(lambda a, b, i: ops.scatter(a, b, i, axis=0), *(cpu_type(DType.float64, s) for s in [(5, 4, 3), (7, 2, 3)]), cpu_type(DType.int64, (7, 2, 3)))
    (out,) = run(g, x, u, idx)
    assert_same(out, scatter_ref(x, u, idx, 0))


def test_scatter_later_duplicates_win():
    g = build(lambda a, b, i: ops.scatter(a, b, i, axis=0), cpu_type(DType.int32, (4,)), cpu_type(DType.int32, (4,)), cpu_type(DType.int64, (4,)))
    (out,) = run(g, np.zeros(4, np.int32), np.array([1, 2, 3, 4], np.int32), np.array([2, -2, 0, 2], np.int64))
    assert out.tolist() == [3, 0, 4, 0]


def test_scatter_index_out_of_range():
    g = build(lambda a, b, i: ops.scatter(a, b, i, axis=1), cpu_type(DType.int8, (2, 3)), cpu_type(DType.int8, (2, 2)), cpu_type(DType.int32, (2, 2)))
    with pytest.raises(ValueError, match=r"scatter: index 3 is out of range for axis 1 of size 3"):
        run(g, np.zeros((2, 3), np.int8), np.ones((2, 2), np.int8), np.array([[0, 1], [2, 3]], np.int32))


# scatter_nd


def scatter_nd_ref(x, updates, idx):
    out = x.copy()
    for pos in np.ndindex(*idx.shape[:-1]):
        out[tuple(int(v) for v in idx[pos])] = updates[pos]
    return out


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_scatter_nd_rows_and_elements(rng, dtype):
    shape = (5, 4, 3)
    for k in [1, 2, 3]:
        g = build(
            lambda x, u, i: ops.scatter_nd(x, u, i),
            cpu_type(dtype, shape),
            cpu_type(dtype, ("n",) + shape[k:]),
            cpu_type(DType.int64, ("n", k)),
        )
        model = session().load(g)
        for n in [3, 8]:
            x = random_values(rng, dtype, shape)
            u = random_values(rng, dtype, (n,) + shape[k:])
            idx = np.stack([indices(rng, DType.int64, shape[t], (n,)) for t in range(k)], axis=-1)
            (out,) = model.execute(x, u, idx)
            assert_same(out.to_numpy(), scatter_nd_ref(x, u, idx))


def test_scatter_nd_index_out_of_range():
    g = build(lambda x, u, i: ops.scatter_nd(x, u, i), cpu_type(DType.float16, (4, 3)), cpu_type(DType.float16, (2,)), cpu_type(DType.int32, (2, 2)))
    with pytest.raises(ValueError, match=r"scatter_nd: index -4 is out of range for dimension 1 of the input of size 3"):
        run(g, np.zeros((4, 3), np.float16), np.ones(2, np.float16), np.array([[0, 0], [1, -4]], np.int32))


# masked_scatter


def masked_scatter_ref(x, mask, updates):
    out = x.copy()
    m = np.broadcast_to(mask, x.shape)
    out[m] = updates.reshape(-1)[: int(m.sum())]
    return out


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_masked_scatter_broadcast_mask(rng, dtype):
    g = build(
        lambda x, m, u: ops.masked_scatter(x, m, u, out_dim="count"),
        cpu_type(dtype, ("batch", 3, 4)),
        cpu_type(DType.bool, (3, 4)),
        cpu_type(dtype, ("m",)),
    )
    model = session().load(g)
    for batch in [1, 4]:
        x = random_values(rng, dtype, (batch, 3, 4))
        mask = rng.integers(0, 2, (3, 4)).astype(np.bool_)
        u = random_values(rng, dtype, (batch * 12 + 3,))  # more updates than needed: the first are used
        (out,) = model.execute(x, mask, u)
        assert_same(out.to_numpy(), masked_scatter_ref(x, mask, u))


def test_masked_scatter_full_mask_and_too_few_updates(rng):
    g = build(
        lambda x, m, u: ops.masked_scatter(x, m, u, out_dim="count"),
        cpu_type(DType.int64, (2, 5)),
        cpu_type(DType.bool, (2, 1)),
        cpu_type(DType.int64, (2, 3)),
    )
    x = random_values(rng, DType.int64, (2, 5))
    u = random_values(rng, DType.int64, (2, 3))
    (out,) = run(g, x, np.array([[False], [True]]), u)
    assert_same(out, masked_scatter_ref(x, np.array([[False], [True]]), u))
    with pytest.raises(ValueError, match=r"masked_scatter: the mask has 10 true elements but updates \(shape \[2, 3\]\) has only 6"):
        run(g, x, np.array([[True], [True]]), u)


# nonzero


def with_zeros(rng, dtype, shape):
    x = random_values(rng, dtype, shape)
    x[rng.random(shape) < 0.5] = 0
    return x


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_nonzero_matches_argwhere(rng, dtype):
    g = build(lambda x: ops.nonzero(x, "nnz"), cpu_type(dtype, ("batch", 3, 4)))
    model = session().load(g)
    for batch in [2, 5, 2]:
        x = with_zeros(rng, dtype, (batch, 3, 4))
        (out,) = model.execute(x)
        assert_same(out.to_numpy(), np.argwhere(x.astype(np.float64) != 0).astype(np.int64))


def test_nonzero_counts_nan_and_not_negative_zero():
    x = np.array([0.0, -0.0, np.nan, 2.0], np.float32)
    (out,) = run(build(lambda a: ops.nonzero(a, "n"), cpu_type(DType.float32, (4,))), x)
    assert out.tolist() == [[2], [3]]


def test_nonzero_count_feeds_later_steps(rng):
    """The count symbol bound by nonzero sizes the values computed from its result, and differs
    between executions of one plan."""

    def body(x):
        coords = ops.nonzero(x, "nnz")
        picked = ops.gather_nd(x, coords)  # [nnz]
        return picked * 2, coords

    g = build(body, cpu_type(DType.float32, (3, 4)))
    model = session().load(g)
    for zeros in [0.2, 0.7, 1.0]:
        x = rng.standard_normal((3, 4)).astype(np.float32)
        x[rng.random((3, 4)) < zeros] = 0
        picked, coords = (o.to_numpy() for o in model.execute(x))
        assert_same(coords, np.argwhere(x).astype(np.int64))
        assert_same(picked, x[x != 0] * 2)
    assert model._core.num_plans == 1


def test_nonzero_count_must_agree_with_its_dim():
    # A static out_dim, and a symbol an input already bound, are checked against the count.
    g = build(lambda x: ops.nonzero(x, 2), cpu_type(DType.int32, (4,)))
    (out,) = run(g, np.array([0, 5, 0, 7], np.int32))
    assert out.tolist() == [[1], [3]]
    with pytest.raises(ValueError, match="nonzero: the input has 3 non-zero elements"):
        run(g, np.array([1, 5, 0, 7], np.int32))
    g = build(lambda x, y: (ops.nonzero(x, "n"), y), cpu_type(DType.int32, (4,)), cpu_type(DType.int32, ("n",)))
    (out, _) = run(g, np.array([0, 5, 0, 7], np.int32), np.zeros(2, np.int32))
    assert out.tolist() == [[1], [3]]
    with pytest.raises(ValueError, match="nonzero: the input has 2 non-zero elements"):
        run(g, np.array([0, 5, 0, 7], np.int32), np.zeros(3, np.int32))
