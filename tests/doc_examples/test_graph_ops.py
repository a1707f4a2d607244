"""The Python examples of graph.ops.md, as tests (see common.py for the method)."""

from doc_examples.common import *  # noqa: F401,F403


# --- graph.ops.md -----------------------------------------------------------------------------


def test_graph_ops__DeviceRef(capsys):
    """graph.ops.md, DeviceRef."""
    from max.graph import DeviceRef
    gpu_device = DeviceRef.GPU()
    print(gpu_device)  # Outputs: gpu:0
    ## Create a CPU device with specific id
    cpu_device = DeviceRef.CPU(id=1)
    print(cpu_device)  # Outputs: cpu:1

    assert lines(capsys) == ["gpu:0", "cpu:1"]


def test_graph_ops__TensorType(capsys):
    """graph.ops.md, TensorType. Real MAX 26.7 rejects TensorType without device."""
    from max.graph import TensorType
    from max.dtype import DType
    ## Create a tensor type with float32 elements and static dimensions 2x3
    tensor_type = TensorType(DType.float32, (2, 3))
    print(tensor_type.dtype)  # Outputs: DType.float32
    print(tensor_type.shape)  # Outputs: [2, 3]

    dtype, shape = lines(capsys)
    assert dtype == "DType.float32"
    assert printed_dims(shape) == ["2", "3"]
    assert dims(tensor_type.shape) == ["2", "3"]


def test_graph_ops__acos():
    """graph.ops.md, acos. The example only defines acos_graph(); the test also calls it."""
    from max.dtype import DType  # added import
    from max.graph import DeviceRef, Graph, TensorType, ops  # added import

    def acos_graph():
        input_type = TensorType(dtype=DType.float32, shape=(3,), device=DeviceRef.CPU())

        with Graph("acos_graph", input_types=(input_type,)) as graph:
            x = graph.inputs[0]
            out = ops.acos(x)
            graph.output(out)

    acos_graph()


def test_graph_ops__gather_nd(capsys):
    """graph.ops.md, gather_nd: prints TensorType(dtype=DType.bfloat16, shape=["a", "f", "e"]).
    Real MAX 26.7 rejects TensorType without device (see REAL_MAX_DIFFERS)."""
    from max.dtype import DType  # added import
    from max.graph import Graph, TensorType, ops  # added import
    input_shape = ["a", "b", "c", "d", "e"]
    indices_shape = ["a", "f", 3]
    input_type = TensorType(DType.bfloat16, input_shape)
    indices_type = TensorType(DType.int32, indices_shape)
    with Graph("gather_nd", input_types=[input_type, indices_type]) as graph:
        input, indices = graph.inputs
        gathered = ops.gather_nd(input, indices, batch_dims=1)
        print(gathered.type)
        ## Output: TensorType(dtype=DType.bfloat16, shape=["a", "f", "e"])

    (out,) = lines(capsys)
    assert out.startswith("TensorType(") and "bfloat16" in out
    shape_part = out[out.index("shape=") :]
    assert printed_dims(shape_part[: shape_part.index("]") + 1]) == ["a", "f", "e"]
    assert gathered.type.dtype == DType.bfloat16
    assert dims(gathered.type.shape) == ["a", "f", "e"]


def test_graph_ops__print(capsys):
    """graph.ops.md, print. The example only defines add_tensors(); the test also calls it."""
    from typing import Any  # added import
    import numpy as np  # added import
    from max.dtype import DType  # added import
    from max.graph import DeviceRef, Graph, TensorType, ops  # added import

    def add_tensors(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
        input_type = TensorType(dtype=DType.float32, shape=(1,), device=DeviceRef.CPU())
        with Graph(
            "simple_add_graph", input_types=(input_type, input_type)
        ) as graph:
            lhs, rhs = graph.inputs
            out = ops.add(lhs, rhs)
            ops.print(out, label="addition_output")  # Pass the output tensor here
            graph.output(out)
            print("final graph:", graph)

    add_tensors(np.ones((1,), np.float32), np.ones((1,), np.float32))

    assert capsys.readouterr().out.startswith("final graph: ")


def test_graph_ops__while_loop(capsys):
    """graph.ops.md, while_loop (one loop-carried value)."""
    from max.graph import DeviceRef  # added import
    from max.graph import Graph, ops
    from max.dtype import DType

    with Graph("while_loop_example") as g:
        x = ops.constant(0, dtype=DType.int32, device=DeviceRef.CPU())

        def pred(x):
            return x < 10

        def body(x):
            return x + 1

        result = ops.while_loop(x, pred, body)
        print(result)

    assert capsys.readouterr().out.strip()


def test_graph_ops__while_loop_two_values(capsys):
    """graph.ops.md, while_loop (two loop-carried values)."""
    from max.graph import DeviceRef  # added import
    from max.graph import Graph, ops
    from max.dtype import DType

    with Graph("while_loop_example") as g:
        x = ops.constant(0, dtype=DType.int32, device=DeviceRef.CPU())
        y = ops.constant(5, dtype=DType.int32, device=DeviceRef.CPU())

        def pred(x, y):
            return ops.logical_and(x < 10, y < 15)

        def body(x, y):
            return [x + 1, y + 1]

        results = ops.while_loop((x, y), pred, body)
        print(results)

    assert capsys.readouterr().out.strip()
