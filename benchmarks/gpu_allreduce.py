"""Allreduce bus bandwidth on two GPUs: the engine's `ops.allreduce.sum` (by default the peer
reads of kernels/allreduce_p2p.cu; `engine_nccl_*`: through NCCL, loaded at run time, with
collective.p2p=0) against torch.distributed's NCCL allreduce, in the same run, for bfloat16
tensors of 16-256 MB. Bus bandwidth is NCCL's figure: bytes * 2 (n - 1) / n / time. JSON to
benchmarks/results/.

`--small` times the allreduces of a decode step instead (bfloat16, 8 KiB to 1 MiB): one graph
holds a chain of 64 allreduces, each summing the previous one's result, run as a CUDA graph, so
the time per allreduce is the GPU's; through NCCL and through the signal buffers
(collective.p2p=1) in the same run.

    python benchmarks/gpu_allreduce.py [--sizes-mb 16,32,64,128,256] [--reps 20]
    python benchmarks/gpu_allreduce.py --small [--sizes-kb 8,32,128,512,1024]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from common import write

N = 2


def engine_busbw(size_mb: int, reps: int, spec: str = "") -> tuple[float, float]:
    """(seconds per allreduce, bus GB/s) of the engine over GPUs 0 and 1 under tuning `spec`."""
    from max import tuning

    with tuning.override(spec):
        return _engine_busbw(size_mb, reps)


def _engine_busbw(size_mb: int, reps: int) -> tuple[float, float]:
    import numpy as np

    from max import driver, engine
    from max.dtype import DType
    from max.graph import DeviceRef, Graph, TensorType, ops
    from max.nn.comm import Signals

    elems = size_mb * (1 << 20) // 2
    refs = [DeviceRef.GPU(i) for i in range(N)]
    devices = [driver.Accelerator(i) for i in range(N)]
    signals = Signals(refs)
    types = [TensorType(DType.bfloat16, [elems], r) for r in refs] + signals.input_types()
    with Graph("allreduce", input_types=types) as g:
        g.output(*ops.allreduce.sum([v.tensor for v in g.inputs[:N]], [v.buffer for v in g.inputs[N:]]))
    model = engine.InferenceSession(devices=[driver.CPU(), *devices]).load(g)
    bits = np.random.default_rng(0).integers(0x3C00, 0x3C7F, elems, dtype=np.uint16)
    xs = [driver.Buffer.from_numpy(bits).view(DType.bfloat16).to(d) for d in devices]
    sig = signals.buffers()

    def sync() -> None:
        for d in devices:
            d.synchronize()

    for _ in range(3):
        model.execute(*xs, *sig)
    sync()
    start = time.perf_counter()
    for _ in range(reps):
        model.execute(*xs, *sig)
    sync()
    t = (time.perf_counter() - start) / reps
    return t, elems * 2 * 2 * (N - 1) / N / t / 1e9


CHAIN = 64  # allreduces per graph in --small


def engine_chain_us(size_kb: int, reps: int, spec: str) -> float:
    """Microseconds per allreduce of a chain of CHAIN bf16 allreduces of `size_kb` KiB over GPUs
    0 and 1, under tuning `spec`."""
    from max import driver, engine, tuning
    from max.dtype import DType
    from max.graph import DeviceRef, Graph, TensorType, ops
    from max.nn.comm import Signals

    elems = size_kb * 1024 // 2
    refs = [DeviceRef.GPU(i) for i in range(N)]
    devices = [driver.Accelerator(i) for i in range(N)]
    signals = Signals(refs)
    types = [TensorType(DType.bfloat16, [elems], r) for r in refs] + signals.input_types()
    with tuning.override(spec):
        with Graph("allreduce_chain", input_types=types) as g:
            xs = [v.tensor for v in g.inputs[:N]]
            sig = [v.buffer for v in g.inputs[N:]]
            for _ in range(CHAIN):
                xs = ops.allreduce.sum(xs, sig)
            g.output(*xs)
        model = engine.InferenceSession(devices=[driver.CPU(), *devices]).load(g)
        xs = [driver.Buffer.zeros([elems], DType.bfloat16, device=d) for d in devices]
        bufs = signals.buffers()
        for _ in range(3):  # the second run captures the CUDA graph
            model.execute(*xs, *bufs)
        for d in devices:
            d.synchronize()
        start = time.perf_counter()
        for _ in range(reps):
            model.execute(*xs, *bufs)
        for d in devices:
            d.synchronize()
    return (time.perf_counter() - start) / reps / CHAIN * 1e6


def small(sizes_kb: list[int], reps: int) -> None:
    rows = []
    for kb in sizes_kb:
        nccl, p2p = engine_chain_us(kb, reps, "collective.p2p=0"), engine_chain_us(kb, reps, "collective.p2p=1")
        rows.append({"size_kb": kb, "nccl_us": round(nccl, 2), "p2p_us": round(p2p, 2), "speedup": round(nccl / p2p, 3)})
    import torch

    write("gpu_allreduce_small", torch.cuda.get_device_name(), rows,
          f"python benchmarks/gpu_allreduce.py --small --sizes-kb {','.join(map(str, sizes_kb))} --reps {reps}")


def _torch_worker(rank: int, init: str, sizes: list[int], reps: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=N)
    torch.cuda.set_device(rank)
    lines = []
    for mb in sizes:
        x = torch.ones(mb * (1 << 20) // 2, dtype=torch.bfloat16, device=f"cuda:{rank}")
        for _ in range(3):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(reps):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        t = (time.perf_counter() - start) / reps
        lines.append(f"{mb} {t}")
    if rank == 0:
        with open(out, "w") as f:
            f.write("\n".join(lines))
    dist.destroy_process_group()


def torch_busbw(sizes: list[int], reps: int) -> dict[int, float]:
    """Seconds per allreduce of torch.distributed (NCCL, one process per GPU) by size."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "torch.txt")
        mp.spawn(_torch_worker, args=(f"file://{tmp}/init", sizes, reps, out), nprocs=N, join=True)
        with open(out) as f:
            return {int(a): float(b) for a, b in (line.split() for line in f.read().splitlines())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes-mb", default="16,32,64,128,256")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--small", action="store_true", help="decode-sized allreduces, NCCL against collective.p2p")
    ap.add_argument("--sizes-kb", default="8,32,128,512,1024")
    args = ap.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    from max import driver

    if driver.accelerator_count() < N:
        raise SystemExit(f"gpu_allreduce: needs {N} GPUs, this machine has {driver.accelerator_count()}")
    if args.small:
        small([int(s) for s in args.sizes_kb.split(",")], args.reps)
        return
    sizes = [int(s) for s in args.sizes_mb.split(",")]
    theirs = torch_busbw(sizes, args.reps)
    rows = []
    for mb in sizes:
        t, bw = engine_busbw(mb, args.reps)
        tn, bwn = engine_busbw(mb, args.reps, "collective.p2p=0")
        tt = theirs[mb]
        tbw = mb * (1 << 20) * 2 * (N - 1) / N / tt / 1e9
        rows.append({"size_mb": mb, "engine_ms": round(t * 1e3, 3), "engine_busbw_gb_s": round(bw, 1),
                     "engine_nccl_ms": round(tn * 1e3, 3), "engine_nccl_busbw_gb_s": round(bwn, 1),
                     "torch_ms": round(tt * 1e3, 3), "torch_busbw_gb_s": round(tbw, 1),
                     "ratio": round(bw / tbw, 3)})
    import torch

    write("gpu_allreduce", torch.cuda.get_device_name(), rows,
          f"python benchmarks/gpu_allreduce.py --sizes-mb {args.sizes_mb} --reps {args.reps}")


if __name__ == "__main__":
    main()
