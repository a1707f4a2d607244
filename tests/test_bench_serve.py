"""benchmarks/serve_gpu.py at tiny shapes on the CPU (`--tiny`): the whole flow runs (ready time
over two starts, `max benchmark` against the server, the served TPOT beside the in-process
decode time) and writes its rows and log; a server that does not come up is an error row and
exit status 1, and every server started is stopped, also then."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MAX_BENCH_OUT": str(tmp_path / "out"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "serve_gpu.py"), "--tiny", "--dir", str(tmp_path), *flags]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)


def _all_stopped(log: str) -> list[int]:
    """The server pids the log names; asserts none of them is still running."""
    pids = [int(p) for p in re.findall(r"^==== pid (\d+)$", log, re.M)]
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        raise AssertionError(f"server {pid} still runs")
    return pids


def test_serve_gpu_tiny_flow(tmp_path):
    r = _run(tmp_path, "--num-prompts", "6", "--concurrency", "3", "--overhead-prompts", "3")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = json.loads((tmp_path / "out" / "serve_gpu_tiny-cpu.json").read_text())["rows"]
    got = {(row["model"], row["measure"]): row for row in rows}
    assert len(got) == len(rows) == 4
    for model in ("llama-3-8b-bf16", "smollm2-135m-bf16"):
        ready = got[model, "ready"]
        assert len(ready["ready_runs_s"]) == 2 and ready["ready_s"] == min(ready["ready_runs_s"])
        assert 0 < ready["loaded_s"] < ready["ready_s"]
    serve = got["llama-3-8b-bf16", "serve"]
    assert serve["completed"] == 6 and serve["concurrency"] == 3 and serve["output_len"] == 8
    assert serve["output_tok_s"] > 0
    assert serve["total_tok_s"] == pytest.approx(serve["output_tok_s"] * (1 + 32 / 8), rel=1e-3)
    assert 0 < serve["tpot_median_ms"] <= serve["tpot_p99_ms"]
    over = got["smollm2-135m-bf16", "http_overhead"]
    assert over["completed"] == 3 and over["pipeline_ms_per_token"] > 0
    # the row's times are rounded to 1 us and the percentage (computed before rounding) to 0.1:
    # it lies within what the rounded times allow (at tiny shapes a step is ~0.1 ms, so 0.5 us moves it ~1%)
    t, p = over["tpot_median_ms"], over["pipeline_ms_per_token"]
    lo = ((t - 0.0005) / (p + 0.0005) - 1) * 100 - 0.05
    hi = ((t + 0.0005) / (p - 0.0005) - 1) * 100 + 0.05
    assert lo <= over["overhead_pct"] <= hi, (over, lo, hi)
    log = (tmp_path / "out" / "serve_gpu_tiny-cpu.log").read_text()
    assert log.count("Server ready on http://127.0.0.1:") == 4 and log.count("Serving Benchmark Result") == 2
    assert len(_all_stopped(log)) == 4
    assert "TPOT served vs in-process" in r.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # the models were deleted


def test_serve_gpu_stops_a_server_that_is_not_ready_in_time(tmp_path):
    # (a tiny model's server is ready in about 0.5 s on an idle machine: 0.05 s is never enough)
    r = _run(tmp_path, "--timeout", "0.05")
    assert r.returncode == 1
    rows = json.loads((tmp_path / "out" / "serve_gpu_tiny-cpu.json").read_text())["rows"]
    assert [(row["part"], row["measure"]) for row in rows] == [("throughput", "error"), ("overhead", "error")]
    assert all("max serve not ready in 0.05 s" in row["error"] for row in rows), rows
    assert len(_all_stopped((tmp_path / "out" / "serve_gpu_tiny-cpu.log").read_text())) == 2
