"""Helpers for tests of data-movement ops (layout, indexing): stage one function for a device,
run it on numpy inputs, and compare every output bit for bit with a numpy reference. Those ops
move bytes, so any dtype is checked exactly, on random bit patterns (NaN payloads included)."""

from __future__ import annotations

import numpy as np

from engine_util import build, session
from helpers import VALUE_TYPES, random_bits
from max import driver
from max.dtype import DType
from max.graph import DeviceRef, TensorType

CPU = DeviceRef.CPU()
FP8 = (np.dtype(VALUE_TYPES[DType.float8_e4m3fn]), np.dtype(VALUE_TYPES[DType.float8_e5m2]))


def rand(rng, dtype: DType, shape) -> np.ndarray:
    """Random bit patterns (NaN payloads included) viewed as `dtype`'s numpy type."""
    return random_bits(rng, dtype, shape).view(VALUE_TYPES[dtype])


def t(dtype: DType, *shape) -> TensorType:
    """A tensor type; `Model` places it on the device under test."""
    return TensorType(dtype, shape, CPU)


def same(out: np.ndarray, ref, what: str = "") -> None:
    """Bit-exact equality of an engine output with its reference (dtype, shape, every byte)."""
    ref = np.asarray(ref)
    if ref.dtype in FP8 and out.dtype == np.uint8:
        out = out.view(ref.dtype)  # Buffer.to_numpy gives float8 data as its uint8 bits
    assert out.dtype == ref.dtype, (what, out.dtype, ref.dtype)
    assert out.shape == ref.shape, (what, out.shape, ref.shape)
    a = np.ascontiguousarray(out).view(np.uint8).reshape(-1)
    b = np.ascontiguousarray(ref).view(np.uint8).reshape(-1)
    if not np.array_equal(a, b):
        bad = np.unique(np.flatnonzero(a != b) // max(out.dtype.itemsize, 1))[:5]
        raise AssertionError(f"{what}: values differ at flat element(s) {bad.tolist()} of shape {out.shape}")


class Model:
    """`fn` compiled for `device`, every input on that device except those in `host_inputs`
    (which stay on the host, as index tensors may)."""

    def __init__(self, fn, types, device: driver.Device, host_inputs=()):
        where = DeviceRef.from_device(device)
        self.device = device
        self.on_device = [i not in host_inputs for i in range(len(types))]
        placed = [TensorType(x.dtype, x.shape, where if d else CPU) for x, d in zip(types, self.on_device)]
        self.model = session(device).load(build(fn, *placed))

    def run(self, *args) -> list[np.ndarray]:
        moved = []
        for a, d in zip(args, self.on_device):
            a = np.asarray(a)
            a = a if a.flags.c_contiguous else a.copy()  # (ascontiguousarray makes 0-d arrays 1-d)
            buf = driver.Buffer.from_numpy(a)
            moved.append(buf.to(self.device) if d else buf)
        return [o.to_numpy() for o in self.model.execute(*moved)]

    def check(self, args, ref) -> list[np.ndarray]:
        """Runs on `args` and compares every output with `ref(*args)` (one array or a list)."""
        outs = self.run(*args)
        refs = ref(*args)
        refs = list(refs) if isinstance(refs, (list, tuple)) else [refs]
        assert len(outs) == len(refs), (len(outs), len(refs))
        for i, (o, r) in enumerate(zip(outs, refs)):
            same(o, r, f"output {i}")
        return outs


def check(fn, types, cases, ref, device, host_inputs=()) -> Model:
    """Builds `fn` for `device` once and checks every input tuple of `cases` against `ref`."""
    m = Model(fn, types, device, host_inputs)
    for args in cases:
        m.check(args, ref)
    return m
