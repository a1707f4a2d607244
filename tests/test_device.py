"""max.driver devices: the CPU, accelerator discovery, and device specs."""

import pytest

from max import driver
from max.dtype import DType


def test_cpu_properties():
    cpu = driver.CPU()
    assert isinstance(cpu, driver.Device)
    assert (cpu.label, cpu.api, cpu.id, cpu.is_host, cpu.is_compatible) == ("cpu", "cpu", 0, True, True)
    assert cpu == driver.CPU() and hash(cpu) == hash(driver.CPU())
    assert repr(cpu) == "Device(type=cpu,id=0)"
    stats = cpu.stats
    assert 0 < stats["free_memory"] <= stats["total_memory"]
    cpu.synchronize()
    assert not cpu.can_access(cpu)
    with pytest.raises(ValueError, match="no architecture name"):
        cpu.architecture_name
    stream = cpu.default_stream
    stream.synchronize()
    assert stream.device == cpu and driver.DeviceStream(cpu) == stream


@pytest.mark.skipif(driver.accelerator_count() > 0, reason="this machine has a GPU")
def test_without_a_gpu():
    assert driver.accelerator_count() == 0
    assert driver.accelerator_api() == "cpu"
    with pytest.raises(RuntimeError, match="no accelerator is available: .+"):
        driver.Accelerator()
    with pytest.raises(RuntimeError, match="no accelerator"):
        driver.accelerator_architecture_name()
    with pytest.raises(RuntimeError):
        driver.Buffer(DType.float32, [2], device=driver.Accelerator())
    # the session stays usable after the errors
    assert driver.Buffer.zeros([2], DType.int8).to_numpy().tolist() == [0, 0]
    assert driver.scan_available_devices() == [driver.DeviceSpec.cpu()]
    assert not driver.devices_exist([driver.DeviceSpec.accelerator()])


def test_device_specs():
    assert driver.DeviceSpec.cpu() == driver.DeviceSpec(-1, "cpu")
    assert driver.DeviceSpec.accelerator(2) == driver.DeviceSpec(2, "gpu")
    with pytest.raises(ValueError):
        driver.DeviceSpec(0, "tpu")
    assert driver.load_devices([driver.DeviceSpec.cpu()]) == [driver.CPU()]
    assert driver.devices_exist([driver.DeviceSpec.cpu()])
    specs = [driver.DeviceSpec.accelerator(0), driver.DeviceSpec.accelerator(3)]
    assert driver.calculate_virtual_device_count(specs, [driver.DeviceSpec.cpu()]) == 4
    assert driver.calculate_virtual_device_count([driver.DeviceSpec.cpu()]) == 1
    assert driver.calculate_virtual_device_count_from_cli("gpu:0,1,2") == 3
    assert driver.calculate_virtual_device_count_from_cli([0, 5], "cpu") == 6


def test_bad_device_arguments():
    with pytest.raises(TypeError, match="must be a max.driver.Device"):
        driver.CPU().can_access("gpu")
    with pytest.raises(TypeError, match="must be a max.driver.Device"):
        driver.DeviceStream(0)
