"""Examples of guide.tensor-fundamentals.md and guide.basic-operations.md, as tests, printed
values compared numerically with the guides' outputs. The guides print reductions without the
reduced axis (``x.sum()`` as a scalar), which contradicts tensor.md's reference (``sum(axis=-1)``,
dims kept); this engine follows the reference, so those lines are checked for values only."""

from doc_examples.common import *  # noqa: F401,F403
from doc_examples.eager_common import same_print, same_values


def test_guide__create_tensors(capsys):
    from max.tensor import Tensor
    from max.driver import CPU
    from max.dtype import DType
    x = Tensor.constant([1, 2, 3, 4, 5])
    print(x)
    cube = Tensor.constant([[[1, 2], [3, 4]], [[5, 6], [7, 8]]])
    print(cube)
    ones = Tensor.ones([3, 4], dtype=DType.float32, device=CPU())
    print(ones)
    t = Tensor.constant([[1, 2, 3], [4, 5, 6]])
    print(t.num_elements())
    print(cube.rank)
    out = lines(capsys)
    same_print(out[0], "TensorType(dtype=float32, shape=[Dim(5)], device=cpu:0): [1.0, 2.0, 3.0, 4.0, 5.0]")
    same_print(out[1], "TensorType(dtype=float32, shape=[Dim(2), Dim(2), Dim(2)], device=cpu:0): "
                       "[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]")
    same_print(out[2], "TensorType(dtype=float32, shape=[Dim(3), Dim(4)], device=cpu:0): [" + ", ".join(["1.0"] * 12) + "]")
    assert out[3:] == ["6", "3"]


def test_guide__arithmetic_and_math(capsys):
    import max.functional as F
    from max.tensor import Tensor
    a = Tensor.constant([1.0, 2.0, 3.0])
    b = Tensor.constant([4.0, 5.0, 6.0])
    print(a + b)
    print(a * b)
    x = Tensor.constant([1.0, -4.0, 9.0, -16.0])
    print(f"Absolute value: {abs(x)}")
    print(f"Power (x**2): {x ** 2}")
    print(f"Square root: {F.sqrt(abs(x))}")
    out = lines(capsys)
    same_print(out[0], "TensorType(dtype=float32, shape=[Dim(3)], device=cpu:0): [5.0, 7.0, 9.0]")
    same_print(out[1], "TensorType(dtype=float32, shape=[Dim(3)], device=cpu:0): [4.0, 10.0, 18.0]")
    same_values(out[2].split(": ", 1)[1], [1.0, 4.0, 9.0, 16.0])
    same_values(out[3].split(": ", 1)[1], [1.0, 16.0, 81.0, 256.0])
    same_values(out[4].split(": ", 1)[1], [1.0, 2.0, 3.0, 4.0])


def test_guide__shapes(capsys):
    from max.tensor import Tensor
    x = Tensor.constant([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])
    print(f"Original shape: {x.shape}")
    matrix = x.reshape([3, 4])
    print(f"Reshaped to 3x4: {matrix.shape}")
    y = Tensor.constant([[1, 2, 3], [4, 5, 6]]).T
    print(y)
    p = Tensor.constant([[[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]],
                         [[13, 14, 15, 16], [17, 18, 19, 20], [21, 22, 23, 24]]]).permute(0, 2, 1)
    print(f"Permuted shape: {p.shape}")
    out = lines(capsys)
    assert out[0] == "Original shape: [Dim(12)]" and out[1] == "Reshaped to 3x4: [Dim(3), Dim(4)]"
    same_print(out[2], "TensorType(dtype=float32, shape=[Dim(3), Dim(2)], device=cpu:0): [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]")
    assert out[3] == "Permuted shape: [Dim(2), Dim(4), Dim(3)]"


def test_guide__reductions_matmul_activations(capsys):
    import max.functional as F
    from max.tensor import Tensor
    x = Tensor.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    print(x.sum(axis=0))
    print(x.sum(axis=1))
    print(x.mean(axis=None))
    print(F.min(x, axis=None))
    w = Tensor.constant([[5.0, 6.0], [7.0, 8.0]])
    print(Tensor.constant([[1.0, 2.0], [3.0, 4.0]]) @ w)
    a = Tensor.constant([[-2.0, -1.0, 0.0], [1.0, 2.0, 3.0]])
    print(F.sigmoid(a))
    out = lines(capsys)
    same_values(out[0], [5.0, 7.0, 9.0])
    same_values(out[1], [6.0, 15.0])
    same_values(out[2], [3.5])
    same_values(out[3], [1.0])
    same_print(out[4], "TensorType(dtype=float32, shape=[Dim(2), Dim(2)], device=cpu:0): [19.0, 22.0, 43.0, 50.0]")
    same_print(out[5], "TensorType(dtype=float32, shape=[Dim(2), Dim(3)], device=cpu:0): "
                       "[0.119, 0.269, 0.5, 0.731, 0.881, 0.953]")
