"""A MAX-compatible inference engine: ``max.dtype``, ``max.driver``, ``max.graph``,
``max.engine``, the eager API (``max.tensor``, ``max.functional``, ``max.random``) and
``max.nn``, with the heavy lifting in the Rust extension ``max._core``.

``Tensor`` is importable from here (``from max import functional as F, Tensor``, as MAX's docs
write it); it is loaded on first use so that ``import max`` stays light."""

from typing import Any

from max._core import __version__

__all__ = ["Tensor", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Tensor":
        from max.tensor import Tensor

        return Tensor
    raise AttributeError(f"module 'max' has no attribute {name!r}")
