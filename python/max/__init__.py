"""A MAX-compatible inference engine: ``max.dtype``, ``max.driver``, ``max.graph``,
``max.engine``, the eager API (``max.tensor``, ``max.functional``, ``max.random``) and
``max.nn``, with the heavy lifting in the Rust extension ``max._core``.

``Tensor`` is importable from here (``from max import functional as F, Tensor``, as MAX's docs
write it); it is loaded on first use so that ``import max`` stays light."""

import atexit
from typing import Any

from max._core import __version__
from max._core.driver import _settle_background_compiles

__all__ = ["Tensor", "__version__"]

# A model's load compiles its kernel families in the background; an exit during such a compile
# crashes in the compiler's teardown, so the interpreter's exit waits for those in flight.
atexit.register(_settle_background_compiles)


def __getattr__(name: str) -> Any:
    if name == "Tensor":
        from max.tensor import Tensor

        return Tensor
    raise AttributeError(f"module 'max' has no attribute {name!r}")
