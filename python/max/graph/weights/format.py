"""Weight file formats and their detection from file names."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from pathlib import Path


class WeightsFormat(str, enum.Enum):
    """The supported weight file formats."""

    gguf = "gguf"
    safetensors = "safetensors"

    def __str__(self) -> str:
        return f"WeightsFormat.{self.name}"


_EXTENSIONS = {".gguf": WeightsFormat.gguf, ".safetensors": WeightsFormat.safetensors}


def weights_format(weight_paths: Iterable[Path | str]) -> WeightsFormat:
    """The format of `weight_paths`, from their extensions; all must share one format."""
    paths = [Path(p) for p in weight_paths]
    if not paths:
        raise ValueError("weights_format: weight_paths is empty")
    found = set()
    for p in paths:
        fmt = _EXTENSIONS.get(p.suffix.lower())
        if fmt is None:
            raise ValueError(f"weights_format: {p} has an unsupported extension (expected .safetensors or .gguf)")
        found.add(fmt)
    if len(found) > 1:
        raise ValueError(f"weights_format: mixed formats in {[str(p) for p in paths]}")
    return found.pop()
