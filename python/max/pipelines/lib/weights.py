"""A model's weights as a flat ``name -> WeightData`` map in the names its modules use: the
files are opened with ``max.graph.weights.load_weights`` (memory-mapped, nothing copied), and
an architecture's adapter renames them (``model.layers.0...`` or GGUF's ``blk.0...`` to
``layers.0...``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from max.graph.quantization import QuantizationEncoding
from max.graph.weights import WeightData, load_weights


def read_weights(paths: list[Any]) -> dict[str, WeightData]:
    """Every tensor of the files, by its name in the file."""
    weights = load_weights(paths)
    out: dict[str, WeightData] = {}
    for name, accessor in weights.items():
        out[name] = accessor.data()
    return out


def adapt(raw: dict[str, WeightData], rename: Callable[[str], str | None]) -> dict[str, WeightData]:
    """The tensors renamed by `rename` (None drops a tensor)."""
    out: dict[str, WeightData] = {}
    for name, data in raw.items():
        new = rename(name)
        if new is not None:
            out[new] = data
    return out


def encoding_of(weights: dict[str, WeightData], name: str) -> QuantizationEncoding | None:
    w = weights.get(name)
    return None if w is None else w.quantization_encoding


def weight_bytes(weights: dict[str, WeightData]) -> int:
    total = 0
    for w in weights.values():
        n = w.dtype.size_in_bytes
        for d in w.shape:
            n *= int(d)
        total += n
    return total


__all__ = ["adapt", "encoding_of", "read_weights", "weight_bytes"]
