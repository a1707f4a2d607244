"""Matmul epilogue fusion on the GPU: `residual + act(x @ w + bias)` runs as one GEMM whose
epilogue applies the bias, the activation and the residual. Checked against numpy float64 and
the CPU backend (which runs the same graph unfused) on every GEMM path: mma.sync (small M),
the Hopper wgmma kernel (M >= 256, where present), SIMT (odd K or f32), batched inputs folded
into rows, and batch broadcasting. Skips without a GPU."""

import math

import ml_dtypes
import numpy as np
import pytest

from engine_util import run
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops

pytestmark = pytest.mark.gpu
GPU, CPU = DeviceRef.GPU(), DeviceRef.CPU()
TOL = {DType.float32: 2e-4, DType.float16: 1e-2, DType.bfloat16: 4e-2}

ACTS = {
    "none": (lambda v: v, lambda v: v),
    "relu": (ops.relu, lambda v: np.maximum(v, 0)),
    "gelu": (ops.gelu, lambda v: 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))),
    "gelu_tanh": (lambda v: ops.gelu(v, approximate="tanh"),
                  lambda v: 0.5 * v * (1 + np.tanh(0.7978845608028654 * (v + 0.044715 * v**3)))),
    "silu": (ops.silu, lambda v: v / (1 + np.exp(-v))),
    "sigmoid": (ops.sigmoid, lambda v: 1 / (1 + np.exp(-v))),
}


def as_np(d):
    return ml_dtypes.bfloat16 if d is DType.bfloat16 else d.to_numpy()


def rand(rng, dtype, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(as_np(dtype))


def check(rng, gpu, dtype, xshape, k, n, act="none", bias=True, residual=True):
    act_g, act_np = ACTS[act]
    oshape = (*xshape[:-1], n)

    def fn(*args):
        x, w, *rest = args
        y = x @ w
        if bias:
            y = y + rest.pop(0)
        y = act_g(y)
        if residual:
            y = rest.pop(0) + y
        return y

    types = [TensorType(dtype, xshape, CPU), TensorType(dtype, (k, n), CPU)]
    x, w = rand(rng, dtype, xshape), rand(rng, dtype, (k, n), 1 / math.sqrt(k))
    inputs = [x, w]
    if bias:
        types.append(TensorType(dtype, (n,), CPU))
        inputs.append(rand(rng, dtype, (n,)))
    if residual:
        types.append(TensorType(dtype, oshape, CPU))
        inputs.append(rand(rng, dtype, oshape))
    gpu_types = [TensorType(t.dtype, t.shape, GPU) for t in types]
    (got,) = run(Graph("gemm_epi", fn, input_types=gpu_types), *inputs, device=gpu)
    (cpu,) = run(Graph("gemm_epi_cpu", fn, input_types=types), *inputs)
    f = [a.astype(np.float64) for a in inputs]
    ref = f[0] @ f[1]
    rest = f[2:]
    if bias:
        ref = ref + rest.pop(0)
    ref = act_np(ref)
    if residual:
        ref = ref + rest.pop(0)
    assert got.shape == oshape
    tol = TOL[dtype]
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(got.astype(np.float64), cpu.astype(np.float64), rtol=2 * tol, atol=2 * tol)


@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float16, DType.float32], ids=lambda d: d.name)
@pytest.mark.parametrize("act", list(ACTS))
def test_each_activation_with_bias_and_residual(rng, gpu, dtype, act):
    check(rng, gpu, dtype, (37, 64), 64, 72, act)


@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float16], ids=lambda d: d.name)
@pytest.mark.parametrize("m", [1, 129, 300, 1000])
@pytest.mark.parametrize("n", [300, 264])
def test_every_gemm_path_applies_the_epilogue(rng, gpu, dtype, m, n):
    # m >= 256 takes the wgmma kernel on Hopper, which reads B as it is when N % 8 == 0 (264:
    # a partial 256-wide tile and a partial 64-column box) and transposes it first otherwise.
    check(rng, gpu, dtype, (m, 128), 128, n, "gelu_tanh")


@pytest.mark.parametrize("bias,residual", [(True, False), (False, True), (False, False)])
def test_partial_epilogues(rng, gpu, bias, residual):
    check(rng, gpu, DType.bfloat16, (300, 64), 64, 256, "silu", bias=bias, residual=residual)


def test_odd_k_uses_the_simt_kernel_with_the_epilogue(rng, gpu):
    check(rng, gpu, DType.bfloat16, (20, 13), 13, 7, "relu")


def test_batched_rows_fold_into_one_gemm(rng, gpu):
    check(rng, gpu, DType.bfloat16, (3, 128, 64), 64, 96, "gelu")
    check(rng, gpu, DType.float16, (2, 5, 64), 64, 40, "relu")


def test_batch_broadcast_offsets_the_residual_per_batch(rng, gpu):
    # lhs [2, 3, M, K] against rhs [3, K, N]: the generic path launches one GEMM per batch
    dtype = DType.float32
    x, w = rand(rng, dtype, (2, 3, 5, 8)), rand(rng, dtype, (3, 8, 6))
    b, r = rand(rng, dtype, (6,)), rand(rng, dtype, (2, 3, 5, 6))
    types = [TensorType(dtype, a.shape, GPU) for a in (x, w, b, r)]
    (got,) = run(Graph("bb", lambda x, w, b, r: ops.relu(x @ w + b) + r, input_types=types), x, w, b, r, device=gpu)
    ref = np.maximum(x.astype(np.float64) @ w + b, 0) + r
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_constant_weights_fold_through_the_host_epilogue(rng, gpu):
    # Every input constant: the fused step folds at load on the host and gives the same values.
    w = rand(rng, DType.float32, (16, 8))
    x = rand(rng, DType.float32, (4, 16))
    b = rand(rng, DType.float32, (8,))

    def fn():
        cw = ops.constant(w, DType.float32, GPU)
        cx = ops.constant(x, DType.float32, GPU)
        cb = ops.constant(b, DType.float32, GPU)
        return ops.gelu(cx @ cw + cb)

    (got,) = run(Graph("folded", fn, input_types=[]), device=gpu)
    v = x.astype(np.float64) @ w + b
    ref = 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [136, 100])
def test_batched_b_on_the_hopper_path(rng, gpu, n):
    # both operands batched (no folding): the B map has a batch dimension, with and without
    # the transpose
    dtype = DType.bfloat16
    x, w = rand(rng, dtype, (3, 300, 64)), rand(rng, dtype, (3, 64, n), 1 / 8)
    b = rand(rng, dtype, (n,))
    types = [TensorType(dtype, a.shape, GPU) for a in (x, w, b)]
    (got,) = run(Graph("bmm", lambda x, w, b: x @ w + b, input_types=types), x, w, b, device=gpu)
    ref = np.einsum("bmk,bkn->bmn", x.astype(np.float64), w.astype(np.float64)) + b.astype(np.float64)
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=4e-2, atol=4e-2)
