"""``load_weights``: the right reader for a list of checkpoint files, chosen by extension."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from max.graph.weights._files import readable_file
from max.graph.weights.format import WeightsFormat, weights_format
from max.graph.weights.load_gguf import GGUFWeights
from max.graph.weights.load_safetensors import SafetensorWeights
from max.graph.weights.weights import Weights


def load_weights(paths: Sequence[Path]) -> Weights:
    """Weights from `paths`: all ``.safetensors`` (one checkpoint, possibly sharded) or one
    ``.gguf`` file. ValueError for no paths, mixed or unknown extensions; a path that cannot be
    opened raises what ``open`` raises (FileNotFoundError, IsADirectoryError, PermissionError)."""
    if isinstance(paths, (str, Path)):
        raise TypeError("load_weights: paths: expected a list of paths, got a single path")
    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("load_weights: paths: no paths given")
    for p in paths:
        readable_file(p, "load_weights: paths")
    fmt = weights_format(paths)
    if fmt is WeightsFormat.safetensors:
        return SafetensorWeights(paths)
    if len(paths) != 1:
        raise ValueError(f"load_weights: paths: a GGUF checkpoint is one file, got {len(paths)}")
    return GGUFWeights(paths[0])


__all__ = ["load_weights"]
