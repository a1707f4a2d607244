"""Helpers of the graph-staging tests: a type on the CPU, staging a function in a fresh graph,
checking a value's dtype and shape, and a documented error's message."""

import pytest

from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType

F32, F16, I32, I64, B = DType.float32, DType.float16, DType.int32, DType.int64, DType.bool


def T(dtype, *shape, device=None):
    return TensorType(dtype, list(shape), device or DeviceRef.CPU())


def stage(fn, *types):
    with Graph("staging", input_types=types) as g:
        return fn(*g.inputs)


def check(value, dtype, shape):
    assert value.dtype == dtype
    assert list(value.shape) == list(shape), value.shape


def fails(exc, op, arg, fn, *types):
    """Staging `fn` raises `exc` whose message starts with ``"{op}: {arg}:"``; the message."""
    with pytest.raises(exc) as info:
        stage(fn, *types)
    assert str(info.value).startswith(f"{op}: {arg}:"), str(info.value)
    return str(info.value)
