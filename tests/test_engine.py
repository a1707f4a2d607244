"""max.engine on the CPU: compile and execute, plans per input shape, input checking,
weights, threads, and the memory plan."""

import os
import threading

import numpy as np
import pytest

from engine_util import build, cpu_type, run, session
from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, Weight, ops

CPU = DeviceRef.CPU()


def test_elementwise_graph_matches_numpy(rng):
    g = build(lambda x, y: ops.sigmoid(x * 2 + y) / (ops.abs(y) + 1), cpu_type(DType.float32, ("batch", 5)), cpu_type(DType.float32, (5,)))
    x = rng.standard_normal((7, 5)).astype(np.float32)
    y = rng.standard_normal(5).astype(np.float32)
    (out,) = run(g, x, y)
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    ref = 1 / (1 + np.exp(-(xd * 2 + yd))) / (np.abs(yd) + 1)
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-7)


def test_one_plan_per_input_shape(rng):
    g = build(lambda x: ops.exp(x) * x, cpu_type(DType.float32, ("batch", 3)))
    model = session().load(g)
    for batch in [1, 7, 64, 7]:
        x = rng.standard_normal((batch, 3)).astype(np.float32)
        (out,) = model.execute(x)
        np.testing.assert_allclose(out.to_numpy(), np.exp(x.astype(np.float64)) * x, rtol=1e-6)
    assert model._core.num_plans == 3


def test_input_checks():
    g = build(lambda x, y: x + y, cpu_type(DType.float32, ("batch", 3)), cpu_type(DType.float32, ("batch", 3)))
    model = session().load(g)
    good = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="input 1: expected dtype float32"):
        model.execute(good, good.astype(np.int32))
    with pytest.raises(ValueError, match="dimension 1 must be 3"):
        model.execute(good, np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="symbolic dimension 'batch' is 2 in an earlier input but 5"):
        model.execute(good, np.zeros((5, 3), np.float32))
    with pytest.raises(ValueError, match="takes 2 inputs but 1"):
        model.execute(good)
    with pytest.raises(TypeError):
        model.execute(good, "x")
    (out,) = model.execute(good, good)  # the model is still usable
    assert out.shape == (2, 3)


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


def test_two_threads_share_a_model(rng):
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


def test_models_running_at_once_on_one_pool_finish_and_agree(rng):
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


def test_thread_count_is_respected():
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
def test_models_share_their_worker_threads():
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


def test_memory_plan_of_a_50_layer_mlp_is_near_the_lower_bound(rng):
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
