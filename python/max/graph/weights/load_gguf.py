"""``GGUFWeights``: weights from a GGUF file (llama.cpp's format). The file is mapped and
parsed by our Rust reader (``max._core.weights.GgufFile``): F32/F16/BF16/F64 and integer
tensors load as their dtype; Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and Q6_K tensors as uint8
``[rows, bytes_per_row]`` with their ``QuantizationEncoding``, as ops.qmatmul takes them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from max import driver
from max._core.weights import GgufFile
from max.dtype import DType
from max.graph.quantization import QuantizationEncoding
from max.graph.weights._files import readable_file
from max.graph.weights.weights import _Checkpoint, _Entry, _HierarchicalWeights

_SUPPORTED = "F32, F16, BF16, F64, I8, I16, I32, I64, Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K"


def _source_path(source: Any) -> Path:
    """The file behind `source`: a path, or a gguf.GGUFReader (whose numpy memmap knows it)."""
    if isinstance(source, (str, os.PathLike)):
        return Path(source)
    filename = getattr(getattr(source, "data", None), "filename", None)
    if filename is None:
        raise TypeError(f"GGUFWeights: source: expected a path or a gguf.GGUFReader, got {type(source).__name__}")
    return Path(filename)


def _entry(row: tuple) -> _Entry:
    name, ggml_type, dims, dtype, encoding, shape, _, _ = row
    if dtype is not None:
        return _Entry(name, dtype, tuple(shape))
    if encoding is not None:
        # dims are innermost first: dims[0] is the elements of one row.
        return _Entry(name, DType.uint8, tuple(shape), QuantizationEncoding(encoding), logical_last=dims[0])
    return _Entry(
        name, None, tuple(shape), unusable=f"its GGML type {ggml_type} is not one MAX computes with ({_SUPPORTED})"
    )


class GGUFWeights(_HierarchicalWeights):
    """Weights from a GGUF file: ``GGUFWeights(path).blk[0].attn_q.weight.allocate()``; the
    file's hyper-parameters and tokenizer are in ``metadata``. A path that cannot be opened
    raises what ``open`` raises (FileNotFoundError, IsADirectoryError, PermissionError)."""

    def __init__(
        self,
        source: os.PathLike[str] | str | Any,
        tensors: dict[str, Any] | None = None,
        prefix: str = "",
        allocated: dict[str, Any] | None = None,
    ) -> None:
        path = readable_file(_source_path(source), "GGUFWeights: source")
        self._file = GgufFile(path)
        rows = self._file.tensors()
        if tensors is not None:
            known = {r[0] for r in rows}
            unknown = sorted(set(tensors) - known)
            if unknown:
                raise ValueError(f"GGUFWeights: tensors: {unknown[:5]} are not in {path}")
            rows = [r for r in rows if r[0] in tensors]
        self._checkpoint = _Checkpoint([_entry(r) for r in rows], self, str(path))
        self._checkpoint.allocated.update(allocated or {})
        self._prefix = prefix

    def _load(self, name: str) -> driver.Buffer:
        return self._file.buffer(name)

    @property
    def metadata(self) -> dict[str, Any]:
        """The file's key/value metadata as plain Python values (a new dict each time):
        hyper-parameters such as ``"llama.block_count"``, the tokenizer (``"tokenizer.ggml.tokens"``,
        a list of str) and ``"general.architecture"``. Arrays are lists; ``metadata_types``
        gives each key's GGUF type."""
        return {k: v[1] for k, v in self._metadata.items()}

    @property
    def metadata_types(self) -> dict[str, str]:
        """Each metadata key's GGUF value type (``"UINT32"``, ``"STRING"``, ``"ARRAY[STRING]"``...)."""
        return {k: v[0] for k, v in self._metadata.items()}

    @property
    def _metadata(self) -> dict[str, tuple[str, Any]]:
        """The file's metadata: key -> (GGUF type name, value)."""
        return self._checkpoint.owner._file.metadata()


__all__ = ["GGUFWeights"]
