"""max.driver.Buffer and Model.execute on the host: scalars that do not fit the dtype are
refused wherever they are written (Buffer.scalar, item assignment, scalar model inputs), the
keyword names MAX documents for ``to`` and ``wait_for``, clear messages for assignments that
cannot be done, read-only file mappings that copy nothing up front, and results that do not
share memory with each other."""

import numpy as np
import pytest

from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType


@pytest.mark.parametrize(("value", "dtype", "shown"), [
    (300, DType.int8, r"300 does not fit in int8 \(range -128..127\)"),
    (-1, DType.uint32, r"-1 does not fit in uint32"),
    (2**64 - 1, DType.int64, r"18446744073709551615 does not fit in int64"),
    (2.5, DType.int32, r"2.5 is not a whole number, so it does not fit in int32"),
    (float("nan"), DType.uint8, r"NaN is not a whole number"),
    (2, DType.bool, r"2 does not fit in bool \(range 0..1\)"),
])
def test_scalars_that_do_not_fit_are_refused(value, dtype, shown):
    with pytest.raises(ValueError, match="Buffer.scalar: value: " + shown):
        driver.Buffer.scalar(value, dtype)
    b = driver.Buffer.zeros([2], dtype)
    with pytest.raises(ValueError, match=r"Buffer.__setitem__: value: " + shown):
        b[0] = value
    assert not b.to_numpy().any()  # untouched, and still usable
    model = engine.InferenceSession(devices=[driver.CPU()]).load(
        Graph("ident", lambda a: [a], input_types=[TensorType(dtype, (), DeviceRef.CPU())]))
    with pytest.raises(ValueError, match=shown):
        model.execute(value)


def test_scalars_that_fit_are_written_exactly():
    assert driver.Buffer.scalar(-128, DType.int8).item() == -128
    assert driver.Buffer.scalar(2**64 - 1, DType.uint64).item() == 2**64 - 1
    assert driver.Buffer.scalar(3.0, DType.int16).item() == 3
    assert driver.Buffer.scalar(True, DType.uint8).item() == 1
    assert driver.Buffer.scalar(1e300, DType.float32).item() == float("inf")  # floats round as IEEE
    b = driver.Buffer.zeros([3], DType.uint8)
    b[1] = 255
    assert b.to_numpy().tolist() == [0, 255, 0]


def test_documented_keyword_names():
    cpu = driver.CPU()
    b = driver.Buffer.from_numpy(np.arange(4, dtype=np.float32))
    for moved in (b.to(device=cpu), b.to(stream=cpu.default_stream), b.to(cpu)):
        assert moved.to_numpy().tolist() == [0, 1, 2, 3]
    for moved in (b.to(devices=[cpu]), b.to(streams=[cpu.default_stream])):
        assert [m.to_numpy().tolist() for m in moved] == [[0, 1, 2, 3]]
    with pytest.raises(TypeError, match="Buffer.to takes one target"):
        b.to(device=cpu, stream=cpu.default_stream)
    with pytest.raises(TypeError, match="Buffer.to takes one target"):
        b.to()
    cpu.default_stream.wait_for(stream=cpu.default_stream)
    cpu.default_stream.wait_for(device=cpu)
    with pytest.raises(TypeError, match="one stream or device"):
        cpu.default_stream.wait_for()


def test_assignments_say_what_cannot_be_done():
    b = driver.Buffer.from_numpy(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="selection .* is not contiguous: an array can be assigned to a contiguous"):
        b[:, 1] = np.array([1.0, 2.0], np.float32)
    b[:, 1] = 5.0  # a scalar fills any selection
    b[0] = [1, 2, 3]  # lists are arrays too
    assert b.to_numpy().tolist() == [[1, 2, 3], [0, 5, 0]]


def test_read_only_mapping_copies_nothing_and_never_writes_the_file(tmp_path):
    path = tmp_path / "w.bin"
    np.arange(16, dtype=np.float32).tofile(path)
    b = driver.Buffer.mmap(path, DType.float32, (16,), mode="r")
    assert b.to_numpy().tolist() == list(range(16))
    b[0] = 99.0  # a private page: the file keeps its bytes
    assert np.fromfile(path, np.float32).tolist() == list(range(16))


def test_a_value_returned_twice_comes_back_as_two_buffers():
    x = TensorType(DType.float32, (3,), DeviceRef.CPU())
    model = engine.InferenceSession(devices=[driver.CPU()]).load(Graph("twice", lambda a: [a * 2, a * 2, a * 2],
                                                                       input_types=[x]))
    outs = model.execute(np.ones(3, np.float32))
    outs[0][0] = 7.0
    assert [o.to_numpy().tolist() for o in outs] == [[7, 2, 2], [2, 2, 2], [2, 2, 2]]
