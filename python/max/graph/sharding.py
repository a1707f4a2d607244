"""``ShardingStrategy``: how a weight is cut into one piece per device. A strategy names an
axis and, per device, the range ``[start, stop)`` of that axis the device holds: even pieces
(``rowwise``, ``columnwise``, ``axiswise``; when the dim does not divide, the first devices get
one more), whole attention heads (``head_aware_columnwise``), the whole weight (``replicate``),
or ranges given outright (``ranges``: the key/value heads of grouped-query attention, which
neighbouring devices may share).

A piece is staged as a slice of the whole weight, which the engine folds at load: each device
receives its own part once, not a copy of the whole."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


def even_ranges(size: int, parts: int, unit: int = 1) -> list[tuple[int, int]]:
    """`size` (a multiple of `unit`) cut into `parts` contiguous ranges of whole units, as even
    as can be (the first ranges get one unit more)."""
    if parts < 1:
        raise ValueError(f"cannot split into {parts} pieces")
    if size % unit:
        raise ValueError(f"a dim of {size} is not a whole number of units of {unit}")
    units = size // unit
    out, start = [], 0
    for i in range(parts):
        n = units // parts + (1 if i < units % parts else 0)
        out.append((start * unit, (start + n) * unit))
        start += n
    return out


@dataclass(frozen=True)
class ShardingStrategy:
    """One piece per device of `num_devices`: along `axis` (None: the whole weight), the range
    that ``ranges_for(size)`` gives each device."""

    num_devices: int
    axis: int | None
    ranges_for: Callable[[int], Sequence[tuple[int, int]]]
    kind: str = "custom"

    @staticmethod
    def rowwise(num_devices: int) -> ShardingStrategy:
        """Even pieces of the first axis (a Linear weight's output features)."""
        return ShardingStrategy(num_devices, 0, lambda n: even_ranges(n, num_devices), "rowwise")

    @staticmethod
    def columnwise(num_devices: int) -> ShardingStrategy:
        """Even pieces of the second axis (a Linear weight's input features)."""
        return ShardingStrategy(num_devices, 1, lambda n: even_ranges(n, num_devices), "columnwise")

    @staticmethod
    def axiswise(axis: int, num_devices: int) -> ShardingStrategy:
        """Even pieces of `axis`."""
        return ShardingStrategy(num_devices, axis, lambda n: even_ranges(n, num_devices), "axiswise")

    @staticmethod
    def replicate(num_devices: int) -> ShardingStrategy:
        """The whole weight on every device."""
        return ShardingStrategy(num_devices, None, lambda n: [(0, n)] * num_devices, "replicate")

    @staticmethod
    def head_aware_columnwise(num_devices: int, num_heads: int, head_dim: int) -> ShardingStrategy:
        """Columns in whole heads of `head_dim` (an attention output projection's input)."""

        def ranges(n: int) -> list[tuple[int, int]]:
            if n != num_heads * head_dim:
                raise ValueError(f"head_aware_columnwise: {n} columns are not {num_heads} heads of {head_dim}")
            return even_ranges(n, num_devices, head_dim)

        return ShardingStrategy(num_devices, 1, ranges, "head_aware_columnwise")

    @staticmethod
    def ranges(axis: int, ranges: Sequence[tuple[int, int]]) -> ShardingStrategy:
        """Device ``i`` holds ``ranges[i]`` of `axis` (ranges may overlap: shared heads)."""
        fixed = [(int(a), int(b)) for a, b in ranges]
        return ShardingStrategy(len(fixed), axis, lambda n: fixed, "ranges")

    @property
    def is_rowwise(self) -> bool:
        """Whether pieces are cut from the first axis."""
        return self.axis == 0

    @property
    def is_colwise(self) -> bool:
        """Whether pieces are cut from the second axis."""
        return self.axis == 1

    @property
    def is_replicate(self) -> bool:
        """Whether every device gets the whole weight."""
        return self.axis is None

    def piece(self, shape: Sequence[int], index: int) -> tuple[int, int] | None:
        """The range of the sharded axis device `index` holds (None: the whole weight), checked
        against `shape`."""
        if not 0 <= index < self.num_devices:
            raise IndexError(f"shard index {index} is out of range for {self.num_devices} devices")
        if self.axis is None:
            return None
        if not -len(shape) <= self.axis < len(shape):
            raise ValueError(f"a {self.kind} sharding needs axis {self.axis}, the weight has rank {len(shape)}")
        size = int(shape[self.axis])
        ranges = list(self.ranges_for(size))
        if len(ranges) != self.num_devices:
            raise ValueError(f"{self.kind} sharding: {len(ranges)} ranges for {self.num_devices} devices")
        start, stop = ranges[index]
        if not 0 <= start <= stop <= size:
            raise ValueError(f"{self.kind} sharding: range {start}:{stop} is outside a dim of {size}")
        return start, stop

    def shard_shape(self, shape: Sequence[int], index: int) -> list[int]:
        """The shape of device `index`'s piece of a weight of `shape`."""
        out = [int(d) for d in shape]
        r = self.piece(out, index)
        if r is not None:
            out[self.axis] = r[1] - r[0]  # type: ignore[index]
        return out

    def shard_value(self, value: Any, index: int) -> Any:
        """Device `index`'s piece of `value` (a graph value or a numpy array)."""
        shape = [int(d) for d in value.shape]
        r = self.piece(shape, index)
        if r is None:
            return value
        axis = self.axis % len(shape)  # type: ignore[operator]
        if r == (0, shape[axis]):
            return value
        index_tuple = tuple(slice(None) if k != axis else slice(r[0], r[1]) for k in range(len(shape)))
        return value[index_tuple]


__all__ = ["ShardingStrategy", "even_ranges"]
