"""One copy for a step's small inputs (max.driver._upload): every array comes back with its
values, dtype and shape, whatever its size (empty ones too) and alignment."""

import numpy as np

from max.driver._upload import upload


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
