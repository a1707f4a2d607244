"""ops.irfft and F.irfft per device against numpy.fft.irfft in float64, on fresh random spectra:
output lengths that are powers of two, odd, products of 3, 5 and 7, and primes (97, 1009, 8191:
Bluestein), n given smaller and larger than 2 * (m - 1) (truncated and zero-padded spectra),
the last, a middle, the first and negative axes, real and interleaved complex inputs, the three
normalisations, float32, float64, float16 and bfloat16, symbolic batch dims, rows long enough
for the GPU's global-memory path, and the errors of staging."""

from __future__ import annotations

import math

import numpy as np
import pytest

import max.functional as F
from engine_util import session
from helpers import VALUE_TYPES
from max import driver
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops
from max.graph.ops.irfft import Normalization
from max.tensor import Tensor

# Error bound relative to the result's largest magnitude, per log2(n) (f32/f64 accumulate over
# log n passes) or flat for the 16-bit types (their rounding of the result dominates).
PER_LOG = {DType.float32: 4e-7, DType.float64: 1e-15}
FLAT = {DType.float16: 2e-3, DType.bfloat16: 1.6e-2}


def spectrum(rng, dtype, shape, complex_input):
    """A random input of `dtype` (shape plus a trailing 2 when complex) and its float64 value as
    numpy complex."""
    full = (*shape, 2) if complex_input else shape
    x = rng.standard_normal(full).astype(VALUE_TYPES[dtype])
    v = x.astype(np.float64)
    return x, (v[..., 0] + 1j * v[..., 1]) if complex_input else v


def check(got, want, dtype, n):
    assert got.shape == want.shape, f"shape {got.shape}, want {want.shape}"
    tol = FLAT.get(dtype) or PER_LOG[dtype] * max(4.0, math.log2(max(n, 2)))
    scale = max(float(np.abs(want).max()), 1e-30)
    err = float(np.abs(got.astype(np.float64) - want).max()) / scale
    assert err <= tol, f"relative error {err:.3g} > {tol:.3g} (n={n}, {dtype})"


def run(device, dtype, shape, fn, *inputs):
    """`fn` on graph inputs of `dtype` and `shape` (str dims symbolic), compiled for `device`."""
    types = [TensorType(dtype, shape, DeviceRef.from_device(device))]
    model = session(device).load(Graph("irfft", fn, input_types=types))
    args = [driver.Buffer.from_numpy(np.ascontiguousarray(x)).to(device) for x in inputs]
    return [o.to_numpy() for o in model.execute(*args)]


# (m, n): n None for the default 2 * (m - 1).
LENGTHS = [
    (2, None), (5, None), (33, None), (513, None), (4, 1), (2, 2), (3, 3), (5, 8), (8, 15), (12, 21),
    (50, 97), (49, 97), (60, 98), (64, 125), (100, 243), (40, 210), (505, 1009), (10, 64), (200, 50),
    (130, 256), (3, 7), (300, 1024), (7, 13),
]


@pytest.mark.parametrize("m,n", LENGTHS, ids=[f"m{m}-n{n}" for m, n in LENGTHS])
@pytest.mark.parametrize("dtype", [DType.float32, DType.float64], ids=lambda d: d.name)
def test_lengths_match_numpy(m, n, dtype, rng, device):
    complex_input = bool(rng.integers(2))
    x, spec = spectrum(rng, dtype, (3, m), complex_input)
    shape = [3, m, 2] if complex_input else [3, m]
    (got,) = run(device, dtype, shape, lambda t: ops.irfft(t, n=n, input_is_complex=complex_input), x)
    check(got, np.fft.irfft(spec, n=n), dtype, n or 2 * (m - 1))


AXES = [(0, (6, 3, 4)), (1, (3, 6, 4)), (2, (3, 4, 6)), (-1, (2, 3, 9)), (-2, (2, 9, 3)), (-3, (7, 2, 3))]


@pytest.mark.parametrize("axis,shape", AXES, ids=[f"axis{a}" for a, _ in AXES])
@pytest.mark.parametrize("complex_input", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
def test_axes_layouts_and_normalizations(axis, shape, complex_input, norm, rng, device):
    x, spec = spectrum(rng, DType.float32, shape, complex_input)
    n = int(rng.integers(1, 20))
    full = [*shape, 2] if complex_input else list(shape)
    normalization = Normalization(norm) if rng.integers(2) else norm
    fn = lambda t: ops.irfft(t, n, axis, normalization, complex_input)  # noqa: E731
    (got,) = run(device, DType.float32, full, fn, x)
    check(got, np.fft.irfft(spec, n=n, axis=axis, norm=norm), DType.float32, n)


@pytest.mark.parametrize("dtype", [DType.float16, DType.bfloat16, DType.float32, DType.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("n", [16, 45, 97, 256])
def test_dtypes(dtype, n, rng, device):
    x, spec = spectrum(rng, dtype, (4, n // 2 + 1), True)
    (got,) = run(device, dtype, [4, n // 2 + 1, 2], lambda t: ops.irfft(t, n=n, input_is_complex=True), x)
    assert got.dtype == VALUE_TYPES[dtype]
    check(got, np.fft.irfft(spec, n=n), dtype, n)


def test_symbolic_batch_dims(rng, device):
    fn = lambda t: ops.irfft(t, axis=1, normalization="ortho")  # noqa: E731
    types = [TensorType(DType.float32, ["batch", 17, "heads"], DeviceRef.from_device(device))]
    model = session(device).load(Graph("irfft", fn, input_types=types))
    for batch, heads in [(1, 3), (5, 2)]:
        x, spec = spectrum(rng, DType.float32, (batch, 17, heads), False)
        (got,) = [o.to_numpy() for o in model.execute(driver.Buffer.from_numpy(x).to(device))]
        check(got, np.fft.irfft(spec, axis=1, norm="ortho"), DType.float32, 32)


# Rows past the GPU's shared memory (2 * N complex values per row): float32 N = 16384, float64
# N = 8192, and a Bluestein length (8191 is prime: L = 16384).
LONG = [(DType.float32, 32768), (DType.float64, 16384), (DType.float32, 2 * 8191), (DType.float64, 8191)]


@pytest.mark.parametrize("dtype,n", LONG, ids=[f"{d.name}-{n}" for d, n in LONG])
def test_long_rows(dtype, n, rng, device):
    x, spec = spectrum(rng, dtype, (2, n // 2 + 1), False)
    (got,) = run(device, dtype, [2, n // 2 + 1], lambda t: ops.irfft(t, n=n), x)
    check(got, np.fft.irfft(spec, n=n), dtype, n)


def test_transposed_and_empty_inputs(rng, device):
    x, spec = spectrum(rng, DType.float64, (9, 4), False)
    (got,) = run(device, DType.float64, [9, 4], lambda t: ops.irfft(ops.transpose(t, 0, 1), n=10), x)
    check(got, np.fft.irfft(spec.T, n=10), DType.float64, 10)
    empty = np.zeros((3, 0), np.float32)
    (got,) = run(device, DType.float32, [3, 0], lambda t: ops.irfft(t, n=4), empty)
    assert got.shape == (3, 4) and not got.any()


def test_eager(rng, device):
    x, spec = spectrum(rng, DType.float32, (3, 12), True)
    t = Tensor.constant(x, dtype=DType.float32, device=device)
    got = F.irfft(t, n=20, axis=0, normalization=Normalization.FORWARD, input_is_complex=True)
    assert list(got.shape) == [20, 12]
    check(got.to_numpy(), np.fft.irfft(spec, n=20, axis=0, norm="forward"), DType.float32, 20)


def test_inside_a_graph_f_stages_the_op():
    types = [TensorType(DType.float32, [4, 5], DeviceRef.CPU())]
    g = Graph("f", lambda t: F.irfft(t, n=6), input_types=types)
    assert "= irfft(%0) {axis=-1, input_is_complex=false, n=6, normalization=\"backward\"} : float32[4, 6]" in str(g)


def test_normalization_enum():
    assert Normalization.BACKWARD == "backward" and Normalization.ORTHO != "forward"
    assert Normalization("ortho") is Normalization.ORTHO
    assert len({Normalization.BACKWARD, Normalization.ORTHO, Normalization.FORWARD}) == 3


def _stage(dtype, shape, **kw):
    with Graph("bad", input_types=[TensorType(dtype, shape, DeviceRef.CPU())]) as g:
        return ops.irfft(g.inputs[0].tensor, **kw)


def test_staging_errors():
    assert list(_stage(DType.float32, ["b", 5]).shape) == ["b", 8]
    with pytest.raises(IndexError, match="irfft: axis: axis 2 is out of range for rank 2"):
        _stage(DType.float32, [3, 5], axis=2)
    with pytest.raises(IndexError, match="out of range for rank 1"):
        _stage(DType.float32, [3, 2], axis=1, input_is_complex=True)
    with pytest.raises(ValueError, match="irfft: n: the output length must be positive, got 0"):
        _stage(DType.float32, [3, 5], n=0)
    with pytest.raises(ValueError, match="must be positive, got -4"):
        _stage(DType.float32, [3, 5], n=-4)
    with pytest.raises(ValueError, match="input_is_complex needs a last dimension of 2"):
        _stage(DType.float32, [3, 5], input_is_complex=True)
    with pytest.raises(ValueError, match="input_is_complex needs a last dimension of 2"):
        _stage(DType.float32, [3, "c"], input_is_complex=True)
    with pytest.raises(TypeError, match="irfft: input_tensor: must be float32, float64, float16 or bfloat16, got int32"):
        _stage(DType.int32, [3, 5])
    with pytest.raises(ValueError, match="needs a static axis, but axis 1 is S; pass n"):
        _stage(DType.float32, [3, "S"])
    assert list(_stage(DType.float32, [3, "S"], n=6).shape) == [3, 6]
    with pytest.raises(ValueError, match="needs at least 2 values along axis 1"):
        _stage(DType.float32, [3, 1])
    with pytest.raises(ValueError, match='irfft: normalization: expected "backward", "ortho" or "forward", got "none"'):
        _stage(DType.float32, [3, 5], normalization="none")
    with pytest.raises(TypeError, match="irfft: normalization: expected a Normalization or a string"):
        _stage(DType.float32, [3, 5], normalization=1)
    with pytest.raises(TypeError, match="irfft: n: expected an int, got float"):
        _stage(DType.float32, [3, 5], n=4.0)
    with pytest.raises(TypeError, match="irfft: input_is_complex: expected a bool"):
        _stage(DType.float32, [3, 5], input_is_complex=1)
