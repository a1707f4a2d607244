"""Small-M matmul on the GPU through the engine (the split-K kernels of
crates/kernels-cuda/kernels/gemm_skinny.cu for decode shapes) against numpy float64: the grid
M x K x N of decode shapes for bf16/f16/f32, batches sharing B (folded into rows), shared A,
batched B, and a vector times a matrix. Every test skips without a GPU."""

import ml_dtypes
import numpy as np
import pytest

from engine_util import session
from max import driver, tuning
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops

pytestmark = pytest.mark.gpu
GPU = DeviceRef.GPU()

DTYPES = [DType.bfloat16, DType.float16, DType.float32]
MS = [1, 2, 3, 7, 16, 17, 64, 128]
KS = [1, 5, 64, 4096 + 8, 1000]
NS = [1, 7, 256, 4096, 11008]
# Output rounding (relative to the value) and f32 accumulation (relative to sum |a| |b|).
EPS_OUT = {DType.bfloat16: 2.0**-8, DType.float16: 2.0**-10, DType.float32: 4e-7}
EPS_ACC = {DType.bfloat16: 2e-5, DType.float16: 2e-5, DType.float32: 1e-5}


@pytest.fixture(autouse=True)
def skinny_kernels():
    """Products of fewer than 256 rows on these kernels on Hopper too (the Hopper GEMM takes
    16-bit products from 9 rows by default)."""
    with tuning.override(**{"gemm.min_m": 256}):
        yield


def as_np(d):
    return ml_dtypes.bfloat16 if d is DType.bfloat16 else d.to_numpy()


def load(gpu, a_shape, b_shape, dtype):
    with Graph("skinny", input_types=[TensorType(dtype, a_shape, GPU), TensorType(dtype, b_shape, GPU)]) as g:
        g.output(ops.matmul(*g.inputs))
    return session(gpu).load(g)


def execute(model, gpu, *arrays):
    args = [driver.Buffer.from_numpy(np.ascontiguousarray(x)).to(gpu) for x in arrays]
    return [o.to_numpy() for o in model.execute(*args)]


def check(out, a, b, dtype, what):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = np.matmul(a64, b64)
    mag = np.matmul(np.abs(a64), np.abs(b64))
    got = np.asarray(out).astype(np.float64)
    assert got.shape == ref.shape, what
    tiny = 1e-7 if dtype is DType.float16 else 1e-30
    tol = EPS_OUT[dtype] * np.abs(ref) + EPS_ACC[dtype] * mag + tiny
    bad = ~(np.abs(got - ref) <= tol)
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, np.abs(got - ref) - tol, -np.inf)), ref.shape)
        pytest.fail(f"{what}: {bad.sum()} of {bad.size} wrong, e.g. at {i}: {got[i]} vs {ref[i]} (tol {tol[i]})")


def rand(rng, shape, dtype):
    return (rng.standard_normal(shape) / 4).astype(as_np(dtype))


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_decode_grid_matches_numpy(rng, gpu, dtype, k, n):
    """Every M of the grid through one model with a symbolic row count."""
    model = load(gpu, ("m", k), (k, n), dtype)
    b = rand(rng, (k, n), dtype)
    for m in MS:
        a = rand(rng, (m, k), dtype)
        (out,) = execute(model, gpu, a, b)
        check(out, a, b, dtype, f"{dtype.name} m={m} k={k} n={n}")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("m,k,n", [(1, 4104, 4096), (7, 1000, 256), (17, 64, 11008), (16, 4104, 7)])
def test_batches_sharing_b(rng, gpu, dtype, m, k, n):
    """[batch, m, k] @ [k, n]: the batches fold into the rows of one product."""
    model = load(gpu, ("batch", m, k), (k, n), dtype)
    b = rand(rng, (k, n), dtype)
    for batch in [1, 3, 8]:
        a = rand(rng, (batch, m, k), dtype)
        (out,) = execute(model, gpu, a, b)
        check(out, a, b, dtype, f"{dtype.name} batch={batch} m={m} k={k} n={n}")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("m,k,n", [(1, 4104, 256), (3, 1000, 4096), (16, 64, 7), (64, 5, 256)])
def test_batched_b_and_shared_a(rng, gpu, dtype, m, k, n):
    """[3, m, k] @ [3, k, n] and [m, k] @ [3, k, n]."""
    b = rand(rng, (3, k, n), dtype)
    model = load(gpu, (3, m, k), (3, k, n), dtype)
    a = rand(rng, (3, m, k), dtype)
    (out,) = execute(model, gpu, a, b)
    check(out, a, b, dtype, f"{dtype.name} batched m={m} k={k} n={n}")
    model = load(gpu, (m, k), (3, k, n), dtype)
    a = rand(rng, (m, k), dtype)
    (out,) = execute(model, gpu, a, b)
    check(out, a, b, dtype, f"{dtype.name} shared A m={m} k={k} n={n}")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_vector_times_matrix(rng, gpu, dtype):
    """[k] @ [k, n] (one row) and odd sizes around the tile widths."""
    for k, n in [(4096, 4096), (1000, 11008), (4103, 129), (3, 1)]:
        model = load(gpu, (k,), (k, n), dtype)
        a, b = rand(rng, (k,), dtype), rand(rng, (k, n), dtype)
        (out,) = execute(model, gpu, a, b)
        check(out, a, b, dtype, f"{dtype.name} vector k={k} n={n}")
