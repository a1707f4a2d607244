"""Helpers for the weights tests: files written by the real `safetensors` and `gguf` packages,
random GGUF blocks, where the fields of a GGUF file lie (to damage them), and the installed
model files of the optional model packages."""

from __future__ import annotations

import importlib.metadata
import struct
from pathlib import Path
from typing import Any, Callable

import numpy as np

import gguf
from gguf import GGMLQuantizationType as GT
from gguf import quants
from max import driver
from max.graph.quantization import QuantizationEncoding as Q

ENCODINGS = {Q.Q4_0: GT.Q4_0, Q.Q4_1: GT.Q4_1, Q.Q8_0: GT.Q8_0, Q.Q4_K: GT.Q4_K, Q.Q5_K: GT.Q5_K, Q.Q6_K: GT.Q6_K}
# Byte offsets of the f16 scale fields of each block type (kept finite in random blocks).
F16_FIELDS = {GT.Q4_K: [0, 2], GT.Q5_K: [0, 2], GT.Q6_K: [208], GT.Q4_0: [0], GT.Q4_1: [0, 2], GT.Q8_0: [0]}


def random_blocks(rng: np.random.Generator, t: GT, rows: int, blocks: int) -> np.ndarray:
    """uint8 [rows, blocks * block bytes]: random bytes with finite f16 scales."""
    size = gguf.GGML_QUANT_SIZES[t][1]
    raw = rng.integers(0, 256, size=(rows, blocks, size), dtype=np.uint8)
    for off in F16_FIELDS[t]:
        scale = (rng.standard_normal((rows, blocks)) * 0.05).astype(np.float16)
        raw[:, :, off : off + 2] = scale.view(np.uint8).reshape(rows, blocks, 2)
    return raw.reshape(rows, blocks * size)


def quantized(rng: np.random.Generator, t: GT, rows: int, cols: int) -> np.ndarray:
    """Rows of `cols` elements in type `t`: gguf's quantizer where it has one (Q4_0, Q4_1,
    Q8_0, ...), random blocks for the K types it only decodes."""
    if t in (GT.Q4_K, GT.Q5_K, GT.Q6_K):
        return random_blocks(rng, t, rows, cols // 256)
    return quants.quantize(rng.standard_normal((rows, cols)).astype(np.float32), t)


def write_gguf(
    path: Path,
    tensors: list[tuple[str, np.ndarray, GT | None]],
    metadata: Callable[[gguf.GGUFWriter], None] | None = None,
    alignment: int | None = None,
) -> Path:
    """A GGUF file written by gguf.GGUFWriter (raw_dtype for pre-quantized data)."""
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    if metadata is not None:
        metadata(w)
    for name, arr, raw in tensors:
        w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def tensor_info_offsets(path: Path) -> dict[str, dict[str, int]]:
    """File offsets of each tensor info's rank, dims, type and data offset fields."""
    out = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        at = t.field.offset + 8 + len(t.name.encode())
        rank = len(t.shape)
        out[t.name] = {"rank": at, "dims": at + 4, "type": at + 4 + 8 * rank, "offset": at + 8 + 8 * rank}
    return out


def patched(src: Path, dst: Path, edits: list[tuple[int, str, Any]]) -> Path:
    """A copy of `src` with struct-packed values written at the given offsets."""
    raw = bytearray(src.read_bytes())
    for at, fmt, value in edits:
        struct.pack_into(fmt, raw, at, value)
    dst.write_bytes(bytes(raw))
    return dst


def to_numpy(buf: driver.Buffer) -> np.ndarray:
    return buf.to_numpy()


def raw_bytes(buf: driver.Buffer) -> bytes:
    """The bytes of a host buffer (bfloat16 and other numpy-less types included)."""
    arr = buf.to_numpy()
    return np.ascontiguousarray(arr).view(np.uint8).tobytes()


def model_file(dist: str, relative: str) -> Path | None:
    """A file inside an installed distribution, found without importing it (the model
    packages import heavy dependencies at import time); None when it is not installed."""
    try:
        d = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
    p = Path(str(d.locate_file(relative)))
    return p if p.is_file() else None
