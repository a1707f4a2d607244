"""The Python examples of nn.module.md and nn.Embedding.md (the eager max.nn), as tests.
Examples that move parameters to an Accelerator skip without a GPU."""

import numpy as np
import pytest

from doc_examples.common import *  # noqa: F401,F403
from doc_examples.eager_common import parse, same_values


def test_nn_module__Module(capsys):
    """nn.module.md, Module: a dataclass Linear, printed and applied."""
    from max.tensor import Tensor
    from max.nn import Module, module_dataclass

    @module_dataclass
    class Linear(Module):
        weight: Tensor
        bias: Tensor | int = 0

        def forward(self, x: Tensor) -> Tensor:
            return x @ self.weight.T + self.bias

    linear = Linear(Tensor.zeros([5, 4]))
    print(linear)
    print(linear(Tensor.constant([1, 2, 3, 4])))
    out = lines(capsys)
    assert out[0].startswith("Linear(") and "weight" in out[0]
    assert parse(out[1])[:2] == ("float32", [5])
    same_values(out[1], [0.0] * 5)


def _mlp():
    from max.tensor import Tensor
    from max.nn import Module, module_dataclass, Linear

    @module_dataclass
    class MLP(Module):
        fc1: Linear
        fc2: Linear

        def forward(self, x: Tensor) -> Tensor:
            return self.fc2(self.fc1(x))

    return MLP(fc1=Linear(10, 20), fc2=Linear(20, 5))


def test_nn_module__parameters(capsys):
    """nn.module.md, parameters: counting them."""
    model = _mlp()
    total_params = sum(param.num_elements() for name, param in model.parameters)
    print(f"Total parameters: {total_params}")
    assert lines(capsys) == ["Total parameters: 325"]
    assert [n for n, _ in model.parameters] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]


def test_nn_module__apply_to_parameters():
    """nn.module.md, apply_to_parameters (to an Accelerator; skips without a GPU)."""
    from max.driver import Accelerator
    if driver.accelerator_count() == 0:
        pytest.skip("needs a GPU")
    model = _mlp()
    model.apply_to_parameters(lambda name, t: t.to(Accelerator()))
    assert all(not t.device.is_host for _, t in model.parameters)


def test_nn_module__compile(capsys):
    """nn.module.md, compile."""
    from max.dtype import DType
    from max.tensor import Tensor, TensorType, defaults
    from max.nn import Module, module_dataclass

    @module_dataclass
    class Linear(Module):
        weight: Tensor
        bias: Tensor

        def forward(self, x: Tensor) -> Tensor:
            return x @ self.weight.T + self.bias

    linear = Linear(weight=Tensor.zeros([10, 5]), bias=Tensor.zeros([10]))
    _, device = defaults()
    input_type = TensorType(DType.float32, [3, 5], device=device)
    model = linear.compile(input_type)
    input_data = Tensor.ones([3, 5], dtype=DType.float32)
    result = model(input_data)
    print(result)
    out = lines(capsys)[0]
    assert parse(out)[1] == [3, 10]
    same_values(out, [0.0] * 30)


def test_nn_module__load_state():
    """nn.module.md, load_state and load_state_dict (with their errors)."""
    from max.tensor import Tensor
    from max.nn import Linear
    model = Linear(2, 3)
    weights = {"weight": Tensor.zeros([3, 2]), "bias": Tensor.zeros([3])}
    model.load_state(lambda name, _: weights[name])
    assert model.weight is weights["weight"]
    model.load_state_dict({"weight": np.ones((3, 2), np.float32), "bias": np.ones(3, np.float32)})
    assert model(Tensor.ones([2])).to_numpy().tolist() == [3.0, 3.0, 3.0]
    with pytest.raises(ValueError, match="match no parameter"):
        model.load_state_dict({**weights, "extra": Tensor.zeros([1])})
    with pytest.raises(KeyError, match="bias"):
        model.load_state_dict({"weight": Tensor.zeros([3, 2])})
    with pytest.raises(ValueError, match="expects float32\\[3, 2\\]"):
        model.load_state_dict({"weight": Tensor.zeros([2, 3]), "bias": Tensor.zeros([3])})


def test_nn_module__map_parameters_and_to():
    """nn.module.md, map_parameters (on the CPU here) and to."""
    from max.driver import CPU
    from max.nn import Linear
    model = Linear(2, 3)
    doubled = model.map_parameters(lambda _, t: t * 2)
    assert np.allclose(doubled.weight.to_numpy(), model.weight.to_numpy() * 2)
    assert model.to(CPU()) is model


def test_nn_sequential():
    """nn.module.md, ModuleList and Sequential examples."""
    from max.tensor import Tensor
    from max.nn import Linear, Sequential
    model = Sequential(Linear(5, 10), Linear(10, 5))
    assert dict(model.parameters).keys() == {"0.weight", "0.bias", "1.weight", "1.bias"}
    result = model(Tensor.ones([5]))
    assert result.shape == [5]
    hidden_dims = [5, 10, 15, 20]
    model = Sequential(*(Linear(in_dim, out_dim) for in_dim, out_dim in zip(hidden_dims, hidden_dims[1:])))
    result = model(Tensor.ones([5]))
    assert result.shape == [20]


def test_nn_Linear():
    """nn.Embedding.md's page section on Linear."""
    from max.nn import Linear
    from max.tensor import Tensor
    model = Linear(5, 10)
    assert dict(model.parameters) == {"weight": model.weight, "bias": model.bias}
    result = model(Tensor.ones([5]))
    assert result.shape == [10]
    w, b = model.weight.to_numpy(), model.bias.to_numpy()
    np.testing.assert_allclose(result.to_numpy(), w.sum(1) + b, rtol=1e-5)


def test_nn_Embedding():
    """nn.Embedding.md, Embedding (1-d and multi-dimensional)."""
    from max.dtype import DType
    from max.tensor import Tensor
    from max.nn import Embedding
    embedding = Embedding(vocab_size=1000, dim=128)
    tokens = Tensor.ones([10], dtype=DType.uint64)
    embedded = embedding(tokens)
    assert embedded.shape == [10, 128]
    np.testing.assert_array_equal(embedded.to_numpy()[3], embedding.weight.to_numpy()[1])
    embedding = Embedding(vocab_size=1000, dims=[16, 128])
    embedded = embedding(tokens)
    assert embedded.shape == [10, 16, 128]
