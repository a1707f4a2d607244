"""Where MAX's two ``max.nn`` spellings collide (``Linear``, ``Embedding``, ``RMSNorm``, ...:
eager modules in the 26.1/26.2 docs, graph layers in 26.7), one name serves both: a call with
the graph layer's signature (a dtype, a device, ...) builds the graph layer of
``max.nn.legacy``, any other call the eager module."""

from __future__ import annotations

from typing import Any

from max.dtype import DType


def graph_signature(args: tuple, kwargs: dict, positional: int, keywords: set[str]) -> bool:
    """Whether a constructor call uses the graph layer's signature: more than `positional`
    positional arguments, a DType among them, or one of the graph layer's own `keywords`."""
    return (
        len(args) > positional
        or any(isinstance(a, DType) for a in args)
        or any(k in keywords for k in kwargs)
    )


def route(cls: type, legacy: type, args: tuple, kwargs: dict, positional: int, keywords: set[str]) -> Any:
    """The graph layer for a graph-signature call, else a new (uninitialised) eager instance."""
    if graph_signature(args, kwargs, positional, keywords):
        return legacy(*args, **kwargs)
    return object.__new__(cls)
