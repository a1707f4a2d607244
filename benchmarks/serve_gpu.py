"""Serving on the GPU, measured from outside as a user meets it: `max serve` started as a
process and loaded by `max benchmark` over HTTP. Random-weight checkpoints of real shapes are
written on the spot (llm_files.py, through llm_gpu.py's `prepare`), so nothing is downloaded.

1. Ready time (llama-3-8b-bf16, 16 GB of bf16 safetensors): the weights are read once into the
   page cache, then `python -m max serve --model-path DIR --port 0 --max-batch-size 64
   --max-length 2048` is spawned; the seconds from spawning it to its "Server ready on
   http://..." line. It is started `--ready-runs` times: the first finds the kernel cache as it
   is (cold on a fresh machine), the best is reported, and the last one serves step 2. The
   server's own "loaded and compiled in" figure is kept beside it.
2. Throughput: `python -m max benchmark --backend modular --dataset-name random
   --random-input-len 1024 --random-output-len 128 --ignore-eos --num-prompts 256
   --max-concurrency 64 --save-result --result-filename F` against that server; from F: output
   and total tok/s, requests/s, and TTFT, TPOT and ITL (median and P99).
3. HTTP overhead (smollm2-135m-bf16): the decode time per token at batch 1 through the pipeline
   API in this process (llm_gpu.py's `load` and `measure`, prompt and step counts as the
   requests'), then a server of the same model and the client at concurrency 1 (16 prompts,
   512 in / 128 out); the server's median TPOT over the in-process time per token. The pipeline
   is loaded first and freed before the server starts, so that each has the GPU to itself.

That concurrent greedy requests return exactly the tokens each gets alone is a test
(tests/test_serve_batching.py), which runs on the GPU too when there is one.

Targets: ready in <= 10 s; >= 15,000 output tok/s with median TPOT <= 30 ms; server TPOT within
10% of the pipeline's. Beside them, the anchors of ../shared/LLM.md (§0, §2, §4): llama.cpp's
batched decode at 64 sequences on this H200, vLLM's published `bench serve` figures, the startup
times reported for vLLM and MAX.

JSON rows to benchmarks/results/serve_gpu-<device>.json ($MAX_BENCH_OUT redirects it); every
server's stdout and stderr and the client's output go to serve_gpu-<device>.log beside it. A
server runs in its own process group and is always stopped (SIGTERM, SIGKILL after 30 s), also
when a step fails or times out; a failed part becomes an error row and the exit status 1.

    python benchmarks/serve_gpu.py [--parts throughput,overhead] [--num-prompts 256] [--concurrency 64]
                                   [--input-len 1024] [--output-len 128] [--max-batch-size 64] [--max-length 2048]
                                   [--ready-runs 2] [--overhead-prompts 16] [--overhead-input 512]
                                   [--overhead-output 128] [--serve-args "--device-memory-utilization 0.8"]
                                   [--timeout 900] [--dir /tmp]
    python benchmarks/serve_gpu.py --tiny    # the same flow on the CPU with tiny models (a smoke test)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import llm_gpu
from common import result_path, write

REPO = Path(__file__).resolve().parent.parent
THROUGHPUT_MODEL = "llama-3-8b-bf16"
OVERHEAD_MODEL = "smollm2-135m-bf16"
PARTS = ("throughput", "overhead")

TARGET_READY_S = 10.0
TARGET_OUTPUT_TOK_S = 15000.0
TARGET_TPOT_MS = 30.0
TARGET_OVERHEAD_PCT = 10.0
# ../shared/LLM.md. llama.cpp: llama-batched-bench on this H200, 8B F16, 64 sequences of
# 128-token prompts (§2). vLLM: `bench serve`, Llama-3.1-8B, 1000 ShareGPT prompts at once, GPU
# not stated (vllm PR #18566, §2). Startup: vLLM ~60 s typical, MAX ~65 s with a warm cache
# (third party, H100) (§0.10).
ANCHORS = {"llama_cpp_b64_tok_s": 6415, "vllm_output_tok_s": 6583, "vllm_median_tpot_ms": 48.8,
           "vllm_ready_s": 60, "max_ready_cached_s": 65}


def child_env() -> dict[str, str]:
    """This environment, with the `max` this process imports first on the path: the server and
    the client run the same code as the in-process measurement."""
    import max

    here = str(Path(max.__file__).resolve().parent.parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}


# ----------------------------------------------------------------------------------------------
# The server process
# ----------------------------------------------------------------------------------------------


class Server:
    """`python -m max serve --model-path PATH --host 127.0.0.1 --port 0 FLAGS...` in a process
    group of its own, stdout and stderr appended to `log`. The constructor returns once the
    server prints "Server ready on URL" (`ready_s` after the spawn), or stops it and raises.
    `stop()`, also on leaving a `with` block, always ends it."""

    def __init__(self, path: Path, flags: list[str], log: Path, timeout: float) -> None:
        cmd = [sys.executable, "-m", "max", "serve", "--model-path", str(path), "--host", "127.0.0.1", "--port", "0",
               *flags]
        self.log_path = log
        self.log = open(log, "ab")  # append mode: the child's stderr and our copy of its stdout interleave safely
        self.log.write(f"\n==== {shlex.join(cmd)}\n".encode())
        self.log.flush()
        self._start = log.stat().st_size
        self.url = ""
        ready = threading.Event()
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, cwd=REPO, env=child_env(),
                                     start_new_session=True)
        self.log.write(f"==== pid {self.proc.pid}\n".encode())
        self.log.flush()

        def copy_stdout() -> None:  # runs until the server exits, so that its stdout never fills
            for line in self.proc.stdout:  # type: ignore[union-attr]
                if not ready.is_set() and (m := re.match(rb"Server ready on (http://\S+)", line)):
                    self.ready_s = time.perf_counter() - t0
                    self.url = m[1].decode()
                    ready.set()
                self.log.write(line)
                self.log.flush()

        self._reader = threading.Thread(target=copy_stdout, daemon=True)
        self._reader.start()
        deadline = t0 + timeout
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.perf_counter() > deadline:
                rc = self.proc.poll()
                why = f"not ready in {timeout:g} s" if rc is None else f"exited with {rc}"
                self.stop()
                raise RuntimeError(f"max serve {why}; the end of {log}:\n{self.output()[-3000:]}")

    def output(self) -> str:
        """What the server wrote to the log so far."""
        with open(self.log_path, "rb") as f:
            f.seek(self._start)
            return f.read().decode(errors="replace")

    def loaded_s(self) -> float | None:
        """The server's own load-and-compile time, from its "[max] ... loaded and compiled in" line."""
        m = re.search(r"loaded and compiled in ([\d.]+) s", self.output())
        return float(m[1]) if m else None

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, None)):
                try:
                    os.killpg(self.proc.pid, sig)
                    self.proc.wait(wait)
                    break
                except ProcessLookupError:
                    break
                except subprocess.TimeoutExpired:
                    continue
        self._reader.join(5)
        self.log.close()
        return self.proc.returncode

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def serve_flags(args, max_batch: int) -> list[str]:
    return ["--devices", "cpu" if args.tiny else "gpu", "--max-batch-size", str(max_batch),
            "--max-length", str(args.max_length), *shlex.split(args.serve_args)]


def start_ready(model: llm_gpu.Model, path: Path, args, log: Path) -> tuple[Server, dict]:
    """Reads the weights into the page cache, then starts the server `--ready-runs` times (all
    but the last stopped again); the running server and the ready row."""
    cache_s = llm_gpu.read_into_page_cache(llm_gpu.weight_files(path))
    runs = []
    for i in range(args.ready_runs):
        server = Server(path, serve_flags(args, args.max_batch_size), log, args.timeout)
        runs.append((server.ready_s, server.loaded_s()))
        if i < args.ready_runs - 1:
            server.stop()
    best = min(runs, key=lambda r: r[0])
    big = model.name == THROUGHPUT_MODEL and not args.tiny
    return server, {
        "model": model.name, "measure": "ready", "ready_s": round(best[0], 3),
        "ready_runs_s": [round(r[0], 3) for r in runs], "loaded_s": best[1],
        "page_cache_read_s": round(cache_s, 2), "max_batch_size": args.max_batch_size, "max_length": args.max_length,
        "target_ready_s": TARGET_READY_S if big else None,
        "vllm_ready_s": ANCHORS["vllm_ready_s"] if big else None,
        "max_ready_cached_s": ANCHORS["max_ready_cached_s"] if big else None,
    }


# ----------------------------------------------------------------------------------------------
# The client
# ----------------------------------------------------------------------------------------------


def run_client(server: Server, model_dir: Path, prompts: int, concurrency: int, input_len: int, output_len: int,
               result: Path, log: Path, timeout: float) -> dict:
    """`max benchmark` (random dataset, --ignore-eos) against `server`; the JSON it writes."""
    cmd = [sys.executable, "-m", "max", "benchmark", "--backend", "modular", "--base-url", server.url,
           "--tokenizer", str(model_dir), "--dataset-name", "random", "--random-input-len", str(input_len),
           "--random-output-len", str(output_len), "--ignore-eos", "--num-prompts", str(prompts),
           "--max-concurrency", str(concurrency), "--seed", "0", "--save-result", "--result-filename", str(result)]
    with open(log, "ab") as f:
        f.write(f"\n==== {shlex.join(cmd)}\n".encode())
        f.flush()
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO, env=child_env(),
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = f"killed after {timeout:g} s"
    if rc != 0 or not result.is_file():
        raise RuntimeError(f"max benchmark: {rc}; its output is in {log}")
    out = json.loads(result.read_text())
    if out["failed"]:
        raise RuntimeError(f"max benchmark: {out['failed']} of {prompts} requests failed: {out['errors']}")
    return out


def figures(res: dict) -> dict:
    """The client's figures a row keeps (its vLLM-named fields)."""
    out = {"completed": res["completed"], "output_tok_s": round(res["output_throughput"], 1),
           "total_tok_s": round(res["total_token_throughput"], 1), "request_s": round(res["request_throughput"], 3)}
    for metric in ("ttft", "tpot", "itl"):
        for stat in ("median", "p99"):
            out[f"{metric}_{stat}_ms"] = round(res[f"{stat}_{metric}_ms"], 3)
    return out


# ----------------------------------------------------------------------------------------------
# The two parts
# ----------------------------------------------------------------------------------------------


def write_model(name: str, tmp: Path, tiny: bool) -> tuple[llm_gpu.Model, Path]:
    model = llm_gpu.MODELS[name]
    path = llm_gpu.model_path(model, tmp, tiny)
    if llm_gpu.prepare(model, path, tiny) is None:
        raise RuntimeError(f"no room in {tmp} to write {name}")
    return model, path


def throughput(tmp: Path, args, log: Path, rows: list[dict]) -> None:
    """Parts 1 and 2 on the 8B model (appending rows as they come)."""
    model, path = write_model(THROUGHPUT_MODEL, tmp, args.tiny)
    try:
        server, ready = start_ready(model, path, args, log)
        with server:
            rows.append(ready)
            res = run_client(server, path, args.num_prompts, args.concurrency, args.input_len, args.output_len,
                             tmp / "throughput.json", log, args.timeout)
        big = not args.tiny
        rows.append({"model": model.name, "measure": "serve", "prompts": args.num_prompts,
                     "concurrency": args.concurrency, "input_len": args.input_len, "output_len": args.output_len,
                     **figures(res),
                     "target_output_tok_s": TARGET_OUTPUT_TOK_S if big else None,
                     "target_tpot_median_ms": TARGET_TPOT_MS if big else None,
                     **({k: ANCHORS[k] for k in ("llama_cpp_b64_tok_s", "vllm_output_tok_s", "vllm_median_tpot_ms")}
                        if big else {})})
    finally:
        shutil.rmtree(path, ignore_errors=True)


def overhead(tmp: Path, args, log: Path, rows: list[dict]) -> None:
    """Part 3 on the SmolLM2-shaped model: the pipeline in this process, then the server."""
    import gc

    model, path = write_model(OVERHEAD_MODEL, tmp, args.tiny)
    try:
        p = llm_gpu.load(path, args.max_length, args.max_batch_size, args.tiny)
        p.warm_up()
        steps = args.overhead_output - 1  # the tokens TPOT counts: all but the first
        _, decode_s = llm_gpu.measure(p, 1, args.overhead_input, steps, args.repeats)
        pipeline_ms = decode_s / steps * 1000
        del p  # the device memory goes back before the server starts
        gc.collect()
        server, ready = start_ready(model, path, args, log)
        with server:
            rows.append(ready)
            res = run_client(server, path, args.overhead_prompts, 1, args.overhead_input, args.overhead_output,
                             tmp / "overhead.json", log, args.timeout)
        fig = figures(res)
        rows.append({"model": model.name, "measure": "http_overhead", "prompts": args.overhead_prompts,
                     "concurrency": 1, "input_len": args.overhead_input, "output_len": args.overhead_output, **fig,
                     "pipeline_ms_per_token": round(pipeline_ms, 3),
                     "overhead_pct": round((fig["tpot_median_ms"] / pipeline_ms - 1) * 100, 1),
                     "target_overhead_pct": None if args.tiny else TARGET_OVERHEAD_PCT})
    finally:
        shutil.rmtree(path, ignore_errors=True)


# ----------------------------------------------------------------------------------------------
# Report, arguments, main
# ----------------------------------------------------------------------------------------------


def table(rows: list[dict]) -> list[tuple[str, ...]]:
    """(what, model, measured, target, met, anchors) lines for the rows."""
    def met(ok: bool | None) -> str:
        return "" if ok is None else ("yes" if ok else "NO")

    def num(v: float) -> str:
        return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"

    out = [("what", "model", "measured", "target", "met", "anchors")]
    for r in rows:
        m = r.get("model", r.get("part", ""))
        if r["measure"] == "ready":
            t = r["target_ready_s"]
            anchors = (f"vLLM ~{r['vllm_ready_s']} s; MAX ~{r['max_ready_cached_s']} s cached"
                       if r["vllm_ready_s"] else "")
            out.append(("ready (spawn to 'Server ready')", m,
                        f"{r['ready_s']:.2f} s (runs {', '.join(f'{x:.2f}' for x in r['ready_runs_s'])}; "
                        f"loaded in {r['loaded_s']} s)", f"<= {t:.0f} s" if t else "",
                        met(None if t is None else r["ready_s"] <= t), anchors))
        elif r["measure"] == "serve":
            t, tt = r["target_output_tok_s"], r["target_tpot_median_ms"]
            what = f"{r['prompts']} x {r['input_len']}/{r['output_len']} at {r['concurrency']}"
            out.append((f"output tok/s, {what}", m, f"{num(r['output_tok_s'])} (total {num(r['total_tok_s'])}; "
                        f"{r['request_s']:.2f} req/s)", f">= {num(t)}" if t else "",
                        met(None if t is None else r["output_tok_s"] >= t),
                        f"llama.cpp B=64 {num(r['llama_cpp_b64_tok_s'])}; vLLM {num(r['vllm_output_tok_s'])}"
                        if t else ""))
            out.append(("TPOT median / P99 ms", m, f"{r['tpot_median_ms']:.2f} / {r['tpot_p99_ms']:.2f}",
                        f"<= {tt:.0f}" if tt else "", met(None if tt is None else r["tpot_median_ms"] <= tt),
                        f"vLLM {r['vllm_median_tpot_ms']}" if tt else ""))
            out.append(("TTFT median / P99 ms", m, f"{r['ttft_median_ms']:.1f} / {r['ttft_p99_ms']:.1f}", "", "", ""))
            out.append(("ITL median / P99 ms", m, f"{r['itl_median_ms']:.2f} / {r['itl_p99_ms']:.2f}", "", "", ""))
        elif r["measure"] == "http_overhead":
            t = r["target_overhead_pct"]
            out.append((f"TPOT served vs in-process, {r['input_len']}/{r['output_len']} at 1", m,
                        f"{r['tpot_median_ms']:.3f} vs {r['pipeline_ms_per_token']:.3f} ms: {r['overhead_pct']:+.1f}%",
                        f"<= +{t:.0f}%" if t else "", met(None if t is None else r["overhead_pct"] <= t), ""))
        else:
            out.append(("ERROR", m, r.get("error", "")[:120], "", "", ""))
    return out


def print_table(lines: list[tuple[str, ...]]) -> None:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    for line in lines:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)} (default: both)")
    ap.add_argument("--num-prompts", type=int, default=None, help="throughput requests (default 256; --tiny 8)")
    ap.add_argument("--concurrency", type=int, default=None, help="throughput --max-concurrency (default 64; --tiny 4)")
    ap.add_argument("--input-len", type=int, default=None, help="throughput prompt tokens (default 1024; --tiny 32)")
    ap.add_argument("--output-len", type=int, default=None, help="throughput output tokens (default 128; --tiny 8)")
    ap.add_argument("--max-batch-size", type=int, default=None, help="the servers' (default 64; --tiny 4)")
    ap.add_argument("--max-length", type=int, default=None, help="the servers' (default 2048; --tiny 128)")
    ap.add_argument("--ready-runs", type=int, default=2, help="server starts timed per model (the best is kept)")
    ap.add_argument("--overhead-prompts", type=int, default=None,
                    help="requests at concurrency 1 (default 16; --tiny 4)")
    ap.add_argument("--overhead-input", type=int, default=None, help="their prompt tokens (default 512; --tiny 16)")
    ap.add_argument("--overhead-output", type=int, default=None, help="their output tokens (default 128; --tiny 8)")
    ap.add_argument("--repeats", type=int, default=None, help="timed in-process rounds (default 3; --tiny 1)")
    ap.add_argument("--serve-args", default="", help="more `max serve` flags, one string")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds a server may take to be ready, and the client to finish (default 900; --tiny 120)")
    ap.add_argument("--dir", type=Path, default=None, help="where the models are written (default: the temp dir)")
    ap.add_argument("--tiny", action="store_true", help="tiny models on the CPU, short requests (a smoke test)")
    args = ap.parse_args()
    args.parts = [p for p in args.parts.split(",") if p]
    if unknown := set(args.parts) - set(PARTS):
        ap.error(f"unknown parts {sorted(unknown)}; known: {', '.join(PARTS)}")
    if args.ready_runs < 1:
        ap.error("--ready-runs must be at least 1")
    defaults = {"num_prompts": (256, 8), "concurrency": (64, 4), "input_len": (1024, 32), "output_len": (128, 8),
                "max_batch_size": (64, 4), "max_length": (2048, 128), "overhead_prompts": (16, 4),
                "overhead_input": (512, 16), "overhead_output": (128, 8), "repeats": (3, 1), "timeout": (900, 120)}
    for key, (full, tiny) in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, tiny if args.tiny else full)
    if args.overhead_output < 2:
        ap.error("--overhead-output must be at least 2 (TPOT counts the tokens after the first)")
    return args


def main() -> None:
    args = parse_args()
    from max import driver

    if not args.tiny and driver.accelerator_count() == 0:
        raise SystemExit("serve_gpu: no GPU on this machine (--tiny runs the flow on the CPU)")
    if args.tiny:
        device, name, out_dir = "cpu", "serve_gpu_tiny", Path(os.environ.get("MAX_BENCH_OUT") or tempfile.mkdtemp())
    else:
        import torch

        device, name, out_dir = torch.cuda.get_device_name(), "serve_gpu", None
    # SIGTERM as an exception, so that the `finally` blocks stop the servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    log = result_path(name, device, out_dir).with_suffix(".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"")
    command = "python benchmarks/serve_gpu.py " + shlex.join(sys.argv[1:])
    # The other part's rows of the last run stay in the file (with its command).
    measured = {{"throughput": THROUGHPUT_MODEL, "overhead": OVERHEAD_MODEL}[p] for p in args.parts}
    old_rows, old_commands = llm_gpu.kept_rows(result_path(name, device, out_dir), measured)
    command = " ; ".join(old_commands + [command])
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for part in args.parts:
            try:
                {"throughput": throughput, "overhead": overhead}[part](Path(tmp), args, log, rows)
            except Exception as e:  # noqa: BLE001 - one part's failure must not lose the other
                print(f"{part}: FAILED: {type(e).__name__}: {e}", flush=True)
                rows.append({"part": part, "measure": "error", "error": f"{type(e).__name__}: {e}"[:2000]})
            write(name, device, old_rows + rows, command, out_dir, table=False)
    print_table(table(old_rows + rows))
    print(f"wrote {write(name, device, old_rows + rows, command, out_dir, table=False)}; server and client output in {log}")
    if any(r["measure"] == "error" for r in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
