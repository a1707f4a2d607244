"""The Python examples of random.md (max.random), as tests. The docs' values come from MAX's own
generator; this engine's random ops (Philox4x32-10 on the tensor's device) give other values, so
the tests check shape, dtype, range, distribution and seeding instead of the docs' exact
numbers."""

import numpy as np
import pytest

from doc_examples.common import *  # noqa: F401,F403


def test_random__module():
    """random.md, module: uniform tensors."""
    from max import random
    from max.dtype import DType
    from max.driver import CPU
    tensor1 = random.uniform((2, 3), dtype=DType.float32, device=CPU())
    tensor2 = random.uniform((4, 4), range=(0, 1), dtype=DType.float32, device=CPU())
    for t, shape in ((tensor1, [2, 3]), (tensor2, [4, 4])):
        a = t.to_numpy()
        assert list(t.shape) == shape and t.dtype == DType.float32
        assert (a >= 0).all() and (a < 1).all()


def test_random__gaussian():
    """random.md, gaussian: a standard normal tensor; large draws have the right moments."""
    from max import random
    from max.driver import CPU
    from max.dtype import DType
    tensor = random.gaussian((2, 3), dtype=DType.float32, device=CPU())
    assert list(tensor.shape) == [2, 3]
    big = random.normal((200_000,), mean=3.0, std=2.0, device=CPU()).to_numpy()
    assert abs(big.mean() - 3.0) < 0.03 and abs(big.std() - 2.0) < 0.03
    with pytest.raises(ValueError, match="std"):
        random.gaussian((2,), std=0.0)


def test_random__uniform_range_and_errors():
    from max import random
    a = random.uniform((100_000,), range=(-2, 5)).to_numpy()
    assert a.min() >= -2 and a.max() < 5 and abs(a.mean() - 1.5) < 0.05
    with pytest.raises(ValueError, match="min < max"):
        random.uniform((2,), range=(1, 1))


def test_random__seeding():
    """set_seed makes the stream repeat; seed() returns the seed as a tensor."""
    from max import random
    random.set_seed(1234)
    a = random.normal((5,)).to_numpy()
    b = random.uniform((3,)).to_numpy()
    random.set_seed(1234)
    assert np.array_equal(random.normal((5,)).to_numpy(), a)
    assert np.array_equal(random.uniform((3,)).to_numpy(), b)
    assert random.seed().item() == 1234
    random.set_seed(1235)
    assert not np.array_equal(random.normal((5,)).to_numpy(), a)


def test_guide__random_basic_and_init():
    """guide.basic-operations.md: uniform(low=, high=), normal, xavier_uniform, kaiming_uniform."""
    from max import random
    uniform_tensor = random.uniform([3, 3], low=0.0, high=1.0)
    normal_tensor = random.normal([3, 3], mean=0.0, std=1.0)
    xavier_weights = random.xavier_uniform([3, 3])
    he_weights = random.kaiming_uniform([3, 3])
    assert all(list(t.shape) == [3, 3] for t in (uniform_tensor, normal_tensor, xavier_weights, he_weights))
    assert np.abs(xavier_weights.to_numpy()).max() <= 1.0
    assert np.abs(he_weights.to_numpy()).max() <= np.sqrt(2.0)
