"""Buffers on the GPU: transfers, the fill and strided-copy kernels, streams and bad input.
Every test skips on a machine without a GPU."""

import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import CAST_DTYPES, random_bits, random_values
from max import driver
from max.dtype import DType

pytestmark = pytest.mark.gpu


def bits_dtype(d):
    return {1: DType.uint8, 2: DType.uint16, 4: DType.uint32, 8: DType.uint64}[d.size_in_bytes]


def test_device_properties(gpu):
    assert isinstance(gpu, driver.Device) and not gpu.is_host
    assert (gpu.label, gpu.api, gpu.id) == ("gpu", "cuda", 0)
    assert gpu.architecture_name.startswith("sm_") and driver.accelerator_api() == "cuda"
    assert driver.accelerator_architecture_name() == gpu.architecture_name
    assert gpu == driver.Accelerator(0) and gpu != driver.CPU()
    assert repr(gpu) == "Device(type=gpu,id=0)"
    stats = gpu.stats
    assert 0 < stats["free_memory"] <= stats["total_memory"]
    assert gpu.can_access(gpu) and not driver.CPU().can_access(gpu)
    gpu.synchronize()


@pytest.mark.parametrize("d", list(DType), ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(), (1,), (3, 5, 7), (1 << 20,)], ids=str)
def test_every_dtype_round_trips_bit_exact(rng, gpu, d, shape):
    bits = random_bits(rng, d, shape)
    host = driver.Buffer.from_numpy(bits).view(d, list(shape))
    dev = host.to(gpu)
    assert dev.device == gpu and dev.dtype is d and dev.shape == tuple(shape) and not dev.is_host
    back = dev.to(driver.CPU())
    assert back.is_host and np.array_equal(back.view(bits_dtype(d), list(shape)).to_numpy(), bits)
    # device-to-device copy, and the copy API
    again = dev.copy().copy(device=driver.CPU())
    assert np.array_equal(again.view(bits_dtype(d), list(shape)).to_numpy(), bits)


@pytest.mark.parametrize("d", list(DType), ids=lambda d: d.name)
def test_zeros_and_fill_overwrite_poisoned_memory(rng, gpu, d):
    poison = driver.Buffer.from_numpy(random_bits(rng, d, (257, 3))).view(d, [257, 3])
    b = driver.Buffer(d, [257, 3], device=gpu)
    b.inplace_copy_from(poison.to(gpu))
    if d in CAST_DTYPES:
        b[...] = 0
    else:  # values of these types can only be written as bits
        b.view(bits_dtype(d), [257, 3])[...] = 0
    assert not b.view(bits_dtype(d), [257, 3]).to_numpy().any()
    z = driver.Buffer.zeros([1000, 7], d, device=gpu)
    assert not z.view(bits_dtype(d), [1000, 7]).to_numpy().any()


@pytest.mark.parametrize("d", [DType.float32, DType.bfloat16, DType.int16, DType.float8_e5m2, DType.bool])
def test_setitem_and_item_on_gpu(rng, gpu, d):
    host = driver.Buffer.from_numpy(random_values(rng, d, (6, 4))).view(d, [6, 4])
    ref = host.copy()
    dev = host.to(gpu)
    dev[2] = 1
    dev[4, 1] = -2.5 if d.is_float() else 1
    ref[2] = 1
    ref[4, 1] = -2.5 if d.is_float() else 1
    got = dev.to(driver.CPU()).view(bits_dtype(d), [6, 4]).to_numpy()
    assert np.array_equal(got, ref.view(bits_dtype(d), [6, 4]).to_numpy())
    assert dev[4, 1].item() == ref[4, 1].item() and dev[0, 0].item() == ref[0, 0].item()
    with pytest.raises(ValueError, match="non-contiguous region of a GPU buffer"):
        dev[:, 1] = 0


STRIDED = [
    (slice(None, None, -1),), (slice(1, None, 2), Ellipsis, 0), (None, slice(None), slice(3, 0, -1)),
    (Ellipsis, slice(None, None, 3)), (2, slice(None), None, slice(None, None, -2)),
]


@pytest.mark.parametrize("key", STRIDED, ids=str)
@pytest.mark.parametrize("d", [DType.uint8, DType.bfloat16, DType.float32, DType.float64])
def test_strided_views_copy_on_gpu(rng, gpu, key, d):
    bits = random_bits(rng, d, (5, 6, 7))
    dev = driver.Buffer.from_numpy(bits).to(gpu)
    view = dev[key]
    expected = bits[key]
    assert view.shape == expected.shape
    assert np.array_equal(view.to_numpy(), expected)
    assert np.array_equal(view.contiguous().to_numpy(), expected)
    assert np.array_equal(view.to(driver.CPU()).to_numpy(), expected)


def test_views_of_more_than_eight_dimensions(rng, gpu):
    bits = random_bits(rng, DType.uint16, (3,) * 10)
    key = tuple(slice(None, None, -1) if i % 2 else slice(None, None, 2) for i in range(10))
    dev = driver.Buffer.from_numpy(bits).to(gpu)
    assert np.array_equal(dev[key].to_numpy(), bits[key])


def test_inplace_copies_between_devices(rng, gpu):
    a = rng.standard_normal((64, 33)).astype(np.float32)
    dev = driver.Buffer(DType.float32, [64, 33], device=gpu)
    dev.inplace_copy_from(driver.Buffer.from_numpy(a))
    host = driver.Buffer(DType.float32, [64 * 33])
    host.inplace_copy_from(dev)
    assert np.array_equal(host.to_numpy(), a.ravel())
    other = driver.Buffer(DType.float32, [64, 33], device=gpu)
    other.inplace_copy_from(dev)
    assert np.array_equal(other.to_numpy(), a)


def test_streams(rng, gpu):
    s = driver.DeviceStream(gpu)
    assert s.device == gpu and s != gpu.default_stream
    a = rng.standard_normal(1 << 20).astype(np.float32)
    on_s = driver.Buffer.from_numpy(a).to(s)
    assert on_s.stream == s
    same = on_s.to(gpu.default_stream)
    assert same.stream == gpu.default_stream
    gpu.default_stream.wait_for(s)
    s.synchronize()
    assert np.array_equal(same.to_numpy(), a)
    b = driver.Buffer(DType.float32, [1 << 20], stream=s)
    b.inplace_copy_from(on_s)
    assert np.array_equal(b.to_numpy(), a)


def test_pinned_host_memory(rng, gpu):
    p = driver.Buffer(DType.float32, [4096], device=gpu, pinned=True)
    assert p.pinned and p.is_host
    a = rng.standard_normal(4096).astype(np.float32)
    p.inplace_copy_from(driver.Buffer.from_numpy(a))
    assert np.array_equal(p.to(gpu).to_numpy(), a)


def test_empty_buffers_on_gpu(gpu):
    b = driver.Buffer(DType.float32, [0, 4], device=gpu)
    assert b.to_numpy().shape == (0, 4) and b.to(driver.CPU()).num_elements == 0
    assert driver.Buffer.zeros([0], DType.int8, device=gpu).to_numpy().shape == (0,)


def test_absent_devices_and_oom_leave_the_session_usable(gpu):
    n = driver.accelerator_count()
    with pytest.raises(RuntimeError, match="does not exist"):
        driver.Accelerator(n)
    with pytest.raises(RuntimeError, match="does not exist"):
        driver.Buffer(DType.float32, [4]).to(driver.Accelerator(n + 3))
    with pytest.raises(MemoryError):
        driver.Buffer(DType.float32, [1 << 42], device=gpu)
    ok = driver.Buffer.from_numpy(np.arange(5, dtype=np.int32)).to(gpu)
    assert ok.to_numpy().tolist() == [0, 1, 2, 3, 4]


def test_hidden_gpu_means_zero_accelerators():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    code = (
        "from max import driver\n"
        "print(driver.accelerator_count())\n"
        "try:\n    driver.Accelerator()\nexcept RuntimeError as e:\n    print('RuntimeError', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.startswith("0\nRuntimeError no accelerator is available"), out


def test_second_process_start_hits_the_kernel_cache(gpu, tmp_path):
    env = dict(os.environ, MAX_KERNEL_CACHE_DIR=str(tmp_path))
    code = (
        "import numpy as np\n"
        "from max import driver\nfrom max.dtype import DType\nfrom max._core import driver as c\n"
        "g = driver.Accelerator()\n"
        "b = driver.Buffer.from_numpy(np.arange(10, dtype=np.float32)).to(g)\n"
        "assert b._cast(DType.bfloat16)._cast(DType.float32).to_numpy().tolist() == list(range(10))\n"
        "s = c._kernel_cache_stats(); print(s['compiles'], s['disk_hits'])\n"
    )
    run = lambda: subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    first, second = run().stdout.split(), run().stdout.split()
    assert first == ["1", "0"] and second == ["0", "1"], (first, second)
