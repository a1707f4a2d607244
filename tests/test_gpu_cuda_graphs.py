"""CUDA graphs: a static single-GPU plan is captured on its second execution and replayed
after that. Replays must read each call's new inputs, return fresh buffers every time, and
give the same values as step-by-step execution (cuda_graphs=off). Skips without a GPU."""

import math

import ml_dtypes
import numpy as np
import pytest

from max import driver, engine, tuning
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops

pytestmark = pytest.mark.gpu
GPU = DeviceRef.GPU()


def mlp(rng, dtype=DType.float32, hidden=64):
    w1 = rng.standard_normal((32, hidden)).astype(np.float32) / math.sqrt(32)
    w2 = rng.standard_normal((hidden, 32)).astype(np.float32) / math.sqrt(hidden)
    b1 = rng.standard_normal(hidden).astype(np.float32)

    def fn(x):
        h = ops.relu(x @ ops.constant(w1, dtype, GPU) + ops.constant(b1, dtype, GPU))
        return ops.tanh(h @ ops.constant(w2, dtype, GPU)) + x, ops.sum(h, axis=-1)

    def ref(x):
        h = np.maximum(x.astype(np.float64) @ w1 + b1, 0)
        return np.tanh(h @ w2) + x, h.sum(axis=-1, keepdims=True)

    g = Graph("mlp", fn, input_types=[TensorType(dtype, (8, 32), GPU)])
    return g, ref


def load(g, gpu):
    return engine.InferenceSession(devices=[driver.CPU(), gpu]).load(g)


def run(model, x, gpu):
    return [o.to_numpy() for o in model.execute(driver.Buffer.from_numpy(x).to(gpu))]


def test_replays_read_new_inputs_and_match_numpy(rng, gpu):
    g, ref = mlp(rng)
    model = load(g, gpu)
    for i in range(5):
        x = rng.standard_normal((8, 32)).astype(np.float32)
        got = run(model, x, gpu)
        for a, b in zip(got, ref(x)):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
        # step by step on the first call, captured on the second, replayed afterwards
        assert model._core.num_cuda_graphs == (0 if i == 0 else 1)


def test_results_of_earlier_calls_are_not_overwritten(rng, gpu):
    g, ref = mlp(rng)
    model = load(g, gpu)
    xs = [rng.standard_normal((8, 32)).astype(np.float32) for _ in range(4)]
    outs = [model.execute(driver.Buffer.from_numpy(x).to(gpu)) for x in xs]
    for x, o in zip(xs, outs):
        np.testing.assert_allclose(o[0].to_numpy(), ref(x)[0], rtol=1e-4, atol=1e-4)


def test_opt_out_gives_the_same_values(rng, gpu):
    g, _ = mlp(rng, DType.bfloat16)
    captured = load(g, gpu)
    with tuning.override(cuda_graphs="off"):
        stepwise = load(g, gpu)
    for _ in range(3):
        x = rng.standard_normal((8, 32)).astype(ml_dtypes.bfloat16)
        a, b = run(captured, x, gpu), run(stepwise, x, gpu)
        for u, v in zip(a, b):
            np.testing.assert_array_equal(u.astype(np.float32), v.astype(np.float32))
    assert captured._core.num_cuda_graphs == 1 and stepwise._core.num_cuda_graphs == 0


def test_each_input_shape_gets_its_own_graph(rng, gpu):
    w = rng.standard_normal((5, 3)).astype(np.float32)

    def fn(x):
        return (ops.exp(x) * 2 + 1) @ ops.constant(w, DType.float32, GPU)

    g = Graph("dyn", fn, input_types=[TensorType(DType.float32, ("n", 5), GPU)])
    model = load(g, gpu)
    for n in [3, 7, 3, 7, 3, 7]:
        x = rng.standard_normal((n, 5)).astype(np.float32)
        (got,) = run(model, x, gpu)
        np.testing.assert_allclose(got, (np.exp(x.astype(np.float64)) * 2 + 1) @ w, rtol=1e-5, atol=1e-5)
    assert model._core.num_cuda_graphs == 2


def test_a_single_step_plan_runs_step_by_step(rng, gpu):
    """One kernel: a graph would replace its launch with its own and add the staging copies,
    so the plan is never captured (unless cuda_graphs=always); the values are the same."""
    g = Graph("one", lambda x: ops.exp(x) * 2 + 1, input_types=[TensorType(DType.float32, (8, 5), GPU)])
    model, forced = load(g, gpu), load(g, gpu)
    for _ in range(3):
        x = rng.standard_normal((8, 5)).astype(np.float32)
        (a,) = run(model, x, gpu)
        with tuning.override(cuda_graphs="always"):  # (read as a plan is first executed)
            (b,) = run(forced, x, gpu)
        np.testing.assert_allclose(a, np.exp(x) * 2 + 1, rtol=1e-6)
        np.testing.assert_array_equal(a, b)
    assert model._core.num_cuda_graphs == 0 and forced._core.num_cuda_graphs == 1


def test_host_transfers_keep_a_plan_step_by_step(rng, gpu):
    def fn(x):
        return ops.transfer_to(ops.exp(x), DeviceRef.CPU())

    g = Graph("xfer", fn, input_types=[TensorType(DType.float32, (4,), GPU)])
    model = load(g, gpu)
    for _ in range(3):
        x = rng.standard_normal(4).astype(np.float32)
        (got,) = run(model, x, gpu)
        np.testing.assert_allclose(got, np.exp(x), rtol=1e-6)
    assert model._core.num_cuda_graphs == 0


def test_inputs_returned_as_outputs_are_copies(rng, gpu):
    g = Graph("id", lambda x: (x, x + 1), input_types=[TensorType(DType.float32, (6,), GPU)])
    model = load(g, gpu)
    for _ in range(3):
        x = rng.standard_normal(6).astype(np.float32)
        buf = driver.Buffer.from_numpy(x).to(gpu)
        a, b = model.execute(buf)
        np.testing.assert_array_equal(a.to_numpy(), x)
        np.testing.assert_allclose(b.to_numpy(), x + 1, rtol=1e-6)


def test_replays_stage_many_inputs_of_every_size(rng, gpu):
    """A replay stages small inputs in one launch (copy_many) and the rest one by one: odd
    byte counts and offsets (an int8 slice at byte 3), a 16-byte aligned int64 vector, a
    non-contiguous view and one input past the batched size (256 KiB) all arrive whole."""
    sizes = [1, 3, 17, 64, 1000]
    big = 65536

    def fn(*xs):
        outs = [ops.cast(x, DType.float32) * 2.0 for x in xs[:len(sizes)]]
        return (*outs, xs[len(sizes)] + 1.0, xs[len(sizes) + 1] + 1, xs[len(sizes) + 2] * 3.0)

    types = [TensorType(DType.int8, (n,), GPU) for n in sizes] + [
        TensorType(DType.float32, (big,), GPU), TensorType(DType.int64, (6,), GPU),
        TensorType(DType.float32, (4, 3), GPU)]
    model = load(Graph("staging", fn, input_types=types), gpu)
    for _ in range(4):
        raw = rng.integers(-100, 100, sum(sizes) + 3).astype(np.int8)
        whole = driver.Buffer.from_numpy(raw).to(gpu)
        smalls, at = [], 3
        for n in sizes:
            smalls.append((whole[at:at + n], raw[at:at + n]))
            at += n
        f = rng.standard_normal(big).astype(np.float32)
        i = rng.integers(-(1 << 40), 1 << 40, 6)
        m = rng.standard_normal((4, 5)).astype(np.float32)
        view = driver.Buffer.from_numpy(m).to(gpu)[:, 1:4]
        assert not view.is_contiguous
        mt = m[:, 1:4]
        args = [b for b, _ in smalls] + [driver.Buffer.from_numpy(f).to(gpu), driver.Buffer.from_numpy(i).to(gpu), view]
        got = [o.to_numpy() for o in model.execute(*args)]
        for (_, want), g in zip(smalls, got):
            np.testing.assert_array_equal(g, want.astype(np.float32) * 2)
        np.testing.assert_array_equal(got[len(sizes)], f + 1)
        np.testing.assert_array_equal(got[len(sizes) + 1], i + 1)
        np.testing.assert_allclose(got[len(sizes) + 2], mt * 3, rtol=1e-6)
    assert model._core.num_cuda_graphs == 1
