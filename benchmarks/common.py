"""Shared pieces of the benchmark scripts: device timing, tuning-spec checks, the result table
and JSON output."""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Callable, Iterable

RESULTS = Path(__file__).resolve().parent / "results"


def time_gpu(fn: Callable[[], object], sync: Callable[[], None], warmup: int = 3, reps: int = 20) -> float:
    """Median seconds of `fn` with the device synchronised around each run."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_async(fn: Callable[[], object], sync: Callable[[], None], warmup: int = 3, reps: int = 20) -> float:
    """Mean seconds per call of `fn` over `reps` back-to-back calls with one sync at the end:
    device work queued on any stream is included, launch overhead is amortised as in real use."""
    for _ in range(warmup):
        fn()
    sync()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - start) / reps


def cuda_time(torch: object, fn: Callable[[], object], reps: int = 20) -> float:
    """`time_async` of `fn` with torch's streams and ours both drained: seconds per call, for a
    comparison with torch in the same process."""
    from max import driver

    gpu = driver.Accelerator()

    def sync() -> None:
        torch.cuda.synchronize()  # type: ignore[attr-defined]
        gpu.synchronize()

    return time_async(fn, sync, reps=reps)


def check_tuning(specs: Iterable[str]) -> None:
    """Raises ValueError naming the first bad entry of any tuning spec ("conv.bn=128,gemm.splitk=2",
    see docs/configuration.md), before anything is measured."""
    from max import tuning

    for spec in specs:
        with tuning.override(spec):
            pass


def result_path(name: str, device: str, out_dir: Path | None = None) -> Path:
    """Where `write` puts a result: `out_dir`, else $MAX_BENCH_OUT, else benchmarks/results."""
    out_dir = Path(out_dir or os.environ.get("MAX_BENCH_OUT") or RESULTS)
    return out_dir / f"{name}-{device.lower().replace(' ', '-')}.json"


def write(name: str, device: str, rows: list[dict], command: str, out_dir: Path | None = None,
          table: bool = True) -> Path:
    """Prints the rows as a table (unless `table` is False) and writes them, with where and when,
    as JSON (see `result_path`)."""
    if table:
        keys = list(dict.fromkeys(k for r in rows for k in r))
        widths = [max(len(k), *(len(f"{r.get(k, '')}") for r in rows)) for k in keys]
        print("  ".join(k.ljust(w) for k, w in zip(keys, widths)))
        for r in rows:
            print("  ".join(f"{r.get(k, '')}".ljust(w) for k, w in zip(keys, widths)))
    path = result_path(name, device, out_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": name,
        "device": device,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "command": command,
        "rows": rows,
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")
    if table:
        print(f"wrote {path}")
    return path
