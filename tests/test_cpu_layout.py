"""CPU kernels of the layout ops through InferenceSession, against numpy references computed
here (reshape, transpose, broadcast_to, concatenate, stack, split, tile, pad, repeat, basic
indexing, triu/tril-style masks). Layout ops move bytes, so every dtype is checked bit for bit,
on random bit patterns (NaN payloads included), with symbolic "batch" dims run at two sizes."""

import numpy as np
import pytest

from engine_util import build, cpu_type, session
from helpers import VALUE_TYPES, random_bits
from max.dtype import DType
from max.graph import DeviceRef, Dim, ops

DTYPES = list(VALUE_TYPES)  # every dtype the host kernels handle
BATCHES = (2, 5)
FP8 = (np.dtype(VALUE_TYPES[DType.float8_e4m3fn]), np.dtype(VALUE_TYPES[DType.float8_e5m2]))


def rand(rng, dtype, shape):
    return random_bits(rng, dtype, shape).view(VALUE_TYPES[dtype])


def same(out, ref):
    """Bit-exact equality of an engine output with its reference."""
    ref = np.asarray(ref)
    if ref.dtype in FP8 and out.dtype == np.uint8:
        out = out.view(ref.dtype)  # Buffer.to_numpy gives float8 data as its uint8 bits
    assert out.dtype == ref.dtype, (out.dtype, ref.dtype)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert out.tobytes() == np.ascontiguousarray(ref).tobytes(), f"values differ:\n{out}\n!=\n{ref}"


def check(fn, types, cases, ref):
    """Builds `fn` over `types` once, runs it on each input tuple of `cases`, and compares every
    output with `ref(*inputs)` (one array or a list, one per output)."""
    model = session().load(build(fn, *types))
    for args in cases:
        outs = [o.to_numpy() for o in model.execute(*args)]
        refs = ref(*args)
        refs = list(refs) if isinstance(refs, (list, tuple)) else [refs]
        assert len(outs) == len(refs)
        for o, r in zip(outs, refs):
            same(o, r)
    return model


def t(dtype, *shape):
    return cpu_type(dtype, shape)


dtypes = pytest.mark.parametrize("dtype", DTYPES, ids=str)


# reshape, flatten, squeeze, unsqueeze, as_interleaved_complex, transfer_to


@dtypes
def test_reshape_flatten_squeeze_unsqueeze(rng, dtype):
    def fn(x, y, s):
        return [
            ops.reshape(x, ["batch", 24]),
            ops.reshape(x, [-1, 3]),
            ops.reshape(x, [Dim("batch") * 2, 2, 6]),
            ops.flatten(x),
            ops.flatten(x, 1, 2),
            ops.unsqueeze(x, -1),
            ops.unsqueeze(x, 1),
            ops.squeeze(y, 1),
            ops.squeeze(y, -1),
            ops.reshape(s, [1, 1]),
            ops.flatten(s),
            ops.as_interleaved_complex(x),
            ops.transfer_to(x, DeviceRef.CPU()),
        ]

    def ref(x, y, s):
        b = x.shape[0]
        return [
            x.reshape(b, 24),
            x.reshape(-1, 3),
            x.reshape(b * 2, 2, 6),
            x.reshape(-1),
            x.reshape(b, 24),
            x[..., None],
            x[:, None],
            y[:, 0],
            y[..., 0],
            s.reshape(1, 1),
            s.reshape(1),
            x.reshape(b, 4, 3, 2),
            x,
        ]

    types = [t(dtype, "batch", 4, 6), t(dtype, "batch", 1, 6, 1), t(dtype)]
    cases = [(rand(rng, dtype, (b, 4, 6)), rand(rng, dtype, (b, 1, 6, 1)), rand(rng, dtype, ())) for b in BATCHES]
    check(fn, types, cases, ref)


# transpose, permute


@dtypes
def test_transpose_permute(rng, dtype):
    # y is large enough for the tiled (cache-blocked) transposing walk.
    def fn(x, s, y):
        return [
            ops.transpose(x, 0, 2),
            ops.transpose(x, -1, 1),
            ops.transpose(x, 3, 3),
            ops.permute(x, [3, 0, 2, 1]),
            ops.permute(x, [-1, -2, 0, 1]),
            ops.transpose(s, 0, -1),
            x.T,
            ops.transpose(y, 1, 2),
            ops.permute(y, [2, 0, 1]),
            ops.permute(y, [1, 2, 0]),
            ops.transpose(y, 1, 2)[:, ::-1],
        ]

    def ref(x, s, y):
        return [
            x.transpose(2, 1, 0, 3),
            x.transpose(0, 3, 2, 1),
            x,
            x.transpose(3, 0, 2, 1),
            x.transpose(3, 2, 0, 1),
            s,
            x.swapaxes(-1, -2),
            y.transpose(0, 2, 1),
            y.transpose(2, 0, 1),
            y.transpose(1, 2, 0),
            y.transpose(0, 2, 1)[:, ::-1],
        ]

    types = [t(dtype, "batch", 3, 4, 5), t(dtype), t(dtype, "batch", 37, 70)]
    cases = [(rand(rng, dtype, (b, 3, 4, 5)), rand(rng, dtype, ()), rand(rng, dtype, (b, 37, 70))) for b in BATCHES]
    check(fn, types, cases, ref)


# broadcast_to


@dtypes
def test_broadcast_to(rng, dtype):
    def fn(x, y, s):
        return [
            ops.broadcast_to(x, [2, "batch", 4, 3]),
            ops.broadcast_to(x, ["batch", 1, 3]),
            ops.broadcast_to(y, ["batch", 3]),
            ops.broadcast_to(s, [3, "batch"]),
        ]

    def ref(x, y, s):
        b = x.shape[0]
        return [
            np.broadcast_to(x, (2, b, 4, 3)),
            x,
            np.broadcast_to(y, (b, 3)),
            np.broadcast_to(s, (3, b)),
        ]

    types = [t(dtype, "batch", 1, 3), t(dtype, 3), t(dtype)]
    cases = [(rand(rng, dtype, (b, 1, 3)), rand(rng, dtype, (3,)), rand(rng, dtype, ())) for b in BATCHES]
    check(fn, types, cases, ref)


@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16, DType.int8, DType.bool], ids=str)
def test_broadcast_to_tensor_shape(rng, dtype):
    def fn(x, shape, z):
        return [ops.broadcast_to(x, shape, out_dims=["batch", 2, 3])]

    types = [t(dtype, 1, 3), t(DType.int64, 3), t(DType.int8, "batch")]
    model = session().load(build(fn, *types))
    for b in BATCHES:
        x = rand(rng, dtype, (1, 3))
        (out,) = model.execute(x, np.array([b, 2, 3], np.int64), np.zeros(b, np.int8))
        same(out.to_numpy(), np.broadcast_to(x, (b, 2, 3)))
    with pytest.raises(ValueError, match="broadcast_to: the shape tensor holds"):
        model.execute(x, np.array([3, 2, 3], np.int64), np.zeros(4, np.int8))


# concat, stack, split


@dtypes
def test_concat(rng, dtype):
    def fn(a, b, c, e):
        return [ops.concat([a, b, c], axis=1), ops.concat([a, c, b], axis=-2), ops.concat([a, e], 0), ops.concat([a], 2), ops.concat([c, c], -1)]

    def ref(a, b, c, e):
        return [np.concatenate([a, b, c], 1), np.concatenate([a, c, b], -2), np.concatenate([a, e], 0), a, np.concatenate([c, c], -1)]

    types = [t(dtype, "batch", 2, 3), t(dtype, "batch", 1, 3), t(dtype, "batch", 4, 3), t(dtype, 3, 2, 3)]
    cases = [
        (rand(rng, dtype, (n, 2, 3)), rand(rng, dtype, (n, 1, 3)), rand(rng, dtype, (n, 4, 3)), rand(rng, dtype, (3, 2, 3)))
        for n in BATCHES
    ]
    check(fn, types, cases, ref)


@dtypes
def test_stack(rng, dtype):
    def fn(a, b, s):
        return [ops.stack([a, b, a], 0), ops.stack([a, b], 1), ops.stack([b, a, b, a], -1), ops.stack([s, s], 0)]

    def ref(a, b, s):
        return [np.stack([a, b, a], 0), np.stack([a, b], 1), np.stack([b, a, b, a], -1), np.stack([s, s], 0)]

    types = [t(dtype, "batch", 3), t(dtype, "batch", 3), t(dtype)]
    cases = [(rand(rng, dtype, (n, 3)), rand(rng, dtype, (n, 3)), rand(rng, dtype, ())) for n in BATCHES]
    check(fn, types, cases, ref)


@dtypes
def test_split(rng, dtype):
    def fn(x):
        return [
            *ops.split(x, [2, 5], 1),
            *ops.split(x, [3, 0, 4], -2),
            *ops.split(x, [Dim("batch") - 1, 1], 0),
            *ops.split(x, [1, 1], 2),
            *ops.chunk(x, 7, 1),
        ]

    def ref(x):
        return [
            *np.split(x, [2], 1),
            *np.split(x, [3, 3], 1),
            *np.split(x, [x.shape[0] - 1], 0),
            *np.split(x, 2, 2),
            *np.split(x, 7, 1),
        ]

    types = [t(dtype, "batch", 7, 2)]
    check(fn, types, [(rand(rng, dtype, (n, 7, 2)),) for n in BATCHES], ref)


# tile, pad


@dtypes
def test_tile(rng, dtype):
    def fn(x, s):
        return [ops.tile(x, [2, 1, 3]), ops.tile(x, [1, 4, 1]), ops.tile(x, [1, 1, 1]), ops.tile(ops.reshape(s, [1]), [5])]

    def ref(x, s):
        return [np.tile(x, (2, 1, 3)), np.tile(x, (1, 4, 1)), x, np.tile(s.reshape(1), 5)]

    types = [t(dtype, "batch", 3, 2), t(dtype)]
    check(fn, types, [(rand(rng, dtype, (n, 3, 2)), rand(rng, dtype, ())) for n in BATCHES], ref)


def np_pad(x, pads, v):
    """Constant padding with a value of x's dtype (filled by element copies, so bit-exact)."""
    out = np.empty(tuple(d + a + b for d, (a, b) in zip(x.shape, pads)), x.dtype)
    out[...] = v
    out[tuple(slice(a, a + d) for d, (a, _) in zip(x.shape, pads))] = x
    return out


@dtypes
def test_pad(rng, dtype):
    def fn(x, v):
        return [ops.pad(x, [1, 2, 0, 3, 2, 0], value=v), ops.pad(x, [0] * 6, value=v), ops.pad(x, [0, 0, 4, 1, 0, 1], value=v)]

    def ref(x, v):
        return [np_pad(x, [(1, 2), (0, 3), (2, 0)], v), x, np_pad(x, [(0, 0), (4, 1), (0, 1)], v)]

    types = [t(dtype, "batch", 3, 4), t(dtype)]
    check(fn, types, [(rand(rng, dtype, (n, 3, 4)), rand(rng, dtype, ())) for n in BATCHES], ref)


# repeat_interleave


@dtypes
def test_repeat_interleave_int(rng, dtype):
    def fn(x):
        return [
            ops.repeat_interleave(x, 3, 1),
            ops.repeat_interleave(x, 2, 0),
            ops.repeat_interleave(x, 2, -1),
            ops.repeat_interleave(x, 1, 1),
            ops.repeat_interleave(x, 2),
        ]

    def ref(x):
        return [np.repeat(x, 3, 1), np.repeat(x, 2, 0), np.repeat(x, 2, -1), x, np.repeat(x, 2)]

    types = [t(dtype, "batch", 3, 2)]
    check(fn, types, [(rand(rng, dtype, (n, 3, 2)),) for n in BATCHES], ref)


@dtypes
def test_repeat_interleave_tensor(rng, dtype):
    counts = rng.integers(0, 4, size=3)
    total = int(counts.sum())

    def fn(x, r, one):
        return [
            ops.repeat_interleave(x, r, 1, out_dim=total),
            ops.repeat_interleave(x, one, 2, out_dim=6),
            ops.repeat_interleave(x, one, None, out_dim=Dim("batch") * 18),
            ops.repeat_interleave(x, one, 0, out_dim=Dim("batch") * 3),
        ]

    def ref(x, r, one):
        return [np.repeat(x, r, 1), np.repeat(x, 3, 2), np.repeat(x, 3), np.repeat(x, 3, 0)]

    types = [t(dtype, "batch", 3, 2), t(DType.int64, 3), t(DType.int32, 1)]
    cases = [(rand(rng, dtype, (n, 3, 2)), counts, np.array([3], np.int32)) for n in BATCHES]
    model = check(fn, types, cases, ref)
    x = cases[0][0]
    with pytest.raises(ValueError, match="repeat_interleave: the repeats add up to"):
        model.execute(x, counts + 1, np.array([3], np.int32))
    with pytest.raises(ValueError, match="repeat_interleave: repeats must be non-negative"):
        model.execute(x, np.array([-1, total + 1, 0]), np.array([3], np.int32))


@pytest.mark.parametrize("rdtype", [DType.int8, DType.uint16, DType.int32, DType.uint64], ids=str)
def test_repeat_interleave_count_dtypes(rng, rdtype):
    counts = rng.integers(0, 5, size=4)
    x = rand(rng, DType.float16, (4, 5))
    types = [t(DType.float16, 4, 5), t(rdtype, 4)]
    fn = lambda x, r: ops.repeat_interleave(x, r, 0, out_dim=int(counts.sum()))  # noqa: E731
    check(fn, types, [(x, counts.astype(VALUE_TYPES[rdtype]))], lambda x, r: np.repeat(x, counts, 0))


# slice_tensor


@dtypes
def test_slice_static_symbolic_and_negative_steps(rng, dtype):
    def fn(x):
        b = Dim("batch")
        return [
            x[1:, ::-1, 2],
            x[..., ::-2],
            x[None, :, 3:0:-1, None],
            x[-1, ..., 1:5:2],
            x[:, -1, :],
            x[::-1],
            x[::-2, -2:, -1:-7:-3],
            x[b // 2 :],
            x[: b - 1, 1],
            x[b - 1 :: -1],
            x[()],
            x[..., None],
            x[:, 4:1],
            x[:, :-6:-1],
        ]

    def ref(x):
        n = x.shape[0]
        return [
            x[1:, ::-1, 2],
            x[..., ::-2],
            x[None, :, 3:0:-1, None],
            x[-1, ..., 1:5:2],
            x[:, -1, :],
            x[::-1],
            x[::-2, -2:, -1:-7:-3],
            x[n // 2 :],
            x[: n - 1, 1],
            x[n - 1 :: -1],
            x,
            x[..., None],
            x[:, 4:1],
            x[:, :-6:-1],
        ]

    check(fn, [t(dtype, "batch", 5, 6)], [(rand(rng, dtype, (n, 5, 6)),) for n in BATCHES], ref)


@dtypes
def test_slice_scalar_tensor_indices(rng, dtype):
    def fn(x, i, j):
        return [
            x[:, i],
            x[-1, ::-1, j],
            ops.slice_tensor(x, [slice(None), (slice(i, j), 2)]),
            ops.slice_tensor(x, [slice(None), (slice(j, i, -1), 2), 1]),
            ops.slice_tensor(x, [(slice(1, None), Dim("batch") - 1)]),
            ops.slice_tensor(x, [..., (slice(i, None), "k")]),
        ]

    def ref(x, i, j):
        i, j = int(i), int(j)
        return [x[:, i], x[-1, ::-1, j], x[:, i:j], x[:, j:i:-1, 1], x[1:], x[..., i:]]

    # "k" is bound through an input of that size; the model takes x, i, j, k.
    def fn4(x, i, j, k):
        return fn(x, i, j)

    def ref4(x, i, j, k):
        return ref(x, i, j)

    types = [t(dtype, "batch", 5, 6), t(DType.int32), t(DType.int64), t(DType.uint8, "k")]
    cases = []
    for n, (i, j) in zip(BATCHES, [(1, 3), (-4, -2)]):
        k = 6 - (i % 6)
        cases.append((rand(rng, dtype, (n, 5, 6)), np.int32(i), np.int64(j), np.zeros(k, np.uint8)))
    model = check(fn4, types, cases, ref4)
    x = cases[0][0]
    with pytest.raises(ValueError, match="slice_tensor: indices: index 5 is out of range for dimension 5 at axis 1"):
        model.execute(x, np.int32(5), np.int64(3), np.zeros(1, np.uint8))
    with pytest.raises(ValueError, match="slice_tensor: indices: the indices select shape"):
        model.execute(x, np.int32(0), np.int64(3), np.zeros(6, np.uint8))
    with pytest.raises(ValueError, match=r"slice_tensor: indices: slice bound -6 is out of range for dimension 5 at axis 1 \(bounds must lie in \[-dim, dim\]"):
        model.execute(x, np.int32(1), np.int64(-6), np.zeros(5, np.uint8))


@pytest.mark.parametrize("idtype", [DType.int8, DType.uint16, DType.int32, DType.uint64, DType.int64], ids=str)
def test_slice_index_tensor_dtypes(rng, idtype):
    x = rand(rng, DType.int16, (4, 7))
    values = [3, 0, 6] if idtype.is_unsigned_integral() else [3, -1, -7]
    fn = lambda x, i: [x[1, i], x[:, i]]  # noqa: E731
    model = session().load(build(fn, t(DType.int16, 4, 7), t(idtype)))
    for v in values:
        a, b = model.execute(x, np.array(v, VALUE_TYPES[idtype]))
        same(a.to_numpy(), x[1, v])
        same(b.to_numpy(), x[:, v])


# band_part


def np_band(x, lower, upper, exclude):
    m, n = x.shape[-2:]
    r = np.arange(m)[:, None]
    c = np.arange(n)[None, :]
    keep = np.ones((m, n), bool)
    if lower is not None and lower >= 0:
        keep &= r - c <= lower
    if upper is not None and upper >= 0:
        keep &= c - r <= upper
    if exclude:
        keep = ~keep
    return np.where(keep, x, np.zeros_like(x))


BANDS = [(None, None, False), (0, None, False), (None, 0, False), (0, 0, False), (1, 2, False), (-1, 1, False), (2, -1, True), (0, 0, True), (1, None, True)]


@dtypes
def test_band_part(rng, dtype):
    def fn(x, y):
        return [ops.band_part(x, lo, up, ex) for lo, up, ex in BANDS] + [ops.band_part(y, 1, 0, False)]

    def ref(x, y):
        return [np_band(x, lo, up, ex) for lo, up, ex in BANDS] + [np_band(y, 1, 0, False)]

    types = [t(dtype, "batch", 4, 5), t(dtype, 6, 3)]
    check(fn, types, [(rand(rng, dtype, (n, 4, 5)), rand(rng, dtype, (6, 3))) for n in BATCHES], ref)


def test_band_part_symbolic_matrix_dims(rng):
    # Counts are checked against static dims at staging; past a symbolic dim at run time they
    # cover the whole triangle, as None does.
    model = session().load(build(lambda x: ops.band_part(x, 2, 1), t(DType.float32, "m", "n")))
    for shape in [(4, 3), (2, 1), (1, 6), (0, 2)]:
        x = rand(rng, DType.float32, shape)
        same(model.execute(x)[0].to_numpy(), np_band(x, 2, 1, False))


# zero-size inputs, large (multi-threaded) copies, a chain of layout ops


@pytest.mark.parametrize("dtype", [DType.float32, DType.bool], ids=str)
def test_zero_batch(rng, dtype):
    def fn(x, v):
        return [
            ops.transpose(x, 0, 1),
            ops.concat([x, x], 1),
            ops.stack([x, x], 0),
            ops.pad(x, [1, 1, 0, 1], value=v),
            ops.tile(x, [2, 2]),
            ops.repeat_interleave(x, 2, 1),
            x[::-1, 1:],
            ops.band_part(x, 0, None),
            ops.broadcast_to(x, [2, "batch", 3]),
        ]

    def ref(x, v):
        return [
            x.T,
            np.concatenate([x, x], 1),
            np.stack([x, x]),
            np_pad(x, [(1, 1), (0, 1)], v),
            np.tile(x, (2, 2)),
            np.repeat(x, 2, 1),
            x[::-1, 1:],
            x,
            np.broadcast_to(x, (2, 0, 3)),
        ]

    check(fn, [t(dtype, "batch", 3), t(dtype)], [(rand(rng, dtype, (0, 3)), rand(rng, dtype, ()))], ref)


@pytest.mark.parametrize("dtype", [DType.float32, DType.int8, DType.float64], ids=str)
def test_large_tensors(rng, dtype):
    def fn(x, v):
        return [
            ops.transpose(x, 0, 1),
            ops.concat([x, x[:, ::-1]], 1),
            ops.pad(x, [3, 1, 2, 5], value=v),
            ops.tile(x, [2, 1]),
            ops.repeat_interleave(x, 2, 0),
            ops.band_part(x, 7, 3, True),
            x[::-3, 1::2],
            ops.broadcast_to(x[:, :1], ["batch", 517]),
            *ops.split(x, [100, 417], 1),
        ]

    def ref(x, v):
        return [
            x.T,
            np.concatenate([x, x[:, ::-1]], 1),
            np_pad(x, [(3, 1), (2, 5)], v),
            np.tile(x, (2, 1)),
            np.repeat(x, 2, 0),
            np_band(x, 7, 3, True),
            x[::-3, 1::2],
            np.broadcast_to(x[:, :1], x.shape),
            x[:, :100],
            x[:, 100:],
        ]

    check(fn, [t(dtype, "batch", 517), t(dtype)], [(rand(rng, dtype, (n, 517)), rand(rng, dtype, ())) for n in (301, 64)], ref)


def test_chain_of_layout_ops(rng):
    def fn(x):
        y = ops.permute(x, [2, 0, 1])  # (4, batch, 3)
        y = ops.reshape(y, [4, -1])  # (4, batch * 3)
        y = ops.concat([y, y[::-1]], 0)  # (8, batch * 3)
        return ops.repeat_interleave(ops.tile(y, [1, 2]), 2, 0)[1::3]

    def ref(x):
        y = x.transpose(2, 0, 1).reshape(4, -1)
        y = np.concatenate([y, y[::-1]], 0)
        return np.repeat(np.tile(y, (1, 2)), 2, 0)[1::3]

    check(fn, [t(DType.bfloat16, "batch", 3, 4)], [(rand(rng, DType.bfloat16, (n, 3, 4)),) for n in BATCHES], ref)
