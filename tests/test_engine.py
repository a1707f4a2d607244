"""max.engine: compile and execute, plans per input shape, input checking and weights, with
fused elementwise graphs, integer arithmetic, casts and matmuls against numpy, on each device;
the host's threads and memory plan (CPU only); transfers inside a graph and input placement
(GPU only)."""

import os
import threading

import ml_dtypes
import numpy as np
import pytest

from engine_util import build, cpu_type, run, session
from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, Weight, ops

CPU = DeviceRef.CPU()
FLOATS = [DType.float32, DType.float16, DType.bfloat16, DType.float64]
TOL = {DType.float32: 1e-5, DType.float64: 1e-12, DType.float16: 2e-3, DType.bfloat16: 2e-2}


def as_np(d):
    return ml_dtypes.bfloat16 if d is DType.bfloat16 else d.to_numpy()


def on(device, dtype, shape) -> TensorType:
    return TensorType(dtype, shape, DeviceRef.from_device(device))


def upload(device, *arrays):
    return [driver.Buffer.from_numpy(np.ascontiguousarray(a)).to(device) for a in arrays]


# -- on each device ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_fused_elementwise_matches_numpy(rng, device, dtype):
    def fn(x, y):
        return [
            ops.sigmoid(x * 2 + y) - ops.tanh(y) * ops.exp(-ops.abs(x)) + ops.gelu(x, approximate="tanh"),
            ops.sigmoid(x * 2 + y) / (ops.abs(y) + 1),
        ]

    g = build(fn, on(device, dtype, ("batch", 33)), on(device, dtype, (33,)))
    for batch in [1, 7, 1000]:
        x = rng.standard_normal((batch, 33)).astype(as_np(dtype))
        y = rng.standard_normal(33).astype(as_np(dtype))
        a, b = run(g, x, y, device=device)
        xd, yd = x.astype(np.float64), y.astype(np.float64)
        sig = 1 / (1 + np.exp(-(xd * 2 + yd)))
        gelu = 0.5 * xd * (1 + np.tanh(0.7978845608 * (xd + 0.044715 * xd**3)))
        np.testing.assert_allclose(a.astype(np.float64), sig - np.tanh(yd) * np.exp(-np.abs(xd)) + gelu, rtol=4 * TOL[dtype], atol=4 * TOL[dtype])
        np.testing.assert_allclose(b.astype(np.float64), sig / (np.abs(yd) + 1), rtol=4 * TOL[dtype], atol=4 * TOL[dtype])


def test_one_plan_per_input_shape(rng, device):
    model = session(device).load(build(lambda x: ops.exp(x) * x, on(device, DType.float32, ("batch", 3))))
    for batch in [1, 7, 64, 7]:
        x = rng.standard_normal((batch, 3)).astype(np.float32)
        (out,) = model.execute(*upload(device, x))
        np.testing.assert_allclose(out.to_numpy(), np.exp(x.astype(np.float64)) * x, rtol=1e-5)
    if device.is_host:  # the plan count is the host scheduler's
        assert model._core.num_plans == 3


def test_input_checks(device):
    t = on(device, DType.float32, ("batch", 3))
    model = session(device).load(build(lambda x, y: x + y, t, t))
    (good,) = upload(device, np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="input 1: expected dtype float32"):
        model.execute(good, *upload(device, np.zeros((2, 3), np.int32)))
    with pytest.raises(ValueError, match="dimension 1 must be 3"):
        model.execute(good, *upload(device, np.zeros((2, 4), np.float32)))
    with pytest.raises(ValueError, match="symbolic dimension 'batch' is 2 in an earlier input but 5"):
        model.execute(good, *upload(device, np.zeros((5, 3), np.float32)))
    with pytest.raises(ValueError, match="takes 2 inputs but 1"):
        model.execute(good)
    with pytest.raises(TypeError):
        model.execute(good, "x")
    (out,) = model.execute(good, good)  # the model is still usable
    assert out.shape == (2, 3)


def test_weights_registry(rng, device):
    w = Weight("w", DType.float32, (3,), DeviceRef.from_device(device))
    with Graph("w", input_types=[on(device, DType.float32, ("n", 3))]) as g:
        g.output(g.inputs[0] * w)
    weights = rng.standard_normal(3).astype(np.float32)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    (out,) = run(g, x, device=device, weights={"w": weights})
    np.testing.assert_array_equal(out, x * weights)  # one f32 rounding, as numpy's
    with pytest.raises(ValueError, match='weight "w" is missing from weights_registry'):
        session(device).load(g, weights_registry={"v": weights})
    with pytest.raises(ValueError, match='weight "w": the graph expects float32'):
        session(device).load(g, weights_registry={"w": weights.astype(np.float64)})
    with pytest.raises(ValueError, match='weight "w": the graph expects'):
        session(device).load(g, weights_registry={"w": np.ones(4, np.float32)})


@pytest.mark.parametrize("dtype", [DType.int8, DType.int32, DType.int64, DType.uint8, DType.uint32], ids=lambda d: d.name)
def test_integer_arithmetic_and_comparisons(rng, device, dtype):
    def fn(a, b):
        return ops.where(a > b, (a * b + 3) // (ops.abs(b) + 1), (a - b) % 7), ops.max(a, b)

    t = dtype.to_numpy().type
    info = np.iinfo(t)
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    a = rng.integers(lo, hi, (64, 9)).astype(t)
    b = rng.integers(lo, hi, (9,)).astype(t)
    sel, mx = run(build(fn, on(device, dtype, (64, 9)), on(device, dtype, (9,))), a, b, device=device)
    with np.errstate(over="ignore"):  # the engine's integers wrap, as numpy's do
        ref = np.where(a > b, (a * b + t(3)) // (np.abs(b) + t(1)), (a - b) % t(7))
    assert sel.dtype == t and mx.dtype == t
    np.testing.assert_array_equal(sel, ref)
    np.testing.assert_array_equal(mx, np.maximum(a, b))


def test_casts_and_bool_logic(rng, device):
    def fn(x):
        m = ops.logical_and(x > 0, ops.logical_not(ops.is_nan(x)))
        return ops.cast(ops.where(m, x, -x), DType.bfloat16), ops.cast(x * 100, DType.int16), ops.cast(m, DType.float32)

    x = rng.standard_normal((7, 5, 3)).astype(np.float32) * np.float32(400)
    x[0, 0, 0] = np.nan
    bf, i16, mf = run(build(fn, on(device, DType.float32, (7, 5, 3))), x, device=device)
    m = (x > 0) & ~np.isnan(x)
    np.testing.assert_array_equal(bf.view(np.uint16), np.where(m, x, -x).astype(ml_dtypes.bfloat16).view(np.uint16))
    hundred = x * np.float32(100)  # in float32, then truncated and saturated; NaN -> 0
    with np.errstate(invalid="ignore"):
        want = np.where(np.isnan(hundred), 0, np.clip(np.trunc(hundred), -(2**15), 2**15 - 1)).astype(np.int16)
    np.testing.assert_array_equal(i16, want)
    np.testing.assert_array_equal(mf, m.astype(np.float32))


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
def test_matmul_matches_numpy(rng, device, dtype, shapes):
    sa, sb = shapes
    a = (rng.standard_normal(sa) / 4).astype(as_np(dtype))
    b = (rng.standard_normal(sb) / 4).astype(as_np(dtype))
    (out,) = run(build(ops.matmul, on(device, dtype, sa), on(device, dtype, sb)), a, b, device=device)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    k = sa[-1]
    tol = {DType.bfloat16: 1e-2, DType.float16: 2e-3, DType.float32: 1e-5, DType.float64: 1e-12}[dtype]
    assert out.dtype == a.dtype
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=tol, atol=tol * np.sqrt(k) / 4)


# -- the session and the host's threads and memory plan (CPU only) ------------------------------


def test_scalars_and_call_forms():
    g = build(lambda x, s: x * s, cpu_type(DType.float32, (2,)), cpu_type(DType.float32, ()))
    model = session().load(g)
    assert model(np.ones(2, np.float32), 3.0)[0].to_numpy().tolist() == [3.0, 3.0]
    assert model(input0=np.ones(2, np.float32), input1=np.float32(2))[0].to_numpy().tolist() == [2.0, 2.0]
    assert [s.name for s in model.input_metadata] == ["input0", "input1"]
    assert model.input_metadata[0].shape == [2] and model.input_metadata[1].dtype is DType.float32


def test_weights_registry():
    w = Weight("w", DType.float32, (3,), CPU)
    with Graph("w", input_types=[cpu_type(DType.float32, ("n", 3))]) as g:
        g.output(g.inputs[0] * w)
    weights = np.array([1, 2, 3], np.float32)
    (out,) = run(g, np.ones((2, 3), np.float32), weights={"w": weights})
    assert out.tolist() == [[1, 2, 3], [1, 2, 3]]
    with pytest.raises(ValueError, match='weight "w" is missing from weights_registry'):
        session().load(g, weights_registry={"v": weights})
    with pytest.raises(ValueError, match='weight "w": the graph expects float32'):
        session().load(g, weights_registry={"w": weights.astype(np.float64)})
    with pytest.raises(ValueError, match='weight "w": the graph expects'):
        session().load(g, weights_registry={"w": np.ones(4, np.float32)})


def test_devices_and_errors():
    with pytest.raises(TypeError):
        engine.InferenceSession(devices=["cpu"])
    with pytest.raises(ValueError):
        engine.InferenceSession(devices=[driver.CPU()], num_threads=0)
    g = Graph("gpu", lambda x: x + 1, input_types=[TensorType(DType.float32, (2,), DeviceRef.GPU())])
    if driver.accelerator_count() == 0:
        with pytest.raises(ValueError, match="uses gpu:0 but the session has no such device"):
            session().load(g)
    with pytest.raises(TypeError, match="expects a max.graph.Graph"):
        session().load(42)


def test_a_panic_in_the_engine_is_a_runtime_error(rng):
    """A bug that panics inside load, execute or a weight reader reaches Python as a
    RuntimeError naming the call (not pyo3's PanicException, which `except Exception` misses),
    and the process, with the models it holds, stays usable."""
    from max._core import engine as core

    model = session().load(build(lambda x: x * 2, cpu_type(DType.float32, [3])))
    for _ in range(2):
        with pytest.raises(RuntimeError, match=r"internal error in _panic_under_guard .*: boom 7"):
            core._panic_under_guard("boom 7")
    x = rng.standard_normal(3).astype(np.float32)
    np.testing.assert_array_equal(model.execute(driver.Buffer.from_numpy(x))[0].to_numpy(), x * 2)


def test_cpu_two_threads_share_a_model(rng):
    g = build(lambda x: ops.tanh(x) * 3 - x, cpu_type(DType.float64, ("n",)))
    model = session().load(g)
    results, errors = {}, []

    def work(i):
        try:
            x = np.linspace(-3, 3, 10_000 + i)
            for _ in range(20):
                (out,) = model.execute(x)
                np.testing.assert_allclose(out.to_numpy(), np.tanh(x) * 3 - x)
            results[i] = True
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 2


def test_cpu_models_running_at_once_on_one_pool_finish_and_agree(rng):
    """Several threads executing two models with parallel steps (matmuls split across the
    workers) at once: while one execution keeps the pool's workers awake, the others run on them
    too; every result is right and nothing waits forever."""
    g1 = build(lambda a, b: ops.relu(a @ b) + 1, cpu_type(DType.float32, (192, 256)), cpu_type(DType.float32, (256, 320)))
    g2 = build(lambda a, b: ops.tanh(a @ b), cpu_type(DType.float32, (192, 256)), cpu_type(DType.float32, (256, 320)))
    models = [session().load(g1), session().load(g2)]
    refs = [lambda a, b: np.maximum(a @ b, 0) + 1, lambda a, b: np.tanh(a @ b)]
    errors = []

    def work(i):
        try:
            r = np.random.default_rng(i)
            for _ in range(25):
                a = r.standard_normal((192, 256)).astype(np.float32)
                b = r.standard_normal((256, 320)).astype(np.float32) / 16
                (out,) = models[i % 2].execute(a, b)
                np.testing.assert_allclose(out.to_numpy(), refs[i % 2](a, b), rtol=1e-4, atol=1e-4)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "an execution did not finish"
    assert not errors, errors[0]


def test_cpu_thread_count_is_respected():
    g = build(lambda x: x + 1, cpu_type(DType.float32, (4,)))
    one = engine.InferenceSession(devices=[driver.CPU()], num_threads=1).load(g)
    assert one._core.num_threads == 1
    assert one.execute(np.zeros(4, np.float32))[0].to_numpy().tolist() == [1, 1, 1, 1]
    three = engine.InferenceSession(devices=[driver.CPU()], num_threads=3).load(g)
    assert three._core.num_threads == 3


def _os_threads():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="counts threads through /proc")
def test_cpu_models_share_their_worker_threads():
    """Loading many models keeps one worker pool per thread count, not one per model."""
    g = build(lambda x: x * 2, cpu_type(DType.float32, (4,)))
    session = engine.InferenceSession(devices=[driver.CPU()], num_threads=4)
    first = session.load(g)
    before = _os_threads()
    models = [first] + [session.load(g) for _ in range(24)]
    assert _os_threads() - before < 4, "each model started its own worker threads"
    for m in models:
        assert m.execute(np.ones(4, np.float32))[0].to_numpy().tolist() == [2, 2, 2, 2]


def _arena_and_bound(report):
    import re

    m = re.search(r"arena cpu:0: (\d+) bytes for (\d+) tensors; max-live lower bound (\d+) bytes", report)
    assert m, report
    return int(m.group(1)), int(m.group(3)), int(m.group(2))


def test_cpu_memory_plan_of_a_50_layer_mlp_is_near_the_lower_bound(rng):
    widths = [64 + 32 * (i % 5) for i in range(51)]
    weights = [rng.standard_normal((widths[i], widths[i + 1])).astype(np.float32) / 8 for i in range(50)]
    biases = [rng.standard_normal(widths[i + 1]).astype(np.float32) for i in range(50)]
    with Graph("mlp50", input_types=[cpu_type(DType.float32, ("batch", widths[0]))]) as g:
        x = g.inputs[0].tensor
        for w, b in zip(weights, biases):
            x = ops.relu(ops.matmul(x, ops.constant(w, DType.float32, CPU)) + ops.constant(b, DType.float32, CPU))
        g.output(x)
    model = session().load(g)
    inp = rng.standard_normal((32, widths[0])).astype(np.float32)
    report = model._plan_report(inp)
    arena, bound, tensors = _arena_and_bound(report)
    assert tensors >= 99 and arena <= 1.05 * bound, report
    ref = inp.astype(np.float64)
    for w, b in zip(weights, biases):
        ref = np.maximum(ref @ w + b, 0)
    (out,) = model.execute(inp)
    np.testing.assert_allclose(out.to_numpy(), ref, rtol=2e-4, atol=1e-4)


# -- GPU only ---------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(2**61, 2), (2**62, 2), (2**32, 2**31, 2)])
def test_a_value_larger_than_any_memory_is_refused(shape):
    # Its bytes once multiplied out past 2^64 to a few, and the process crashed writing them.
    s = engine.InferenceSession(devices=[driver.CPU()])
    with Graph("huge", input_types=[cpu_type(DType.float32, (2,))]) as g:
        g.output(ops.exp(ops.broadcast_to(g.inputs[0].tensor, shape))[:1])
    with pytest.raises(MemoryError, match=r"needs more than 281474976710656 bytes"):
        s.load(g).execute(driver.Buffer.from_numpy(np.ones(2, np.float32)))
    with Graph("small", input_types=[cpu_type(DType.float32, (2,))]) as g:
        g.output(ops.exp(ops.broadcast_to(g.inputs[0].tensor, (3, 2)))[:1])
    out = s.load(g).execute(driver.Buffer.from_numpy(np.zeros(2, np.float32)))[0]
    np.testing.assert_array_equal(out.to_numpy(), np.ones((1, 2), np.float32))


def test_gpu_transfers_inside_a_graph(rng, gpu):
    here = DeviceRef.from_device(gpu)
    with Graph("t", input_types=[TensorType(DType.float32, (4, 4), CPU)]) as graph:
        x = graph.inputs[0].tensor
        on_gpu = ops.transfer_to(x, here) * 2
        graph.output(ops.transfer_to(on_gpu + 1, CPU), on_gpu)
    x = rng.standard_normal((4, 4)).astype(np.float32)
    host, dev = run(graph, x, device=gpu)
    np.testing.assert_array_equal(host, x * 2 + 1)
    np.testing.assert_array_equal(dev, x * 2)


@pytest.mark.gpu
def test_gpu_inputs_must_be_on_the_gpu(gpu):
    g = Graph("in", lambda x: x + 1, input_types=[on(gpu, DType.float32, (2,))])
    model = session(gpu).load(g)
    with pytest.raises(TypeError, match="input 0 is on cpu:0 but the graph expects it on gpu:0"):
        model.execute(driver.Buffer.from_numpy(np.zeros(2, np.float32)))
    out = model.execute(driver.Buffer.from_numpy(np.zeros(2, np.float32)).to(gpu))[0]
    assert out.device == gpu and out.to_numpy().tolist() == [1, 1]
