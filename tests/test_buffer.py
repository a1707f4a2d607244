"""max.driver.Buffer: construction, views, copies, numpy interop and bad input on the host;
transfers, fills, item access and strided views on each device (the GPU's fill and strided-copy
kernels); streams, pinned memory, absent devices and the kernel cache on the GPU only."""

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from helpers import CAST_DTYPES, VALUE_TYPES, random_bits, random_values
from max import driver
from max.dtype import DType


def test_construction_and_properties():
    b = driver.Buffer(shape=[2, 3], dtype=DType.float32)
    assert b.shape == (2, 3) and b.dtype is DType.float32 and b.rank == 2
    assert b.num_elements == 6 and b.element_size == 4 and b.is_host and b.is_contiguous
    assert b.device == driver.CPU() and not b.pinned
    assert np.array_equal(b.to_numpy(), np.zeros((2, 3), np.float32))
    assert driver.Tensor is driver.Buffer
    s = driver.Buffer(DType.int8, [])
    assert s.shape == () and s.num_elements == 1 and s.rank == 0
    e = driver.Buffer(DType.float16, [0, 5])
    assert e.num_elements == 0 and e.to_numpy().shape == (0, 5)


def test_zeros_and_scalar():
    z = driver.Buffer.zeros([4, 5], DType.int64)
    assert z.to_numpy().dtype == np.int64 and not z.to_numpy().any()
    s = driver.Buffer.scalar(2.5, DType.bfloat16)
    assert s.shape == () and s.item() == 2.5


@pytest.mark.parametrize("shape", [[-1, 2], [3, -7]])
def test_negative_shape_is_a_value_error(shape):
    with pytest.raises(ValueError, match=r"Buffer: shape .* negative dimension"):
        driver.Buffer(DType.float32, shape)


def test_overflowing_shape_is_a_value_error():
    with pytest.raises(ValueError, match="needs .* bytes"):
        driver.Buffer(DType.float32, [2**62, 2**62])
    with pytest.raises(ValueError, match="does not fit in 64 bits"):
        driver.Buffer(DType.float32, [2**70])
    with pytest.raises(ValueError, match="needs .* bytes"):
        driver.Buffer.zeros([2**40, 2**30], DType.float64)


def test_huge_but_valid_shape_is_a_memory_error():
    with pytest.raises(MemoryError):
        driver.Buffer(DType.uint8, [2**62])


@pytest.mark.parametrize("dtype", ["float32", np.float32, 81, None])
def test_unknown_dtype_is_a_type_error(dtype):
    with pytest.raises(TypeError, match=r"Buffer\(dtype\) must be a max.dtype.DType"):
        driver.Buffer(dtype, [2])


def test_bad_shape_entries_are_type_errors():
    with pytest.raises(TypeError, match="shape entries must be ints"):
        driver.Buffer(DType.float32, [2.5])
    with pytest.raises(TypeError, match="shape must be a sequence"):
        driver.Buffer(DType.float32, "ab")


def test_from_numpy_shares_memory_for_every_numpy_dtype(rng):
    for d, t in VALUE_TYPES.items():
        a = random_values(rng, d, (3, 5))
        b = driver.Buffer.from_numpy(a)
        assert b.dtype is d and b.shape == (3, 5)
        out = b.to_numpy()
        if d.is_float8():
            out = out.view(t)  # float8 comes back as its bits, as DType.to_numpy() says
        assert out.dtype == a.dtype and np.array_equal(out.view(np.uint8), a.view(np.uint8))
        assert np.shares_memory(out, a)


def test_bits_round_trip_for_every_dtype(rng):
    """Every DType round-trips exactly, via its bits where numpy lacks the type."""
    for d in DType:
        bits = random_bits(rng, d, (4, 6))
        raw = driver.Buffer.from_numpy(bits)
        typed = raw.view(d, [4, 6]) if bits.dtype.itemsize == d.size_in_bytes else None
        assert typed is not None and typed.dtype is d
        back = typed.view(raw.dtype).to_numpy()
        assert np.array_equal(back, bits) and np.shares_memory(back, bits)


def test_from_numpy_copies_noncontiguous_and_readonly():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    for view in [a[:, ::2], a.T, a[::-1]]:
        b = driver.Buffer.from_numpy(view)
        assert b.is_contiguous and np.array_equal(b.to_numpy(), view)
        assert not np.shares_memory(b.to_numpy(), a)
    ro = np.frombuffer(np.arange(4, dtype=np.int32).tobytes(), dtype=np.int32)
    b = driver.Buffer.from_numpy(ro)
    b[0] = 9
    assert b.to_numpy()[0] == 9 and ro[0] == 0
    big_endian = np.arange(5, dtype=">i4")
    assert np.array_equal(driver.Buffer.from_numpy(big_endian).to_numpy(), np.arange(5))


@pytest.mark.parametrize("bad", [np.zeros(3, np.complex64), np.zeros(2, "U2"), np.zeros(2, object)])
def test_from_numpy_rejects_unsupported_dtypes(bad):
    with pytest.raises(TypeError, match="Buffer.from_numpy: numpy dtype .* has no max.dtype.DType"):
        driver.Buffer.from_numpy(bad)


def test_from_numpy_rejects_non_arrays():
    with pytest.raises(TypeError, match="expects a numpy.ndarray, got list"):
        driver.Buffer.from_numpy([1, 2, 3])


INDEXES = [
    (1,), (-1,), (slice(None, None, -1),), (slice(1, None, 2), -2), (Ellipsis, 0),
    (None, slice(None), 3), (0, Ellipsis, None), (slice(-100, 100, 3),), (slice(5, 1),),
    (2, slice(None, None, -2), Ellipsis, 1), (slice(None), None, slice(1, 3)),
]


@pytest.mark.parametrize("key", INDEXES)
def test_indexing_matches_numpy(rng, key):
    a = rng.standard_normal((4, 5, 6)).astype(np.float32)
    b = driver.Buffer.from_numpy(a)
    view = b[key]
    expected = a[key]
    assert view.shape == expected.shape
    got = view.to_numpy()
    assert np.array_equal(got, expected)
    assert np.shares_memory(got, a) or expected.size == 0
    assert view.is_contiguous == (expected.flags.c_contiguous and all(s >= 0 for s in expected.strides))


@pytest.mark.parametrize("key, kind", [
    ((4,), IndexError), ((-5,), IndexError), ((0, 0, 0, 0), IndexError), ((0, 7), IndexError),
    ((Ellipsis, Ellipsis), IndexError), ((slice(None, None, 0),), ValueError), (("a",), TypeError),
    ((1.0,), TypeError), ((True,), TypeError), (([0, 1],), TypeError),
])
def test_bad_indexes(key, kind):
    b = driver.Buffer(DType.int32, [4, 5, 6])
    with pytest.raises(kind):
        b[key]


def test_item_and_setitem(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = driver.Buffer.from_numpy(a)
    assert b[1, 2].item() == float(a[1, 2])
    with pytest.raises(ValueError, match="exactly one element"):
        b.item()
    b[0, 1] = 7
    b[2] = -1.5
    b[:, 3] = True
    assert a[0, 1] == 7 and (a[2, :3] == -1.5).all() and (a[:, 3] == 1).all()
    b[1] = np.arange(4, dtype=np.float64)
    assert np.array_equal(a[1], np.arange(4, dtype=np.float32))
    with pytest.raises(ValueError, match="cannot assign a value of shape"):
        b[0] = np.zeros(3, np.float32)
    ints = driver.Buffer.from_numpy(np.zeros(3, np.int64))
    ints[1] = 2**62
    assert ints[1].item() == 2**62 and isinstance(ints[1].item(), int)
    flags = driver.Buffer.from_numpy(np.array([True, False]))
    assert flags[0].item() is True


def test_view_reinterprets_bytes(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = driver.Buffer.from_numpy(a)
    assert np.array_equal(b.view(DType.int32).to_numpy(), a.view(np.int32))
    assert b.view(DType.uint8).shape == (3, 16) and b.view(DType.float16).shape == (3, 8)
    assert b.view(DType.int64, [6]).shape == (6,)
    with pytest.raises(ValueError, match="has 40 bytes but the buffer"):
        b.view(DType.float64, [5])
    with pytest.raises(ValueError, match="contiguous"):
        b[:, ::2].view(DType.int32)
    with pytest.raises(ValueError, match="without a shape"):
        driver.Buffer(DType.uint8, [3]).view(DType.float32)


def test_copy_contiguous_and_inplace_copy(rng):
    a = rng.standard_normal((5, 6)).astype(np.float64)
    b = driver.Buffer.from_numpy(a)
    c = b.copy()
    assert np.array_equal(c.to_numpy(), a) and not np.shares_memory(c.to_numpy(), a)
    s = b[::-2, 1:5]
    assert not s.is_contiguous
    sc = s.contiguous()
    assert sc.is_contiguous and np.array_equal(sc.to_numpy(), a[::-2, 1:5])
    target = driver.Buffer(DType.float64, [30])
    target.inplace_copy_from(b)
    assert np.array_equal(target.to_numpy(), a.ravel())
    with pytest.raises(ValueError, match="same dtype and number of elements"):
        driver.Buffer(DType.float64, [29]).inplace_copy_from(b)
    with pytest.raises(ValueError, match="same dtype"):
        driver.Buffer(DType.float32, [30]).inplace_copy_from(b)
    with pytest.raises(ValueError, match="contiguous"):
        driver.Buffer(DType.float64, [3, 4]).inplace_copy_from(s)
    b.inplace_copy_from(b)  # same storage goes through a temporary
    assert np.array_equal(b.to_numpy(), a)


def test_to_same_device_is_the_same_memory_and_bad_targets_fail():
    b = driver.Buffer(DType.float32, [4])
    cpu = driver.CPU()
    assert np.shares_memory(b.to(cpu).to_numpy(), b.to_numpy())
    assert len(b.to([cpu, cpu])) == 2
    with pytest.raises(TypeError, match="Device"):
        b.to("cuda")
    with pytest.raises(TypeError):
        b.to(3)


def test_bfloat16_to_numpy_uses_ml_dtypes(rng):
    v = random_values(rng, DType.bfloat16, (7,))
    b = driver.Buffer.from_numpy(v)
    assert b.dtype is DType.bfloat16
    out = b.to_numpy()
    assert out.dtype == ml_dtypes.bfloat16 and np.array_equal(out.view(np.uint16), v.view(np.uint16))


def test_repr_and_str():
    b = driver.Buffer.from_numpy(np.arange(6, dtype=np.int32).reshape(2, 3))
    assert repr(b) == "max.driver.Buffer(DType.int32, (2, 3), cpu[0])"
    assert str(b).startswith("Buffer([[0 1 2]") and "device=Device(type=cpu,id=0)" in str(b)


def test_mmap(tmp_path, rng):
    a = rng.standard_normal((8, 3)).astype(np.float32)
    path = tmp_path / "w.bin"
    path.write_bytes(b"\0" * 16 + a.tobytes())
    m = driver.Buffer.mmap(path, DType.float32, (8, 3), offset=16)
    assert np.array_equal(m.to_numpy(), a)
    h = driver.Buffer.mmap(path, DType.bfloat16, [4], offset=16)
    assert h.dtype is DType.bfloat16 and np.array_equal(h.view(DType.uint16).to_numpy(), np.frombuffer(a.tobytes()[:8], np.uint16))


# -- on each device ---------------------------------------------------------------------------


def bits_dtype(d):
    return {1: DType.uint8, 2: DType.uint16, 4: DType.uint32, 8: DType.uint64}[d.size_in_bytes]


@pytest.mark.parametrize("d", list(DType), ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(), (1,), (3, 5, 7), (1 << 20,)], ids=str)
def test_every_dtype_round_trips_bit_exact(rng, device, d, shape):
    bits = random_bits(rng, d, shape)
    host = driver.Buffer.from_numpy(bits).view(d, list(shape))
    dev = host.to(device)
    assert dev.device == device and dev.dtype is d and dev.shape == tuple(shape) and dev.is_host == device.is_host
    back = dev.to(driver.CPU())
    assert back.is_host and np.array_equal(back.view(bits_dtype(d), list(shape)).to_numpy(), bits)
    # a copy on the device, and the copy API
    again = dev.copy().copy(device=driver.CPU())
    assert np.array_equal(again.view(bits_dtype(d), list(shape)).to_numpy(), bits)


@pytest.mark.parametrize("d", list(DType), ids=lambda d: d.name)
def test_zeros_and_fill_overwrite_poisoned_memory(rng, device, d):
    poison = driver.Buffer.from_numpy(random_bits(rng, d, (257, 3))).view(d, [257, 3])
    b = driver.Buffer(d, [257, 3], device=device)
    b.inplace_copy_from(poison.to(device))
    assert b.view(bits_dtype(d), [257, 3]).to_numpy().any()
    if d in CAST_DTYPES:
        b[...] = 0
    else:  # values of these types can only be written as bits
        b.view(bits_dtype(d), [257, 3])[...] = 0
    assert not b.view(bits_dtype(d), [257, 3]).to_numpy().any()
    z = driver.Buffer.zeros([1000, 7], d, device=device)
    assert not z.view(bits_dtype(d), [1000, 7]).to_numpy().any()


@pytest.mark.parametrize("d", [DType.float32, DType.bfloat16, DType.int16, DType.float8_e5m2, DType.bool])
def test_setitem_and_item_per_device(rng, device, d):
    values = random_values(rng, d, (6, 4))
    dev = driver.Buffer.from_numpy(values.copy()).view(d, [6, 4]).to(device)
    dev[2] = 1
    dev[4, 1] = -2.5 if d.is_float() else 1
    ref = values.view(VALUE_TYPES[d]).copy()  # numpy assigns through the same cast
    ref[2] = 1
    ref[4, 1] = -2.5 if d.is_float() else 1
    got = dev.to(driver.CPU()).view(bits_dtype(d), [6, 4]).to_numpy()
    assert np.array_equal(got, ref.view(VALUE_TYPES[bits_dtype(d)]))
    assert dev[4, 1].item() == ref[4, 1].item() and dev[0, 0].item() == ref[0, 0].item()


STRIDED = [
    (slice(None, None, -1),), (slice(1, None, 2), Ellipsis, 0), (None, slice(None), slice(3, 0, -1)),
    (Ellipsis, slice(None, None, 3)), (2, slice(None), None, slice(None, None, -2)),
]


@pytest.mark.parametrize("key", STRIDED + INDEXES, ids=str)
@pytest.mark.parametrize("d", [DType.uint8, DType.bfloat16, DType.float32, DType.float64])
def test_strided_views_copy_per_device(rng, device, key, d):
    bits = random_bits(rng, d, (5, 6, 7))
    dev = driver.Buffer.from_numpy(bits).to(device)
    view = dev[key]
    expected = bits[key]
    assert view.shape == expected.shape
    assert np.array_equal(view.to_numpy(), expected)
    assert np.array_equal(view.contiguous().to_numpy(), expected)
    assert np.array_equal(view.to(driver.CPU()).to_numpy(), expected)


def test_views_of_more_than_eight_dimensions(rng, device):
    bits = random_bits(rng, DType.uint16, (3,) * 10)
    key = tuple(slice(None, None, -1) if i % 2 else slice(None, None, 2) for i in range(10))
    dev = driver.Buffer.from_numpy(bits).to(device)
    assert np.array_equal(dev[key].to_numpy(), bits[key])
    assert np.array_equal(dev[key].contiguous().to_numpy(), bits[key])


def test_inplace_copies_to_and_from_the_host(rng, device):
    a = rng.standard_normal((64, 33)).astype(np.float32)
    dev = driver.Buffer(DType.float32, [64, 33], device=device)
    dev.inplace_copy_from(driver.Buffer.from_numpy(a))
    host = driver.Buffer(DType.float32, [64 * 33])
    host.inplace_copy_from(dev)
    assert np.array_equal(host.to_numpy(), a.ravel())
    other = driver.Buffer(DType.float32, [64, 33], device=device)
    other.inplace_copy_from(dev)
    assert np.array_equal(other.to_numpy(), a)


def test_empty_buffers_per_device(device):
    b = driver.Buffer(DType.float32, [0, 4], device=device)
    assert b.to_numpy().shape == (0, 4) and b.to(driver.CPU()).num_elements == 0
    assert driver.Buffer.zeros([0], DType.int8, device=device).to_numpy().shape == (0,)


# -- GPU only ---------------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_device_properties(gpu):
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


@pytest.mark.gpu
def test_gpu_setitem_of_a_non_contiguous_region_is_a_value_error(gpu):
    dev = driver.Buffer(DType.float32, [6, 4], device=gpu)
    with pytest.raises(ValueError, match="non-contiguous region of a GPU buffer"):
        dev[:, 1] = 0


@pytest.mark.gpu
def test_gpu_streams(rng, gpu):
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


@pytest.mark.gpu
def test_gpu_pinned_host_memory(rng, gpu):
    p = driver.Buffer(DType.float32, [4096], device=gpu, pinned=True)
    assert p.pinned and p.is_host
    a = rng.standard_normal(4096).astype(np.float32)
    p.inplace_copy_from(driver.Buffer.from_numpy(a))
    assert np.array_equal(p.to(gpu).to_numpy(), a)


@pytest.mark.gpu
def test_gpu_absent_devices_and_oom_leave_the_session_usable(gpu):
    n = driver.accelerator_count()
    with pytest.raises(RuntimeError, match="does not exist"):
        driver.Accelerator(n)
    with pytest.raises(RuntimeError, match="does not exist"):
        driver.Buffer(DType.float32, [4]).to(driver.Accelerator(n + 3))
    with pytest.raises(MemoryError):
        driver.Buffer(DType.float32, [1 << 42], device=gpu)
    ok = driver.Buffer.from_numpy(np.arange(5, dtype=np.int32)).to(gpu)
    assert ok.to_numpy().tolist() == [0, 1, 2, 3, 4]


@pytest.mark.gpu
def test_hidden_gpu_means_zero_accelerators():
    # Runs on any machine; selected with the GPU tests, where hiding the GPU matters.
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    code = (
        "from max import driver\n"
        "print(driver.accelerator_count())\n"
        "try:\n    driver.Accelerator()\nexcept RuntimeError as e:\n    print('RuntimeError', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.startswith("0\nRuntimeError no accelerator is available"), out


@pytest.mark.gpu
def test_gpu_second_process_start_hits_the_kernel_cache(gpu, tmp_path):
    env = dict(os.environ, MAX_KERNEL_CACHE_DIR=str(tmp_path))
    code = (
        "import numpy as np\n"
        "from max import driver\nfrom max.dtype import DType\nfrom max._core import driver as c\n"
        "g = driver.Accelerator()\n"
        "b = driver.Buffer.from_numpy(np.arange(10, dtype=np.float32)).to(g)\n"
        "assert b._cast(DType.bfloat16)._cast(DType.float32).to_numpy().tolist() == list(range(10))\n"
        "s = c._kernel_cache_stats(); print(s['compiles'], s['disk_hits'])\n"
    )
    run = lambda: subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)  # noqa: E731
    first, second = run().stdout.split(), run().stdout.split()
    assert first == ["1", "0"] and second == ["0", "1"], (first, second)
