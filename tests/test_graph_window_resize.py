"""ops.hann_window against numpy's window, and ops.resize (bicubic) against a per-pixel
evaluation of the cubic convolution written independently of the op's matrices; both on the
CPU, with their documented errors."""

import numpy as np
import pytest

from max.driver import CPU, Tensor
from max.dtype import DType
from max.engine import InferenceSession
from max.graph import DeviceRef, Graph, TensorType, ops

CPU_REF = DeviceRef.CPU()


def _run(graph, *inputs):
    model = InferenceSession(devices=[CPU()]).load(graph)
    return [o.to_numpy() for o in model.execute(*[Tensor.from_numpy(x) for x in inputs])]


@pytest.mark.parametrize("n", [0, 1, 2, 7, 64, 400])
def test_hann_window_matches_numpy(n):
    with Graph("h", input_types=[]) as g:
        g.output(ops.hann_window(n, CPU_REF), ops.hann_window(n, CPU_REF, periodic=False, dtype=DType.float64))
    periodic, symmetric = _run(g)
    want_sym = np.hanning(n) if n != 1 else np.ones(1)
    want_per = np.hanning(n + 1)[:-1] if n > 1 else np.ones(n)
    assert periodic.dtype == np.float32 and symmetric.dtype == np.float64
    np.testing.assert_allclose(periodic, want_per, atol=1e-7)
    np.testing.assert_allclose(symmetric, want_sym, atol=1e-15)


def test_hann_window_errors():
    with Graph("h", input_types=[]):
        with pytest.raises(ValueError, match="hann_window: window_length must not be negative, got -1"):
            ops.hann_window(-1, CPU_REF)
        with pytest.raises(TypeError, match="hann_window: window_length must be an int, got float"):
            ops.hann_window(4.0, CPU_REF)
        with pytest.raises(TypeError, match="hann_window: dtype must be a floating-point type"):
            ops.hann_window(4, CPU_REF, dtype=DType.int32)


def _keys(x, a=-0.75):
    """The cubic convolution kernel W(x) (Keys, a = -0.75)."""
    x = abs(x)
    if x <= 1:
        return (a + 2) * x**3 - (a + 3) * x**2 + 1
    if x < 2:
        return a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a
    return 0.0


def _bicubic_ref(img, h_out, w_out):
    """Each output pixel from the 4 x 4 input pixels around its half-pixel-centred source,
    weights W(distance), coordinates past the border clamped to the edge."""
    n, c, h, w = img.shape
    out = np.zeros((n, c, h_out, w_out))
    for i in range(h_out):
        sy = (i + 0.5) * h / h_out - 0.5
        y0 = int(np.floor(sy))
        for j in range(w_out):
            sx = (j + 0.5) * w / w_out - 0.5
            x0 = int(np.floor(sx))
            acc = np.zeros((n, c))
            for yy in range(y0 - 1, y0 + 3):
                for xx in range(x0 - 1, x0 + 3):
                    wgt = _keys(sy - yy) * _keys(sx - xx)
                    acc += wgt * img[:, :, min(max(yy, 0), h - 1), min(max(xx, 0), w - 1)]
            out[:, :, i, j] = acc
    return out


@pytest.mark.parametrize("dtype", [DType.float32, DType.float64, DType.bfloat16])
@pytest.mark.parametrize("size", [(5, 7, 9, 4), (4, 4, 4, 4), (3, 8, 12, 2), (1, 1, 3, 5)])
def test_resize_bicubic_matches_the_per_pixel_formula(rng, dtype, size):
    h, w, h_out, w_out = size
    x = rng.standard_normal((2, 3, h, w))
    np_type = {DType.float32: np.float32, DType.float64: np.float64}.get(dtype)
    if np_type is None:
        import ml_dtypes

        np_type = ml_dtypes.bfloat16
    xt = x.astype(np_type)
    with Graph("r", input_types=[TensorType(dtype, [2, 3, h, w], CPU_REF)]) as g:
        g.output(ops.resize(g.inputs[0], [2, 3, h_out, w_out], ops.InterpolationMode.BICUBIC))
    (got,) = _run(g, xt)
    assert got.shape == (2, 3, h_out, w_out) and got.dtype == xt.dtype
    want = _bicubic_ref(xt.astype(np.float64), h_out, w_out)
    tol = {DType.float32: 1e-5, DType.float64: 1e-12, DType.bfloat16: 3e-2}[dtype]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


def test_resize_errors():
    with Graph("r", input_types=[TensorType(DType.float32, [1, 2, 4, 4], CPU_REF),
                                 TensorType(DType.float32, [2, 4, 4], CPU_REF),
                                 TensorType(DType.int32, [1, 2, 4, 4], CPU_REF)]) as g:
        x, x3, xi = g.inputs
        with pytest.raises(NotImplementedError, match="only InterpolationMode.BICUBIC"):
            ops.resize(x, [1, 2, 8, 8])  # the default, BILINEAR, as in MAX
        with pytest.raises(NotImplementedError, match="a single integer size"):
            ops.resize(x, 8, ops.InterpolationMode.BICUBIC)
        with pytest.raises(ValueError, match="input must have rank 4"):
            ops.resize(x3, [2, 4, 8, 8], ops.InterpolationMode.BICUBIC)
        with pytest.raises(ValueError, match="shape must have 4 elements"):
            ops.resize(x, [8, 8], ops.InterpolationMode.BICUBIC)
        with pytest.raises(ValueError, match="C must stay 2, got 3"):
            ops.resize(x, [1, 3, 8, 8], ops.InterpolationMode.BICUBIC)
        with pytest.raises(ValueError, match="the new height must be positive"):
            ops.resize(x, [1, 2, 0, 8], ops.InterpolationMode.BICUBIC)
        with pytest.raises(TypeError, match="must be a floating-point tensor, got int32"):
            ops.resize(xi, [1, 2, 8, 8], ops.InterpolationMode.BICUBIC)
