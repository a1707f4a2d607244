"""DLPack with torch on the GPU: both directions share device memory, and streams are ordered."""

import numpy as np
import pytest

from max import driver
from max.dtype import DType

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


@pytest.mark.parametrize("d", [DType.float32, DType.bfloat16, DType.float16, DType.int64, DType.uint8, DType.bool])
def test_torch_from_dlpack_shares_gpu_memory(rng, gpu, d):
    host = driver.Buffer.from_numpy(np.arange(12, dtype=np.int64))._cast(d)
    dev = host.to(gpu)
    t = torch.from_dlpack(dev)
    assert t.is_cuda and t.dtype == d.to_torch() and tuple(t.shape) == (12,)
    assert t.data_ptr() == torch.from_dlpack(dev).data_ptr()
    t.fill_(1)
    torch.cuda.synchronize()
    assert dev._cast(DType.int64).to_numpy().tolist() == [1] * 12  # the write shows through


def test_buffer_from_torch_cuda_tensor_shares_memory(gpu):
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


def test_work_on_a_torch_stream_is_ordered_after_ours(rng, gpu):
    a = rng.standard_normal(1 << 22).astype(np.float32)
    dev = driver.Buffer.from_numpy(a).to(gpu)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        t = torch.from_dlpack(dev)  # torch passes its stream; our copy is ordered before it
        total = t.double().sum()
    s.synchronize()
    assert abs(total.item() - a.astype(np.float64).sum()) < 1e-6 * np.abs(a).sum()


def test_dlpack_device_and_cpu_export_of_gpu_buffer(gpu):
    dev = driver.Buffer.from_numpy(np.arange(6, dtype=np.int32)).to(gpu)
    assert dev.__dlpack_device__() == (2, 0)
    cap = dev.__dlpack__(dl_device=(1, 0))
    host = np.from_dlpack(type("C", (), {"__dlpack__": lambda self, **k: cap, "__dlpack_device__": lambda self: (1, 0)})())
    assert host.tolist() == [0, 1, 2, 3, 4, 5]
