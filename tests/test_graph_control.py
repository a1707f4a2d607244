"""Staging control flow: cond, while_loop, print, call (inlined subgraphs) and
assert_same_device; result types, chain threading and the documented errors."""

import numpy as np
import pytest

from max.dtype import DType
from max.graph import BufferType, DeviceRef, Dim, Graph, TensorType, TensorValue, Weight, ops
from max.graph.value import _ChainValue

CPU = DeviceRef.CPU()
BOOL = TensorType(DType.bool, [], CPU)


def T(dtype, shape, device=CPU):
    return TensorType(dtype, shape, device)


def one(dtype=DType.int32, value=1):
    return ops.constant(value, dtype, device=CPU)


# cond


def test_cond_documented_example():
    with Graph("cond", input_types=[BOOL]) as g:
        (pred,) = g.inputs
        result = ops.cond(pred, [T(DType.int32, [])], lambda: one(value=1), lambda: one(value=0))
        assert isinstance(result, list) and len(result) == 1
        assert result[0].type == T(DType.int32, [])
        g.output(*result)
        g._verify()


def test_cond_without_results_returns_an_empty_list():
    with Graph("cond", input_types=[BOOL]) as g:
        assert ops.cond(g.inputs[0], None, lambda: None, lambda: None) == []
        assert ops.cond(g.inputs[0], [], lambda: None, lambda: None) == []


def test_cond_with_symbolic_shapes_and_several_results():
    doubled = T(DType.float32, [Dim("n") * 2, 3])
    with Graph("cond", input_types=[BOOL, T(DType.float32, ["n", 3]), doubled]) as g:
        pred, x, y = g.inputs
        types = [T(DType.float32, ["n", 3]), doubled]
        a, b = ops.cond(pred, types, lambda: [x + 1, y], lambda: (x * 2, y - 1))
        assert a.type == types[0] and b.type == types[1]
        assert list(b.type.shape) == [Dim("n") * 2, Dim(3)]
        g.output(a, b)
        g._verify()


def test_cond_branch_numbers_take_the_declared_type():
    with Graph("cond", input_types=[BOOL]) as g:
        (r,) = ops.cond(g.inputs[0], [T(DType.float16, [])], lambda: 1.5, lambda: 0)
        assert r.type == T(DType.float16, [])


def test_cond_branches_may_use_outer_values_and_nest():
    with Graph("cond", input_types=[BOOL, T(DType.int64, ["k"])]) as g:
        pred, x = g.inputs
        ty = [T(DType.int64, ["k"])]

        def then_fn():
            return ops.cond(pred, ty, lambda: x + 1, lambda: x - 1)

        (r,) = ops.cond(pred, ty, then_fn, lambda: x)
        assert r.type == ty[0]
        g.output(r)
        g._verify()


@pytest.mark.parametrize(
    "then_result, else_result, who",
    [
        (lambda: [one(), one()], lambda: one(), "then_fn"),  # too many
        (lambda: one(), lambda: one(DType.int64), "else_fn"),  # wrong dtype
        (lambda: None, lambda: one(), "then_fn"),  # nothing
        (lambda: one(), lambda: ops.constant([1, 2], DType.int32, CPU), "else_fn"),  # wrong shape
    ],
)
def test_cond_branch_mismatches_are_value_errors(then_result, else_result, who):
    with Graph("cond", input_types=[BOOL]) as g:
        with pytest.raises(ValueError) as info:
            ops.cond(g.inputs[0], [T(DType.int32, [])], then_result, else_result)
        assert "cond" in str(info.value) and who in str(info.value)


def test_cond_results_when_none_declared_is_a_value_error():
    with Graph("cond", input_types=[BOOL]) as g:
        with pytest.raises(ValueError, match="cond: then_fn"):
            ops.cond(g.inputs[0], None, lambda: one(), lambda: None)


def test_cond_symbolic_mismatch_is_a_value_error():
    with Graph("cond", input_types=[BOOL, T(DType.float32, ["n"])]) as g:
        pred, x = g.inputs
        with pytest.raises(ValueError, match="then_fn"):
            ops.cond(pred, [T(DType.float32, ["m"])], lambda: x, lambda: x)


@pytest.mark.parametrize("pred_type", [T(DType.float32, []), T(DType.bool, [2])])
def test_cond_pred_must_be_a_bool_scalar(pred_type):
    with Graph("cond", input_types=[pred_type]) as g:
        with pytest.raises(ValueError) as info:
            ops.cond(g.inputs[0], None, lambda: None, lambda: None)
        assert "cond: pred" in str(info.value)


def test_cond_out_types_must_be_types():
    with Graph("cond", input_types=[BOOL]) as g:
        with pytest.raises(TypeError, match="cond: out_types"):
            ops.cond(g.inputs[0], [DType.int32], lambda: one(), lambda: one())


def test_an_exception_in_a_branch_leaves_the_graph_usable():
    def boom():
        raise RuntimeError("boom")

    with Graph("cond", input_types=[BOOL, T(DType.float32, [2])]) as g:
        pred, x = g.inputs
        chain = g._current_chain
        with pytest.raises(RuntimeError, match="boom"):
            ops.cond(pred, None, lambda: None, boom)
        assert g._current_chain is chain
        y = x + 1  # staged in the graph body again, not in a discarded block
        g.output(y)
        g._verify()


def test_cond_threads_buffer_effects_through_the_chain():
    with Graph("cond", input_types=[BOOL, BufferType(DType.float32, ["n"], CPU)]) as g:
        pred, buf = g.inputs
        before = g._current_chain

        def then_fn():
            ops.buffer_store(buf, ops.buffer_load(buf) * 2)

        assert ops.cond(pred, None, then_fn, lambda: None) == []
        after = g._current_chain
        assert isinstance(after, _ChainValue) and after is not before
        x = ops.buffer_load(buf)
        g.output(x)
        g._verify()
        # the load after the cond is ordered after it: it consumes the cond's chain
        assert f"buffer_load(%{after._id}" in str(g)


# while_loop


def test_while_loop_documented_single_argument_example():
    with Graph("while_loop_example") as g:
        x = ops.constant(0, dtype=DType.int32, device=DeviceRef.CPU())

        def pred(x):
            return x < 10

        def body(x):
            return x + 1

        result = ops.while_loop(x, pred, body)
        assert isinstance(result, list) and len(result) == 1
        assert result[0].type == T(DType.int32, [])
        g.output(*result)
        g._verify()


def test_while_loop_documented_multiple_argument_example():
    with Graph("while_loop_example") as g:
        x = ops.constant(0, dtype=DType.int32, device=DeviceRef.CPU())
        y = ops.constant(5, dtype=DType.int32, device=DeviceRef.CPU())

        def pred(x, y):
            return ops.logical_and(x < 10, y < 15)

        def body(x, y):
            return [x + 1, y + 1]

        results = ops.while_loop((x, y), pred, body)
        assert [r.type for r in results] == [T(DType.int32, []), T(DType.int32, [])]
        g.output(*results)
        g._verify()


def test_while_loop_keeps_symbolic_shapes():
    with Graph("loop", input_types=[T(DType.float32, ["n", 4]), T(DType.int64, [])]) as g:
        x, i = g.inputs
        out, count = ops.while_loop([x, i], lambda x, i: i < 3, lambda x, i: (x * 2, i + 1))
        assert out.type == T(DType.float32, ["n", 4]) and count.type == T(DType.int64, [])
        g.output(out, count)
        g._verify()


def test_while_loop_body_may_print():
    with Graph("loop", input_types=[T(DType.int32, [])]) as g:
        (x,) = g.inputs

        def body(x):
            ops.print(x, label="step")
            return x + 1

        (r,) = ops.while_loop(x, lambda x: x < 3, body)
        chain = g._current_chain
        g.output(r)
        g._verify()
        text = str(g)
        assert f"%{r._id}, %{chain._id} = while_loop(" in text
        assert 'print(' in text and 'label="step"' in text


def test_while_loop_empty_initial_values_is_a_value_error():
    with Graph("loop"):
        with pytest.raises(ValueError, match="while_loop: initial_values"):
            ops.while_loop([], lambda: None, lambda: None)


def test_while_loop_buffers_are_not_implemented():
    with Graph("loop", input_types=[BufferType(DType.float32, [2], CPU)]) as g:
        with pytest.raises(NotImplementedError, match="while_loop"):
            ops.while_loop(g.inputs, lambda b: None, lambda b: b)


@pytest.mark.parametrize(
    "predicate",
    [lambda x: x, lambda x: ops.constant([True, False], DType.bool, CPU), lambda x: [x < 1, x < 2], lambda x: True],
)
def test_while_loop_predicate_must_return_one_bool_scalar(predicate):
    with Graph("loop"):
        with pytest.raises(ValueError, match="while_loop: predicate"):
            ops.while_loop(one(), predicate, lambda x: x + 1)


@pytest.mark.parametrize(
    "body",
    [lambda x: x.cast(DType.int64), lambda x: [x, x], lambda x: None, lambda x: ops.constant([1, 2], DType.int32, CPU)],
)
def test_while_loop_body_must_return_the_loop_types(body):
    # MAX raises TypeError here ("Results don't match expected types").
    with Graph("loop"):
        with pytest.raises(TypeError, match="while_loop: body"):
            ops.while_loop(one(), lambda x: x < 3, body)


def test_while_loop_body_may_not_change_a_symbolic_dim():
    with Graph("loop", input_types=[T(DType.float32, ["n"]), T(DType.float32, [Dim("n") * 2])]) as g:
        x, y = g.inputs
        with pytest.raises(TypeError, match="while_loop: body: result 0"):
            ops.while_loop(x, lambda x: ops.constant(True, DType.bool, CPU), lambda x: y)


# print


def test_print_tensor_and_string_advance_the_chain():
    with Graph("p", input_types=[T(DType.float32, [1]), T(DType.float32, [1])]) as g:
        lhs, rhs = g.inputs
        out = ops.add(lhs, rhs)
        c0 = g._current_chain
        assert ops.print(out, label="addition_output") is None
        c1 = g._current_chain
        ops.print("hello")
        c2 = g._current_chain
        out.print("again")
        assert len({c0._id, c1._id, c2._id, g._current_chain._id}) == 4
        g.output(out)
        g._verify()
        text = str(g)
        assert 'label="addition_output"' in text and 'text="hello"' in text and 'label="again"' in text


def test_print_errors():
    with Graph("p", input_types=[T(DType.float32, [1])]) as g:
        with pytest.raises(TypeError, match="print: value"):
            ops.print(3)
        with pytest.raises(TypeError, match="print: label"):
            ops.print(g.inputs[0], label=3)


# call


def _double_and_inc(g, input_type):
    sub = g.add_subgraph("sub", input_types=[input_type])
    with sub:
        (a,) = sub.inputs
        sub.output(a * 2, a + 1)
    return sub


def test_call_inlines_the_subgraph_and_returns_its_outputs():
    x_type = T(DType.float32, ["n"])
    with Graph("main", input_types=[x_type]) as g:
        sub = _double_and_inc(g, x_type)
        r = ops.call(sub, g.inputs[0])
        assert isinstance(r, list) and [v.type for v in r] == [x_type, x_type]
        r2 = ops.call(sub, r[0])
        assert [v.type for v in r2] == [x_type, x_type]
        g.output(*r2)
        g._verify()
        text = str(g)
        assert "call" not in text and text.count("mul(") == 2


def test_call_with_one_output_returns_a_list():
    with Graph("main", input_types=[T(DType.int32, [3])]) as g:
        sub = g.add_subgraph("sub", input_types=[T(DType.int32, [3])])
        with sub:
            sub.output(sub.inputs[0] * 2)
        r = ops.call(sub, g.inputs[0])
        assert isinstance(r, list) and len(r) == 1 and isinstance(r[0], TensorValue)


@pytest.mark.parametrize("arg_type", [T(DType.float32, ["m"]), T(DType.float32, [3]), T(DType.int32, ["n"])])
def test_call_argument_types_must_match(arg_type):
    with Graph("main", input_types=[arg_type]) as g:
        sub = _double_and_inc(g, T(DType.float32, ["n"]))
        with pytest.raises(ValueError) as info:
            ops.call(sub, g.inputs[0])
        assert "call" in str(info.value) and "args[0]" in str(info.value)


def test_call_argument_count_and_outputs_are_checked():
    with Graph("main", input_types=[T(DType.float32, [3])]) as g:
        sub = _double_and_inc(g, T(DType.float32, [3]))
        with pytest.raises(ValueError, match="call: args"):
            ops.call(sub)
        empty = g.add_subgraph("empty", input_types=[T(DType.float32, [3])])
        with pytest.raises(ValueError, match="call: graph"):
            ops.call(empty, g.inputs[0])
        with pytest.raises(ValueError, match="call: graph"):
            ops.call(g, g.inputs[0])
        with pytest.raises(TypeError, match="call: graph"):
            ops.call("sub", g.inputs[0])


def test_call_prefixes_weight_names():
    with Graph("main", input_types=[T(DType.float32, [3])]) as g:
        sub = g.add_subgraph("layer", input_types=[T(DType.float32, [3])])
        with sub:
            w = Weight("w", DType.float32, [3], CPU)
            sub.output(sub.inputs[0] * w)
        (a,) = ops.call(sub, g.inputs[0], prefix="layer0.")
        (b,) = ops.call(sub, a, prefix="layer1.")
        (c,) = ops.call(sub, b, prefix="layer1.")
        assert sorted(g._weights) == ["layer0.w", "layer1.w"]
        g.output(c)
        g._verify()
        text = str(g)
        assert '"layer0.w"' in text and '"layer1.w"' in text and '"w"' not in text


def test_call_orders_the_subgraph_side_effects_on_the_callers_chain():
    buf_type = BufferType(DType.float32, [3], CPU)
    with Graph("main", input_types=[buf_type]) as g:
        sub = g.add_subgraph("sub", input_types=[buf_type])
        with sub:
            (b,) = sub.inputs
            ops.buffer_store(b, ops.buffer_load(b) * 2)
            sub.output()
        before = g._current_chain
        assert ops.call(sub, g.inputs[0]) == []
        after = g._current_chain
        assert after is not before
        g.output(ops.buffer_load(g.inputs[0]))
        g._verify()
        assert "chain_create" in str(g) and str(g).count("chain_create") == 1


# assert_same_device


def test_assert_same_device():
    types = [T(DType.float32, [4]), T(DType.float32, [4], DeviceRef.GPU()), BufferType(DType.float32, [4], DeviceRef.GPU(1))]
    with Graph("d", input_types=types) as g:
        x, y, b = g.inputs
        assert ops.assert_same_device(x, x, a=x) is None
        assert ops.assert_same_device() is None
        with pytest.raises(ValueError) as info:
            ops.assert_same_device(x, y)
        msg = str(info.value)
        assert "assert_same_device" in msg and "same device" in msg and "0: TensorType" in msg and "1: TensorType" in msg
        with pytest.raises(ValueError) as info:
            ops.assert_same_device(x, q=b)
        assert "q: BufferType" in str(info.value) and "gpu:1" in str(info.value)
        with pytest.raises(TypeError, match="assert_same_device: 1"):
            ops.assert_same_device(x, 3)


def test_cond_branch_may_return_an_array():
    with Graph("cond", input_types=[BOOL]) as g:
        ty = [T(DType.float32, [2])]
        (r,) = ops.cond(g.inputs[0], ty, lambda: np.array([1.0, 2.0]), lambda: np.zeros(2, np.float32))
        assert r.type == ty[0]
