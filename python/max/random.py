"""``max.random``: tensors of random values, reproducible from one global seed.

Values are generated on the tensor's device by the graph's random ops (``max.graph.ops.random``:
Philox4x32-10 and Box-Muller, the recipe in crates/runtime/src/cpu/random/values.rs), so uniform
values are the same bits on the CPU and on a GPU. Each tensor takes a 64-bit key from the global
seed and its place in the order of creation -- the k-th tensor after ``set_seed(s)`` (k = 0, 1,
...) takes splitmix64's k-th output from the state s -- and passes it to the op as the seed
tensor, so one compiled op serves every call. The values depend only on the seed and the order of
creation, also under ``F.lazy()`` (where they are only generated if the tensor is used)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from max.dtype import DType
from max._eager import creation

_STATE: dict[str, int] = {"seed": 0, "count": 0}
_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def set_seed(value: int) -> None:
    """Restarts the global random stream from `value` (an int64)."""
    item = getattr(value, "item", None)
    if not hasattr(value, "__index__") and callable(item) and getattr(value, "dtype", None) is not None:
        if not value.dtype.is_integral() or list(getattr(value, "shape", [])) not in ([], [1]):
            raise TypeError(f"random.set_seed: a tensor seed must be one integer, got {value.dtype} {list(value.shape)}")
        value = item()  # a scalar integer Tensor (random.seed()'s)
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"random.set_seed: the seed must be an int, got {type(value).__name__}")
    value = int(value)
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"random.set_seed: the seed must fit in int64, got {value}")
    _STATE["seed"] = value
    _STATE["count"] = 0


def seed() -> Any:
    """The global seed, as an int64 scalar tensor on the CPU."""
    from max.driver import CPU
    from max.tensor import Tensor

    return Tensor.constant(_STATE["seed"], dtype=DType.int64, device=CPU())


def _next_key() -> int:
    """The next tensor's key: splitmix64's k-th output from the state `seed` (k counts the
    tensors made since ``set_seed``)."""
    k = _STATE["count"]
    _STATE["count"] = k + 1
    z = (_STATE["seed"] + (k + 1) * _GOLDEN) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def _draw(seed: Any, *, name: str, shape: tuple[int, ...], dtype: DType, device: Any, params: dict) -> Any:
    """The graph function behind every draw: one random op with `seed` as its seed tensor."""
    from max.graph.ops.random import draw
    from max.graph.type import TensorType

    return draw(name, seed, TensorType(dtype, shape, device), params)


def _number(op: str, arg: str, value: Any) -> float:
    """`value` as a float, or a TypeError naming the argument."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"random.{op}: {arg} must be a number, got {value!r}")
    return float(value)


def _make(shape: Iterable[Any], dtype: DType | None, device: Any, op: str, name: str, params: dict) -> Any:
    from max import driver
    from max.graph.type import DeviceRef
    from max.tensor import Tensor
    from max._eager import dispatch

    dtype, device = creation.defaults(dtype, device)
    if not (dtype.is_float() if hasattr(dtype, "is_float") else "float" in dtype.name):
        raise TypeError(f"random.{op}: dtype must be a floating-point type, got {dtype}")
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
        raise TypeError(f"random.{op}: shape must be a sequence of dims, got {shape!r}")
    dims = creation.static_shape(shape, op)
    key = Tensor(storage=driver.Buffer.from_numpy(np.array(_next_key(), dtype=np.uint64)))
    kwargs = {"name": name, "shape": dims, "dtype": dtype, "device": DeviceRef.from_device(device), "params": params}
    return dispatch.apply(_draw, (key,), kwargs)


def uniform(shape: Iterable[Any] = (), range: tuple[float, float] = (0, 1), *, dtype: DType | None = None,  # noqa: A002
            device: Any = None, low: float | None = None, high: float | None = None) -> Any:
    """Values uniform in [range[0], range[1]) (``low``/``high`` override the bounds)."""
    if isinstance(range, (str, bytes)) or not isinstance(range, Iterable) or len(tuple(range)) != 2:
        raise ValueError(f"random.uniform: range must be (min, max), got {range!r}")
    lo, hi = range
    lo = _number("uniform", "range's min" if low is None else "low", lo if low is None else low)
    hi = _number("uniform", "range's max" if high is None else "high", hi if high is None else high)
    if not lo < hi:
        raise ValueError(f"random.uniform: the range must have min < max, got ({lo}, {hi})")
    return _make(shape, dtype, device, "uniform", "random_uniform", {"low": float(lo), "high": float(hi)})


def gaussian(shape: Iterable[Any] = (), mean: float = 0.0, std: float = 1.0, *, dtype: DType | None = None,
             device: Any = None) -> Any:
    """Values from the normal distribution N(mean, std**2)."""
    mean, std = _number("gaussian", "mean", mean), _number("gaussian", "std", std)
    if not std > 0:
        raise ValueError(f"random.gaussian: std must be positive, got {std}")
    return _make(shape, dtype, device, "gaussian", "random_normal", {"mean": float(mean), "std": float(std)})


def normal(shape: Iterable[Any] = (), mean: float = 0.0, std: float = 1.0, *, dtype: DType | None = None,
           device: Any = None) -> Any:
    """Alias of ``gaussian``."""
    return gaussian(shape, mean, std, dtype=dtype, device=device)


def _like(t: Any) -> dict:
    return {"dtype": t.dtype, "device": creation.as_device(t.device)}


def gaussian_like(like: Any, mean: float = 0.0, std: float = 1.0) -> Any:
    """Normal random values with `like`'s shape, dtype and device."""
    return gaussian(like.shape, mean, std, **_like(like))


normal_like = gaussian_like


def uniform_like(like: Any, range: tuple[float, float] = (0, 1)) -> Any:  # noqa: A002
    """Uniform random values in `range` with `like`'s shape, dtype and device."""
    return uniform(like.shape, range, **_like(like))


def _fans(shape: Iterable[Any]) -> tuple[int, int]:
    dims = [int(d) for d in shape]
    if len(dims) < 2:
        n = dims[0] if dims else 1
        return n, n
    field = math.prod(dims[2:])
    return dims[1] * field, dims[0] * field


def xavier_uniform(shape: Iterable[Any] = (), gain: float = 1.0, *, dtype: DType | None = None,
                   device: Any = None) -> Any:
    """Glorot uniform: bound ``gain * sqrt(6 / (fan_in + fan_out))``, shape [out, in, ...]."""
    fan_in, fan_out = _fans(shape)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform(shape, (-bound, bound), dtype=dtype, device=device)


def kaiming_uniform(shape: Iterable[Any] = (), a: float = 0.0, *, dtype: DType | None = None,
                    device: Any = None) -> Any:
    """He uniform for a leaky ReLU of slope `a`: bound ``sqrt(6 / ((1 + a^2) fan_in))``."""
    fan_in, _ = _fans(shape)
    bound = math.sqrt(6.0 / ((1.0 + a * a) * fan_in))
    return uniform(shape, (-bound, bound), dtype=dtype, device=device)


__all__ = [
    "gaussian", "gaussian_like", "kaiming_uniform", "normal", "normal_like", "seed", "set_seed", "uniform",
    "uniform_like", "xavier_uniform",
]
