"""``max.nn.sequential``: ``Sequential`` (unary modules applied in order) and ``ModuleList``, as
MAX 26.7 places them. ``Sequential`` called with one list of layers builds the graph layers'
``Sequential`` (``max.nn.legacy.sequential``)."""

from max.nn.layers import ModuleList, Sequential

__all__ = ["ModuleList", "Sequential"]
