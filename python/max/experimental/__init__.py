"""``max.experimental``: MAX 26.7's names for the eager API. ``max.experimental.tensor``,
``.functional``, ``.random`` and ``.nn`` are the modules ``max.tensor``, ``max.functional``,
``max.random`` and the eager modules of ``max.nn`` (one implementation, two spellings)."""

import sys as _sys

from max import functional, random, tensor
from max.experimental import nn

for _name, _module in (("tensor", tensor), ("functional", functional), ("random", random)):
    _sys.modules[f"{__name__}.{_name}"] = _module

__all__ = ["functional", "nn", "random", "tensor"]
