"""The indexing ops on the GPU: gather, gather_nd, scatter, scatter_nd (device kernels) and
masked_scatter, nonzero (through the host) against the CPU backend and numpy, bit for bit, for
1-, 2-, 4- and 8-byte dtypes and every index dtype, with negative indices, many duplicates in
scatters (the last update wins, as on the CPU), large and odd sizes, symbolic dims, and the
out-of-range errors (the CPU kernel's messages). Every test skips without a GPU."""

import numpy as np
import pytest

from gpu_compare import CPU, Pair, rand, same
from helpers import VALUE_TYPES
from max.dtype import DType
from max.graph import TensorType, ops

pytestmark = pytest.mark.gpu

DTYPES = [DType.float32, DType.bfloat16, DType.float16, DType.float64, DType.int8, DType.int64, DType.uint16, DType.bool]
INDEX_DTYPES = [DType.int8, DType.int16, DType.int32, DType.int64, DType.uint8, DType.uint16, DType.uint32, DType.uint64]
dtypes = pytest.mark.parametrize("dtype", DTYPES, ids=str)


def t(dtype, *shape):
    return TensorType(dtype, shape, CPU)


def indices(rng, dtype: DType, size: int, shape, negative: bool = True) -> np.ndarray:
    """Random indices into a dim of `size`, negative ones too where the dtype is signed."""
    np_t = VALUE_TYPES[dtype]
    lo = -size if negative and not dtype.name.startswith("uint") else 0
    lo = max(lo, np.iinfo(np_t).min)
    hi = min(size - 1, np.iinfo(np_t).max)
    return rng.integers(lo, hi, size=shape, endpoint=True).astype(np_t)


# gather


@dtypes
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather(rng, gpu, dtype, axis):
    p = Pair(lambda x, i: ops.gather(x, i, axis=axis), [t(dtype, "batch", 5, 3), t(DType.int64, "n", 2)], gpu)
    for batch, n in [(4, 3), (9, 1), (1, 7)]:
        x = rand(rng, dtype, (batch, 5, 3))
        idx = indices(rng, DType.int64, x.shape[axis], (n, 2))
        p.check([x, idx], lambda x, i: np.take(x, i, axis=axis))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
def test_gather_index_dtypes_and_scalar_index(rng, gpu, index_dtype):
    x = rand(rng, DType.float32, (6, 7))
    p = Pair(lambda a, i: ops.gather(a, i, axis=1), [t(DType.float32, 6, 7), t(index_dtype, 4)], gpu)
    p.check([x, indices(rng, index_dtype, 7, (4,))], lambda a, i: np.take(a, i.astype(np.int64), axis=1))
    p = Pair(lambda a, i: ops.gather(a, i, axis=0), [t(DType.float32, 6, 7), t(index_dtype)], gpu)
    v = -2 if index_dtype.name.startswith("int") else 4
    p.check([x, np.array(v, VALUE_TYPES[index_dtype])], lambda a, i: a[int(i)])


@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float32, DType.int8], ids=str)
@pytest.mark.parametrize("row", [4096, 3, 1, 1000], ids=lambda r: f"row{r}")
def test_large_gathers(rng, gpu, dtype, row):
    # An embedding lookup (16-byte rows), odd rows (element copies), and > 2^20 elements.
    vocab, tokens = 3001, 1100
    x = rand(rng, dtype, (vocab, row))
    idx = indices(rng, DType.int32, vocab, (2, tokens // 2))
    p = Pair(lambda a, i: ops.gather(a, i, axis=0), [t(dtype, vocab, row), t(DType.int32, 2, tokens // 2)], gpu)
    p.check([x, idx], lambda a, i: a[i])


@pytest.mark.parametrize("bad", [5, -6, 1000])
def test_gather_index_out_of_range(gpu, bad):
    p = Pair(lambda x, i: ops.gather(x, i, axis=1), [t(DType.float32, 2, 5), t(DType.int64, 3)], gpu)
    x = np.zeros((2, 5), np.float32)
    with pytest.raises(ValueError, match=rf"gather: index {bad} is out of range for axis 1 of size 5 \(expected -5..=4\)"):
        p.run_gpu(x, np.array([0, bad, 1], np.int64))
    # The first bad index in row-major order is the one reported.
    with pytest.raises(ValueError, match=rf"gather: index {bad} is out of range"):
        p.run_gpu(x, np.array([bad, 0, 7], np.int64))
    p.check([x, np.array([0, 4, -5], np.int64)])  # still usable


def test_gather_huge_unsigned_index_does_not_wrap(gpu):
    p = Pair(lambda x, i: ops.gather(x, i, axis=0), [t(DType.int32, 4), t(DType.uint64, 1)], gpu)
    with pytest.raises(ValueError, match="gather: index 9223372036854775807 is out of range"):
        p.run_gpu(np.arange(4, dtype=np.int32), np.array([2**64 - 1], np.uint64))


# gather_nd


def gather_nd_ref(x, idx, batch_dims):
    k = idx.shape[-1]
    out = np.empty(idx.shape[:-1] + x.shape[batch_dims + k :], dtype=x.dtype)
    for pos in np.ndindex(*idx.shape[:-1]):
        out[pos] = x[pos[:batch_dims] + tuple(int(v) for v in idx[pos])]
    return out


@dtypes
def test_gather_nd_batch_dims(rng, gpu, dtype):
    p = Pair(lambda x, i: ops.gather_nd(x, i, batch_dims=1), [t(dtype, "batch", 4, 5, 3), t(DType.int32, "batch", "f", 2)], gpu)
    for batch, f in [(3, 2), (5, 4), (1, 1)]:
        x = rand(rng, dtype, (batch, 4, 5, 3))
        idx = np.stack([indices(rng, DType.int32, 4, (batch, f)), indices(rng, DType.int32, 5, (batch, f))], axis=-1)
        p.check([x, idx], lambda x, i: gather_nd_ref(x, i, 1))


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("index_dtype", [DType.int64, DType.uint8, DType.int16], ids=str)
def test_gather_nd_without_batch_dims(rng, gpu, k, index_dtype):
    shape = (4, 5, 3)
    x = rand(rng, DType.int16, shape)
    idx = np.stack([indices(rng, index_dtype, shape[d], (2, 3)) for d in range(k)], axis=-1)
    p = Pair(lambda a, i: ops.gather_nd(a, i), [t(DType.int16, *shape), t(index_dtype, 2, 3, k)], gpu)
    p.check([x, idx], lambda a, i: gather_nd_ref(a, i, 0))


def test_large_gather_nd(rng, gpu):
    x = rand(rng, DType.float32, (1000, 64))
    idx = indices(rng, DType.int64, 64, (1000, 300, 1))
    p = Pair(lambda a, i: ops.gather_nd(a, i, batch_dims=1), [t(DType.float32, 1000, 64), t(DType.int64, 1000, 300, 1)], gpu)
    p.check([x, idx], lambda a, i: np.take_along_axis(a, i[..., 0] % 64, axis=1))
    x = rand(rng, DType.bfloat16, (64, 32, 256))
    idx = np.stack([indices(rng, DType.int32, 64, (2000,)), indices(rng, DType.int32, 32, (2000,))], axis=-1)
    p = Pair(lambda a, i: ops.gather_nd(a, i), [t(DType.bfloat16, 64, 32, 256), t(DType.int32, 2000, 2)], gpu)
    p.check([x, idx], lambda a, i: a[i[:, 0], i[:, 1]])


def test_gather_nd_index_out_of_range(gpu):
    p = Pair(lambda a, i: ops.gather_nd(a, i), [t(DType.float32, 4, 5), t(DType.int64, 2, 2)], gpu)
    with pytest.raises(ValueError, match=r"gather_nd: index -6 is out of range for dimension 1 of the input of size 5"):
        p.run_gpu(np.zeros((4, 5), np.float32), np.array([[0, 0], [3, -6]], np.int64))


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
def test_scatter_along_the_last_axis(rng, gpu, dtype, index_dtype):
    types = [t(dtype, "batch", 6), t(dtype, "batch", 9), t(index_dtype, "batch", 9)]
    p = Pair(lambda x, u, i: ops.scatter(x, u, i, axis=-1), types, gpu)
    for batch in [2, 5, 1]:
        x, u = rand(rng, dtype, (batch, 6)), rand(rng, dtype, (batch, 9))
        idx = indices(rng, index_dtype, 6, (batch, 9))  # 9 writes into 6 slots: duplicates
        p.check([x, u, idx], lambda x, u, i: scatter_ref(x, u, i, 1))


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_scatter_updates_smaller_than_the_input(rng, gpu, axis):
    ushape = [(7, 2, 3), (5, 6, 2), (3, 4, 9)][axis]
    x = rand(rng, DType.float64, (5, 4, 3))
    u = rand(rng, DType.float64, ushape)
    idx = indices(rng, DType.int64, x.shape[axis], ushape)
    types = [t(DType.float64, 5, 4, 3), t(DType.float64, *ushape), t(DType.int64, *ushape)]
    Pair(lambda a, b, i: ops.scatter(a, b, i, axis=axis), types, gpu).check([x, u, idx], lambda a, b, i: scatter_ref(a, b, i, axis))


def test_scatter_later_duplicates_win(gpu):
    types = [t(DType.int32, 4), t(DType.int32, 4), t(DType.int64, 4)]
    (out,) = Pair(lambda a, b, i: ops.scatter(a, b, i, axis=0), types, gpu).check(
        [np.zeros(4, np.int32), np.array([1, 2, 3, 4], np.int32), np.array([2, -2, 0, 2], np.int64)]
    )
    assert out.tolist() == [3, 0, 4, 0]


@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.int8, DType.float64], ids=str)
def test_large_scatter_with_many_duplicates(rng, gpu, dtype):
    # 2^20 updates into 1000 x 64 places: thousands of writers per place, one deterministic winner.
    x = rand(rng, dtype, (1000, 64))
    u = rand(rng, dtype, (16384, 64))
    idx = indices(rng, DType.int32, 1000, (16384, 64))
    types = [t(dtype, 1000, 64), t(dtype, 16384, 64), t(DType.int32, 16384, 64)]
    p = Pair(lambda a, b, i: ops.scatter(a, b, i, axis=0), types, gpu)
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
        p.check([x, u, idx], ref)


def test_scatter_index_out_of_range(gpu):
    types = [t(DType.int8, 2, 3), t(DType.int8, 2, 2), t(DType.int32, 2, 2)]
    p = Pair(lambda a, b, i: ops.scatter(a, b, i, axis=1), types, gpu)
    with pytest.raises(ValueError, match=r"scatter: index 3 is out of range for axis 1 of size 3"):
        p.run_gpu(np.zeros((2, 3), np.int8), np.ones((2, 2), np.int8), np.array([[0, 1], [2, 3]], np.int32))
    with pytest.raises(ValueError, match=r"scatter: index -4 is out of range for axis 1 of size 3"):
        p.run_gpu(np.zeros((2, 3), np.int8), np.ones((2, 2), np.int8), np.array([[0, -4], [9, 1]], np.int32))


# scatter_nd


def scatter_nd_ref(x, updates, idx):
    out = x.copy()
    for pos in np.ndindex(*idx.shape[:-1]):
        out[tuple(int(v) for v in idx[pos])] = updates[pos]
    return out


@dtypes
def test_scatter_nd_rows_and_elements(rng, gpu, dtype):
    shape = (5, 4, 3)
    for k in [1, 2, 3]:
        types = [t(dtype, *shape), t(dtype, "n", *shape[k:]), t(DType.int64, "n", k)]
        p = Pair(lambda x, u, i: ops.scatter_nd(x, u, i), types, gpu)
        for n in [1, 3, 40]:  # 40 vectors into at most 60 places: duplicates
            x, u = rand(rng, dtype, shape), rand(rng, dtype, (n,) + shape[k:])
            idx = np.stack([indices(rng, DType.int64, shape[d], (n,)) for d in range(k)], axis=-1)
            p.check([x, u, idx], scatter_nd_ref)


def test_large_scatter_nd(rng, gpu):
    # A KV-cache style update: 3000 rows of 1024 bf16 into a 4096-row cache, with repeats.
    x = rand(rng, DType.bfloat16, (4096, 1024))
    u = rand(rng, DType.bfloat16, (3000, 1024))
    idx = indices(rng, DType.int32, 4096, (3000, 1))
    types = [t(DType.bfloat16, 4096, 1024), t(DType.bfloat16, 3000, 1024), t(DType.int32, 3000, 1)]
    Pair(lambda a, b, i: ops.scatter_nd(a, b, i), types, gpu).check([x, u, idx], scatter_nd_ref)


def test_scatter_nd_index_out_of_range(gpu):
    types = [t(DType.float16, 4, 3), t(DType.float16, 2), t(DType.int32, 2, 2)]
    p = Pair(lambda x, u, i: ops.scatter_nd(x, u, i), types, gpu)
    with pytest.raises(ValueError, match=r"scatter_nd: index -4 is out of range for dimension 1 of the input of size 3"):
        p.run_gpu(np.zeros((4, 3), np.float16), np.ones(2, np.float16), np.array([[0, 0], [1, -4]], np.int32))


# masked_scatter and nonzero (through the host)


def masked_scatter_ref(x, mask, updates):
    out = x.copy()
    m = np.broadcast_to(mask, x.shape)
    out[m] = updates.reshape(-1)[: int(m.sum())]
    return out


@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16, DType.int8, DType.bool], ids=str)
def test_masked_scatter(rng, gpu, dtype):
    types = [t(dtype, "batch", 3, 4), t(DType.bool, 3, 4), t(dtype, "m")]
    p = Pair(lambda x, m, u: ops.masked_scatter(x, m, u, out_dim="count"), types, gpu)
    for batch in [1, 4]:
        x = rand(rng, dtype, (batch, 3, 4))
        mask = rng.integers(0, 2, (3, 4)).astype(np.bool_)
        u = rand(rng, dtype, (batch * 12 + 3,))
        p.check([x, mask, u], masked_scatter_ref)
    with pytest.raises(ValueError, match=r"masked_scatter: the mask has 12 true elements but updates \(shape \[5\]\) has only 5"):
        p.run_gpu(rand(rng, dtype, (1, 3, 4)), np.ones((3, 4), np.bool_), rand(rng, dtype, (5,)))


@pytest.mark.parametrize("dtype", [DType.float32, DType.float16, DType.int64, DType.uint16, DType.bool], ids=str)
def test_nonzero(rng, gpu, dtype):
    p = Pair(lambda x: ops.nonzero(x, "nnz"), [t(dtype, "batch", 3, 4)], gpu)
    for batch in [2, 5, 2]:
        x = rand(rng, dtype, (batch, 3, 4))
        x[rng.random(x.shape) < 0.5] = 0
        p.check([x], lambda x: np.argwhere(x.astype(np.float64) != 0).astype(np.int64))


def test_nonzero_count_feeds_gpu_steps(rng, gpu):
    def body(x):
        coords = ops.nonzero(x, "nnz")
        return ops.gather_nd(x, coords) * 2, coords, ops.nonzero(x + 0, "nnz")

    p = Pair(body, [t(DType.float32, 30, 40)], gpu)
    for zeros in [0.2, 0.7, 1.0]:
        x = rng.standard_normal((30, 40)).astype(np.float32)
        x[rng.random((30, 40)) < zeros] = 0
        p.check([x], lambda x: [x[x != 0] * 2, np.argwhere(x).astype(np.int64), np.argwhere(x).astype(np.int64)])
