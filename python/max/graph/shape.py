"""Tensor shapes (``max.graph.shape``): a list of Dims."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeGuard

from max.graph.dim import Dim, DimLike, StaticDim, SymbolicDim

ShapeLike = Iterable[DimLike]


class Shape(list):
    """A list of Dims; entries given as ints or names become Dims."""

    def __init__(self, dims: ShapeLike = ()) -> None:
        if isinstance(dims, (str, bytes)):
            raise TypeError(f"a shape is a sequence of dims, got the string {dims!r}")
        if not isinstance(dims, Iterable):
            raise TypeError(f"a shape is a sequence of dims, got {type(dims).__name__} {dims!r}")
        super().__init__(d if isinstance(d, Dim) else Dim(d) for d in dims)

    @property
    def rank(self) -> int:
        """The number of dims."""
        return len(self)

    @property
    def static_dims(self) -> list[int]:
        """The static dims, as ints (symbolic and algebraic ones are left out)."""
        return [d.dim for d in self if isinstance(d, StaticDim)]

    @property
    def parameters(self) -> Iterable[SymbolicDim]:
        """The symbolic dims the shape depends on, each once."""
        seen: dict[str, SymbolicDim] = {}
        for d in self:
            for p in d.parameters:
                seen.setdefault(p.name, p)
        return list(seen.values())

    @staticmethod
    def is_static(shape: Shape) -> TypeGuard[list[StaticDim]]:
        """Whether every dim of `shape` is a StaticDim (a known integer) of a valid size (>= 0)."""
        return all(isinstance(d, StaticDim) and d.dim >= 0 for d in shape)

    def __getitem__(self, index: Any) -> Any:
        out = super().__getitem__(index)
        return Shape(out) if isinstance(index, slice) else out

    def __add__(self, other: Any) -> Shape:  # type: ignore[override]
        return Shape(list(self) + list(other))
