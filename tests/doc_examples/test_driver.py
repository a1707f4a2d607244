"""The Python examples of driver.md, as tests (see common.py for the method)."""

from doc_examples.common import *  # noqa: F401,F403


# --- driver.md --------------------------------------------------------------------------------


def test_driver__module(capsys):
    """driver.md, module intro: use an accelerator if one is available, otherwise the CPU."""
    from max import driver
    device = driver.CPU() if driver.accelerator_count() == 0 else driver.Accelerator()
    print(f"Using {device} device")

    (out,) = lines(capsys)
    assert out.startswith("Using ") and out.endswith(" device")


@needs_gpu
def test_driver__Buffer():
    """driver.md, Buffer."""
    from max import driver
    from max.dtype import DType
    cpu_buffer = driver.Buffer(shape=[2, 3], dtype=DType.float32)
    # Create a buffer on GPU
    gpu = driver.Accelerator()
    gpu_buffer = driver.Buffer(shape=[2, 3], dtype=DType.float32, device=gpu)


@needs_gpu
def test_driver__Buffer_copy():
    """driver.md, Buffer.copy (in a blockquote)."""
    from max import driver
    from max.dtype import DType

    cpu_buffer = driver.Buffer(shape=[2, 3], dtype=DType.bfloat16, device=driver.CPU())
    cpu_copy = cpu_buffer.copy()

    # Copy to GPU
    gpu = driver.Accelerator()
    gpu_copy = cpu_buffer.copy(device=gpu)


def test_driver__Buffer_is_host(capsys):
    """driver.md, Buffer.is_host: 'Returns false for GPU buffers, true for CPU buffers.'"""
    from max import driver
    from max.dtype import DType
    cpu_buffer = driver.Buffer(shape=[2, 3], dtype=DType.bfloat16, device=driver.CPU())
    print(cpu_buffer.is_host)

    assert lines(capsys) == ["True"]


def test_driver__Device_api():
    """driver.md, Device.api: '`cpu` for host devices'."""
    from max import driver
    device = driver.CPU()
    device.api

    assert device.api == "cpu"


@needs_gpu
def test_driver__Device_architecture_name():
    """driver.md, Device.architecture_name: e.g. `sm_80`, `sm_86` for NVIDIA GPUs."""
    from max import driver
    device = driver.Accelerator()
    device.architecture_name

    assert isinstance(device.architecture_name, str) and device.architecture_name


@needs_two_gpus
def test_driver__Device_can_access():
    """driver.md, Device.can_access (needs gpu0 and gpu1)."""
    from max import driver
    gpu0 = driver.Accelerator(id=0)
    gpu1 = driver.Accelerator(id=1)
    if gpu0.can_access(gpu1):
        print("GPU0 can directly access GPU1 memory.")


@needs_gpu
def test_driver__Device_id():
    """driver.md, Device.id: 'the id of the device relative to this host'."""
    from max import driver
    device = driver.Accelerator()
    device_id = device.id

    assert device_id == 0


def test_driver__Device_is_host():
    """driver.md, Device.is_host: 'Whether this device is the CPU (host) device.'"""
    from max import driver
    device = driver.CPU()
    device.is_host

    assert device.is_host is True


def test_driver__Device_label():
    """driver.md, Device.label: '`cpu` for host devices'."""
    from max import driver
    device = driver.CPU()
    device.label

    assert device.label == "cpu"


def test_driver__Device_stats():
    """driver.md, Device.stats: 'A dictionary containing device utilization statistics.'"""
    from max import driver
    device = driver.CPU()
    stats = device.stats

    assert isinstance(stats, dict)


@needs_gpu
def test_driver__DeviceStream():
    """driver.md, DeviceStream."""
    from max import driver
    # Create a default accelerator device
    device = driver.Accelerator()
    # Get the default stream for the device
    stream = device.default_stream
    # Create a new stream of execution on the device
    new_stream = driver.DeviceStream(device)
