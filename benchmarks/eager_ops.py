"""Eager op throughput: ``x = x * 1.0001 + 1`` on a float32 tensor, 1,000 steps (2,000 ops)
after a first step that compiles the two one-op graphs, against numpy doing the same; also the
raw engine (the cached models' execute called directly, no Tensor wrapping) to show where the
time goes, and the F.functional version (one fused graph per step). When torch is importable
(with CUDA for ``--device gpu``), torch eager runs the same loop on the same device in this
process, and each MAX row gets ``time_vs_torch``: its time per op over torch's (the target on
the GPU is <= 2); without torch that row says why it was skipped. On the GPU every timed run
ends with a device synchronisation, so queued kernels are counted. Repeats each loop and keeps
the best run and the median. Never fails: a case that errors is reported as such.

    python benchmarks/eager_ops.py [--device gpu] [--sizes 1024,65536]
"""

import argparse
import statistics
import sys
import time

import numpy as np

from common import write


def _timed(step, steps: int, reps: int, sync=lambda: None) -> tuple[float, float]:
    runs = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        step(steps)
        sync()
        runs.append(time.perf_counter() - t0)
    return min(runs), statistics.median(runs)


def _torch(device_name: str):
    """torch, when it is importable and (for the GPU) has CUDA; else the reason it is not."""
    try:
        import torch
    except ImportError as e:
        return None, f"torch is not importable ({e})"
    if device_name == "gpu" and not torch.cuda.is_available():
        return None, "torch has no CUDA device"
    return torch, None


def torch_loop(torch, n: int, device_name: str, steps: int, reps: int) -> tuple[float, float]:
    """The same loop in torch eager: float32 ``x * 1.0001 + 1``, two kernels a step."""
    dev = "cuda" if device_name == "gpu" else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    with torch.inference_mode():
        x0 = torch.ones(n, dtype=torch.float32, device=dev)
        x0 = x0 * 1.0001 + 1

        def loop(k):
            x = x0
            for _ in range(k):
                x = x * 1.0001 + 1

        return _timed(loop, steps, reps, sync)


def bench(n: int, device_name: str, steps: int, reps: int) -> list[dict]:
    from max import driver
    import max.functional as F
    from max.tensor import Tensor
    from max._eager import compiled

    device = driver.Accelerator() if device_name == "gpu" else driver.CPU()
    sync = device.synchronize if device_name == "gpu" else (lambda: None)
    rows = []
    ops = 2 * steps
    best_s: dict[str, float] = {}

    def row(case, best, median):
        best_s[case] = best
        rows.append({"case": case, "elements": n, "ops": ops, "best_ops_per_s": round(ops / best),
                     "median_ops_per_s": round(ops / median), "best_us_per_op": round(best / ops * 1e6, 2)})

    x0 = Tensor.constant(np.ones(n, np.float32), device=device)
    x0 = x0 * 1.0001 + 1  # the first step compiles
    compiled_before = compiled.STATS["compiled"]

    def eager(k):
        x = x0
        for _ in range(k):
            x = x * 1.0001 + 1
        x._realize()

    row("max eager", *_timed(eager, steps, reps, sync))
    assert compiled.STATS["compiled"] == compiled_before, "the eager loop recompiled"

    entries = list(compiled._CACHE.values())[-2:]
    mul, add = entries[0].execute, entries[1].execute

    def raw(k):
        b = x0.storage
        for _ in range(k):
            b = add([mul([b])[0]])[0]

    row("engine execute only", *_timed(raw, steps, reps, sync))

    fused = F.functional(lambda x: x * 1.0001 + 1)
    fused(x0)

    def functional(k):
        x = x0
        for _ in range(k):
            x = fused(x)

    row("F.functional (1 graph/step)", *_timed(functional, steps, reps, sync))

    torch, why_not = _torch(device_name)
    if torch is None:
        rows.append({"case": "torch eager", "elements": n, "skipped": why_not})
    else:
        row("torch eager", *torch_loop(torch, n, device_name, steps, reps))
        for r in rows[:-1]:
            r["time_vs_torch"] = round(best_s[r["case"]] / best_s["torch eager"], 3)

    if device_name == "cpu":
        a0 = np.ones(n, np.float32)
        c, one = np.float32(1.0001), np.float32(1)

        def numpy_loop(k):
            a = a0
            for _ in range(k):
                a = a * c + one

        row("numpy", *_timed(numpy_loop, steps, reps))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    p.add_argument("--sizes", default="1024,65536")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--reps", type=int, default=7)
    args = p.parse_args()
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        try:
            rows.extend(bench(n, args.device, args.steps, args.reps))
        except Exception as e:  # a benchmark never fails the run
            rows.append({"case": "error", "elements": n, "error": f"{type(e).__name__}: {e}"})
    import platform

    if args.device == "cpu":
        device = f"cpu-{platform.machine()}"
    else:
        torch, _ = _torch("gpu")
        device = torch.cuda.get_device_name() if torch is not None else "gpu"
    write("eager_ops", device, rows, " ".join(["python", *sys.argv]))


if __name__ == "__main__":
    main()
