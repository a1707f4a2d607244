"""The engine on the GPU: graphs on DeviceRef.GPU() against the CPU backend and numpy.
Every test skips without a GPU."""

import ml_dtypes
import numpy as np
import pytest

from engine_util import run
from max import driver
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops

pytestmark = pytest.mark.gpu
GPU, CPU = DeviceRef.GPU(), DeviceRef.CPU()

FLOATS = [DType.float32, DType.float16, DType.bfloat16, DType.float64]
TOL = {DType.float32: 1e-5, DType.float64: 1e-12, DType.float16: 2e-3, DType.bfloat16: 2e-2}


def as_np(d):
    return ml_dtypes.bfloat16 if d is DType.bfloat16 else d.to_numpy()


def both(fn, *types_and_inputs, gpu=None):
    """Runs fn as a graph on the CPU and on the GPU; returns both results (as float64)."""
    types = [t for t, _ in types_and_inputs]
    inputs = [x for _, x in types_and_inputs]
    cpu_graph = Graph("cpu", fn, input_types=[TensorType(t.dtype, t.shape, CPU) for t in types])
    gpu_graph = Graph("gpu", fn, input_types=[TensorType(t.dtype, t.shape, GPU) for t in types])
    c = run(cpu_graph, *inputs)
    g = run(gpu_graph, *inputs, device=gpu)
    return c, g


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_fused_elementwise_matches_cpu_and_numpy(rng, gpu, dtype):
    def fn(x, y):
        return ops.sigmoid(x * 2 + y) - ops.tanh(y) * ops.exp(-ops.abs(x)) + ops.gelu(x, approximate="tanh")

    t = TensorType(dtype, ("batch", 33), CPU)
    u = TensorType(dtype, (33,), CPU)
    for batch in [1, 1000]:
        x = rng.standard_normal((batch, 33)).astype(as_np(dtype))
        y = rng.standard_normal(33).astype(as_np(dtype))
        (c,), (g,) = both(fn, (t, x), (u, y), gpu=gpu)
        np.testing.assert_allclose(g.astype(np.float64), c.astype(np.float64), rtol=TOL[dtype], atol=TOL[dtype])
        xd, yd = x.astype(np.float64), y.astype(np.float64)
        ref = 1 / (1 + np.exp(-(xd * 2 + yd))) - np.tanh(yd) * np.exp(-np.abs(xd)) + 0.5 * xd * (1 + np.tanh(0.7978845608 * (xd + 0.044715 * xd**3)))
        np.testing.assert_allclose(g.astype(np.float64), ref, rtol=4 * TOL[dtype], atol=4 * TOL[dtype])


@pytest.mark.parametrize("dtype", [DType.int8, DType.int32, DType.int64, DType.uint8, DType.uint32])
def test_integer_arithmetic_and_comparisons_match_cpu(rng, gpu, dtype):
    def fn(a, b):
        return ops.where(a > b, (a * b + 3) // (ops.abs(b) + 1), (a - b) % 7), ops.max(a, b)

    info = np.iinfo(dtype.to_numpy())
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    a = rng.integers(lo, hi, (64, 9)).astype(dtype.to_numpy())
    b = rng.integers(lo, hi, (9,)).astype(dtype.to_numpy())
    c, g = both(fn, (TensorType(dtype, (64, 9), CPU), a), (TensorType(dtype, (9,), CPU), b), gpu=gpu)
    for x, y in zip(c, g):
        np.testing.assert_array_equal(x, y)


def test_casts_and_bool_logic_match_cpu(rng, gpu):
    def fn(x):
        m = ops.logical_and(x > 0, ops.logical_not(ops.is_nan(x)))
        return ops.cast(ops.where(m, x, -x), DType.bfloat16), ops.cast(x * 100, DType.int16), ops.cast(m, DType.float32)

    x = rng.standard_normal((7, 5, 3)).astype(np.float32)
    x[0, 0, 0] = np.nan
    c, g = both(fn, (TensorType(DType.float32, (7, 5, 3), CPU), x), gpu=gpu)
    for a, b in zip(c, g):
        np.testing.assert_array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


def test_transfers_inside_a_graph(rng, gpu):
    with Graph("t", input_types=[TensorType(DType.float32, (4, 4), CPU)]) as graph:
        x = graph.inputs[0].tensor
        on_gpu = ops.transfer_to(x, GPU) * 2
        graph.output(ops.transfer_to(on_gpu + 1, CPU), on_gpu)
    x = rng.standard_normal((4, 4)).astype(np.float32)
    host, dev = run(graph, x, device=gpu)
    np.testing.assert_allclose(host, x * 2 + 1)
    np.testing.assert_allclose(dev, x * 2)


def test_gpu_inputs_must_be_on_the_gpu(gpu):
    from engine_util import session

    g = Graph("in", lambda x: x + 1, input_types=[TensorType(DType.float32, (2,), GPU)])
    model = session(gpu).load(g)
    with pytest.raises(TypeError, match="input 0 is on cpu:0 but the graph expects it on gpu:0"):
        model.execute(driver.Buffer.from_numpy(np.zeros(2, np.float32)))
    out = model.execute(driver.Buffer.from_numpy(np.zeros(2, np.float32)).to(gpu))[0]
    assert out.device == gpu and out.to_numpy().tolist() == [1, 1]


MATMUL_SHAPES = [
    ((256, 512), (512, 128)),      # tensor-core path, whole tiles
    ((1, 4096), (4096, 64)),       # decode-like M = 1
    ((300, 200), (200, 72)),       # edges in M and N
    ((3, 17, 24), (24, 40)),       # batch with a shared right operand
    ((2, 1, 8, 16), (3, 16, 8)),   # broadcast batch dims
    ((5, 7), (7, 3)),              # odd K and N: SIMT path
    ((64,), (64, 16)),             # 1-D left operand
    ((4, 300, 64), (4, 64, 520)),  # Hopper path, batched operands
    ((2, 300, 64), (64, 100)),     # Hopper path, batches folded into rows
    ((1000, 1000), (1000, 1000)),  # Hopper path, many tiles and K tiles, ragged edges
]


@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float16, DType.float32, DType.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul_matches_numpy(rng, gpu, dtype, shapes):
    sa, sb = shapes
    a = (rng.standard_normal(sa) / 4).astype(as_np(dtype))
    b = (rng.standard_normal(sb) / 4).astype(as_np(dtype))
    with Graph("mm", input_types=[TensorType(dtype, sa, GPU), TensorType(dtype, sb, GPU)]) as g:
        g.output(ops.matmul(*g.inputs))
    (out,) = run(g, a, b, device=gpu)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    k = sa[-1]
    tol = {DType.bfloat16: 1e-2, DType.float16: 2e-3, DType.float32: 1e-5, DType.float64: 1e-12}[dtype]
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=tol, atol=tol * np.sqrt(k) / 4)
