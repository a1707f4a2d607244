"""Decoder LLMs on the GPU: decode tokens/s at several batch sizes, prefill tokens/s and the time
from process start to the first token, for random-weight Llama models of real shapes written on
the spot (speed does not depend on the values; llm_files.py writes them):

- smollm2-135m-bf16, llama-3.2-1b-bf16: safetensors, bf16, tied embeddings;
- smollm2-135m-q4_1: the real SmolLM2-135M-Instruct Q4_1 GGUF in .gpu/models when present, else a
  random one of its types (Q4_1 linears, Q8_0 tied embedding; the same bytes);
- llama-3-8b-bf16: safetensors, bf16, untied embeddings (16.1 GB);
- llama-3-8b-q4_0: a GGUF of the types llama.cpp gives a Q4_0 file: Q4_0 linears and token
  embedding, Q6_K output (4.65 GB).

Each model is written to a temporary directory (`--dir`; skipped when the disk lacks room), loaded
once through the pipeline API with max_batch_size the largest batch, measured, and deleted.

- Decode, per batch size B (`--batch`): B sequences, each with its own random `--prompt`-token
  prompt, are prefilled (in steps of at most max_batch_input_tokens tokens, as the scheduler
  does), then decode `--steps` steps together, one TextGenerationInputs of B contexts per step.
  Reported: aggregate tok/s (B tokens per step), ms per step (each sequence's time per token),
  and the prefill tok/s of the B prompts. Each batch size runs one untimed round, then
  `--repeats` timed rounds; medians.
- Prefill: one `--prefill-prompt`-token prompt (the issue's 2048), batch 1.
- Time to first token (`--ttft`, default the 8B bf16 model): `python -m max generate` in a
  subprocess, the weights read once beforehand so that they are in the page cache, and after the
  in-process runs, so that the kernel cache is warm. The time is from just before the process is
  spawned to the moment the first generated token's text reaches its stdout (the CLI echoes the
  prompt, then streams the tokens); best of `--ttft-runs`. The child's own load time and time to
  first token (from its summary line) and the time to its exit are kept beside it.

Beside each decode number: the bandwidth floor, bytes a step reads from the weights (an untied
embedding is read one row per token, so not counted) over the H200's device-to-device copy rate,
times B for batch B; the same with the KV cache read at the mean context length; llama.cpp's
figure on the same machine where ../shared/LLM.md §2 has one (batch 1 from llama-bench tg128;
B=64 from llama-batched-bench with 128-token prompts, the 8B one on an F16 file; prefill pp512 /
pp2048); and issue 31's target. JSON to benchmarks/results/llm_gpu-<device>.json: rows of models
not measured in this run are kept from the file, so that the models can be measured in separate
runs.

    python benchmarks/llm_gpu.py [--models a,b] [--batch 1,8,64] [--prompt 512] [--steps 128]
                                 [--prefill-prompt 2048] [--ttft llama-3-8b-bf16] [--dir /tmp]
    python benchmarks/llm_gpu.py --tiny    # every kind at tiny shapes on the CPU (a smoke test)
    python benchmarks/llm_gpu.py --compare launch.pdl=0 --models llama-3.2-1b-bf16 --batch 1 --ttft ""
                                           # decode with the default settings and with the knobs
                                           # given (here: without programmatic dependent launch)
    python benchmarks/llm_gpu.py --compare 'a=1;a=2' --rounds 3 ...
                                           # the default and each variant in turn, three times
                                           # over (rows per round; the comparison on medians;
                                           # its `speedup`: default tok/s / the variant's)

`--tiny` runs the same flow on the CPU with 2-layer models of hidden size 256 (each kind: tied and
untied bf16 safetensors, Q4_1 and Q4_0/Q6_K GGUF), batches 1 and 2, short prompts, and time to
first token for every model; its JSON goes to a temporary directory unless MAX_BENCH_OUT is set.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import llm_files
from common import result_path, write

REPO = Path(__file__).resolve().parent.parent
# A device-to-device copy on the H200 (torch, measured on the same machine): the rate a decode
# step can stream its weights at.
COPY_RATE = 4.19e12


@dataclass(frozen=True)
class Model:
    """A measured model: its shape (llm_files.SHAPES), its GGUF block types (None: bf16
    safetensors), a real file to prefer, llama.cpp's figures and issue 31's targets."""

    name: str
    shape: str
    types: dict[str, str] | None = None
    real_file: str | None = None
    llama_cpp_decode: dict[int, float] = field(default_factory=dict)  # batch -> tok/s
    llama_cpp_prefill: dict[int, float] = field(default_factory=dict)  # prompt tokens -> tok/s
    target_decode: dict[int, float] = field(default_factory=dict)
    target_prefill: dict[int, float] = field(default_factory=dict)
    target_ttft_s: float | None = None


MODELS = {m.name: m for m in [
    Model("smollm2-135m-bf16", "smollm2-135m", llama_cpp_decode={1: 994}, llama_cpp_prefill={512: 112000}),
    Model("llama-3.2-1b-bf16", "llama-3.2-1b", llama_cpp_decode={1: 788, 64: 19203}, llama_cpp_prefill={512: 83600},
          target_decode={1: 1200}),
    Model("smollm2-135m-q4_1", "smollm2-135m", {"linear": "Q4_1", "embed": "Q8_0"},
          real_file=".gpu/models/SmolLM2-135M-Instruct.Q4_1.gguf", llama_cpp_decode={1: 970, 64: 11907},
          llama_cpp_prefill={512: 53000, 2048: 77900}, target_decode={1: 2000}),
    Model("llama-3-8b-bf16", "llama-3-8b", llama_cpp_decode={1: 209, 64: 6415},
          llama_cpp_prefill={512: 25700, 2048: 25200}, target_decode={1: 250, 64: 15000}, target_prefill={2048: 35000},
          target_ttft_s=5.0),
    Model("llama-3-8b-q4_0", "llama-3-8b", {"linear": "Q4_0", "embed": "Q4_0", "output": "Q6_K"},
          llama_cpp_decode={1: 337, 64: 4983}, llama_cpp_prefill={512: 11100, 2048: 11900}, target_decode={1: 600}),
    # (Q4_K_S-like: Q4_K linear layers, Q6_K output; a Q4_K_M file also has Q6_K in v and half
    # the down projections)
    Model("llama-3-8b-q4_k", "llama-3-8b", {"linear": "Q4_K", "embed": "Q4_K", "output": "Q6_K"}),
]}


# ----------------------------------------------------------------------------------------------
# Model files
# ----------------------------------------------------------------------------------------------


def file_bytes(model: Model, shape: dict) -> int:
    return llm_files.gguf_bytes(shape, model.types) if model.types else llm_files.safetensors_bytes(shape)


def model_path(model: Model, tmp: Path, tiny: bool) -> Path:
    """Where the model is: its real file when there is one, else where it is written in `tmp`."""
    if model.real_file and not tiny and (REPO / model.real_file).is_file():
        return REPO / model.real_file
    return tmp / (f"{model.name}.gguf" if model.types else model.name)


def prepare(model: Model, path: Path, tiny: bool) -> str | None:
    """Writes the model at `path` unless it is there; says where it came from ("real file", "random,
    kept" from an earlier run, or "random, written in N s"), or returns None when the disk lacks
    room for it."""
    if path.exists():
        return "real file" if model.real_file and path == REPO / model.real_file else "random, kept"
    shape = llm_files.SHAPES[model.shape]
    shape = llm_files.tiny(shape) if tiny else shape
    need, free = file_bytes(model, shape), shutil.disk_usage(path.parent).free
    if need + (1 << 30) > free:
        print(f"{model.name}: skipped, {need / 1e9:.1f} GB to write but {free / 1e9:.1f} GB free in {path.parent}",
              flush=True)
        return None
    t = time.perf_counter()
    if model.types:
        llm_files.write_gguf_model(path, shape, model.types)
    else:
        llm_files.write_safetensors_model(path, shape)
        tensors = sum(1 for _ in llm_files.llama_tensors(shape))
        llm_files.check_safetensors(path / "model.safetensors", tensors)
    took = time.perf_counter() - t
    print(f"{model.name}: wrote {need / 1e9:.2f} GB in {took:.1f} s", flush=True)
    return f"random, written in {took:.1f} s"


def weight_files(path: Path) -> list[Path]:
    return [path] if path.is_file() else sorted(path.glob("*.safetensors"))


def read_into_page_cache(files: list[Path]) -> float:
    """Reads the files once (so that a process starting next finds them in memory); seconds."""
    t = time.perf_counter()
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while fh.read(64 << 20):
                pass
    return time.perf_counter() - t


# ----------------------------------------------------------------------------------------------
# Measuring through the pipeline API
# ----------------------------------------------------------------------------------------------


# Pipeline settings a --compare variant may set beside tuning knobs (PipelineConfig fields).
CONFIG_SETTINGS = ("kv_cache_format", "quantization_encoding")


def split_settings(spec: str) -> tuple[str, dict[str, str]]:
    """A --compare variant's tuning knobs (a spec for tuning.override) and its pipeline settings."""
    knobs, config = [], {}
    for item in filter(None, spec.split(",")):
        key, _, value = item.partition("=")
        if key.strip() in CONFIG_SETTINGS:
            config[key.strip()] = value.strip()
        else:
            knobs.append(item)
    return ",".join(knobs), config


def load(path: Path, max_length: int, max_batch: int, tiny: bool, **config: str):
    from max.driver import DeviceSpec
    from max.pipelines import PipelineConfig
    from max.pipelines.lib.pipeline import load_pipeline

    device = DeviceSpec.cpu() if tiny else DeviceSpec.accelerator(0)
    return load_pipeline(PipelineConfig(model_path=str(path), max_length=max_length, max_batch_size=max_batch,
                                        device_specs=[device], **config))


def median_row(rows: list[dict]) -> dict:
    """The decode figures (tok/s, ms per step) of a variant's rounds: their medians (of an
    even count, the mean of the middle two)."""
    return {key: round(float(np.median([r[key] for r in rows])), digits)
            for key, digits in (("decode_tok_s", 1), ("ms_per_step", 3))}


def prefill_groups(ctxs: list, budget: int) -> list[list]:
    """Consecutive groups of contexts whose prompts add up to at most `budget` tokens (one
    context per group at least): the prefill steps of a batch."""
    groups: list[list] = [[]]
    used = 0
    for ctx in ctxs:
        if groups[-1] and used + ctx.prompt_length > budget:
            groups.append([])
            used = 0
        groups[-1].append(ctx)
        used += ctx.prompt_length
    return groups


def run_round(p, batch: int, prompt: int, steps: int, rng: np.random.Generator,
              prefill_ctx=None, decode_ctx=None) -> tuple[float, float]:
    """One round: `batch` fresh prompts prefilled, then `steps` decode steps of all of them;
    (prefill seconds, decode seconds). The prefill and the decode steps each run inside their
    context manager when given (profile_llm.py profiles one of them)."""
    from max.interfaces import SamplingParams, TextGenerationInputs
    from max.pipelines.lib.context import TextContext

    def step(ctxs: list, num_steps: int = 1) -> int:
        """One execute (up to `num_steps` decode steps, as `max generate` runs them); the tokens
        each sequence got."""
        out = p.execute(TextGenerationInputs([{c.request_id: c for c in ctxs}], num_steps=num_steps))
        counts = {len(o.tokens) for o in out.values()}
        if len(out) != len(ctxs) or len(counts) != 1:
            raise RuntimeError(f"a step of {len(ctxs)} sequences produced {len(out)} outputs of {counts} tokens")
        return counts.pop()

    vocab = int(p.model.config["vocab_size"])
    ctxs = [TextContext(max_length=p.max_length, tokens=rng.integers(1, vocab, prompt),
                        sampling_params=SamplingParams(top_k=1, max_new_tokens=steps + 1, ignore_eos=True))
            for _ in range(batch)]
    try:
        with prefill_ctx or contextlib.nullcontext():
            t = time.perf_counter()
            for group in prefill_groups(ctxs, int(p.pipeline_config.max_batch_input_tokens)):
                step(group)
            prefill = time.perf_counter() - t
        with decode_ctx or contextlib.nullcontext():
            t = time.perf_counter()
            done = 0
            while done < steps:
                done += step(ctxs, min(p.decode_steps, steps - done))
            decode = time.perf_counter() - t
    finally:
        for c in ctxs:
            p.release(c.request_id)
    return prefill, decode


def measure(p, batch: int, prompt: int, steps: int, repeats: int) -> tuple[float, float]:
    """Median (prefill seconds, decode seconds) over `repeats` rounds after two untimed ones (a
    step's CUDA graph is captured on its second run)."""
    rng = np.random.default_rng(batch * 1000 + prompt)
    for _ in range(2):
        run_round(p, batch, prompt, steps, rng)
    rounds = [run_round(p, batch, prompt, steps, rng) for _ in range(repeats)]
    return statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds)


def kv_bytes_per_token(p) -> int:
    kv = p.model.kv_params
    return 2 * kv.n_kv_heads * kv.head_dim * kv.num_layers * kv.dtype.size_in_bytes


def decode_row(model: Model, p, batch: int, args, weights: int) -> dict:
    prefill_s, decode_s = measure(p, batch, args.prompt, args.steps, args.repeats)
    kv = batch * (args.prompt + args.steps / 2) * kv_bytes_per_token(p)  # KV read per step, mean context
    return {
        "model": model.name, "measure": "decode", "batch": batch, "prompt": args.prompt, "steps": args.steps,
        "kv_cache": p.model.kv_params.dtype.name,
        "decode_tok_s": round(batch * args.steps / decode_s, 1),
        "ms_per_step": round(decode_s / args.steps * 1000, 3),
        "prefill_tok_s": round(batch * args.prompt / prefill_s, 1),
        "bytes_per_step": weights, "floor_tok_s": round(batch * COPY_RATE / weights, 1),
        "floor_with_kv_tok_s": round(batch * COPY_RATE / (weights + kv), 1),
        "llama_cpp_decode_tok_s": model.llama_cpp_decode.get(batch),
        "llama_cpp_prefill_tok_s": model.llama_cpp_prefill.get(args.prompt) if batch == 1 else None,
        "target_decode_tok_s": model.target_decode.get(batch),
    }


def prefill_row(model: Model, p, prompt: int, repeats: int) -> dict:
    prefill_s, _ = measure(p, 1, prompt, 0, repeats)
    return {"model": model.name, "measure": "prefill", "batch": 1, "prompt": prompt,
            "prefill_tok_s": round(prompt / prefill_s, 1), "llama_cpp_prefill_tok_s": model.llama_cpp_prefill.get(prompt),
            "target_prefill_tok_s": model.target_prefill.get(prompt)}


# ----------------------------------------------------------------------------------------------
# Time to first token: `max generate` in a new process
# ----------------------------------------------------------------------------------------------


def generate_once(cmd: list[str], echoed: int, timeout: float) -> dict:
    """Runs `cmd` (a `max generate` of one prompt); seconds from spawning it to the first
    generated text on its stdout (after the `echoed` bytes of prompt it prints first) and to its
    exit, and its summary line's load time and time to first token."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, cwd=REPO)
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        out, first = bytearray(), None
        try:
            while chunk := os.read(proc.stdout.fileno(), 1 << 16):
                out += chunk
                if first is None and out[echoed:].strip():
                    first = time.perf_counter() - t0
            rc = proc.wait()
            exit_s = time.perf_counter() - t0
        finally:
            killer.cancel()
            proc.stdout.close()
        err.seek(0)
        log = err.read().decode(errors="replace")
    if rc != 0 or first is None:
        raise RuntimeError(f"max generate exited with {rc}{' (killed after %d s)' % timeout if rc < 0 else ''}, "
                           f"{'no' if first is None else 'some'} token printed:\n{log[-3000:]}")
    m = re.search(r"load ([\d.]+) s \| time to first token ([\d.]+) ms \| prefill [\d.]+ tok/s \((\d+) tokens", log)
    return {"ttft_s": first, "exit_s": exit_s, "child_load_s": float(m[1]) if m else None,
            "child_ttft_s": round(float(m[2]) / 1000, 4) if m else None, "prompt_tokens": int(m[3]) if m else None}


def ttft_row(model: Model, path: Path, prompt: int, runs: int, tiny: bool) -> dict:
    cache_s = read_into_page_cache(weight_files(path))
    text = llm_files.prompt_text(prompt)
    cmd = [sys.executable, "-m", "max", "generate", "--model-path", str(path), "--prompt", text,
           "--max-new-tokens", "4", "--top-k", "1", "--ignore-eos", "--max-length", str(prompt * 2 + 16),
           "--max-batch-size", "1", "--devices", "cpu" if tiny else "gpu"]
    results = [generate_once(cmd, len(text.encode()), timeout=240) for _ in range(runs)]
    best = min(results, key=lambda r: r["ttft_s"])
    return {"model": model.name, "measure": "ttft", "batch": 1, "prompt": best["prompt_tokens"] or prompt,
            "ttft_s": round(best["ttft_s"], 3), "ttft_runs_s": [round(r["ttft_s"], 3) for r in results],
            "exit_s": round(best["exit_s"], 3), "child_load_s": best["child_load_s"],
            "child_ttft_s": best["child_ttft_s"], "page_cache_read_s": round(cache_s, 2),
            "target_ttft_s": model.target_ttft_s}


# ----------------------------------------------------------------------------------------------
# One model, reporting, main
# ----------------------------------------------------------------------------------------------


def show(row: dict) -> None:
    def fig(key: str, fmt: str = ".0f", unit: str = "") -> str:
        v = row.get(key)
        return "-" if v is None else format(v, fmt) + unit

    name = f"{row['model'] + ('' if row.get('variant') is None else ' ' + row['variant']):18s}"
    if row["measure"] == "decode":
        print(f"{name} B={row['batch']:<3d} decode {row['decode_tok_s']:9.1f} tok/s {row['ms_per_step']:8.3f} ms/step "
              f"(floor {fig('floor_tok_s')}, with KV {fig('floor_with_kv_tok_s')}; llama.cpp {fig('llama_cpp_decode_tok_s')};"
              f" target {fig('target_decode_tok_s')})  prefill {row['prefill_tok_s']:9.1f} tok/s", flush=True)
    elif row["measure"] == "prefill":
        print(f"{name} prefill {row['prompt']} tokens {row['prefill_tok_s']:9.1f} tok/s (llama.cpp "
              f"{fig('llama_cpp_prefill_tok_s')}; target {fig('target_prefill_tok_s')})", flush=True)
    elif row["measure"] == "ttft":
        print(f"{name} first token {row['ttft_s']:.2f} s after process start (runs {row['ttft_runs_s']}; in the "
              f"child: load {fig('child_load_s', '.2f', ' s')}, first token {fig('child_ttft_s', '.3f', ' s')} after it; "
              f"exit at {row['exit_s']:.2f} s; target {fig('target_ttft_s', '.1f', ' s')})", flush=True)
    elif row["measure"] == "compare":
        print(f"{name} B={row['batch']:<3d} decode {row['decode_tok_s_default']:9.1f} tok/s by default, "
              f"{row['decode_tok_s_variant']:9.1f} with {row['settings']} (default / variant {row['speedup']:.3f}x)",
              flush=True)
    else:
        print(f"{name} {row}", flush=True)


def run_model(model: Model, tmp: Path, args) -> Iterator[dict]:
    """Writes (unless real), measures and deletes one model, yielding its rows as they come."""
    if args.tiny:  # no figures to compare with at tiny shapes
        model = Model(model.name, model.shape, model.types)
    path = model_path(model, tmp, args.tiny)
    try:
        origin = prepare(model, path, args.tiny)
        if origin is None:
            return
        from max import tuning

        tag = {"weights": origin.split(",")[0]}
        max_length = max(args.prompt + args.steps, args.prefill_prompt) + 8
        weights = llm_files.streamed_bytes(weight_files(path))
        # --compare: the model is loaded and measured with the default settings, then with each
        # set of knobs given (knobs are read as the graphs are lowered and the decode graphs
        # captured, so each load runs inside its own settings), --rounds times over in turn, so
        # that a drift of the machine meets every variant alike; then one row per variant and
        # batch size with the medians of both figures over the rounds.
        compared = args.variants
        variants = [("default", "")] + [(c, c) for c in compared] if compared else [(None, "")]
        rounds = args.rounds if compared else 1
        decoded: dict[str | None, dict[int, list[dict]]] = {}
        for rnd, (label, spec) in ((r, v) for r in range(rounds) for v in variants):
            knobs, config = split_settings(spec)
            with tuning.override(knobs or None):
                t = time.perf_counter()
                p = load(path, max_length, max(args.batch), args.tiny, **config)
                p.warm_up()
                what = "" if label is None else f" ({label})"
                print(f"{model.name}: {origin}; loaded and warmed up in {time.perf_counter() - t:.1f} s{what}", flush=True)
                vtag = tag if label is None else tag | {"variant": label}
                if rounds > 1:
                    vtag = vtag | {"round": rnd}
                for b in args.batch:
                    row = decode_row(model, p, b, args, weights) | vtag
                    decoded.setdefault(label, {}).setdefault(b, []).append(row)
                    yield row
                if args.prefill_prompt and label in (None, "default") and rnd == 0:
                    yield prefill_row(model, p, args.prefill_prompt, args.repeats) | vtag
                del p  # the GPU memory goes back before the next load or `max generate`
                gc.collect()
        for c in compared:
            for b in args.batch:
                on, off = median_row(decoded["default"][b]), median_row(decoded[c][b])
                yield {"model": model.name, "measure": "compare", "batch": b, "settings": c,
                       "decode_tok_s_default": on["decode_tok_s"], "decode_tok_s_variant": off["decode_tok_s"],
                       "ms_per_step_default": on["ms_per_step"], "ms_per_step_variant": off["ms_per_step"],
                       "speedup": round(on["decode_tok_s"] / off["decode_tok_s"], 3), "rounds": rounds} | tag
        if model.name in args.ttft:
            yield ttft_row(model, path, args.prompt, args.ttft_runs, args.tiny) | tag
    finally:
        if not args.keep_models and path.is_relative_to(tmp) and path.exists():
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def kept_rows(path: Path, measured: set[str]) -> tuple[list[dict], list[str]]:
    """Rows (and commands) of an earlier result file in this format, for models not measured now."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return [], []
    rows = [r for r in old.get("rows", []) if "measure" in r and r.get("model") not in measured]
    return rows, [old["command"]] if rows and old.get("command") else []


def parse_args() -> argparse.Namespace:
    def names(s: str) -> list[str]:
        out = [x for x in s.split(",") if x]
        unknown = [x for x in out if x not in MODELS]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown models {unknown}; known: {', '.join(MODELS)}")
        return out

    def ints(s: str) -> list[int]:
        return [int(x) for x in s.split(",") if x]

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=names, default=list(MODELS), help="comma-separated (default: all)")
    ap.add_argument("--batch", type=ints, default=None, help="decode batch sizes (default 1,8,64; --tiny 1,2)")
    ap.add_argument("--prompt", type=int, default=None, help="prompt tokens of each sequence (default 512; --tiny 16)")
    ap.add_argument("--steps", type=int, default=None, help="decode steps timed (default 128; --tiny 4)")
    ap.add_argument("--prefill-prompt", type=int, default=None,
                    help="the batch-1 prefill prompt (default 2048; --tiny 32; 0: none)")
    ap.add_argument("--repeats", type=int, default=None, help="timed rounds (default 3; --tiny 1)")
    ap.add_argument("--ttft", type=names, default=None,
                    help="models whose time to first token is measured (default llama-3-8b-bf16; --tiny: all)")
    ap.add_argument("--ttft-runs", type=int, default=2, help="`max generate` runs per model (the best is kept)")
    ap.add_argument("--dir", type=Path, default=None, help="where the models are written (default: the temp dir)")
    ap.add_argument("--keep-models", type=Path, default=None,
                    help="write the models here and keep them: later runs with the same folder load them "
                    "instead of writing them again (variants measured in separate processes)")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes of every model kind on the CPU")
    ap.add_argument("--compare", default="", metavar="KNOB=VALUE[,...][;...]",
                    help="measure decode with the default settings and with each ';'-separated set of tuning "
                    "knobs (one more load of each model per set), side by side: e.g. launch.pdl=0; a set may "
                    f"also name pipeline settings ({', '.join(CONFIG_SETTINGS)}), e.g. kv_cache_format=bfloat16")
    ap.add_argument("--rounds", type=int, default=1,
                    help="with --compare: measure the default and every variant in turn this many times over")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds: at least 1 (got {args.rounds})")
    args.variants = [x for x in args.compare.split(";") if x]
    if len(set(args.variants)) != len(args.variants) or "default" in args.variants:
        ap.error(f"--compare: each variant once, none called 'default' (got {args.variants})")
    defaults = ([1, 2], 16, 4, 32, 1, list(MODELS)) if args.tiny else ([1, 8, 64], 512, 128, 2048, 3, ["llama-3-8b-bf16"])
    for key, value in zip(("batch", "prompt", "steps", "prefill_prompt", "repeats", "ttft"), defaults):
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main() -> None:
    args = parse_args()
    from max import driver

    if not args.tiny and driver.accelerator_count() == 0:
        raise SystemExit("llm_gpu: no GPU on this machine (--tiny runs the flow on the CPU)")
    if args.tiny:
        device, name, out_dir = "cpu", "llm_gpu_tiny", Path(os.environ.get("MAX_BENCH_OUT") or tempfile.mkdtemp())
    else:
        import torch

        device, name, out_dir = torch.cuda.get_device_name(), "llm_gpu", None
    command = "python benchmarks/llm_gpu.py " + " ".join(sys.argv[1:])
    old_rows, old_commands = kept_rows(result_path(name, device, out_dir), set(args.models))
    rows: list[dict] = []
    if args.keep_models:
        args.keep_models.mkdir(parents=True, exist_ok=True)
    with contextlib.nullcontext(str(args.keep_models)) if args.keep_models else tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for m in args.models:
            try:
                for row in run_model(MODELS[m], Path(tmp), args):
                    show(row)
                    rows.append(row)
            except Exception as e:  # noqa: BLE001 - one model's failure must not lose the others
                print(f"{m}: FAILED: {type(e).__name__}: {e}", flush=True)
                rows.append({"model": m, "measure": "error", "error": f"{type(e).__name__}: {e}"[:500]})
            gc.collect()
            write(name, device, old_rows + rows, " ; ".join(old_commands + [command]), out_dir, table=False)
    write(name, device, old_rows + rows, " ; ".join(old_commands + [command]), out_dir)
    if any(r["measure"] == "error" for r in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
