"""A MAX-compatible inference engine: ``max.dtype``, ``max.driver`` and (as they land)
``max.graph`` and ``max.engine``, with the heavy lifting in the Rust extension ``max._core``."""

from max._core import __version__

__all__ = ["__version__"]
