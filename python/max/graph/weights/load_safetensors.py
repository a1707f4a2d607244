"""``SafetensorWeights``: weights from one or more safetensors files (a sharded checkpoint is
one set of names spread over several files). Each file is mapped once by the Rust reader
(``max._core.weights.SafetensorsFile``), which checks its header; tensors are Buffers viewing
the map."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence, Set
from pathlib import Path
from typing import Any

from max import driver
from max._core.weights import SafetensorsFile
from max.dtype import DType
from max.graph.weight import Weight
from max.graph.weights._files import readable_file
from max.graph.weights.weights import WeightData, _Checkpoint, _Entry, _HierarchicalWeights


def _open_files(paths: list[Path]) -> list[SafetensorsFile]:
    files = []
    for p in paths:
        files.append(SafetensorsFile(readable_file(p, "SafetensorWeights: filepaths")))
    return files


def _entries(
    files: list[SafetensorsFile], tensors: Set[str] | None, to_file: Mapping[str, int] | None
) -> tuple[list[_Entry], dict[str, int]]:
    """Every tensor's entry and the file holding it, ordered by file and then by name (a name
    in two files is an error, since which one a model meant cannot be known)."""
    rows: dict[str, tuple[int, Any]] = {}
    for i, f in enumerate(files):
        for row in sorted(f.tensors(), key=lambda r: r[0]):
            name = row[0]
            if name in rows:
                first = files[rows[name][0]].path
                raise ValueError(f"SafetensorWeights: filepaths: tensor {name!r} is in both {first} and {f.path}")
            rows[name] = (i, row)
    if to_file is not None:
        for name, idx in to_file.items():
            if name not in rows or rows[name][0] != idx:
                raise ValueError(
                    f"SafetensorWeights: tensors_to_file_idx: tensor {name!r} is not in file {idx} of filepaths"
                )
    names = [n for n in rows if tensors is None or n in tensors]
    if tensors is not None:
        unknown = sorted(set(tensors) - set(rows))
        if unknown:
            raise ValueError(f"SafetensorWeights: tensors: {unknown[:5]} are not in the files")
    entries = []
    for name in names:
        _, st_dtype, dtype, shape, _, _ = rows[name][1]
        unusable = None if dtype is not None else f"its safetensors dtype {st_dtype} has no max.dtype.DType equivalent"
        entries.append(_Entry(name, dtype, tuple(shape), unusable=unusable))
    return entries, {n: rows[n][0] for n in names}


class SafetensorWeights(_HierarchicalWeights):
    """Weights from safetensors files: ``SafetensorWeights([path, ...]).encoder.layer[0]
    .attention.query.weight.allocate()``."""

    def __init__(
        self,
        filepaths: Sequence[os.PathLike[str] | str],
        *,
        tensors: Set[str] | None = None,
        tensors_to_file_idx: Mapping[str, int] | None = None,
        prefix: str = "",
        allocated: dict[str, Any] | None = None,
        _st_weight_map: dict[str, driver.Buffer] | None = None,
        _st_file_handles: dict[Any, SafetensorsFile] | None = None,
    ) -> None:
        if isinstance(filepaths, (str, os.PathLike)):
            raise TypeError("SafetensorWeights: filepaths: expected a sequence of paths, got a single path")
        paths = [Path(p) for p in filepaths]
        if not paths:
            raise ValueError("SafetensorWeights: filepaths: no files given")
        handles = dict(_st_file_handles or {})
        missing = [p for p in paths if p not in handles]
        for p, f in zip(missing, _open_files(missing)):
            handles[p] = f
        self._files = [handles[p] for p in paths]
        entries, self._file_of = _entries(self._files, tensors, tensors_to_file_idx)
        self._overrides = dict(_st_weight_map or {})
        shown = str(paths[0]) if len(paths) == 1 else f"{len(paths)} safetensors files ({paths[0]}, ...)"
        self._checkpoint = _Checkpoint(entries, self, shown)
        self._checkpoint.allocated.update(allocated or {})
        self._prefix = prefix

    def _load(self, name: str) -> driver.Buffer:
        # Bound to the root accessor, whose attributes these are.
        if name in self._overrides:
            return self._overrides[name]
        return self._files[self._file_of[name]].buffer(name)

    def allocate_as_bytes(self, dtype: DType | None = None) -> Weight:
        """A uint8 Weight over this tensor's bytes: the last dimension is scaled by the element
        size (``[512, 256]`` float32 becomes ``[512, 1024]`` uint8; a scalar becomes
        ``[size]``). A `dtype` that is given must be the tensor's."""
        e = self._entry()
        assert e.dtype is not None
        if dtype is not None and dtype != e.dtype:
            raise ValueError(f"allocate_as_bytes: dtype: weight {e.name!r} holds {e.dtype.name}, not {dtype.name}")
        shape = list(e.shape) or [1]
        shape[-1] *= e.dtype.size_in_bytes
        raw = self._buffer(e).view(DType.uint8, shape)
        self._checkpoint.allocated[e.name] = raw
        return Weight(e.name, DType.uint8, shape)

    def close(self) -> None:
        """Drops this object's handles on the files (Buffers already handed out keep their
        mapping alive until they are released)."""
        owner = self._checkpoint.owner
        owner._files = []
        owner._checkpoint.load = _closed


def _closed(name: str) -> driver.Buffer:
    raise ValueError(f"SafetensorWeights: {name!r}: the files were closed")


__all__ = ["SafetensorWeights", "WeightData"]
