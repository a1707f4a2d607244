"""Helpers for GPU tests of data-movement ops: stage one function on the CPU and on the GPU,
run both on the same inputs, and compare the results bit for bit with each other and with a
numpy reference."""

from __future__ import annotations

import numpy as np

from engine_util import build, session
from helpers import VALUE_TYPES, random_bits
from max import driver
from max.dtype import DType
from max.graph import DeviceRef, TensorType

GPU, CPU = DeviceRef.GPU(), DeviceRef.CPU()
FP8 = (np.dtype(VALUE_TYPES[DType.float8_e4m3fn]), np.dtype(VALUE_TYPES[DType.float8_e5m2]))


def rand(rng, dtype: DType, shape) -> np.ndarray:
    """Random bit patterns (NaN payloads included) viewed as `dtype`'s numpy type."""
    return random_bits(rng, dtype, shape).view(VALUE_TYPES[dtype])


def same(out: np.ndarray, ref, what: str = "") -> None:
    """Bit-exact equality (shape, dtype width and every byte)."""
    ref = np.asarray(ref)
    if ref.dtype in FP8 and out.dtype == np.uint8:
        out = out.view(ref.dtype)  # Buffer.to_numpy gives float8 data as its uint8 bits
    assert out.shape == ref.shape, (what, out.shape, ref.shape)
    assert out.dtype.itemsize == ref.dtype.itemsize, (what, out.dtype, ref.dtype)
    a = np.ascontiguousarray(out).view(np.uint8)
    b = np.ascontiguousarray(ref).view(np.uint8)
    if not np.array_equal(a, b):
        bad = np.argwhere(a.reshape(-1) != b.reshape(-1))[:5].ravel() // max(out.dtype.itemsize, 1)
        raise AssertionError(f"{what}: values differ at flat element(s) {bad.tolist()} of shape {out.shape}")


def on(device: DeviceRef, t: TensorType) -> TensorType:
    return TensorType(t.dtype, t.shape, device)


class Pair:
    """One function compiled for the CPU and for the GPU (every input on that device)."""

    def __init__(self, fn, types, gpu, cpu_inputs=()):
        self.gpu = gpu
        self.cpu = session().load(build(fn, *[on(CPU, t) for t in types], name="cpu"))
        # Inputs listed in cpu_inputs stay on the host in the GPU graph too.
        gtypes = [on(CPU if i in cpu_inputs else GPU, t) for i, t in enumerate(types)]
        self.dev = session(gpu).load(build(fn, *gtypes, name="gpu"))
        self.on_gpu = [i not in cpu_inputs for i in range(len(types))]

    def run_cpu(self, *args):
        return [o.to_numpy() for o in self.cpu.execute(*args)]

    def run_gpu(self, *args):
        moved = []
        for a, g in zip(args, self.on_gpu):
            a = np.asarray(a)
            a = a if a.flags.c_contiguous else a.copy()  # (ascontiguousarray makes 0-d arrays 1-d)
            buf = driver.Buffer.from_numpy(a)
            moved.append(buf.to(self.gpu) if g else buf)
        return [o.to_numpy() for o in self.dev.execute(*moved)]

    def check(self, args, ref=None):
        """Runs both, compares GPU with CPU and (when given) with `ref(*args)`; returns the GPU
        results."""
        c = self.run_cpu(*args)
        g = self.run_gpu(*args)
        assert len(c) == len(g)
        for i, (a, b) in enumerate(zip(c, g)):
            same(b, a, f"output {i}: GPU vs CPU")
        if ref is not None:
            refs = ref(*args)
            refs = list(refs) if isinstance(refs, (list, tuple)) else [refs]
            assert len(refs) == len(g)
            for i, (b, r) in enumerate(zip(g, refs)):
                same(b, r, f"output {i}: GPU vs numpy")
        return g


def check(fn, types, cases, ref, gpu, cpu_inputs=()):
    """Builds `fn` for both devices once and checks every input tuple of `cases`."""
    p = Pair(fn, types, gpu, cpu_inputs)
    for args in cases:
        p.check(args, ref)
    return p
