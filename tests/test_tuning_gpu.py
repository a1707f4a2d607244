"""Each GPU tuning knob that is read at launch (rather than in a pure selection function with
table tests in crates/kernels-cuda) changes what runs: the launch record differs, and the
results still match the knob-free run. Skips without a GPU; the Hopper kernels' knobs skip
off sm_90."""

import ml_dtypes
import numpy as np
import pytest

from engine_util import session
from max import driver, tuning
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops
from max.graph.quantization import QuantizationEncoding as Q
from max.graph.type import ConvInputLayout, FilterLayout

pytestmark = pytest.mark.gpu
GPU = DeviceRef.GPU()
BF16 = ml_dtypes.bfloat16


@pytest.fixture(scope="module")
def hopper(gpu):
    if not gpu.architecture_name.startswith("sm_90"):
        pytest.skip("the Hopper kernels need sm_90")
    return gpu


def _run(gpu, graph, inputs, spec=""):
    """Runs `graph` under `spec` with CUDA graphs off (a replay launches nothing); the results
    and the launch log."""
    with tuning.override(spec, cuda_graphs="off"):
        model = session(gpu).load(graph)
        args = [driver.Buffer.from_numpy(np.ascontiguousarray(x)).to(gpu) for x in inputs]
        with tuning.record_launches() as log:
            out = [o.to_numpy() for o in model.execute(*args)]
    return out, log


def _matmul(m, n, k):
    types = [TensorType(DType.bfloat16, (m, k), GPU), TensorType(DType.bfloat16, (k, n), GPU)]
    return Graph("mm", lambda a, b: ops.matmul(a, b), input_types=types)


def _close(got, want, rtol=2e-2):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert np.abs(got - want).max() <= rtol * (np.abs(want).max() + 1e-6)


@pytest.mark.parametrize(
    "spec, field, default_holds, forced_holds",
    [
        ("gemm.transpose=1", "n_major", lambda v: v == 1, lambda v: v == 0),
        ("gemm.grid=8", "grid", lambda v: v > 8, lambda v: v <= 8),
        ("gemm.epilogue=direct", "staged", lambda v: v == 1, lambda v: v == 0),
    ],
)
def test_gemm_launch_knobs(hopper, rng, spec, field, default_holds, forced_holds):
    a = rng.standard_normal((512, 1024)).astype(BF16)
    b = rng.standard_normal((1024, 1024)).astype(BF16)
    want = a.astype(np.float64) @ b.astype(np.float64)
    (base,), log0 = _run(hopper, _matmul(512, 1024, 1024), [a, b])
    (forced,), log1 = _run(hopper, _matmul(512, 1024, 1024), [a, b], spec)
    r0, r1 = log0.last("gemm_sm90p"), log1.last("gemm_sm90p")
    assert r0 is not None and r1 is not None
    assert default_holds(r0[field]) and forced_holds(r1[field]), (r0, r1)
    _close(base, want)
    _close(forced, want)


def test_gemm_min_m_moves_products_off_the_hopper_kernel(hopper, rng):
    a = rng.standard_normal((256, 512)).astype(BF16)
    b = rng.standard_normal((512, 512)).astype(BF16)
    (base,), log0 = _run(hopper, _matmul(256, 512, 512), [a, b])
    (forced,), log1 = _run(hopper, _matmul(256, 512, 512), [a, b], "gemm.min_m=512")
    assert log0.count("gemm_sm90p") == 1 and log1.count("gemm_sm90p") == 0
    _close(forced, a.astype(np.float64) @ b.astype(np.float64))
    _close(base, forced)


def test_conv_sm90_switch(hopper, rng):
    types = [TensorType(DType.bfloat16, (2, 14, 14, 64), GPU), TensorType(DType.bfloat16, (3, 3, 64, 64), GPU)]

    def fn(x, f):
        return ops.conv2d(
            x, f, padding=(1, 1, 1, 1), input_layout=ConvInputLayout.NHWC, filter_layout=FilterLayout.RSCF
        )

    x = rng.standard_normal((2, 14, 14, 64)).astype(BF16)
    f = (rng.standard_normal((3, 3, 64, 64)) / 24).astype(BF16)
    (on,), log_on = _run(hopper, Graph("conv", fn, input_types=types), [x, f])
    (off,), log_off = _run(hopper, Graph("conv", fn, input_types=types), [x, f], "conv.sm90=0")
    assert log_on.count("conv_sm90") == 1 and log_off.count("conv_sm90") == 0
    _close(on, off)


def _q4_0_weights(rng, n, k):
    blocks = rng.integers(0, 256, size=(n, k // 32, 18), dtype=np.uint8)
    scale = (rng.standard_normal((n, k // 32)) * 0.05).astype(np.float16)
    blocks[:, :, 0:2] = scale.view(np.uint8).reshape(n, k // 32, 2)
    return blocks.reshape(n, k // 32 * 18)


@pytest.mark.parametrize(
    "spec, holds",
    [
        ("qgemv.mma=0", lambda r: r["mma"] == 0 and r["streaming"] == 1),
        ("qgemv.mma=0,qgemv.stream=0", lambda r: r["mma"] == 0 and r["streaming"] == 0),
        ("qgemv.split=2", lambda r: r["mma"] == 1 and r["split"] == 2),
        ("qgemv.grid=1", lambda r: r["blocks"] == 1),
        ("qgemv.pdl=0", lambda r: r["mma"] == 1 and r["pdl"] == 0),
    ],
)
def test_qgemv_knobs(hopper, rng, spec, holds):
    n, k = 3072, 2048  # as few weights as take the tensor-core GEMV by default
    w = _q4_0_weights(rng, n, k)
    lhs = rng.standard_normal((1, k)).astype(np.float32)
    types = [TensorType(DType.float32, (1, k), GPU), TensorType(DType.uint8, w.shape, GPU)]
    graph = Graph("q", lambda a, b: ops.qmatmul(Q.Q4_0, None, a, b), input_types=types)
    (base,), log0 = _run(hopper, graph, [lhs, w])
    (forced,), log1 = _run(hopper, graph, [lhs, w], spec)
    r0, r1 = log0.last("qgemv"), log1.last("qgemv")
    assert r0["mma"] == 1 and r0.get("pdl") == 1, r0
    assert holds(r1) and r0 != r1, (r0, r1)
    np.testing.assert_allclose(forced, base, rtol=1e-3, atol=1e-3 * np.abs(base).max())


@pytest.mark.parametrize("n, k", [(576, 1536), (2048, 2048)])
def test_small_q4_products_take_the_general_gemv_unless_told(hopper, rng, n, k):
    """Below 3072 x 2048 weights one row takes qgemv.cu (launch/quant.rs: SMALL_WEIGHTS);
    qgemv.mma=1 and qgemv.stream=1 still reach the other kernels, with the same values."""
    w = _q4_0_weights(rng, n, k)
    lhs = rng.standard_normal((1, k)).astype(np.float32)
    types = [TensorType(DType.float32, (1, k), GPU), TensorType(DType.uint8, w.shape, GPU)]
    graph = Graph("q", lambda a, b: ops.qmatmul(Q.Q4_0, None, a, b), input_types=types)
    (base,), log0 = _run(hopper, graph, [lhs, w])
    (mma,), log1 = _run(hopper, graph, [lhs, w], "qgemv.mma=1")
    (stream,), log2 = _run(hopper, graph, [lhs, w], "qgemv.mma=0,qgemv.stream=1")
    r0, r1, r2 = log0.last("qgemv"), log1.last("qgemv"), log2.last("qgemv")
    assert (r0["mma"], r0["streaming"], r1["mma"], r2["mma"], r2["streaming"]) == (0, 0, 1, 0, 1), (r0, r1, r2)
    for out in (mma, stream):
        np.testing.assert_allclose(out, base, rtol=1e-3, atol=1e-3 * np.abs(base).max())


def test_fused_two_vectors_knob(gpu, rng):
    x = rng.standard_normal((64, 1024)).astype(BF16)
    graph = Graph("relu", lambda a: ops.relu(a), input_types=[TensorType(DType.bfloat16, (64, 1024), GPU)])
    (base,), log0 = _run(gpu, graph, [x])
    (forced,), log1 = _run(gpu, graph, [x], "fusion.vec2=0")
    assert log0.last("fused")["kernel"] == "fused_vec2"
    assert log1.last("fused")["kernel"] == "fused_vec"
    np.testing.assert_array_equal(np.asarray(base, np.float32), np.maximum(x.astype(np.float32), 0))
    np.testing.assert_array_equal(np.asarray(forced, np.float32), np.asarray(base, np.float32))
