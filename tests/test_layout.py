"""The layout ops on each device (reshape, transpose, broadcast_to, concat, stack, split, tile,
pad, repeat_interleave, slices, band_part) against numpy, bit for bit: they move bytes, so every
dtype is checked exactly on random bit patterns (NaN payloads included), with symbolic "batch"
dims run at several sizes, odd and large sizes (the tiled transpose, the 16-byte vector paths,
many blocks or threads), negative-step slices and the run-time errors. Host/GPU transfers and
the GPU's 64-bit index path are GPU-only tests."""

import numpy as np
import pytest

from bitexact import CPU, Model, check, rand, same, t
from engine_util import session
from helpers import VALUE_TYPES
from max import driver
from max.dtype import DType
from max.graph import DeviceRef, Dim, Graph, TensorType, ops

DTYPES = list(VALUE_TYPES)  # every dtype; the kernels only see its width
BATCHES = (1, 2, 5)
dtypes = pytest.mark.parametrize("dtype", DTYPES, ids=str)


# reshape, flatten, squeeze, unsqueeze, as_interleaved_complex, transfer_to


@dtypes
def test_reshape_flatten_squeeze_unsqueeze(rng, device, dtype):
    here = DeviceRef.from_device(device)

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
            ops.transfer_to(x, here),
            ops.reshape(ops.transpose(x, 1, 2), [-1]),  # a reshape of a computed value
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
            x.transpose(0, 2, 1).reshape(-1),
        ]

    types = [t(dtype, "batch", 4, 6), t(dtype, "batch", 1, 6, 1), t(dtype)]
    cases = [(rand(rng, dtype, (b, 4, 6)), rand(rng, dtype, (b, 1, 6, 1)), rand(rng, dtype, ())) for b in BATCHES]
    check(fn, types, cases, ref, device)


# transpose, permute


@dtypes
def test_transpose_permute(rng, device, dtype):
    # y and z are large enough for the tiled transposing walk (edges not multiples of 32).
    def fn(x, s, y, z):
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
            ops.permute(z, [0, 2, 1, 3]),  # attention heads: inner runs stay contiguous
            ops.transpose(z, -1, -2),
        ]

    def ref(x, s, y, z):
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
            z.transpose(0, 2, 1, 3),
            z.swapaxes(-1, -2),
        ]

    types = [t(dtype, "batch", 3, 4, 5), t(dtype), t(dtype, "batch", 37, 70), t(dtype, "batch", 33, 4, 64)]
    cases = [
        (rand(rng, dtype, (b, 3, 4, 5)), rand(rng, dtype, ()), rand(rng, dtype, (b, 37, 70)), rand(rng, dtype, (b, 33, 4, 64)))
        for b in BATCHES
    ]
    check(fn, types, cases, ref, device)


@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16, DType.int8, DType.float64], ids=str)
@pytest.mark.parametrize("shape", [(1025, 1023), (3, 517, 1000), (4096, 256), (1, 33, 8)], ids=str)
def test_large_transposes(rng, device, dtype, shape):
    fn = lambda a: [ops.transpose(a, -1, -2), ops.transpose(a, 0, -1)]  # noqa: E731
    check(fn, [t(dtype, *shape)], [(rand(rng, dtype, shape),)], lambda a: [a.swapaxes(-1, -2), a.swapaxes(0, -1)], device)


# broadcast_to


@dtypes
def test_broadcast_to(rng, device, dtype):
    def fn(x, y, s):
        return [
            ops.broadcast_to(x, [2, "batch", 4, 3]),
            ops.broadcast_to(x, ["batch", 1, 3]),
            ops.broadcast_to(y, ["batch", 3]),
            ops.broadcast_to(s, [3, "batch"]),
            ops.broadcast_to(y[:, None], [3, 1000]),
        ]

    def ref(x, y, s):
        b = x.shape[0]
        return [
            np.broadcast_to(x, (2, b, 4, 3)),
            x,
            np.broadcast_to(y, (b, 3)),
            np.broadcast_to(s, (3, b)),
            np.broadcast_to(y[:, None], (3, 1000)),
        ]

    types = [t(dtype, "batch", 1, 3), t(dtype, 3), t(dtype)]
    cases = [(rand(rng, dtype, (b, 1, 3)), rand(rng, dtype, (3,)), rand(rng, dtype, ())) for b in BATCHES]
    check(fn, types, cases, ref, device)


@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16, DType.int8, DType.bool], ids=str)
def test_broadcast_to_tensor_shape(rng, device, dtype):
    def fn(x, shape, z):
        return [ops.broadcast_to(x, shape, out_dims=["batch", 2, 3])]

    types = [t(dtype, 1, 3), t(DType.int64, 3), t(DType.int8, "batch")]
    model = Model(fn, types, device)
    x = rand(rng, dtype, (1, 3))
    for b in BATCHES:
        model.check([x, np.array([b, 2, 3], np.int64), np.zeros(b, np.int8)], lambda x, s, z: np.broadcast_to(x, (len(z), 2, 3)))
    with pytest.raises(ValueError, match="broadcast_to: the shape tensor holds"):
        model.run(x, np.array([3, 2, 3], np.int64), np.zeros(4, np.int8))


# concat, stack, split


@dtypes
def test_concat(rng, device, dtype):
    def fn(a, b, c, e):
        return [
            ops.concat([a, b, c], axis=1),
            ops.concat([a, c, b], axis=-2),
            ops.concat([a, e], 0),
            ops.concat([a, a], 0),
            ops.concat([a], 2),
            ops.concat([c, c], -1),
            ops.concat([c[:, 1:], c[:, :1]], 1),  # misaligned pieces
        ]

    def ref(a, b, c, e):
        return [
            np.concatenate([a, b, c], 1),
            np.concatenate([a, c, b], -2),
            np.concatenate([a, e], 0),
            np.concatenate([a, a], 0),
            a,
            np.concatenate([c, c], -1),
            np.concatenate([c[:, 1:], c[:, :1]], 1),
        ]

    types = [t(dtype, "batch", 2, 3), t(dtype, "batch", 1, 3), t(dtype, "batch", 4, 3), t(dtype, 3, 2, 3)]
    cases = [
        (rand(rng, dtype, (n, 2, 3)), rand(rng, dtype, (n, 1, 3)), rand(rng, dtype, (n, 4, 3)), rand(rng, dtype, (3, 2, 3)))
        for n in BATCHES
    ]
    check(fn, types, cases, ref, device)


@dtypes
def test_stack(rng, device, dtype):
    def fn(a, b, s):
        return [ops.stack([a, b, a], 0), ops.stack([a, b], 1), ops.stack([b, a, b, a], -1), ops.stack([s, s], 0)]

    def ref(a, b, s):
        return [np.stack([a, b, a], 0), np.stack([a, b], 1), np.stack([b, a, b, a], -1), np.stack([s, s], 0)]

    types = [t(dtype, "batch", 3), t(dtype, "batch", 3), t(dtype)]
    cases = [(rand(rng, dtype, (n, 3)), rand(rng, dtype, (n, 3)), rand(rng, dtype, ())) for n in BATCHES]
    check(fn, types, cases, ref, device)


@dtypes
def test_split(rng, device, dtype):
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

    check(fn, [t(dtype, "batch", 7, 2)], [(rand(rng, dtype, (n, 7, 2)),) for n in BATCHES], ref, device)


# tile, pad


@dtypes
def test_tile(rng, device, dtype):
    def fn(x, s):
        return [ops.tile(x, [2, 1, 3]), ops.tile(x, [1, 4, 1]), ops.tile(x, [1, 1, 1]), ops.tile(ops.reshape(s, [1]), [5])]

    def ref(x, s):
        return [np.tile(x, (2, 1, 3)), np.tile(x, (1, 4, 1)), x, np.tile(s.reshape(1), 5)]

    cases = [(rand(rng, dtype, (n, 3, 2)), rand(rng, dtype, ())) for n in BATCHES]
    check(fn, [t(dtype, "batch", 3, 2), t(dtype)], cases, ref, device)


def np_pad(x, pads, v):
    """Constant padding with a value of x's dtype (filled by element copies, so bit-exact)."""
    out = np.empty(tuple(d + a + b for d, (a, b) in zip(x.shape, pads)), x.dtype)
    out[...] = v
    out[tuple(slice(a, a + d) for d, (a, _) in zip(x.shape, pads))] = x
    return out


@dtypes
def test_pad(rng, device, dtype):
    def fn(x, v):
        return [
            ops.pad(x, [1, 2, 0, 3, 2, 0], value=v),
            ops.pad(x, [0] * 6, value=v),
            ops.pad(x, [0, 0, 4, 1, 0, 1], value=v),
            ops.pad(x[:, ::-1], [0, 0, 0, 0, 5, 0], value=v),
        ]

    def ref(x, v):
        return [
            np_pad(x, [(1, 2), (0, 3), (2, 0)], v),
            x,
            np_pad(x, [(0, 0), (4, 1), (0, 1)], v),
            np_pad(x[:, ::-1], [(0, 0), (0, 0), (5, 0)], v),
        ]

    cases = [(rand(rng, dtype, (n, 3, 4)), rand(rng, dtype, ())) for n in BATCHES]
    check(fn, [t(dtype, "batch", 3, 4), t(dtype)], cases, ref, device)


def test_pad_of_rank_nine(rng, device):
    # Nine padded dims (none can merge): more than the GPU kernel walks at once, so the host
    # splits the leading dim there.
    shape = (2, 1, 3, 2, 1, 2, 3, 1, 2)
    pads = [1, 0, 0, 1, 1, 1, 0, 1, 2, 0, 0, 1, 1, 0, 0, 2, 1, 1]
    case = (rand(rng, DType.int16, shape), rand(rng, DType.int16, ()))
    fn = lambda a, b: ops.pad(a, pads, value=b)  # noqa: E731
    check(fn, [t(DType.int16, *shape), t(DType.int16)], [case], lambda a, b: np_pad(a, list(zip(pads[::2], pads[1::2])), b), device)


# repeat_interleave


@dtypes
def test_repeat_interleave_int(rng, device, dtype):
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

    check(fn, [t(dtype, "batch", 3, 2)], [(rand(rng, dtype, (n, 3, 2)),) for n in BATCHES], ref, device)


@dtypes
def test_repeat_interleave_tensor(rng, device, dtype):
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
    model = check(fn, types, cases, ref, device)
    x = cases[0][0]
    with pytest.raises(ValueError, match="repeat_interleave: the repeats add up to"):
        model.run(x, counts + 1, np.array([3], np.int32))
    with pytest.raises(ValueError, match="repeat_interleave: repeats must be non-negative"):
        model.run(x, np.array([-1, total + 1, 0]), np.array([3], np.int32))


@pytest.mark.parametrize("rdtype", [DType.int8, DType.uint16, DType.int32, DType.uint64], ids=str)
@pytest.mark.parametrize("dtype, shape", [(DType.float16, (4, 5)), (DType.bfloat16, (300, 1024))], ids=["small", "2KiB_rows"])
def test_repeat_interleave_count_dtypes(rng, device, rdtype, dtype, shape):
    # 2 KiB rows take the GPU's 16-byte row gather.
    counts = rng.integers(0, 5, size=shape[0])
    fn = lambda x, r: ops.repeat_interleave(x, r, 0, out_dim=int(counts.sum()))  # noqa: E731
    case = (rand(rng, dtype, shape), counts.astype(VALUE_TYPES[rdtype]))
    check(fn, [t(dtype, *shape), t(rdtype, shape[0])], [case], lambda x, r: np.repeat(x, counts, 0), device)


# slice_tensor


@dtypes
def test_slice_static_symbolic_and_negative_steps(rng, device, dtype):
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

    check(fn, [t(dtype, "batch", 5, 6)], [(rand(rng, dtype, (n, 5, 6)),) for n in (2, 5)], ref, device)


def test_slice_steps_near_the_int64_range(rng, device):
    """Steps of +-(2**63 - 1), -2**63 and 2**62 select one element or none, as numpy's do."""
    big = [-(2**63), 2**63 - 1, -(2**63 - 1), 2**62]
    fn = lambda x: [x[::s] for s in big] + [x[1:, ::s] for s in big] + [x[2:0:s] for s in big]  # noqa: E731
    check(fn, [t(DType.float32, "batch", 4)], [(rand(rng, DType.float32, (n, 4)),) for n in (3, 5)], fn, device)


@dtypes
@pytest.mark.parametrize("host_indices", [False, True], ids=["indices_on_device", "indices_on_host"])
def test_slice_scalar_tensor_indices(rng, device, dtype, host_indices):
    # "k" is bound through an input of that size.
    def fn(x, i, j, k):
        return [
            x[:, i],
            x[-1, ::-1, j],
            ops.slice_tensor(x, [slice(None), (slice(i, j), 2)]),
            ops.slice_tensor(x, [slice(None), (slice(j, i, -1), 2), 1]),
            ops.slice_tensor(x, [(slice(1, None), Dim("batch") - 1)]),
            ops.slice_tensor(x, [..., (slice(i, None), "k")]),
        ]

    def ref(x, i, j, k):
        i, j = int(i), int(j)
        return [x[:, i], x[-1, ::-1, j], x[:, i:j], x[:, j:i:-1, 1], x[1:], x[..., i:]]

    types = [t(dtype, "batch", 5, 6), t(DType.int32), t(DType.int64), t(DType.uint8, "k")]
    cases = []
    for n, (i, j) in zip((2, 5), [(1, 3), (-4, -2)]):
        cases.append((rand(rng, dtype, (n, 5, 6)), np.int32(i), np.int64(j), np.zeros(6 - (i % 6), np.uint8)))
    model = check(fn, types, cases, ref, device, host_inputs=(1, 2, 3) if host_indices else ())
    x = cases[0][0]
    with pytest.raises(ValueError, match="slice_tensor: indices: index 5 is out of range for dimension 5 at axis 1"):
        model.run(x, np.int32(5), np.int64(3), np.zeros(1, np.uint8))
    with pytest.raises(ValueError, match="slice_tensor: indices: the indices select shape"):
        model.run(x, np.int32(0), np.int64(3), np.zeros(6, np.uint8))
    with pytest.raises(ValueError, match=r"slice_tensor: indices: slice bound -6 is out of range for dimension 5 at axis 1 \(bounds must lie in \[-dim, dim\]"):
        model.run(x, np.int32(1), np.int64(-6), np.zeros(5, np.uint8))


@pytest.mark.parametrize("idtype", [DType.int8, DType.uint16, DType.int32, DType.uint64, DType.int64], ids=str)
def test_slice_index_tensor_dtypes(rng, device, idtype):
    x = rand(rng, DType.int16, (4, 7))
    values = [3, 0, 6] if idtype.is_unsigned_integral() else [3, -1, -7]
    model = Model(lambda x, i: [x[1, i], x[:, i]], [t(DType.int16, 4, 7), t(idtype)], device)
    for v in values:
        model.check([x, np.array(v, VALUE_TYPES[idtype])], lambda x, i: [x[1, v], x[:, v]])


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
def test_band_part(rng, device, dtype):
    def fn(x, y, w):
        bands = [ops.band_part(x, lo, up, ex) for lo, up, ex in BANDS]
        return bands + [ops.band_part(y, 1, 0, False), ops.band_part(w, 1, 0, False), ops.band_part(w.T, 2, 1, True)]

    def ref(x, y, w):
        bands = [np_band(x, lo, up, ex) for lo, up, ex in BANDS]
        return bands + [np_band(y, 1, 0, False), np_band(w, 1, 0, False), np_band(w.T, 2, 1, True)]

    types = [t(dtype, "batch", 4, 5), t(dtype, 6, 3), t(dtype, 67, 300)]
    cases = [(rand(rng, dtype, (n, 4, 5)), rand(rng, dtype, (6, 3)), rand(rng, dtype, (67, 300))) for n in BATCHES]
    check(fn, types, cases, ref, device)


def test_band_part_symbolic_matrix_dims(rng, device):
    # Counts are checked against static dims at staging; past a symbolic dim at run time they
    # cover the whole triangle, as None does.
    model = Model(lambda x: ops.band_part(x, 2, 1), [t(DType.float32, "m", "n")], device)
    for shape in [(4, 3), (2, 1), (1, 6), (0, 2), (513, 257)]:
        model.check([rand(rng, DType.float32, shape)], lambda x: np_band(x, 2, 1, False))


# zero-size inputs, large (multi-block, multi-threaded) copies, a chain of layout ops


@pytest.mark.parametrize("dtype", [DType.float32, DType.bool], ids=str)
def test_zero_batch(rng, device, dtype):
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

    check(fn, [t(dtype, "batch", 3), t(dtype)], [(rand(rng, dtype, (0, 3)), rand(rng, dtype, ()))], ref, device)


@pytest.mark.parametrize("dtype", [DType.float32, DType.int8, DType.float64, DType.bfloat16], ids=str)
def test_large_tensors(rng, device, dtype):
    # 2^20+ elements: many threads or blocks, grid-stride loops, and rows longer than a block.
    def fn(x, v):
        return [
            ops.transpose(x, 0, 1),
            ops.concat([x, x[:, ::-1]], 1),
            ops.pad(x, [3, 1, 2, 5], value=v),
            ops.tile(x, [2, 1]),
            ops.repeat_interleave(x, 2, 0),
            ops.band_part(x, 7, 3, True),
            x[::-3, 1::2],
            ops.broadcast_to(x[:, :1], ["batch", 2053]),
            *ops.split(x, [100, 1953], 1),
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

    cases = [(rand(rng, dtype, (n, 2053)), rand(rng, dtype, ())) for n in (513, 301, 64)]
    check(fn, [t(dtype, "batch", 2053), t(dtype)], cases, ref, device)


def test_chain_of_layout_ops(rng, device):
    def fn(x):
        y = ops.permute(x, [2, 0, 1])  # (4, batch, 3)
        y = ops.reshape(y, [4, -1])  # (4, batch * 3)
        y = ops.concat([y, y[::-1]], 0)  # (8, batch * 3)
        return ops.repeat_interleave(ops.tile(y, [1, 2]), 2, 0)[1::3]

    def ref(x):
        y = x.transpose(2, 0, 1).reshape(4, -1)
        y = np.concatenate([y, y[::-1]], 0)
        return np.repeat(np.tile(y, (1, 2)), 2, 0)[1::3]

    check(fn, [t(DType.bfloat16, "batch", 3, 4)], [(rand(rng, DType.bfloat16, (n, 3, 4)),) for n in BATCHES], ref, device)


# GPU only: transfers between the host and the GPU, and more than 2^31 elements


@pytest.mark.gpu
def test_gpu_transfers_between_host_and_gpu(rng, gpu):
    here = DeviceRef.from_device(gpu)
    x = rand(rng, DType.float16, (37, 70))
    with Graph("t", input_types=[TensorType(DType.float16, (37, 70), CPU), TensorType(DType.float16, (37, 70), here)]) as g:
        h, d = g.inputs
        up = ops.transpose(ops.transfer_to(h.tensor, here), 0, 1)  # host -> GPU, then a GPU op
        down = ops.transfer_to(ops.transpose(d.tensor, 0, 1), CPU)  # GPU op, then GPU -> host
        g.output(up, down, ops.transfer_to(d.tensor, here))
    model = session(gpu).load(g)
    outs = model.execute(driver.Buffer.from_numpy(x), driver.Buffer.from_numpy(x).to(gpu))
    up, down, same_dev = (o.to_numpy() for o in outs)
    same(up, x.T, "host to GPU")
    same(down, x.T, "GPU to host")
    same(same_dev, x, "GPU to GPU")


@pytest.mark.gpu
def test_gpu_64_bit_index_path(gpu):
    # More than 2^31 elements with a stride-0 inner dim (no widening): the 64-bit kernels.
    rows = (1 << 31) // 4096 + 1
    model = Model(lambda a: ops.broadcast_to(a, [rows, 4096]), [t(DType.bool, 1, 1)], gpu)
    (out,) = model.run(np.ones((1, 1), np.bool_))
    assert out.shape == (rows, 4096) and out.all()
