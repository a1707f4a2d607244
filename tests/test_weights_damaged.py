"""Damaged weight files: truncation, bad magic or version, offsets out of range, unaligned
or overlapping, absurd dims and counts, unknown types. Each is a ValueError naming the file
and what is wrong, never a crash or a huge allocation. (The byte-level fuzzing of both
parsers is crates/runtime/tests/weights_fuzz.rs; this drives the Python entry points.)"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
st_numpy = pytest.importorskip("safetensors.numpy")
from gguf import GGMLQuantizationType as GT  # noqa: E402
from gguf import quants  # noqa: E402

from max.graph.weights import GGUFWeights, SafetensorWeights, load_weights  # noqa: E402
from weights_util import patched, tensor_info_offsets, write_gguf  # noqa: E402


@pytest.fixture
def good_gguf(tmp_path, rng):
    q = quants.quantize(rng.standard_normal((2, 64)).astype(np.float32), GT.Q4_0)
    tensors = [("a", rng.standard_normal((4, 8)).astype(np.float32), None), ("b", q, GT.Q4_0),
               ("c", np.arange(16, dtype=np.int32), None)]
    return write_gguf(tmp_path / "good.gguf", tensors, lambda w: w.add_array("tok", ["x", "yy"]))


def gguf_error(path, match):
    with pytest.raises(ValueError, match=match) as e:
        GGUFWeights(path)
    assert str(path) in str(e.value) and "not a valid GGUF file" in str(e.value)


def test_gguf_truncated_anywhere(tmp_path, good_gguf):
    raw = good_gguf.read_bytes()
    infos = tensor_info_offsets(good_gguf)
    last = max(i["offset"] for i in infos.values()) + 8
    cuts = list(range(0, last + 1)) + list(range(last + 1, len(raw), 7))
    bad = tmp_path / "cut.gguf"
    for n in cuts:
        bad.write_bytes(raw[:n])
        with pytest.raises(ValueError, match="not a valid GGUF file"):
            GGUFWeights(bad)


def test_gguf_header_damage(tmp_path, good_gguf):
    p = tmp_path / "bad.gguf"
    gguf_error(patched(good_gguf, p, [(0, "4s", b"GGML")]), "not the GGUF magic")
    gguf_error(patched(good_gguf, p, [(4, "<I", 1)]), "GGUF version 1 is not supported")
    gguf_error(patched(good_gguf, p, [(4, "<I", 4)]), "GGUF version 4 is not supported")
    gguf_error(patched(good_gguf, p, [(4, ">I", 3)]), "big-endian")
    gguf_error(patched(good_gguf, p, [(8, "<Q", 2**62)]), r"the tensor count is 4611686018427387904, more than")
    gguf_error(patched(good_gguf, p, [(16, "<Q", 2**40)]), r"the metadata count is 1099511627776, more than")
    # The first key's length, then its value type.
    gguf_error(patched(good_gguf, p, [(24, "<Q", 2**63)]), r"the key of metadata entry 0 \(9223372036854775808 bytes\)")
    key_len = struct.unpack_from("<Q", good_gguf.read_bytes(), 24)[0]
    gguf_error(patched(good_gguf, p, [(32 + key_len, "<I", 77)]), "has unknown value type 77")


def test_gguf_tensor_info_damage(tmp_path, good_gguf):
    p = tmp_path / "bad.gguf"
    i = tensor_info_offsets(good_gguf)
    gguf_error(patched(good_gguf, p, [(i["a"]["type"], "<I", 99)]), 'tensor "a" has unknown GGML type 99')
    gguf_error(patched(good_gguf, p, [(i["a"]["type"], "<I", 4)]), "unknown GGML type 4")
    gguf_error(patched(good_gguf, p, [(i["a"]["rank"], "<I", 1000)]), "has 1000 dimensions")
    gguf_error(patched(good_gguf, p, [(i["a"]["dims"], "<Q", 2**63)]), "dimension 0 of 9223372036854775808")
    gguf_error(patched(good_gguf, p, [(i["a"]["dims"], "<Q", 2**40), (i["a"]["dims"] + 8, "<Q", 2**40)]),
               "whose product overflows")
    gguf_error(patched(good_gguf, p, [(i["a"]["dims"], "<Q", 2**32)]), "extends past the end of the file")
    gguf_error(patched(good_gguf, p, [(i["b"]["dims"], "<Q", 48)]), "rows of 48 elements, not a multiple of its block of 32")
    gguf_error(patched(good_gguf, p, [(i["c"]["offset"], "<Q", 2**63)]), "extends past the end of the file")
    gguf_error(patched(good_gguf, p, [(i["c"]["offset"], "<Q", 2**64 - 32)]), "extends past the end of the file")
    gguf_error(patched(good_gguf, p, [(i["c"]["offset"], "<Q", 8)]), "not a multiple of the alignment 32")
    gguf_error(patched(good_gguf, p, [(i["c"]["offset"], "<Q", 0)]), r'tensors "c" and "a" overlap \(bytes 256..320 belong to both\)')
    # A name that is not UTF-8: its first byte, right after the 8-byte length.
    gguf_error(patched(good_gguf, p, [(i["a"]["rank"] - 1, "B", 0xFF)]), "is not valid UTF-8")


def test_gguf_alignment_metadata_damage(tmp_path, rng):
    path = write_gguf(tmp_path / "al.gguf", [("a", np.ones(8, np.float32), None)], alignment=64)
    raw = path.read_bytes()
    at = raw.index(b"general.alignment") + len("general.alignment")
    gguf_error(patched(path, tmp_path / "bad.gguf", [(at + 4, "<I", 48)]), "general.alignment must be a UINT32 power of two")
    gguf_error(patched(path, tmp_path / "bad.gguf", [(at + 4, "<I", 0)]), "power of two, got U32\\(0\\)")


def test_gguf_random_mutations_never_crash(tmp_path, good_gguf, rng):
    raw = np.frombuffer(good_gguf.read_bytes(), np.uint8)
    p = tmp_path / "m.gguf"
    outcomes = {"ok": 0, "error": 0}
    for _ in range(300):
        b = raw.copy()
        for at in rng.integers(0, 400, size=rng.integers(1, 4)):
            b[at] = rng.integers(0, 256)
        p.write_bytes(b.tobytes())
        try:
            w = GGUFWeights(p)
            for _, t in w.items():
                try:
                    t.data()
                except ValueError:
                    pass
            outcomes["ok"] += 1
        except (ValueError, KeyError, UnicodeDecodeError):
            outcomes["error"] += 1
    assert outcomes["error"] > 0


def st_file(path, header, data: bytes, raw_len: int | None = None):
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(h) if raw_len is None else raw_len
    path.write_bytes(struct.pack("<Q", n) + h + data)
    return path


def st_error(path, match):
    with pytest.raises(ValueError, match=match) as e:
        SafetensorWeights([path])
    assert str(path) in str(e.value) and "not a valid safetensors file" in str(e.value)


def test_safetensors_truncated_anywhere(tmp_path, rng):
    good = tmp_path / "good.safetensors"
    st_numpy.save_file({"a": rng.standard_normal((3, 4)).astype(np.float32), "b": np.arange(5, dtype=np.int64)},
                       str(good))
    raw = good.read_bytes()
    bad = tmp_path / "cut.safetensors"
    for n in range(len(raw)):
        bad.write_bytes(raw[:n])
        with pytest.raises(ValueError, match="not a valid safetensors file"):
            SafetensorWeights([bad])


def test_safetensors_header_damage(tmp_path):
    p = tmp_path / "bad.safetensors"
    a = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    st_error(st_file(p, {"a": a}, b"\0" * 8, raw_len=2**63), r"the header length 9223372036854775808 is larger")
    st_error(st_file(p, b"{\"a\": ", b""), "JSON")
    st_error(st_file(p, b"\xff\xfe{}", b""), "UTF-8")
    st_error(st_file(p, {"a": {**a, "dtype": "X9"}}, b"\0" * 8), "JSON")
    st_error(st_file(p, {"a": {**a, "shape": [-2]}}, b"\0" * 8), "JSON")
    st_error(st_file(p, {"a": {**a, "shape": [3]}}, b"\0" * 8), "does not match the size of its dtype and shape")
    st_error(st_file(p, {"a": {**a, "shape": [2**40, 2**40]}}, b"\0" * 8), "overflow")
    st_error(st_file(p, {"a": {**a, "data_offsets": [0, 2**40]}}, b"\0" * 8), "does not match|end exactly")
    st_error(st_file(p, {"a": a}, b"\0" * 7), "do not end exactly at the end of the file")
    st_error(st_file(p, {"a": a}, b"\0" * 9), "do not end exactly at the end of the file")
    b = {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}
    st_error(st_file(p, {"a": a, "b": b}, b"\0" * 8), "does not follow the previous tensor")
    st_error(st_file(p, {"a": {**a, "data_offsets": [8, 0]}}, b"\0" * 8), "does not follow|does not match")


def test_unusable_dtypes_and_missing_files(tmp_path):
    p = st_file(tmp_path / "f4.safetensors", {"a": {"dtype": "F4", "shape": [4], "data_offsets": [0, 2]}}, b"\0\0")
    w = SafetensorWeights([p])
    assert w.a.exists()
    with pytest.raises(ValueError, match="its safetensors dtype F4 has no max.dtype.DType equivalent"):
        w.a.data()
    with pytest.raises(FileNotFoundError, match="load_weights: paths: No such file"):
        load_weights([tmp_path / "missing.gguf"])
    with pytest.raises(IsADirectoryError):
        GGUFWeights(tmp_path)
