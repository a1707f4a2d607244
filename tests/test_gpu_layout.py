"""The layout ops on the GPU (graphs whose values live on DeviceRef.GPU()): every op against the
CPU backend and numpy, bit for bit (they move bytes; random bit patterns, NaN payloads
included), for 1-, 2-, 4- and 8-byte dtypes, odd and large sizes (the tiled transpose, the
16-byte vector paths, many blocks), symbolic batch dims, negative-step slices and the run-time
errors. Every test skips without a GPU."""

import numpy as np
import pytest

from gpu_compare import CPU, GPU, Pair, check, rand, same
from max.dtype import DType
from max.graph import Dim, Graph, TensorType, ops

pytestmark = pytest.mark.gpu

DTYPES = [DType.float32, DType.bfloat16, DType.float16, DType.float64, DType.int8, DType.int64, DType.uint16, DType.bool]
BATCHES = (1, 5)
dtypes = pytest.mark.parametrize("dtype", DTYPES, ids=str)


def t(dtype, *shape):
    return TensorType(dtype, shape, CPU)


@dtypes
def test_reshape_flatten_squeeze_unsqueeze(rng, gpu, dtype):
    def fn(x, y, s):
        return [
            ops.reshape(x, ["batch", 24]),
            ops.reshape(x, [-1, 3]),
            ops.flatten(x, 1, 2),
            ops.unsqueeze(x, 1),
            ops.squeeze(y, -1),
            ops.reshape(s, [1, 1]),
            ops.as_interleaved_complex(x),
            ops.reshape(ops.transpose(x, 1, 2), [-1]),  # a reshape of a computed value
        ]

    def ref(x, y, s):
        b = x.shape[0]
        return [
            x.reshape(b, 24), x.reshape(-1, 3), x.reshape(b, 24), x[:, None], y[..., 0], s.reshape(1, 1),
            x.reshape(b, 4, 3, 2), x.transpose(0, 2, 1).reshape(-1),
        ]  # fmt: skip

    types = [t(dtype, "batch", 4, 6), t(dtype, "batch", 1, 6, 1), t(dtype)]
    cases = [(rand(rng, dtype, (b, 4, 6)), rand(rng, dtype, (b, 1, 6, 1)), rand(rng, dtype, ())) for b in BATCHES]
    check(fn, types, cases, ref, gpu)


@dtypes
def test_transpose_permute(rng, gpu, dtype):
    # y and z are large enough for the shared-memory tile path; edges are not multiples of 32.
    def fn(x, y, z):
        return [
            ops.transpose(x, 0, 2),
            ops.permute(x, [3, 0, 2, 1]),
            ops.transpose(x, 3, 3),
            x.T,
            ops.transpose(y, 1, 2),
            ops.permute(y, [2, 0, 1]),
            ops.permute(y, [1, 2, 0]),
            ops.transpose(y, 1, 2)[:, ::-1],
            ops.permute(z, [0, 2, 1, 3]),  # attention heads: inner runs stay contiguous
            ops.transpose(z, -1, -2),
        ]

    def ref(x, y, z):
        return [
            x.transpose(2, 1, 0, 3), x.transpose(3, 0, 2, 1), x, x.swapaxes(-1, -2), y.transpose(0, 2, 1),
            y.transpose(2, 0, 1), y.transpose(1, 2, 0), y.transpose(0, 2, 1)[:, ::-1], z.transpose(0, 2, 1, 3),
            z.swapaxes(-1, -2),
        ]  # fmt: skip

    types = [t(dtype, "batch", 3, 4, 5), t(dtype, "batch", 37, 70), t(dtype, "batch", 33, 4, 64)]
    cases = [(rand(rng, dtype, (b, 3, 4, 5)), rand(rng, dtype, (b, 37, 70)), rand(rng, dtype, (b, 33, 4, 64))) for b in BATCHES]
    check(fn, types, cases, ref, gpu)


@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16, DType.int8, DType.float64], ids=str)
@pytest.mark.parametrize("shape", [(1025, 1023), (3, 517, 1000), (4096, 256), (1, 33, 8)], ids=str)
def test_large_transposes(rng, gpu, dtype, shape):
    x = rand(rng, dtype, shape)
    p = Pair(lambda a: [ops.transpose(a, -1, -2), ops.transpose(a, 0, -1)], [t(dtype, *shape)], gpu)
    p.check([x], lambda a: [a.swapaxes(-1, -2), a.swapaxes(0, -1)])


@dtypes
def test_broadcast_to(rng, gpu, dtype):
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
            np.broadcast_to(x, (2, b, 4, 3)), x, np.broadcast_to(y, (b, 3)), np.broadcast_to(s, (3, b)),
            np.broadcast_to(y[:, None], (3, 1000)),
        ]  # fmt: skip

    types = [t(dtype, "batch", 1, 3), t(dtype, 3), t(dtype)]
    cases = [(rand(rng, dtype, (b, 1, 3)), rand(rng, dtype, (3,)), rand(rng, dtype, ())) for b in BATCHES]
    check(fn, types, cases, ref, gpu)


def test_broadcast_to_tensor_shape(rng, gpu):
    def fn(x, shape, z):
        return [ops.broadcast_to(x, shape, out_dims=["batch", 2, 3])]

    p = Pair(fn, [t(DType.bfloat16, 1, 3), t(DType.int64, 3), t(DType.int8, "batch")], gpu)
    x = rand(rng, DType.bfloat16, (1, 3))
    for b in BATCHES:
        p.check([x, np.array([b, 2, 3], np.int64), np.zeros(b, np.int8)], lambda x, s, z: np.broadcast_to(x, (len(z), 2, 3)))
    with pytest.raises(ValueError, match="broadcast_to: the shape tensor holds"):
        p.run_gpu(x, np.array([3, 2, 3], np.int64), np.zeros(4, np.int8))


@dtypes
def test_concat_stack_split(rng, gpu, dtype):
    def fn(a, b, c):
        return [
            ops.concat([a, b, c], axis=1),
            ops.concat([a, c, b], axis=-2),
            ops.concat([a, a], 0),
            ops.concat([c[:, 1:], c[:, :1]], 1),  # misaligned pieces
            ops.stack([a, a, a], 0),
            ops.stack([a, a], -1),
            *ops.split(c, [1, 0, 3], 1),
            *ops.split(c, [Dim("batch") - 1, 1], 0),
            *ops.chunk(c, 3, 2),
        ]

    def ref(a, b, c):
        n = a.shape[0]
        return [
            np.concatenate([a, b, c], 1), np.concatenate([a, c, b], -2), np.concatenate([a, a], 0),
            np.concatenate([c[:, 1:], c[:, :1]], 1), np.stack([a, a, a], 0), np.stack([a, a], -1),
            *np.split(c, [1, 1], 1), *np.split(c, [n - 1], 0), *np.split(c, 3, 2),
        ]  # fmt: skip

    types = [t(dtype, "batch", 2, 3), t(dtype, "batch", 1, 3), t(dtype, "batch", 4, 3)]
    cases = [(rand(rng, dtype, (n, 2, 3)), rand(rng, dtype, (n, 1, 3)), rand(rng, dtype, (n, 4, 3))) for n in BATCHES]
    check(fn, types, cases, ref, gpu)


@dtypes
def test_tile(rng, gpu, dtype):
    def fn(x, s):
        return [ops.tile(x, [2, 1, 3]), ops.tile(x, [1, 4, 1]), ops.tile(x, [1, 1, 1]), ops.tile(ops.reshape(s, [1]), [5])]

    def ref(x, s):
        return [np.tile(x, (2, 1, 3)), np.tile(x, (1, 4, 1)), x, np.tile(s.reshape(1), 5)]

    cases = [(rand(rng, dtype, (n, 3, 2)), rand(rng, dtype, ())) for n in BATCHES]
    check(fn, [t(dtype, "batch", 3, 2), t(dtype)], cases, ref, gpu)


def np_pad(x, pads, v):
    out = np.empty(tuple(d + a + b for d, (a, b) in zip(x.shape, pads)), x.dtype)
    out[...] = v
    out[tuple(slice(a, a + d) for d, (a, _) in zip(x.shape, pads))] = x
    return out


@dtypes
def test_pad(rng, gpu, dtype):
    def fn(x, v):
        return [
            ops.pad(x, [1, 2, 0, 3, 2, 0], value=v),
            ops.pad(x, [0] * 6, value=v),
            ops.pad(x, [0, 0, 4, 1, 0, 1], value=v),
            ops.pad(x[:, ::-1], [0, 0, 0, 0, 5, 0], value=v),
        ]

    def ref(x, v):
        return [np_pad(x, [(1, 2), (0, 3), (2, 0)], v), x, np_pad(x, [(0, 0), (4, 1), (0, 1)], v), np_pad(x[:, ::-1], [(0, 0), (0, 0), (5, 0)], v)]

    cases = [(rand(rng, dtype, (n, 3, 4)), rand(rng, dtype, ())) for n in BATCHES]
    check(fn, [t(dtype, "batch", 3, 4), t(dtype)], cases, ref, gpu)


def test_pad_of_rank_nine(rng, gpu):
    # Nine padded dims (none can merge): more than the kernel walks at once, so the host
    # splits the leading dim.
    shape = (2, 1, 3, 2, 1, 2, 3, 1, 2)
    pads = [1, 0, 0, 1, 1, 1, 0, 1, 2, 0, 0, 1, 1, 0, 0, 2, 1, 1]
    x = rand(rng, DType.int16, shape)
    v = rand(rng, DType.int16, ())
    p = Pair(lambda a, b: ops.pad(a, pads, value=b), [t(DType.int16, *shape), t(DType.int16)], gpu)
    p.check([x, v], lambda a, b: np_pad(a, list(zip(pads[::2], pads[1::2])), b))


@dtypes
def test_repeat_interleave(rng, gpu, dtype):
    counts = rng.integers(0, 4, size=3)
    total = int(counts.sum())

    def fn(x, r, one):
        return [
            ops.repeat_interleave(x, 3, 1),
            ops.repeat_interleave(x, 2, 0),
            ops.repeat_interleave(x, 2),
            ops.repeat_interleave(x, r, 1, out_dim=total),
            ops.repeat_interleave(x, one, 2, out_dim=6),
            ops.repeat_interleave(x, one, None, out_dim=Dim("batch") * 18),
        ]

    def ref(x, r, one):
        return [np.repeat(x, 3, 1), np.repeat(x, 2, 0), np.repeat(x, 2), np.repeat(x, r, 1), np.repeat(x, 3, 2), np.repeat(x, 3)]

    types = [t(dtype, "batch", 3, 2), t(DType.int64, 3), t(DType.int32, 1)]
    cases = [(rand(rng, dtype, (n, 3, 2)), counts, np.array([3], np.int32)) for n in BATCHES]
    p = check(fn, types, cases, ref, gpu)
    x = cases[0][0]
    with pytest.raises(ValueError, match="repeat_interleave: the repeats add up to"):
        p.run_gpu(x, counts + 1, np.array([3], np.int32))
    with pytest.raises(ValueError, match="repeat_interleave: repeats must be non-negative"):
        p.run_gpu(x, np.array([-1, total + 1, 0]), np.array([3], np.int32))


@pytest.mark.parametrize("rdtype", [DType.int8, DType.uint16, DType.uint64], ids=str)
def test_repeat_interleave_large_rows(rng, gpu, rdtype):
    counts = rng.integers(0, 5, size=300)
    x = rand(rng, DType.bfloat16, (300, 1024))  # 2 KiB rows: the 16-byte row gather
    p = Pair(lambda a, r: ops.repeat_interleave(a, r, 0, out_dim=int(counts.sum())), [t(DType.bfloat16, 300, 1024), t(rdtype, 300)], gpu)
    p.check([x, counts.astype(rdtype.to_numpy())], lambda a, r: np.repeat(a, counts, 0))


@dtypes
def test_slice_static_symbolic_and_negative_steps(rng, gpu, dtype):
    def fn(x):
        b = Dim("batch")
        return [
            x[1:, ::-1, 2], x[..., ::-2], x[None, :, 3:0:-1, None], x[-1, ..., 1:5:2], x[:, -1, :], x[::-1],
            x[::-2, -2:, -1:-7:-3], x[b // 2 :], x[: b - 1, 1], x[b - 1 :: -1], x[()], x[:, 4:1], x[:, :-6:-1],
        ]  # fmt: skip

    def ref(x):
        n = x.shape[0]
        return [
            x[1:, ::-1, 2], x[..., ::-2], x[None, :, 3:0:-1, None], x[-1, ..., 1:5:2], x[:, -1, :], x[::-1],
            x[::-2, -2:, -1:-7:-3], x[n // 2 :], x[: n - 1, 1], x[n - 1 :: -1], x, x[:, 4:1], x[:, :-6:-1],
        ]  # fmt: skip

    check(fn, [t(dtype, "batch", 5, 6)], [(rand(rng, dtype, (n, 5, 6)),) for n in (2, 5)], ref, gpu)


def test_slice_scalar_tensor_indices_and_errors(rng, gpu):
    dtype = DType.bfloat16

    def fn(x, i, j, k):
        return [
            x[:, i],
            x[-1, ::-1, j],
            ops.slice_tensor(x, [slice(None), (slice(i, j), 2)]),
            ops.slice_tensor(x, [slice(None), (slice(j, i, -1), 2), 1]),
            ops.slice_tensor(x, [..., (slice(i, None), "k")]),
        ]

    def ref(x, i, j, k):
        i, j = int(i), int(j)
        return [x[:, i], x[-1, ::-1, j], x[:, i:j], x[:, j:i:-1, 1], x[..., i:]]

    types = [t(dtype, "batch", 5, 6), t(DType.int32), t(DType.int64), t(DType.uint8, "k")]
    p = Pair(fn, types, gpu)
    for n, (i, j) in zip((2, 5), [(1, 3), (-4, -2)]):
        p.check([rand(rng, dtype, (n, 5, 6)), np.array(i, np.int32), np.array(j, np.int64), np.zeros(6 - (i % 6), np.uint8)], ref)
    x = rand(rng, dtype, (2, 5, 6))
    with pytest.raises(ValueError, match="slice_tensor: indices: index 5 is out of range for dimension 5 at axis 1"):
        p.run_gpu(x, np.array(5, np.int32), np.array(3, np.int64), np.zeros(1, np.uint8))
    with pytest.raises(ValueError, match="slice_tensor: indices: the indices select shape"):
        p.run_gpu(x, np.array(0, np.int32), np.array(3, np.int64), np.zeros(6, np.uint8))
    with pytest.raises(ValueError, match=r"slice_tensor: indices: slice bound -6 is out of range for dimension 5 at axis 1"):
        p.run_gpu(x, np.array(1, np.int32), np.array(-6, np.int64), np.zeros(5, np.uint8))
    # Index tensors that stay on the host in the GPU graph work the same.
    q = Pair(fn, types, gpu, cpu_inputs=(1, 2, 3))
    q.check([x, np.array(-4, np.int32), np.array(-2, np.int64), np.zeros(4, np.uint8)], ref)


def np_band(x, lower, upper, exclude):
    m, n = x.shape[-2:]
    r, c = np.arange(m)[:, None], np.arange(n)[None, :]
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
def test_band_part(rng, gpu, dtype):
    def fn(x, y):
        return [ops.band_part(x, lo, up, ex) for lo, up, ex in BANDS] + [ops.band_part(y, 1, 0, False), ops.band_part(y.T, 2, 1, True)]

    def ref(x, y):
        return [np_band(x, lo, up, ex) for lo, up, ex in BANDS] + [np_band(y, 1, 0, False), np_band(y.T, 2, 1, True)]

    types = [t(dtype, "batch", 4, 5), t(dtype, 67, 300)]
    check(fn, types, [(rand(rng, dtype, (n, 4, 5)), rand(rng, dtype, (67, 300))) for n in BATCHES], ref, gpu)


def test_band_part_symbolic_matrix_dims(rng, gpu):
    p = Pair(lambda x: ops.band_part(x, 2, 1), [t(DType.float32, "m", "n")], gpu)
    for shape in [(4, 3), (2, 1), (1, 6), (0, 2), (513, 257)]:
        p.check([rand(rng, DType.float32, shape)], lambda x: np_band(x, 2, 1, False))


@pytest.mark.parametrize("dtype", [DType.float32, DType.bool], ids=str)
def test_zero_batch(rng, gpu, dtype):
    def fn(x, v):
        return [
            ops.transpose(x, 0, 1), ops.concat([x, x], 1), ops.stack([x, x], 0), ops.pad(x, [1, 1, 0, 1], value=v),
            ops.tile(x, [2, 2]), ops.repeat_interleave(x, 2, 1), x[::-1, 1:], ops.band_part(x, 0, None),
            ops.broadcast_to(x, [2, "batch", 3]),
        ]  # fmt: skip

    def ref(x, v):
        return [
            x.T, np.concatenate([x, x], 1), np.stack([x, x]), np_pad(x, [(1, 1), (0, 1)], v), np.tile(x, (2, 2)),
            np.repeat(x, 2, 1), x[::-1, 1:], x, np.broadcast_to(x, (2, 0, 3)),
        ]  # fmt: skip

    check(fn, [t(dtype, "batch", 3), t(dtype)], [(rand(rng, dtype, (0, 3)), rand(rng, dtype, ()))], ref, gpu)


@pytest.mark.parametrize("dtype", [DType.float32, DType.int8, DType.float64, DType.bfloat16], ids=str)
def test_large_tensors(rng, gpu, dtype):
    # 2^20+ elements: many blocks, grid-stride loops, and rows longer than a block.
    def fn(x, v):
        return [
            ops.transpose(x, 0, 1), ops.concat([x, x[:, ::-1]], 1), ops.pad(x, [3, 1, 2, 5], value=v),
            ops.tile(x, [2, 1]), ops.repeat_interleave(x, 2, 0), ops.band_part(x, 7, 3, True), x[::-3, 1::2],
            ops.broadcast_to(x[:, :1], ["batch", 2053]), *ops.split(x, [100, 1953], 1),
        ]  # fmt: skip

    def ref(x, v):
        return [
            x.T, np.concatenate([x, x[:, ::-1]], 1), np_pad(x, [(3, 1), (2, 5)], v), np.tile(x, (2, 1)),
            np.repeat(x, 2, 0), np_band(x, 7, 3, True), x[::-3, 1::2], np.broadcast_to(x[:, :1], x.shape),
            x[:, :100], x[:, 100:],
        ]  # fmt: skip

    cases = [(rand(rng, dtype, (n, 2053)), rand(rng, dtype, ())) for n in (513, 64)]
    check(fn, [t(dtype, "batch", 2053), t(dtype)], cases, ref, gpu)


def test_chain_of_layout_ops(rng, gpu):
    def fn(x):
        y = ops.permute(x, [2, 0, 1])
        y = ops.reshape(y, [4, -1])
        y = ops.concat([y, y[::-1]], 0)
        return ops.repeat_interleave(ops.tile(y, [1, 2]), 2, 0)[1::3]

    def ref(x):
        y = x.transpose(2, 0, 1).reshape(4, -1)
        y = np.concatenate([y, y[::-1]], 0)
        return np.repeat(np.tile(y, (1, 2)), 2, 0)[1::3]

    check(fn, [t(DType.bfloat16, "batch", 3, 4)], [(rand(rng, DType.bfloat16, (n, 3, 4)),) for n in BATCHES], ref, gpu)


def test_transfers_between_host_and_gpu(rng, gpu):
    x = rand(rng, DType.float16, (37, 70))
    with Graph("t", input_types=[TensorType(DType.float16, (37, 70), CPU), TensorType(DType.float16, (37, 70), GPU)]) as g:
        h, d = g.inputs
        up = ops.transpose(ops.transfer_to(h.tensor, GPU), 0, 1)  # host -> GPU, then a GPU op
        down = ops.transfer_to(ops.transpose(d.tensor, 0, 1), CPU)  # GPU op, then GPU -> host
        g.output(up, down, ops.transfer_to(d.tensor, GPU))
    from engine_util import session
    from max import driver

    model = session(gpu).load(g)
    outs = model.execute(driver.Buffer.from_numpy(x), driver.Buffer.from_numpy(x).to(gpu))
    up, down, same_dev = (o.to_numpy() for o in outs)
    same(up, x.T, "host to GPU")
    same(down, x.T, "GPU to host")
    same(same_dev, x, "GPU to GPU")


def test_the_64_bit_index_path(gpu):
    # More than 2^31 elements with a stride-0 inner dim (no widening): the 64-bit kernels.
    rows = (1 << 31) // 4096 + 1
    x = np.ones((1, 1), np.bool_)
    p = Pair(lambda a: ops.broadcast_to(a, [rows, 4096]), [t(DType.bool, 1, 1)], gpu)
    (out,) = p.run_gpu(x)
    assert out.shape == (rows, 4096) and out.all()
