"""The indexing ops on each device: gather, gather_nd, scatter, scatter_nd, masked_scatter,
nonzero and repeat_interleave with a data-dependent size against numpy, bit for bit (random bit
patterns, NaN payloads included), for every dtype and index dtype, with negative indices, many
duplicates in scatters (the last update in row-major order wins), large and odd sizes, symbolic
dims, and the run-time out-of-range errors (one message on every device)."""

import numpy as np
import pytest

from bitexact import Model, check, rand, same, t
from helpers import VALUE_TYPES
from max.dtype import DType
from max.graph import ops

DTYPES = list(VALUE_TYPES)  # every dtype; the kernels move element bytes
INDEX_DTYPES = [DType.int8, DType.int16, DType.int32, DType.int64, DType.uint8, DType.uint16, DType.uint32, DType.uint64]
dtypes = pytest.mark.parametrize("dtype", DTYPES, ids=str)


def indices(rng, dtype: DType, size: int, shape, negative: bool = True) -> np.ndarray:
    """Random indices into a dim of `size`, negative ones too where the dtype is signed."""
    np_t = VALUE_TYPES[dtype]
    lo = -size if negative and not dtype.is_unsigned_integral() else 0
    lo = max(lo, np.iinfo(np_t).min)
    hi = min(size - 1, np.iinfo(np_t).max)
    return rng.integers(lo, hi, size=shape, endpoint=True).astype(np_t)


# gather


@dtypes
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather(rng, device, dtype, axis):
    model = Model(lambda x, i: ops.gather(x, i, axis=axis), [t(dtype, "batch", 5, 3), t(DType.int64, "n", 2)], device)
    for batch, n in [(4, 3), (9, 1), (1, 7)]:
        x = rand(rng, dtype, (batch, 5, 3))
        idx = indices(rng, DType.int64, x.shape[axis], (n, 2))
        model.check([x, idx], lambda x, i: np.take(x, i, axis=axis))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
def test_gather_index_dtypes_and_scalar_index(rng, device, index_dtype):
    x = rand(rng, DType.float32, (6, 7))
    model = Model(lambda a, i: ops.gather(a, i, axis=1), [t(DType.float32, 6, 7), t(index_dtype, 4)], device)
    model.check([x, indices(rng, index_dtype, 7, (4,))], lambda a, i: np.take(a, i.astype(np.int64), axis=1))
    model = Model(lambda a, i: ops.gather(a, i, axis=0), [t(DType.float32, 6, 7), t(index_dtype)], device)
    v = 4 if index_dtype.is_unsigned_integral() else -2
    model.check([x, np.array(v, VALUE_TYPES[index_dtype])], lambda a, i: a[v])


@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float32, DType.int8], ids=str)
@pytest.mark.parametrize("row", [4096, 3, 1, 1000], ids=lambda r: f"row{r}")
def test_large_gathers(rng, device, dtype, row):
    # An embedding lookup (16-byte rows), odd rows (element copies), and > 2^20 elements.
    vocab, tokens = 3001, 1100
    x = rand(rng, dtype, (vocab, row))
    idx = indices(rng, DType.int32, vocab, (2, tokens // 2))
    fn = lambda a, i: ops.gather(a, i, axis=0)  # noqa: E731
    check(fn, [t(dtype, vocab, row), t(DType.int32, 2, tokens // 2)], [(x, idx)], lambda a, i: a[i], device)


@pytest.mark.parametrize("bad", [5, -6, 1000])
def test_gather_index_out_of_range(rng, device, bad):
    model = Model(lambda x, i: ops.gather(x, i, axis=1), [t(DType.float32, 2, 5), t(DType.int64, 3)], device)
    x = rand(rng, DType.float32, (2, 5))
    with pytest.raises(ValueError, match=rf"gather: index {bad} is out of range for axis 1 of size 5 \(expected -5..=4\)"):
        model.run(x, np.array([0, bad, 1], np.int64))
    # The first bad index in row-major order is the one reported.
    with pytest.raises(ValueError, match=rf"gather: index {bad} is out of range"):
        model.run(x, np.array([bad, 0, 7], np.int64))
    model.check([x, np.array([0, 4, -5], np.int64)], lambda x, i: x[:, i])  # still usable


def test_gather_huge_unsigned_index_does_not_wrap(device):
    model = Model(lambda x, i: ops.gather(x, i, axis=0), [t(DType.int32, 4), t(DType.uint64, 1)], device)
    with pytest.raises(ValueError, match="gather: index 9223372036854775807 is out of range"):
        model.run(np.arange(4, dtype=np.int32), np.array([2**64 - 1], np.uint64))


# gather_nd


def gather_nd_ref(x, idx, batch_dims):
    k = idx.shape[-1]
    out = np.empty(idx.shape[:-1] + x.shape[batch_dims + k :], dtype=x.dtype)
    for pos in np.ndindex(*idx.shape[:-1]):
        out[pos] = x[pos[:batch_dims] + tuple(int(v) for v in idx[pos])]
    return out


@dtypes
def test_gather_nd_batch_dims(rng, device, dtype):
    # The documented example's shape pattern: input [a, b, c, d], indices [a, f, 2], batch_dims=1.
    types = [t(dtype, "batch", 4, 5, 3), t(DType.int32, "batch", "f", 2)]
    model = Model(lambda x, i: ops.gather_nd(x, i, batch_dims=1), types, device)
    for batch, f in [(3, 2), (5, 4), (1, 1)]:
        x = rand(rng, dtype, (batch, 4, 5, 3))
        idx = np.stack([indices(rng, DType.int32, 4, (batch, f)), indices(rng, DType.int32, 5, (batch, f))], axis=-1)
        model.check([x, idx], lambda x, i: gather_nd_ref(x, i, 1))


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("index_dtype", [DType.int64, DType.uint8, DType.int16], ids=str)
def test_gather_nd_without_batch_dims(rng, device, k, index_dtype):
    shape = (4, 5, 3)
    x = rand(rng, DType.int16, shape)
    idx = np.stack([indices(rng, index_dtype, shape[d], (2, 3)) for d in range(k)], axis=-1)
    model = Model(lambda a, i: ops.gather_nd(a, i), [t(DType.int16, *shape), t(index_dtype, 2, 3, k)], device)
    model.check([x, idx], lambda a, i: gather_nd_ref(a, i, 0))
    model.check([x, idx], lambda a, i: a[tuple(i[..., d].astype(np.int64) for d in range(k))])


def test_large_gather_nd(rng, device):
    x = rand(rng, DType.float32, (1000, 64))
    idx = indices(rng, DType.int64, 64, (1000, 300, 1))
    fn = lambda a, i: ops.gather_nd(a, i, batch_dims=1)  # noqa: E731
    ref = lambda a, i: np.take_along_axis(a, i[..., 0] % 64, axis=1)  # noqa: E731
    check(fn, [t(DType.float32, 1000, 64), t(DType.int64, 1000, 300, 1)], [(x, idx)], ref, device)
    x = rand(rng, DType.bfloat16, (64, 32, 256))
    idx = np.stack([indices(rng, DType.int32, 64, (2000,)), indices(rng, DType.int32, 32, (2000,))], axis=-1)
    fn = lambda a, i: ops.gather_nd(a, i)  # noqa: E731
    check(fn, [t(DType.bfloat16, 64, 32, 256), t(DType.int32, 2000, 2)], [(x, idx)], lambda a, i: a[i[:, 0], i[:, 1]], device)


def test_gather_nd_index_out_of_range(device):
    model = Model(lambda a, i: ops.gather_nd(a, i), [t(DType.float32, 4, 5), t(DType.int64, 2, 2)], device)
    with pytest.raises(ValueError, match=r"gather_nd: index -6 is out of range for dimension 1 of the input of size 5"):
        model.run(np.zeros((4, 5), np.float32), np.array([[0, 0], [3, -6]], np.int64))


# scatter


def scatter_ref(x, updates, idx, axis):
    out = x.copy()
    for pos in np.ndindex(*updates.shape):
        target = list(pos)
        target[axis] = int(idx[pos])
        out[tuple(target)] = updates[pos]  # in row-major order: later duplicates win
    return out


@dtypes
@pytest.mark.parametrize("index_dtype", [DType.int32, DType.int64], ids=str)
def test_scatter_along_the_last_axis(rng, device, dtype, index_dtype):
    types = [t(dtype, "batch", 6), t(dtype, "batch", 9), t(index_dtype, "batch", 9)]
    model = Model(lambda x, u, i: ops.scatter(x, u, i, axis=-1), types, device)
    for batch in [2, 5, 1]:
        x, u = rand(rng, dtype, (batch, 6)), rand(rng, dtype, (batch, 9))
        idx = indices(rng, index_dtype, 6, (batch, 9))  # 9 writes into 6 slots: duplicates
        model.check([x, u, idx], lambda x, u, i: scatter_ref(x, u, i, 1))


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_scatter_updates_smaller_than_the_input(rng, device, axis):
    ushape = [(7, 2, 3), (5, 6, 2), (3, 4, 9)][axis]
    x = rand(rng, DType.float64, (5, 4, 3))
    u = rand(rng, DType.float64, ushape)
    idx = indices(rng, DType.int64, x.shape[axis], ushape)
    types = [t(DType.float64, 5, 4, 3), t(DType.float64, *ushape), t(DType.int64, *ushape)]
    check(lambda a, b, i: ops.scatter(a, b, i, axis=axis), types, [(x, u, idx)], lambda a, b, i: scatter_ref(a, b, i, axis), device)


def test_scatter_later_duplicates_win(device):
    types = [t(DType.int32, 4), t(DType.int32, 4), t(DType.int64, 4)]
    model = Model(lambda a, b, i: ops.scatter(a, b, i, axis=0), types, device)
    (out,) = model.run(np.zeros(4, np.int32), np.array([1, 2, 3, 4], np.int32), np.array([2, -2, 0, 2], np.int64))
    assert out.tolist() == [3, 0, 4, 0]


@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.int8, DType.float64], ids=str)
def test_large_scatter_with_many_duplicates(rng, device, dtype):
    # 2^20 updates into 1000 x 64 places: thousands of writers per place, one deterministic winner.
    x = rand(rng, dtype, (1000, 64))
    u = rand(rng, dtype, (16384, 64))
    idx = indices(rng, DType.int32, 1000, (16384, 64))
    types = [t(dtype, 1000, 64), t(dtype, 16384, 64), t(DType.int32, 16384, 64)]
    model = Model(lambda a, b, i: ops.scatter(a, b, i, axis=0), types, device)
    last = np.full((1000, 64), -1)
    rows = np.arange(16384)[:, None].repeat(64, 1)
    cols = np.arange(64)[None, :].repeat(16384, 0)
    np.maximum.at(last, (idx.astype(np.int64) % 1000, cols), rows)

    def ref(a, b, i):
        out = a.copy()
        hit = last >= 0
        out[hit] = b[last[hit], np.nonzero(hit)[1]]
        return out

    for _ in range(2):  # the same result every time
        model.check([x, u, idx], ref)


def test_scatter_index_out_of_range(device):
    types = [t(DType.int8, 2, 3), t(DType.int8, 2, 2), t(DType.int32, 2, 2)]
    model = Model(lambda a, b, i: ops.scatter(a, b, i, axis=1), types, device)
    with pytest.raises(ValueError, match=r"scatter: index 3 is out of range for axis 1 of size 3"):
        model.run(np.zeros((2, 3), np.int8), np.ones((2, 2), np.int8), np.array([[0, 1], [2, 3]], np.int32))
    with pytest.raises(ValueError, match=r"scatter: index -4 is out of range for axis 1 of size 3"):
        model.run(np.zeros((2, 3), np.int8), np.ones((2, 2), np.int8), np.array([[0, -4], [9, 1]], np.int32))


# scatter_nd


def scatter_nd_ref(x, updates, idx):
    out = x.copy()
    for pos in np.ndindex(*idx.shape[:-1]):
        out[tuple(int(v) for v in idx[pos])] = updates[pos]
    return out


@dtypes
def test_scatter_nd_rows_and_elements(rng, device, dtype):
    shape = (5, 4, 3)
    for k in [1, 2, 3]:
        types = [t(dtype, *shape), t(dtype, "n", *shape[k:]), t(DType.int64, "n", k)]
        model = Model(lambda x, u, i: ops.scatter_nd(x, u, i), types, device)
        for n in [1, 3, 8, 40]:  # 40 vectors into at most 60 places: duplicates
            x, u = rand(rng, dtype, shape), rand(rng, dtype, (n,) + shape[k:])
            idx = np.stack([indices(rng, DType.int64, shape[d], (n,)) for d in range(k)], axis=-1)
            model.check([x, u, idx], scatter_nd_ref)


def test_large_scatter_nd(rng, device):
    # A KV-cache style update: 3000 rows of 1024 bf16 into a 4096-row cache, with repeats.
    x = rand(rng, DType.bfloat16, (4096, 1024))
    u = rand(rng, DType.bfloat16, (3000, 1024))
    idx = indices(rng, DType.int32, 4096, (3000, 1))
    types = [t(DType.bfloat16, 4096, 1024), t(DType.bfloat16, 3000, 1024), t(DType.int32, 3000, 1)]
    check(lambda a, b, i: ops.scatter_nd(a, b, i), types, [(x, u, idx)], scatter_nd_ref, device)


def test_scatter_nd_index_out_of_range(device):
    types = [t(DType.float16, 4, 3), t(DType.float16, 2), t(DType.int32, 2, 2)]
    model = Model(lambda x, u, i: ops.scatter_nd(x, u, i), types, device)
    with pytest.raises(ValueError, match=r"scatter_nd: index -4 is out of range for dimension 1 of the input of size 3"):
        model.run(np.zeros((4, 3), np.float16), np.ones(2, np.float16), np.array([[0, 0], [1, -4]], np.int32))


# masked_scatter


def masked_scatter_ref(x, mask, updates):
    out = x.copy()
    m = np.broadcast_to(mask, x.shape)
    out[m] = updates.reshape(-1)[: int(m.sum())]
    return out


@dtypes
def test_masked_scatter_broadcast_mask(rng, device, dtype):
    types = [t(dtype, "batch", 3, 4), t(DType.bool, 3, 4), t(dtype, "m")]
    model = Model(lambda x, m, u: ops.masked_scatter(x, m, u, out_dim="count"), types, device)
    for batch in [1, 4]:
        x = rand(rng, dtype, (batch, 3, 4))
        mask = rng.integers(0, 2, (3, 4)).astype(np.bool_)
        u = rand(rng, dtype, (batch * 12 + 3,))  # more updates than needed: the first are used
        model.check([x, mask, u], masked_scatter_ref)
    with pytest.raises(ValueError, match=r"masked_scatter: the mask has 12 true elements but updates \(shape \[5\]\) has only 5"):
        model.run(rand(rng, dtype, (1, 3, 4)), np.ones((3, 4), np.bool_), rand(rng, dtype, (5,)))


def test_masked_scatter_full_mask_and_too_few_updates(rng, device):
    types = [t(DType.int64, 2, 5), t(DType.bool, 2, 1), t(DType.int64, 2, 3)]
    model = Model(lambda x, m, u: ops.masked_scatter(x, m, u, out_dim="count"), types, device)
    x = rand(rng, DType.int64, (2, 5))
    u = rand(rng, DType.int64, (2, 3))
    model.check([x, np.array([[False], [True]]), u], masked_scatter_ref)
    with pytest.raises(ValueError, match=r"masked_scatter: the mask has 10 true elements but updates \(shape \[2, 3\]\) has only 6"):
        model.run(x, np.array([[True], [True]]), u)


# nonzero


@dtypes
def test_nonzero_matches_argwhere(rng, device, dtype):
    model = Model(lambda x: ops.nonzero(x, "nnz"), [t(dtype, "batch", 3, 4)], device)
    for batch in [2, 5, 2]:
        x = rand(rng, dtype, (batch, 3, 4))
        x[rng.random(x.shape) < 0.5] = 0
        model.check([x], nonzero_ref)


def nonzero_ref(x: np.ndarray) -> np.ndarray:
    """np.argwhere of the nonzero elements; the random bit patterns hold NaN payloads, whose
    cast to float64 numpy flags as invalid (they stay NaN, and count as nonzero)."""
    with np.errstate(invalid="ignore"):
        return np.argwhere(x.astype(np.float64) != 0).astype(np.int64)


def test_nonzero_counts_nan_and_not_negative_zero(device):
    model = Model(lambda a: ops.nonzero(a, "n"), [t(DType.float32, 4)], device)
    (out,) = model.run(np.array([0.0, -0.0, np.nan, 2.0], np.float32))
    assert out.tolist() == [[2], [3]]


def test_nonzero_count_feeds_later_steps(rng, device):
    """The count symbol bound by nonzero sizes the values computed from its result, and differs
    between executions of one plan."""

    def body(x):
        coords = ops.nonzero(x, "nnz")
        return ops.gather_nd(x, coords) * 2, coords, ops.nonzero(x + 0, "nnz")

    model = Model(body, [t(DType.float32, 30, 40)], device)
    for zeros in [0.2, 0.7, 1.0]:
        x = rng.standard_normal((30, 40)).astype(np.float32)
        x[rng.random((30, 40)) < zeros] = 0
        model.check([x], lambda x: [x[x != 0] * 2, np.argwhere(x).astype(np.int64), np.argwhere(x).astype(np.int64)])
    if device.is_host:  # the plan count is the host scheduler's
        assert model.model._core.num_plans == 1


def test_nonzero_count_must_agree_with_its_dim(device):
    # A static out_dim, and a symbol an input already bound, are checked against the count.
    model = Model(lambda x: ops.nonzero(x, 2), [t(DType.int32, 4)], device)
    (out,) = model.run(np.array([0, 5, 0, 7], np.int32))
    assert out.tolist() == [[1], [3]]
    with pytest.raises(ValueError, match="nonzero: the input has 3 non-zero elements"):
        model.run(np.array([1, 5, 0, 7], np.int32))
    model = Model(lambda x, y: (ops.nonzero(x, "n"), y), [t(DType.int32, 4), t(DType.int32, "n")], device)
    (out, _) = model.run(np.array([0, 5, 0, 7], np.int32), np.zeros(2, np.int32))
    assert out.tolist() == [[1], [3]]
    with pytest.raises(ValueError, match="nonzero: the input has 2 non-zero elements"):
        model.run(np.array([0, 5, 0, 7], np.int32), np.zeros(3, np.int32))


# repeat_interleave whose size is data-dependent (as nonzero's count is)


@pytest.mark.parametrize("dtype", [DType.float32, DType.int16, DType.bool], ids=str)
def test_repeat_interleave_with_a_data_dependent_size(rng, device, dtype):
    """A tensor of counts with a symbolic out_dim: the size is known only from the counts (as
    nonzero's count is); the symbol is bound to their sum, and a later op can use it."""

    def fn(x, r, one):
        y = ops.repeat_interleave(x, r, 0, out_dim="n")
        return [y, ops.repeat_interleave(x, one, None, out_dim="m"), ops.concat([y, y], axis=0)]

    model = Model(fn, [t(dtype, 4, 3), t(DType.int64, 4), t(DType.int32, 1)], device)
    for counts, k in (([2, 0, 3, 1], 2), ([0, 0, 0, 0], 0), ([5, 1, 1, 1], 3)):
        x = rand(rng, dtype, (4, 3))
        r = np.array(counts, np.int64)
        y, flat, both = model.run(x, r, np.array([k], np.int32))
        same(y, np.repeat(x, r, 0))
        same(flat, np.repeat(x, k))
        same(both, np.concatenate([np.repeat(x, r, 0)] * 2))
    with pytest.raises(ValueError, match="repeats must be non-negative, got -1"):
        model.run(rand(rng, dtype, (4, 3)), np.array([1, -1, 0, 0], np.int64), np.array([1], np.int32))
    with pytest.raises(ValueError, match="has 2 counts for a dimension of size 4"):
        Model(lambda x, r: ops.repeat_interleave(x, r, 0, out_dim="n"), [t(dtype, 4, 3), t(DType.int64, 2)],
              device).run(rand(rng, dtype, (4, 3)), np.array([1, 2], np.int64))
