"""The Python examples of graph.TensorValue.md, as tests (see common.py for the method)."""

from doc_examples.common import *  # noqa: F401,F403


# --- graph.TensorValue.md ---------------------------------------------------------------------


def test_graph_TensorValue__TensorValue(capsys):
    """graph.TensorValue.md, TensorValue: create and manipulate tensor values in a graph."""
    from max.graph import DeviceRef  # added import
    import numpy as np
    from max.dtype import DType
    from max.graph import Graph, ops

    matrix = np.array([[1, 2], [3, 4]], dtype=np.float32)

    # Create a Graph context to work with tensors
    with Graph("tensor_demo") as graph:
        # Create a constant tensor from the matrix
        tensor = ops.constant(matrix, dtype=DType.float32, device=DeviceRef.CPU())

        # Access tensor properties
        print(f"Shape: {tensor.shape}")  # Output: [2, 2]
        print(f"Data type: {tensor.dtype}")  # Output: DType.float32

        # Perform operations on the tensor
        transposed = tensor.T
        doubled = tensor * 2

        print(f"Original shape: {tensor.shape}")  # Output: [2, 2]
        print(f"Transposed shape: {transposed.shape}")  # Output: [2, 2]

    shape, dtype, original, trans = lines(capsys)
    assert shape.startswith("Shape: ") and printed_dims(shape) == ["2", "2"]
    assert dtype == "Data type: DType.float32"
    assert original.startswith("Original shape: ") and printed_dims(original) == ["2", "2"]
    assert trans.startswith("Transposed shape: ") and printed_dims(trans) == ["2", "2"]
    assert dims(tensor.shape) == ["2", "2"] and dims(transposed.shape) == ["2", "2"]
    assert tensor.dtype == DType.float32


def test_graph_TensorValue__argmax(capsys):
    """graph.TensorValue.md, TensorValue.argmax: the reduced axis stays, with size 1."""
    from max.dtype import DType
    from max.graph import Graph, TensorType, DeviceRef

    # Define a 2x3 float32 input tensor for the graph
    input_type = TensorType(DType.float32, (2, 3), device=DeviceRef.CPU())

    with Graph("argmax_demo", input_types=[input_type]) as graph:
        x = graph.inputs[0].tensor

        # Argmax along axis 1 (last dimension of each row)
        indices = x.argmax(axis=1)

        print(f"Input shape: {x.shape}")  # [2, 3]
        print(f"Argmax shape: {indices.shape}")  # [2, 1]

    inp, out = lines(capsys)
    assert inp.startswith("Input shape: ") and printed_dims(inp) == ["2", "3"]
    assert out.startswith("Argmax shape: ") and printed_dims(out) == ["2", "1"]
    assert dims(indices.shape) == ["2", "1"]


def test_graph_TensorValue__broadcast_to(capsys):
    """graph.TensorValue.md, TensorValue.broadcast_to."""
    from max.graph import DeviceRef  # added import
    import numpy as np
    from max.dtype import DType
    from max.graph import Graph, ops

    # Create a 2x2 matrix
    matrix = np.array([[1, 2], [3, 4]], dtype=np.float32)

    # Create a Graph context to work with tensors
    with Graph("broadcast_to_demo") as graph:
        # Create a constant tensor from the matrix
        tensor = ops.constant(matrix, dtype=DType.float32, device=DeviceRef.CPU())

        # Broadcast tensor to a 3x2x2 tensor (add a new dimension of size 3)
        broadcasted_tensor = tensor.broadcast_to((3, 2, 2))

        print(f"Original shape: {tensor.shape}")  # Output: [2, 2]
        print(f"Broadcasted shape: {broadcasted_tensor.shape}")  # Output: [3, 2, 2]

    original, out = lines(capsys)
    assert original.startswith("Original shape: ") and printed_dims(original) == ["2", "2"]
    assert out.startswith("Broadcasted shape: ") and printed_dims(out) == ["3", "2", "2"]
    assert dims(broadcasted_tensor.shape) == ["3", "2", "2"]


def test_graph_TensorValue__cast(capsys):
    """graph.TensorValue.md, TensorValue.cast."""
    from max.graph import DeviceRef  # added import
    import numpy as np
    from max.dtype import DType
    from max.graph import Graph, ops

    # Create a matrix with float32 values
    matrix = np.array([[1, 2], [3, 4]], dtype=np.float32)

    # Create a Graph context to work with tensors
    with Graph("cast_demo") as graph:
        # Create a constant tensor from the matrix
        tensor = ops.constant(matrix, dtype=DType.float32, device=DeviceRef.CPU())

        # Cast tensor to integer type
        casted_tensor = tensor.cast(DType.int32)

        print(f"Original dtype: {tensor.dtype}")  # Output: DType.float32
        print(f"Casted dtype: {casted_tensor.dtype}")  # Output: DType.int32

    assert lines(capsys) == ["Original dtype: DType.float32", "Casted dtype: DType.int32"]
    assert casted_tensor.dtype == DType.int32


def test_graph_TensorValue__dtype(capsys):
    """graph.TensorValue.md, TensorValue.dtype."""
    from max.graph import DeviceRef  # added import
    import numpy as np
    from max.dtype import DType
    from max.graph import Graph, ops

    # Create a matrix with float32 values
    matrix = np.array([[1, 2], [3, 4]], dtype=np.float32)

    # Create a Graph context to work with tensors
    with Graph("dtype_demo") as graph:
        # Create a constant tensor from the matrix
        tensor = ops.constant(matrix, dtype=DType.float32, device=DeviceRef.CPU())

        # Access tensor data type
        print(f"Data type: {tensor.dtype}")  # Output: DType.float32

    assert lines(capsys) == ["Data type: DType.float32"]


def test_graph_TensorValue__flatten(capsys):
    """graph.TensorValue.md, TensorValue.flatten."""
    from max.graph import DeviceRef  # added import
    import numpy as np
    from max.dtype import DType
    from max.graph import Graph, ops

    # Create a 2x2 matrix
    matrix = np.array([[1, 2], [3, 4]], dtype=np.float32)

    # Create a Graph context to work with tensors
    with Graph("flatten_demo") as graph:
        # Create a constant tensor from the matrix
        tensor = ops.constant(matrix, dtype=DType.float32, device=DeviceRef.CPU())

        # Flatten the tensor to a 1D array
        flattened_tensor = tensor.flatten()

        print(f"Original shape: {tensor.shape}")  # Output: [2, 2]
        print(f"Flattened shape: {flattened_tensor.shape}")  # Output: [4]

    original, out = lines(capsys)
    assert original.startswith("Original shape: ") and printed_dims(original) == ["2", "2"]
    assert out.startswith("Flattened shape: ") and printed_dims(out) == ["4"]
    assert dims(flattened_tensor.shape) == ["4"]


def test_graph_TensorValue__max(capsys):
    """graph.TensorValue.md, TensorValue.max: the reduced axis stays, with size 1."""
    from max.dtype import DType
    from max.graph import Graph, TensorType, DeviceRef

    # Define a 2x3 float32 input tensor for the graph
    input_type = TensorType(DType.float32, (2, 3), device=DeviceRef.CPU())

    with Graph("max_demo", input_types=[input_type]) as graph:
        x = graph.inputs[0].tensor

        # Max along axis 1 (last dimension of each row)
        m = x.max(axis=1)

        print(f"Input shape: {x.shape}")  # [2, 3]
        print(f"Max shape: {m.shape}")  # [2, 1]

    inp, out = lines(capsys)
    assert inp.startswith("Input shape: ") and printed_dims(inp) == ["2", "3"]
    assert out.startswith("Max shape: ") and printed_dims(out) == ["2", "1"]
    assert dims(m.shape) == ["2", "1"]


def test_graph_TensorValue__mean(capsys):
    """graph.TensorValue.md, TensorValue.mean: the reduced axis stays, with size 1."""
    from max.dtype import DType
    from max.graph import Graph, TensorType, DeviceRef

    # Define a 2x3 float32 input tensor for the graph
    input_type = TensorType(DType.float32, (2, 3), device=DeviceRef.CPU())

    with Graph("mean_demo", input_types=[input_type]) as graph:
        x = graph.inputs[0].tensor

        # Mean along axis 1 (last dimension of each row)
        mu = x.mean(axis=1)

        print(f"Input shape: {x.shape}")  # [2, 3]
        print(f"Mean shape: {mu.shape}")  # [2, 1]

    inp, out = lines(capsys)
    assert inp.startswith("Input shape: ") and printed_dims(inp) == ["2", "3"]
    assert out.startswith("Mean shape: ") and printed_dims(out) == ["2", "1"]
    assert dims(mu.shape) == ["2", "1"]


def test_graph_TensorValue__min(capsys):
    """graph.TensorValue.md, TensorValue.min: the reduced axis stays, with size 1."""
    from max.dtype import DType
    from max.graph import Graph, TensorType, DeviceRef

    # Define a 2x3 float32 input tensor for the graph
    input_type = TensorType(DType.float32, (2, 3), device=DeviceRef.CPU())

    with Graph("min_demo", input_types=[input_type]) as graph:
        x = graph.inputs[0].tensor

        # Min along axis 1 (last dimension of each row)
        mn = x.min(axis=1)

        print(f"Input shape: {x.shape}")  # [2, 3]
        print(f"Min shape: {mn.shape}")  # [2, 1]

    inp, out = lines(capsys)
    assert inp.startswith("Input shape: ") and printed_dims(inp) == ["2", "3"]
    assert out.startswith("Min shape: ") and printed_dims(out) == ["2", "1"]
    assert dims(mn.shape) == ["2", "1"]


def test_graph_TensorValue__rank(capsys):
    """graph.TensorValue.md, TensorValue.rank."""
    from max.graph import DeviceRef  # added import
    import numpy as np
    from max.dtype import DType
    from max.graph import Graph, ops

    # Create a 2x2 matrix (2-dimensional array)
    matrix = np.array([[1, 2], [3, 4]], dtype=np.float32)

    # Create a Graph context to work with tensors
    with Graph("rank_demo") as graph:
        # Create a constant tensor from the matrix
        tensor = ops.constant(matrix, dtype=DType.float32, device=DeviceRef.CPU())

        # Access tensor rank (number of dimensions)
        print(f"Rank: {tensor.rank}")  # Output: 2

    assert lines(capsys) == ["Rank: 2"]


def test_graph_TensorValue__reshape(capsys):
    """graph.TensorValue.md, TensorValue.reshape."""
    from max.graph import DeviceRef  # added import
    import numpy as np
    from max.dtype import DType
    from max.graph import Graph, ops

    # Create a 2x2 matrix
    matrix = np.array([[1, 2], [3, 4]], dtype=np.float32)

    # Create a Graph context to work with tensors
    with Graph("reshape_demo") as graph:
        # Create a constant tensor from the matrix
        tensor = ops.constant(matrix, dtype=DType.float32, device=DeviceRef.CPU())

        # Reshape tensor to a 1x4 matrix
        reshaped_tensor = tensor.reshape((1, 4))

        print(f"Original shape: {tensor.shape}")  # Output: [2, 2]
        print(f"Reshaped shape: {reshaped_tensor.shape}")  # Output: [1, 4]

    original, out = lines(capsys)
    assert original.startswith("Original shape: ") and printed_dims(original) == ["2", "2"]
    assert out.startswith("Reshaped shape: ") and printed_dims(out) == ["1", "4"]
    assert dims(reshaped_tensor.shape) == ["1", "4"]


def test_graph_TensorValue__shape(capsys):
    """graph.TensorValue.md, TensorValue.shape: prints 'Shape: [Dim(2), Dim(2)]'."""
    from max.graph import DeviceRef  # added import
    import numpy as np
    from max.dtype import DType
    from max.graph import Graph, ops

    # Create a 2x2 matrix
    matrix = np.array([[1, 2], [3, 4]], dtype=np.float32)

    # Create a Graph context to work with tensors
    with Graph("shape_demo") as graph:
        # Create a constant tensor from the matrix
        tensor = ops.constant(matrix, dtype=DType.float32, device=DeviceRef.CPU())

        # Access tensor shape
        print(f"Shape: {tensor.shape}")  # Shape: [Dim(2), Dim(2)]

    (out,) = lines(capsys)
    assert out.startswith("Shape: ") and printed_dims(out) == ["2", "2"]
    assert dims(tensor.shape) == ["2", "2"]


def test_graph_TensorValue__stdev(capsys):
    """graph.TensorValue.md, TensorValue.stdev: the reduced axis stays, with size 1."""
    from max.dtype import DType
    from max.graph import Graph, TensorType, DeviceRef

    # Define a 2x3 float32 input tensor for the graph
    input_type = TensorType(DType.float32, (2, 3), device=DeviceRef.CPU())

    with Graph("stdev_demo", input_types=[input_type]) as graph:
        x = graph.inputs[0].tensor

        # Standard deviation along axis 1 (last dimension of each row)
        sd = x.stdev(axis=1)

        print(f"Input shape: {x.shape}")  # [2, 3]
        print(f"Stdev shape: {sd.shape}")  # [2, 1]

    inp, out = lines(capsys)
    assert inp.startswith("Input shape: ") and printed_dims(inp) == ["2", "3"]
    assert out.startswith("Stdev shape: ") and printed_dims(out) == ["2", "1"]
    assert dims(sd.shape) == ["2", "1"]


def test_graph_TensorValue__to(capsys):
    """graph.TensorValue.md, TensorValue.to: staging a transfer needs no GPU."""
    import numpy as np
    from max.dtype import DType
    from max.graph import Graph, ops, DeviceRef

    # Create a 2x2 matrix
    matrix = np.array([[1, 2], [3, 4]], dtype=np.float32)

    with Graph("to_device_example") as graph:
        # Create a tensor on the default device
        tensor = ops.constant(matrix, dtype=DType.float32, device=DeviceRef.CPU())

        # Move the tensor to a GPU device
        gpu_tensor = tensor.to(DeviceRef.GPU())

        print(f"Original device: {tensor.device}")  # Output depends on default device
        print(f"New device: {gpu_tensor.device}")  # Output: gpu:0

    original, new = lines(capsys)
    assert original.startswith("Original device: ")
    assert new == "New device: gpu:0"


def test_graph_TensorValue__transpose(capsys):
    """graph.TensorValue.md, TensorValue.transpose."""
    from max.graph import DeviceRef  # added import
    import numpy as np
    from max.dtype import DType
    from max.graph import Graph, ops

    # Create a 2x3 matrix
    matrix = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)

    with Graph("transpose_demo") as graph:
        tensor = ops.constant(matrix, dtype=DType.float32, device=DeviceRef.CPU())

        # Transpose the tensor (swap dimensions 0 and 1)
        transposed_tensor = tensor.transpose(dim_1=0, dim_2=1)

        print(f"Original shape: {tensor.shape}")  # Output: [2, 3]
        print(f"Transposed shape: {transposed_tensor.shape}")  # Output: [3, 2]

    original, out = lines(capsys)
    assert original.startswith("Original shape: ") and printed_dims(original) == ["2", "3"]
    assert out.startswith("Transposed shape: ") and printed_dims(out) == ["3", "2"]
    assert dims(transposed_tensor.shape) == ["3", "2"]


def test_graph_TensorValue__var(capsys):
    """graph.TensorValue.md, TensorValue.var: the reduced axis stays, with size 1."""
    from max.dtype import DType
    from max.graph import Graph, TensorType, DeviceRef

    # Define a 2x3 float32 input tensor for the graph
    input_type = TensorType(DType.float32, (2, 3), device=DeviceRef.CPU())

    with Graph("var_demo", input_types=[input_type]) as graph:
        x = graph.inputs[0].tensor

        # Variance along axis 1 (last dimension of each row)
        vr = x.var(axis=1)

        print(f"Input shape: {x.shape}")  # [2, 3]
        print(f"Var shape: {vr.shape}")  # [2, 1]

    inp, out = lines(capsys)
    assert inp.startswith("Input shape: ") and printed_dims(inp) == ["2", "3"]
    assert out.startswith("Var shape: ") and printed_dims(out) == ["2", "1"]
    assert dims(vr.shape) == ["2", "1"]
