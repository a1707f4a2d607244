"""The Python examples of graph.type.md, as tests (see common.py for the method)."""

from doc_examples.common import *  # noqa: F401,F403


# --- graph.type.md ----------------------------------------------------------------------------


def test_graph_type__DeviceRef(capsys):
    """graph.type.md, DeviceRef."""
    from max.graph import DeviceRef
    gpu_device = DeviceRef.GPU()
    print(gpu_device)  # Outputs: gpu:0
    # Create a CPU device with specific id
    cpu_device = DeviceRef.CPU(id=1)
    print(cpu_device)  # Outputs: cpu:1

    assert lines(capsys) == ["gpu:0", "cpu:1"]


def test_graph_type__TensorType(capsys):
    """graph.type.md, TensorType. Real MAX 26.7 rejects TensorType without device."""
    from max.graph import TensorType
    from max.dtype import DType
    # Create a tensor type with float32 elements and static dimensions 2x3
    tensor_type = TensorType(DType.float32, (2, 3))
    print(tensor_type.dtype)  # Outputs: DType.float32
    print(tensor_type.shape)  # Outputs: [2, 3]

    dtype, shape = lines(capsys)
    assert dtype == "DType.float32"
    assert printed_dims(shape) == ["2", "3"]
    assert dims(tensor_type.shape) == ["2", "3"]


@pytest.mark.skip(
    reason="docs bug: `with Graph() as g:` is a TypeError in real MAX 26.7 too (Graph needs a name)"
)
def test_graph_type__Type(capsys):
    """graph.type.md, Type: work with types in a graph."""
    from max.graph import Graph, TensorType
    from max.dtype import DType

    with Graph() as g:
        # Create a tensor constant with a specific type
        tensor_type = TensorType(DType.float32, [2, 3])

        # The type can be inspected to get information about the value
        print(f"Tensor element type: {tensor_type.dtype}")  # Outputs: DType.float32
        print(f"Tensor shape: {tensor_type.shape}")  # Outputs: [2, 3]

    elem, shape = lines(capsys)
    assert elem == "Tensor element type: DType.float32"
    assert shape.startswith("Tensor shape: ") and printed_dims(shape) == ["2", "3"]
