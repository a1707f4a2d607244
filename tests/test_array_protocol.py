"""numpy's array protocol on Buffers and WeightData: ``np.asarray`` gives the values (a view of
host memory, a copy from a device), honours ``dtype`` and ``copy``, bfloat16 comes back as
ml_dtypes' bfloat16, and DLPack keeps working beside it."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from helpers import random_values
from max import driver
from max.dtype import DType
from max.graph.shape import Shape
from max.graph.weights import GGUFWeights, WeightData
from weights_util import write_gguf

DTYPES = [DType.bool, DType.int8, DType.int32, DType.int64, DType.uint8, DType.float16, DType.float32,
          DType.float64, DType.bfloat16]


@pytest.mark.parametrize("d", DTYPES, ids=lambda d: d.name)
def test_buffer_asarray_gives_the_values(rng, device, d):
    a = random_values(rng, d, (4, 5))
    buf = driver.Buffer.from_numpy(a).to(device)
    got = np.asarray(buf)
    assert got.dtype == a.dtype and got.shape == (4, 5)
    np.testing.assert_array_equal(got, a)
    np.testing.assert_array_equal(np.array(buf, dtype=np.float64), a.astype(np.float64))


def test_host_asarray_is_a_view_and_copy_copies(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    buf = driver.Buffer.from_numpy(a)
    view = np.asarray(buf)
    view[0, 0] = 7.0
    assert buf[0, 0].item() == 7.0
    copied = np.array(buf, copy=True)
    copied[0, 1] = -7.0
    assert buf[0, 1].item() == a[0, 1]
    # A strided view comes out with its own shape and values.
    np.testing.assert_array_equal(np.asarray(buf[:, 1::2]), view[:, 1::2])


@pytest.mark.gpu
def test_device_buffer_refuses_copy_false(gpu, rng):
    buf = driver.Buffer.from_numpy(rng.standard_normal(8).astype(np.float32)).to(gpu)
    with pytest.raises(ValueError, match="copy=False"):
        np.asarray(buf, copy=False)
    assert np.asarray(buf).shape == (8,)


def test_weight_data_asarray_and_dlpack(tmp_path, rng):
    w = rng.standard_normal((3, 8)).astype(np.float32)
    h = rng.standard_normal(8).astype(np.float16)
    path = write_gguf(tmp_path / "m.gguf", [("w", w, None), ("h", h, None)])
    weights = GGUFWeights(path)
    data = weights.w.data()
    got = np.asarray(data)
    assert got.dtype == np.float32 and got.shape == (3, 8)
    np.testing.assert_array_equal(got, w)
    np.testing.assert_array_equal(np.from_dlpack(data), w)
    np.testing.assert_array_equal(np.asarray(weights.h.data(), dtype=np.float32), h.astype(np.float32))
    # Over numpy data and over any DLPack producer.
    arr = rng.standard_normal((2, 2))
    np.testing.assert_array_equal(np.asarray(WeightData.from_numpy(arr, "x")), arr)
    other = WeightData(driver.Buffer.from_numpy(arr), "y", DType.float64, data.shape)
    np.testing.assert_array_equal(np.asarray(other), arr)


def test_bfloat16_weight_data(rng):
    a = rng.standard_normal((2, 3)).astype(ml_dtypes.bfloat16)
    data = WeightData(driver.Buffer.from_numpy(a), "b", DType.bfloat16, Shape(a.shape))
    got = np.asarray(data)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.astype(np.float32), a.astype(np.float32))
