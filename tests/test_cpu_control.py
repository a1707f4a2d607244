"""Control flow, buffers, print and the run-time creation ops, executed on the CPU."""

import numpy as np
import pytest

from engine_util import run, session
from max import driver
from max.dtype import DType
from max.graph import BufferType, DeviceRef, Graph, TensorType, ops

CPU = DeviceRef.CPU()


def test_while_loop_docs_example():
    with Graph("while_loop_example") as g:
        x = ops.constant(0, dtype=DType.int32, device=CPU)
        y = ops.constant(5, dtype=DType.int32, device=CPU)
        g.output(*ops.while_loop((x, y), lambda x, y: ops.logical_and(x < 10, y < 15), lambda x, y: [x + 1, y + 1]))
    assert [int(o) for o in run(g)] == [10, 15]


def test_while_loop_over_tensors(rng):
    # Newton iterations for sqrt(a), 20 steps, counted by the loop.
    with Graph("newton", input_types=[TensorType(DType.float64, ("n",), CPU)]) as g:
        a = g.inputs[0].tensor
        i0 = ops.constant(0, DType.int32, CPU)
        _, root = ops.while_loop((i0, a), lambda i, x: i < 20, lambda i, x: [i + 1, (x + a / x) * 0.5])
        g.output(root)
    a = rng.uniform(1, 100, 17)
    (out,) = run(g, a)
    np.testing.assert_allclose(out, np.sqrt(a), rtol=1e-12)


def test_cond_takes_either_branch(rng):
    with Graph("c", input_types=[TensorType(DType.bool, (), CPU), TensorType(DType.float32, ("n", 3), CPU)]) as g:
        p, v = g.inputs
        g.output(*ops.cond(p, [TensorType(DType.float32, ("n", 3), CPU)], lambda: ops.exp(v), lambda: v - 1))
    model = session().load(g)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_allclose(model.execute(np.array(True), x)[0].to_numpy(), np.exp(x.astype(np.float64)), rtol=1e-6)
    np.testing.assert_allclose(model.execute(np.array(False), x)[0].to_numpy(), x - 1)


def test_buffers_are_updated_in_place(rng):
    with Graph("b", input_types=[BufferType(DType.float32, (6,), CPU), TensorType(DType.float32, (2,), CPU)]) as g:
        buf, t = g.inputs
        buf[1:3] = t
        loaded = ops.buffer_load(buf)
        ops.buffer_store(buf, loaded * 2)
        g.output(ops.buffer_load(buf) + 1)
    b = driver.Buffer.from_numpy(np.arange(6, dtype=np.float32))
    (out,) = session().load(g).execute(b, np.array([7, 8], np.float32))
    assert b.to_numpy().tolist() == [0, 14, 16, 6, 8, 10]
    assert out.to_numpy().tolist() == [1, 15, 17, 7, 9, 11]


def test_strided_buffer_slices():
    with Graph("s", input_types=[BufferType(DType.int32, (4, 4), CPU), TensorType(DType.int32, (4,), CPU)]) as g:
        buf, t = g.inputs
        buf[:, 1] = t
        g.output(ops.buffer_load(buf))
    b = driver.Buffer.from_numpy(np.zeros((4, 4), np.int32))
    session().load(g).execute(b, np.array([1, 2, 3, 4], np.int32))
    assert b.to_numpy()[:, 1].tolist() == [1, 2, 3, 4] and b.to_numpy().sum() == 10


def test_print(capfd):
    with Graph("p", input_types=[TensorType(DType.int64, (3,), CPU)]) as g:
        ops.print(g.inputs[0], label="values")
        ops.print("hello", label="note")
        g.output(g.inputs[0] + 1)
    run(g, np.array([4, 5, 6]))
    printed = capfd.readouterr().out
    assert "values: Tensor(int64 [3]: [4, 5, 6])" in printed and "note: hello" in printed


def test_range_shape_to_tensor_rebind(rng):
    with Graph("r", input_types=[TensorType(DType.float32, ("n", 2), CPU)]) as g:
        x = g.inputs[0].tensor
        g.output(
            ops.range(0, 10, 3, dtype=DType.int64, device=CPU),
            ops.range(1.5, 0.0, -0.5, dtype=DType.float32, device=CPU),
            ops.range(0, x.shape[0], 1, dtype=DType.int64, device=CPU),
            ops.shape_to_tensor(x.shape),
            x.rebind(["m", 2]) * 2,
        )
    x = rng.standard_normal((4, 2)).astype(np.float32)
    a, b, c, d, e = run(g, x)
    assert a.tolist() == [0, 3, 6, 9] and b.tolist() == [1.5, 1.0, 0.5]
    assert c.tolist() == [0, 1, 2, 3] and d.tolist() == [4, 2]
    np.testing.assert_allclose(e, x * 2)


@pytest.mark.parametrize("dtype, start, step, stop, good, bad", [
    (DType.int32, 0, 1, 3, 3, 4),
    (DType.int64, 10, -3, 0, 4, 1),
    (DType.uint32, 2, 5, 13, 3, 2),
    (DType.float32, 10.0, -2.5, 0.0, 4, -1.0),
])
def test_range_asserts_out_dim_at_run_time(dtype, start, step, stop, good, bad):
    """A run-time stop whose element count differs from out_dim is an error (MAX asserts
    out_dim at execution), and the model stays usable."""
    with Graph("r", input_types=[TensorType(dtype, [], CPU)]) as g:
        g.output(ops.range(start, g.inputs[0], step, out_dim=good, dtype=dtype, device=CPU))
    model = session().load(g)
    want = np.arange(start, stop, step, dtype=dtype.to_numpy()).tolist()
    assert model.execute(np.array(stop, dtype.to_numpy()))[0].to_numpy().tolist() == want
    with pytest.raises(ValueError, match=f"range: out_dim is {good}, but start, stop and step give"):
        model.execute(np.array(bad, dtype.to_numpy()))
    assert model.execute(np.array(stop, dtype.to_numpy()))[0].to_numpy().tolist() == want


@pytest.mark.parametrize("start, stop, step, dtype", [
    (0, 0.3, 0.1, DType.float32), (0, 2.2, 0.1, DType.float32), (1, 1.3, 0.1, DType.float32),
    (0, 1.0, 0.1, DType.float16), (0, 0.7, 0.1, DType.float16), (0, 0.6, 0.2, DType.bfloat16),
    (5.0, -1.0, -0.7, DType.float32),
])
def test_float_ranges_keep_the_count_their_builder_gave(start, stop, step, dtype):
    """The count comes from the Python bounds; the run-time check of out_dim sees them rounded
    to the dtype (0.3 / 0.1 in float32 is above 3) and must not refuse the range for that."""
    with Graph("r", input_types=[]) as g:
        g.output(ops.range(start, stop, step, dtype=dtype, device=CPU))
    (out,) = run(g)
    want = np.arange(start, stop, step)
    assert len(out) == len(want)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=1e-2 if dtype is not DType.float32 else 1e-6)


def test_integer_range_counts_are_exact():
    with Graph("r", input_types=[]) as g:
        g.output(ops.range(0, 2**60 + 1, 2**60, dtype=DType.int64, device=CPU))
    (out,) = run(g)
    assert out.tolist() == [0, 2**60]  # (float division would count 1)


def test_range_binds_a_new_out_dim_from_its_values():
    """An out_dim symbol no input gives is the count start, stop and step give at run time,
    and later ops see it; one an input binds is asserted instead."""
    with Graph("r", input_types=[TensorType(DType.int32, [], CPU)]) as g:
        r = ops.range(1, g.inputs[0], 2, out_dim="n", dtype=DType.int32, device=CPU)
        g.output(r, r * 3)
    model = session().load(g)
    for stop in (8, 1, 0, 13):
        a, b = (o.to_numpy() for o in model.execute(np.array(stop, np.int32)))
        assert a.tolist() == list(range(1, stop, 2)) and b.tolist() == [3 * v for v in range(1, stop, 2)]
    with Graph("r2", input_types=[TensorType(DType.int32, [], CPU), TensorType(DType.float32, ["n"], CPU)]) as g:
        r = ops.range(0, g.inputs[0], 1, out_dim="n", dtype=DType.int32, device=CPU)
        g.output(r.cast(DType.float32) + g.inputs[1])
    model = session().load(g)
    assert model.execute(np.array(3, np.int32), np.ones(3, np.float32))[0].to_numpy().tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match="range: out_dim is 3, but start, stop and step give 4 elements"):
        model.execute(np.array(4, np.int32), np.ones(3, np.float32))


def test_rebind_checks_at_run_time():
    with Graph("rb", input_types=[TensorType(DType.float32, ("n",), CPU)]) as g:
        g.output(g.inputs[0].rebind([4], message="expected four") + 1)
    model = session().load(g)
    assert model.execute(np.zeros(4, np.float32))[0].to_numpy().tolist() == [1] * 4
    with pytest.raises(ValueError, match="rebind: the tensor has shape \\[3\\], not \\[4\\]: expected four"):
        model.execute(np.zeros(3, np.float32))
