"""``max.random``: tensors of random values, reproducible from one global seed.

The graph API has no random ops, so values are drawn on the host, with numpy's counter-based
Philox generator, and copied to the tensor's device. Each tensor draws a 64-bit key from the
global stream when it is created and generates its values from its own Philox stream with that
key: the values depend only on the seed and the order of creation, also under ``F.lazy()``
(where they are only generated if the tensor is used)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from max.dtype import DType
from max._eager import creation

_STATE: dict[str, Any] = {}


def set_seed(value: int) -> None:
    """Restarts the global random stream from `value`."""
    _STATE["seed"] = int(value)
    _STATE["rng"] = np.random.Generator(np.random.Philox(int(value)))


def _rng() -> np.random.Generator:
    if "rng" not in _STATE:
        set_seed(0)
    return _STATE["rng"]


def seed() -> Any:
    """The global seed, as an int64 scalar tensor on the CPU."""
    from max.driver import CPU
    from max.tensor import Tensor

    _rng()
    return Tensor.constant(_STATE["seed"], dtype=DType.int64, device=CPU())


def _make(shape: Iterable[Any], dtype: DType | None, device: Any, op: str, draw: Any) -> Any:
    dtype, device = creation.defaults(dtype, device)
    if not (dtype.is_float() if hasattr(dtype, "is_float") else "float" in dtype.name):
        raise TypeError(f"random.{op}: dtype must be a floating-point type, got {dtype}")
    dims = creation.static_shape(shape, op)
    key = int(_rng().integers(0, 2**63))

    def values() -> np.ndarray:
        return draw(np.random.Generator(np.random.Philox(key)), dims)

    return creation.make(dims, dtype, device, values)


def uniform(shape: Iterable[Any] = (), range: tuple[float, float] = (0, 1), *, dtype: DType | None = None,  # noqa: A002
            device: Any = None, low: float | None = None, high: float | None = None) -> Any:
    """Values uniform in [range[0], range[1]) (``low``/``high`` override the bounds)."""
    if len(tuple(range)) != 2:
        raise ValueError(f"random.uniform: range must be (min, max), got {range!r}")
    lo, hi = range
    lo = lo if low is None else low
    hi = hi if high is None else high
    if not lo < hi:
        raise ValueError(f"random.uniform: the range must have min < max, got ({lo}, {hi})")
    return _make(shape, dtype, device, "uniform", lambda g, dims: g.uniform(lo, hi, dims))


def gaussian(shape: Iterable[Any] = (), mean: float = 0.0, std: float = 1.0, *, dtype: DType | None = None,
             device: Any = None) -> Any:
    """Values from the normal distribution N(mean, std**2)."""
    if not std > 0:
        raise ValueError(f"random.gaussian: std must be positive, got {std}")
    return _make(shape, dtype, device, "gaussian", lambda g, dims: g.normal(mean, std, dims))


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
