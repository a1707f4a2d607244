"""The Python examples of functional.md (max.functional) and graph.ops.md's eager examples
(F.* on Tensors), as tests (see common.py for the method). Printed Tensors are compared with
the values the docs give, numerically (the docs round, e.g. 0.119)."""

import pytest

from doc_examples.common import *  # noqa: F401,F403
from doc_examples.eager_common import parse, same_values


def test_functional__custom():
    """functional.md, custom: needs a Mojo package (ops.mojopkg); custom kernels are not
    supported, and the call says so."""
    from max import functional as F, Tensor
    from max.dtype import DType
    from max.driver import CPU
    x = Tensor.full([10], 10, dtype=DType.float32, device=CPU())
    y = Tensor.ones([10], dtype=DType.float32, device=CPU())
    with pytest.raises(NotImplementedError, match="custom"):
        F.custom("vector_sum", device=x.device, values=[x, y], out_types=[x.type],
                 custom_extensions="ops.mojopkg")[0]


def test_functional__inplace_custom():
    """functional.md, inplace_custom: not supported (no Mojo kernels), with a clear error."""
    from max import functional as F, Tensor
    from max.dtype import DType
    from max.driver import CPU
    data = Tensor.zeros([10], dtype=DType.float32, device=CPU())
    with pytest.raises(NotImplementedError, match="inplace_custom"):
        F.inplace_custom("my_inplace_op", device=data.device, values=[data], custom_extensions="ops.mojopkg")


def test_functional__lazy(capsys):
    """functional.md, lazy."""
    from max import functional as F
    from max.tensor import Tensor
    from max.nn import Linear
    with F.lazy():
        model = Linear(2, 3)
        print(model)  # Lazy weights not initialized
    weights = {
        "weight": Tensor.zeros([3, 2]),
        "bias": Tensor.zeros([3]),
    }
    model.load_state_dict(weights)
    assert model(Tensor.ones([5, 2])).to_numpy().tolist() == [[0.0] * 3] * 5


def test_functional__split():
    """functional.md, split."""
    from max import functional as F, Tensor
    x = Tensor.ones([10, 4])
    chunks = F.split(x, 3, axis=0)
    assert [list(c.shape) for c in chunks] == [[3, 4], [3, 4], [3, 4], [1, 4]]
    chunks = F.split(x, [2, 3, 5], axis=0)
    assert [list(c.shape) for c in chunks] == [[2, 4], [3, 4], [5, 4]]


def test_functional__in_graph_context():
    """functional.md, in_graph_context; F.* on graph values stages graph ops."""
    import max.functional as F
    from max.dtype import DType
    from max.graph import DeviceRef, Graph, TensorType, TensorValue
    assert not F.in_graph_context()
    with Graph("g", input_types=[TensorType(DType.float32, [3], DeviceRef.CPU())]) as g:
        assert F.in_graph_context()
        y = F.relu(g.inputs[0].tensor)
        assert isinstance(y, TensorValue)


def test_graph_ops__concat(capsys):
    """graph.ops.md, concat."""
    import max.functional as F
    from max.tensor import Tensor
    a = Tensor.constant([[1, 2], [3, 4]])
    b = Tensor.constant([[5, 6], [7, 8]])
    vertical = F.concat([a, b], axis=0)
    print(f"Concatenated along axis 0: {vertical.shape}")
    print(vertical)
    horizontal = F.concat([a, b], axis=1)
    print(f"Concatenated along axis 1: {horizontal.shape}")
    print(horizontal)
    out = lines(capsys)
    assert out[0] == "Concatenated along axis 0: [Dim(4), Dim(2)]"
    same_values(out[1], [[1, 2], [3, 4], [5, 6], [7, 8]])
    assert out[2] == "Concatenated along axis 1: [Dim(2), Dim(4)]"
    same_values(out[3], [[1, 2, 5, 6], [3, 4, 7, 8]])


def test_graph_ops__exp(capsys):
    """graph.ops.md, exp."""
    import max.functional as F
    from max.tensor import Tensor
    x = Tensor.constant([0.0, 1.0, 2.0])
    result = F.exp(x)
    print(result)
    same_values(lines(capsys)[0], [1.0, 2.718, 7.389])


def test_graph_ops__log(capsys):
    """graph.ops.md, log."""
    import max.functional as F
    from max.tensor import Tensor
    x = Tensor.constant([1.0, 2.718, 7.389, 20.0])
    result = F.log(x)
    print(result)
    same_values(lines(capsys)[0], [0.0, 1.0, 2.0, 2.996])


def test_graph_ops__matmul(capsys):
    """graph.ops.md, matmul."""
    from max.tensor import Tensor
    x = Tensor.constant([[1.0, 2.0], [3.0, 4.0]])
    w = Tensor.constant([[5.0, 6.0], [7.0, 8.0]])
    result = x @ w
    print("Matrix multiplication result:")
    print(result)
    import max.functional as F
    result2 = F.matmul(x, w)
    out = lines(capsys)
    assert out[0] == "Matrix multiplication result:"
    same_values(out[1], [[19.0, 22.0], [43.0, 50.0]])
    assert result2.to_numpy().tolist() == result.to_numpy().tolist()


def test_graph_ops__relu(capsys):
    """graph.ops.md, relu."""
    import max.functional as F
    from max.tensor import Tensor
    x = Tensor.constant([[-2.0, -1.0, 0.0], [1.0, 2.0, 3.0]])
    result = F.relu(x)
    print(result)
    same_values(lines(capsys)[0], [[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]])


def test_graph_ops__sigmoid(capsys):
    """graph.ops.md, sigmoid."""
    import max.functional as F
    from max.tensor import Tensor
    x = Tensor.constant([[-2.0, -1.0, 0.0], [1.0, 2.0, 3.0]])
    result = F.sigmoid(x)
    print(result)
    same_values(lines(capsys)[0], [[0.119, 0.269, 0.5], [0.731, 0.881, 0.953]])


def test_graph_ops__sqrt(capsys):
    """graph.ops.md, sqrt."""
    import max.functional as F
    from max.tensor import Tensor
    x = Tensor.constant([1.0, 4.0, 9.0, 16.0])
    result = F.sqrt(x)
    print(result)
    y = Tensor.constant([1.0, -4.0, 9.0, -16.0])
    result2 = F.sqrt(F.abs(y))
    print(result2)
    a, b = lines(capsys)
    same_values(a, [1.0, 2.0, 3.0, 4.0])
    same_values(b, [1.0, 2.0, 3.0, 4.0])


def test_graph_ops__tanh(capsys):
    """graph.ops.md, tanh."""
    import max.functional as F
    from max.tensor import Tensor
    x = Tensor.constant([[-2.0, -1.0, 0.0], [1.0, 2.0, 3.0]])
    result = F.tanh(x)
    print(result)
    out = lines(capsys)[0]
    assert parse(out)[:2] == ("float32", [2, 3])
    same_values(out, [[-0.964, -0.762, 0.0], [0.762, 0.964, 0.995]])
