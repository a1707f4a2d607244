"""DLPack: zero-copy both ways with numpy on the host, capsule lifetimes and bad producers; the
device a buffer reports and its export to the host on each device; zero-copy both ways with
torch on the GPU, and stream ordering (GPU only: torch is installed on the GPU machines)."""

import gc
import weakref

import numpy as np
import pytest

from helpers import random_values
from max import driver
from max.dtype import DType

NUMPY_DLPACK = [DType.bool, DType.int8, DType.int16, DType.int32, DType.int64, DType.uint8,
                DType.uint16, DType.uint32, DType.uint64, DType.float16, DType.float32, DType.float64]


@pytest.mark.parametrize("d", NUMPY_DLPACK, ids=lambda d: d.name)
def test_numpy_zero_copy_both_ways(rng, d):
    a = random_values(rng, d, (6, 7))
    b = driver.Buffer.from_dlpack(a)
    assert b.dtype is d and b.shape == a.shape
    back = np.from_dlpack(b)
    assert back.dtype == a.dtype and np.array_equal(back, a)
    assert np.shares_memory(back, a)
    # writes through one are seen by the other
    a.flat[3] = a.flat[0]
    assert np.array_equal(np.from_dlpack(b), a)
    assert b.__dlpack_device__() == (1, 0)


@pytest.mark.parametrize("d", [DType.bfloat16, DType.float8_e4m3fn, DType.float8_e5m2])
def test_types_numpy_cannot_import_travel_as_bits(rng, d):
    v = random_values(rng, d, (9,))
    b = driver.Buffer.from_numpy(v)
    bits = np.from_dlpack(b.view(DType.uint16 if d.size_in_bytes == 2 else DType.uint8))
    assert np.shares_memory(bits, v) and np.array_equal(bits, v.view(bits.dtype))


def test_strided_views_export_with_strides(rng):
    a = rng.standard_normal((5, 8)).astype(np.float32)
    v = driver.Buffer.from_numpy(a)[::-2, 1::3]
    out = np.from_dlpack(v)
    assert np.array_equal(out, a[::-2, 1::3]) and np.shares_memory(out, a)
    strided = driver.Buffer.from_dlpack(a[:, ::2])
    assert not strided.is_contiguous and np.array_equal(strided.to_numpy(), a[:, ::2])
    assert np.shares_memory(strided.to_numpy(), a)


def test_versioned_and_legacy_capsules():
    b = driver.Buffer.from_numpy(np.arange(4, dtype=np.int32))
    assert "dltensor_versioned" in repr(b.__dlpack__(max_version=(1, 1)))
    legacy = b.__dlpack__()
    assert '"dltensor"' in repr(legacy)
    # an unconsumed capsule frees its tensor when collected (no leak, no crash)
    del legacy
    gc.collect()


def test_import_keeps_the_producer_alive():
    class Owner(np.ndarray):
        pass

    a = np.arange(1000, dtype=np.float64).view(Owner)
    ref = weakref.ref(a)
    b = driver.Buffer.from_dlpack(a)
    del a
    gc.collect()
    assert ref() is not None  # the buffer holds the producer's memory
    assert b[999].item() == 999.0
    del b
    gc.collect()
    assert ref() is None


def test_copy_flag_and_read_only():
    a = np.arange(6, dtype=np.int16)
    c = driver.Buffer.from_dlpack(a, copy=True)
    assert not np.shares_memory(c.to_numpy(), a) and np.array_equal(c.to_numpy(), a)
    ro = np.arange(6, dtype=np.int16)
    ro.flags.writeable = False
    b = driver.Buffer.from_dlpack(ro)
    assert not np.shares_memory(b.to_numpy(), ro) and np.array_equal(b.to_numpy(), ro)
    with pytest.raises(BufferError):
        driver.Buffer.from_dlpack(ro, copy=False)
    same = driver.Buffer.from_dlpack(b)
    assert np.shares_memory(same.to_numpy(), b.to_numpy())


def test_bad_producers():
    with pytest.raises(TypeError, match="does not implement the DLPack protocol"):
        driver.Buffer.from_dlpack([1, 2, 3])
    with pytest.raises((TypeError, BufferError)):
        driver.Buffer.from_dlpack(np.zeros(3, np.complex64))

    class Liar:
        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kw):
            return "not a capsule"

    with pytest.raises(BufferError, match="did not return an unused DLPack capsule"):
        driver.Buffer.from_dlpack(Liar())

    class OnOpenCL:
        def __dlpack_device__(self):
            return (4, 0)

        def __dlpack__(self, **kw):
            return np.zeros(2).__dlpack__()

    with pytest.raises(BufferError, match="device type 4"):
        driver.Buffer.from_dlpack(OnOpenCL())


def test_float4_cannot_be_exported():
    b = driver.Buffer(DType.float4_e2m1fn, [4])
    with pytest.raises(BufferError, match="view"):
        b.__dlpack__()


# -- on each device ---------------------------------------------------------------------------


def test_dlpack_device_and_host_export(rng, device):
    a = random_values(rng, DType.int32, (6,))
    b = driver.Buffer.from_numpy(a).to(device)
    assert b.__dlpack_device__() == ((1, 0) if device.is_host else (2, device.id))
    cap = b.__dlpack__(dl_device=(1, 0))
    host = np.from_dlpack(type("C", (), {"__dlpack__": lambda self, **k: cap, "__dlpack_device__": lambda self: (1, 0)})())
    assert np.array_equal(host, a)


# -- GPU only: torch CUDA tensors -------------------------------------------------------------


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.mark.gpu
@pytest.mark.parametrize("d", [DType.float32, DType.bfloat16, DType.float16, DType.int64, DType.uint8, DType.bool])
def test_gpu_torch_from_dlpack_shares_gpu_memory(torch, gpu, d):
    host = driver.Buffer.from_numpy(np.arange(12, dtype=np.int64))._cast(d)
    dev = host.to(gpu)
    t = torch.from_dlpack(dev)
    assert t.is_cuda and t.dtype == d.to_torch() and tuple(t.shape) == (12,)
    assert t.data_ptr() == torch.from_dlpack(dev).data_ptr()
    t.fill_(1)
    torch.cuda.synchronize()
    assert dev._cast(DType.int64).to_numpy().tolist() == [1] * 12  # the write shows through


@pytest.mark.gpu
def test_gpu_buffer_from_torch_cuda_tensor_shares_memory(torch, gpu):
    t = torch.arange(20, dtype=torch.float32, device="cuda").reshape(4, 5)
    b = driver.Buffer.from_dlpack(t)
    assert b.device == gpu and b.shape == (4, 5) and b.dtype is DType.float32
    assert np.array_equal(b.to_numpy(), t.cpu().numpy())
    t.mul_(2)
    torch.cuda.synchronize()
    assert np.array_equal(b.to_numpy(), t.cpu().numpy())
    tb = torch.randn(8, 3, device="cuda").to(torch.bfloat16)
    bb = driver.Buffer.from_dlpack(tb)
    assert bb.dtype is DType.bfloat16
    assert np.array_equal(bb.view(DType.uint16).to_numpy(), tb.view(torch.int16).cpu().numpy().view(np.uint16))
    strided = driver.Buffer.from_dlpack(t.t())
    assert not strided.is_contiguous and np.array_equal(strided.to_numpy(), t.t().cpu().numpy())


@pytest.mark.gpu
def test_gpu_work_on_a_torch_stream_is_ordered_after_ours(torch, rng, gpu):
    a = rng.standard_normal(1 << 22).astype(np.float32)
    dev = driver.Buffer.from_numpy(a).to(gpu)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        t = torch.from_dlpack(dev)  # torch passes its stream; our copy is ordered before it
        total = t.double().sum()
    s.synchronize()
    assert abs(total.item() - a.astype(np.float64).sum()) < 1e-6 * np.abs(a).sum()
