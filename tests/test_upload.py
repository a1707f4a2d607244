"""One copy for a step's small inputs (max.driver._upload): every array comes back with its
values, dtype and shape, whatever its size (empty ones too) and alignment."""

import numpy as np
import pytest

from max import driver
from max.driver._upload import PIECE, pieces, upload
from max.dtype import DType


def test_packed_arrays_round_trip(device, rng):
    arrays = [
        rng.integers(-5, 5, 7).astype(np.int64),
        rng.integers(0, 9, (3, 5)).astype(np.uint32),
        np.zeros(0, np.uint32),
        rng.standard_normal(3).astype(np.float32),
        rng.integers(0, 2**63, 1, dtype=np.uint64),
        np.arange(1, dtype=np.uint8),
    ]
    got = upload(arrays, device)
    assert [b.device for b in got] == [device] * len(arrays)
    for a, b in zip(arrays, got):
        assert b.shape == a.shape and b.is_contiguous
        np.testing.assert_array_equal(b.to_numpy(), a)


def test_large_uploads_go_in_pieces_within_the_staged_size(device, rng):
    """Arrays past PIECE bytes in all are copied in groups, each within PIECE once 16-byte
    aligned (an array larger than that alone), in order; every array arrives whole."""
    sizes = [5, 300, 7, 260, 1, 100, 2000, 0]
    groups = pieces(sizes, 1200)
    assert [i for g in groups for i in g] == list(range(len(sizes)))
    for g in groups:
        assert len(g) == 1 or sum(-(-sizes[i] // 16) * 16 for i in g) <= 1200, groups
    assert len(groups) > 2 and [6] in groups
    assert pieces([PIECE // 2, PIECE // 2, 1]) == [[0, 1], [2]]
    arrays = [rng.integers(0, 256, n, dtype=np.uint8) for n in (PIECE // 2, PIECE // 2 + 16, 3, PIECE + 5)]
    for a, b in zip(arrays, upload(arrays, device), strict=True):
        np.testing.assert_array_equal(b.to_numpy(), a)


@pytest.mark.gpu
def test_gpu_small_uploads_arrive_intact_behind_slow_device_work(gpu, rng):
    """Small host-to-GPU copies are staged in a ring of pinned memory and queued without
    waiting for the stream: far more of them than the ring holds (8 MiB), queued behind slow
    device copies so that earlier ones are still pending when the ring wraps, on the default
    stream and on another, and a few just past the staging limit (1 MiB), all arrive with the
    bytes the source held at the call, whatever it holds afterwards."""
    big = driver.Buffer(DType.uint8, [256 << 20], device=gpu)
    other = driver.DeviceStream(gpu)
    expected, got = [], []
    for i in range(160):
        n = (1 << 20) + i % 3 - 1 if i % 40 == 39 else int(rng.integers(1, 200_000))
        a = rng.integers(0, 256, n, dtype=np.uint8)
        if i % 8 == 0:
            big.copy()  # about 0.1 ms of device work ahead of the next copies
        expected.append(a.copy())
        got.append(driver.Buffer.from_numpy(a).to(gpu if i % 5 else other))
        a[:] = 0
    for want, b in zip(expected, got):
        np.testing.assert_array_equal(b.to_numpy(), want)
