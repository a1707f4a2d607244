"""Typed use of the public API, checked by mypy in the test command (scripts/test) and run by
tests/test_examples.py: each ``assert_type`` fails the type check when a stub or annotation
loses a type (an ``Any`` does not pass ``assert_type``)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from typing_extensions import assert_type

from max import driver, engine
from max.driver import CPU, Buffer, Device, DeviceStream
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, TensorValue, ops
from max.graph.weights import WeightData, load_weights

cpu = CPU()
assert_type(cpu.is_host, bool)
assert_type(cpu.id, int)
assert_type(cpu.default_stream, DeviceStream)
assert_type(driver.accelerator_count(), int)

x = np.arange(12, dtype=np.float32).reshape(3, 4)
buf = Buffer.from_numpy(x)
assert_type(buf, Buffer)
assert_type(buf.shape, tuple[int, ...])
assert_type(buf.dtype, DType)
assert_type(buf.device, Device)
assert_type(buf.to(cpu), Buffer)
assert_type(buf[1:, ::2], Buffer)
values = np.asarray(buf)
assert values.shape == (3, 4) and float(values[2, 3]) == 11.0

ref = DeviceRef.from_device(cpu)
with Graph("typed", input_types=[TensorType(DType.float32, ("rows", 4), ref)]) as graph:
    inp = graph.inputs[0].tensor
    assert_type(inp, TensorValue)
    y = ops.relu(inp * 2.0 - 1.0)
    assert_type(y, TensorValue)
    graph.output(ops.transpose(y, 0, 1))

session = engine.InferenceSession(devices=[cpu])
model = session.load(graph)
assert_type(model, engine.Model)
(out,) = model.execute(buf)
result = np.asarray(out)
assert result.shape == (4, 3)
assert np.array_equal(result, np.maximum(x * 2 - 1, 0).T)

with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "missing.gguf"
    try:
        load_weights([path])
    except FileNotFoundError as e:
        assert str(path) in str(e)
    data = WeightData.from_numpy(x, "w")
    assert_type(data, WeightData)
    assert_type(data.dtype, DType)
    assert np.array_equal(np.asarray(data), x)

print("typed usage ok")
