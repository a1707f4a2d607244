"""Writes the small weight files the Rust reader tests and the fuzz harness start from, with
the real `safetensors` and `gguf` packages, and manifest.tsv describing them (what those
packages say is in each file). Run from the repository root after changing it:

    .venv/bin/python crates/runtime/tests/data/make_fixtures.py

Manifest lines, tab-separated:
    tensor  FILE  NAME  TYPE  SHAPE(outermost first, comma-separated)  OFFSET  NBYTES  SHA256
    meta    FILE  KEY   TYPE  VALUE (scalars; arrays give their length)
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import gguf
import ml_dtypes
import numpy as np
from gguf import GGMLQuantizationType as GT
from gguf import quants
from safetensors import safe_open
from safetensors.numpy import save_file

HERE = Path(__file__).parent
rng = np.random.default_rng(1234)
# Byte offsets of f16 scales in each K block, kept finite so decoded values are finite.
K_SCALES = {GT.Q4_K: [0, 2], GT.Q5_K: [0, 2], GT.Q6_K: [208]}


def k_blocks(t: GT, rows: int, blocks: int) -> np.ndarray:
    elems, size = gguf.GGML_QUANT_SIZES[t]
    raw = rng.integers(0, 256, size=(rows, blocks, size), dtype=np.uint8)
    for off in K_SCALES[t]:
        scale = (rng.standard_normal((rows, blocks)) * 0.05).astype(np.float16)
        raw[:, :, off : off + 2] = scale.view(np.uint8).reshape(rows, blocks, 2)
    return raw.reshape(rows, blocks * size)


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def write_safetensors(lines: list[str]) -> None:
    path = HERE / "tiny.safetensors"
    tensors = {
        "embeddings.word_embeddings.weight": rng.standard_normal((5, 4)).astype(np.float32),
        "encoder.layer.0.attention.query.weight": rng.standard_normal((4, 4)).astype(np.float16),
        "encoder.layer.0.attention.query.bias": rng.standard_normal(4).astype(ml_dtypes.bfloat16),
        "encoder.layer.0.mask": rng.integers(0, 2, size=(3,)).astype(bool),
        "position_ids": np.arange(7, dtype=np.int64).reshape(1, 7),
        "odd.bytes": rng.integers(0, 256, size=(3,), dtype=np.uint8),
        "counts": rng.integers(-9, 9, size=(2, 2), dtype=np.int16),
        "scale": np.array(0.5, dtype=np.float64),
        "empty": np.zeros((0, 3), dtype=np.float32),
    }
    save_file(tensors, str(path), metadata={"format": "pt"})
    raw = path.read_bytes()
    header = 8 + int.from_bytes(raw[:8], "little")
    import json

    info = json.loads(raw[8:header])
    with safe_open(str(path), "np") as f:
        for name in sorted(f.keys()):
            meta = info[name]
            begin, end = meta["data_offsets"]
            data = raw[header + begin : header + end]
            assert data == np.ascontiguousarray(tensors[name]).tobytes()
            shape = ",".join(str(d) for d in meta["shape"])
            lines.append(f"tensor\t{path.name}\t{name}\t{meta['dtype']}\t{shape}\t{header + begin}\t{end - begin}\t{sha(data)}")


def write_gguf(name: str, lines: list[str], alignment: int | None = None, version: int = 3) -> None:
    path = HERE / name
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 1.5)
    w.add_uint64("t.u64", 2**64 - 1)
    w.add_int64("t.i64", -(2**63))
    w.add_float64("t.f64", -2.25)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo wörld")
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_str", ["a", "", "ccc"])
    w.add_array("t.arr_f32", [0.5, 1.5])
    w.add_array("t.arr_bool", [True, False, True])
    w.add_array("t.arr_u8", b"\x00\x01\xff")
    w.add_array("t.arr_nested", [[1, 2], [3]])
    x = rng.standard_normal((2, 64)).astype(np.float32)
    w.add_tensor("token_embd.weight", rng.standard_normal((3, 8)).astype(np.float32))
    w.add_tensor("blk.0.attn_norm.weight", rng.standard_normal(8).astype(np.float16))
    w.add_tensor("blk.0.bf16", quants.quantize(x[:, :4], GT.BF16), raw_dtype=GT.BF16)
    w.add_tensor("blk.0.f64", rng.standard_normal(3))
    w.add_tensor("blk.0.i8", rng.integers(-9, 9, size=5, dtype=np.int8))
    w.add_tensor("blk.0.i16", rng.integers(-9, 9, size=5, dtype=np.int16))
    w.add_tensor("blk.0.i32", rng.integers(-9, 9, size=3, dtype=np.int32))
    w.add_tensor("blk.0.i64", rng.integers(-9, 9, size=2, dtype=np.int64))
    for t in (GT.Q4_0, GT.Q4_1, GT.Q8_0, GT.Q5_0):
        w.add_tensor(f"blk.0.{t.name.lower()}", quants.quantize(x, t), raw_dtype=t)
    for t, rows in ((GT.Q4_K, 1), (GT.Q5_K, 1), (GT.Q6_K, 2)):
        w.add_tensor(f"blk.0.{t.name.lower()}", k_blocks(t, rows, 1), raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if version != 3:
        raw = bytearray(path.read_bytes())
        raw[4:8] = version.to_bytes(4, "little")
        path.write_bytes(bytes(raw))
    raw = path.read_bytes()
    r = gguf.GGUFReader(str(path))
    for t in r.tensors:
        data = raw[t.data_offset : t.data_offset + t.n_bytes]
        assert data == t.data.tobytes()
        shape = ",".join(str(int(d)) for d in reversed(t.shape))
        lines.append(f"tensor\t{name}\t{t.name}\t{t.tensor_type.name}\t{shape}\t{t.data_offset}\t{t.n_bytes}\t{sha(data)}")
    for f in r.fields.values():
        if f.name.startswith("GGUF."):
            continue
        types = [gguf.GGUFValueType(v).name for v in f.types]
        kind = types[0]
        for inner in types[1:]:
            kind += f"[{inner}"
        kind += "]" * (len(types) - 1)
        if types[0] == "ARRAY":
            # parts: key length, key, value type, element type, element count, ...
            value = str(int(f.parts[4][0]))
        elif types[0] == "STRING":
            value = bytes(f.parts[-1]).decode()
        elif types[0] == "BOOL":
            value = "true" if f.parts[-1][0] else "false"
        else:
            value = str(f.parts[-1][0])
        lines.append(f"meta\t{name}\t{f.name}\t{kind}\t{value}")


def main() -> None:
    lines: list[str] = []
    write_safetensors(lines)
    write_gguf("tiny.gguf", lines)
    write_gguf("tiny_align64_v2.gguf", lines, alignment=64, version=2)
    (HERE / "manifest.tsv").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
