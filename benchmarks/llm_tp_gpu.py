"""Tensor parallelism on two GPUs: batch-1 prefill and decode tokens/s of a random-weight
bfloat16 Llama of the 8B shape (hidden 4096, 32 layers, 32 heads over 8 KV heads, FFN 14336,
vocab 128256) at TP=1 (gpu:0) and TP=2 (gpu:0,1), in the same run. The checkpoint is written by
llm_files.py and timed with llm_gpu.py's rounds. `--shape smollm2-135m` runs the 135M shape
instead (quick check). JSON to benchmarks/results/.

    python benchmarks/llm_tp_gpu.py [--prompt 512] [--steps 64] [--shape llama-3-8b]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import write
from llm_files import SHAPES, write_safetensors_model
from llm_gpu import measure as timed_rounds


def measure(model_path: Path, gpus: list[int], prompt: int, steps: int, repeats: int) -> dict:
    from max.driver import DeviceSpec
    from max.pipelines import PipelineConfig
    from max.pipelines.lib.pipeline import load_pipeline

    t = time.perf_counter()
    p = load_pipeline(PipelineConfig(model_path=str(model_path), max_length=prompt + steps + 8, max_batch_size=1,
                                     device_specs=[DeviceSpec.accelerator(i) for i in gpus]))
    load = time.perf_counter() - t
    p.warm_up()
    prefill, decode = timed_rounds(p, 1, prompt, steps, repeats)
    del p
    return {"tp": len(gpus), "load_s": round(load, 1), "prefill_tok_s": round(prompt / prefill, 1),
            "decode_tok_s": round(steps / decode, 2), "decode_ms_per_token": round(decode / steps * 1000, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--shape", choices=list(SHAPES), default="llama-3-8b")
    ap.add_argument("--dir", default=None, help="where to write the checkpoint (default: a temporary folder)")
    args = ap.parse_args()
    from max import driver

    if driver.accelerator_count() < 2:
        raise SystemExit(f"llm_tp_gpu: needs 2 GPUs, this machine has {driver.accelerator_count()}")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        t = time.perf_counter()
        path = write_safetensors_model(Path(tmp) / args.shape, SHAPES[args.shape])
        print(f"wrote the {args.shape} checkpoint in {time.perf_counter() - t:.0f} s", flush=True)
        rows = []
        for gpus in ([0], [0, 1]):
            r = measure(path, gpus, args.prompt, args.steps, args.repeats)
            rows.append({"model": f"{args.shape}-bf16", **r})
            print(rows[-1], flush=True)
    base = rows[0]
    for r in rows:
        r["decode_speedup"] = round(r["decode_tok_s"] / base["decode_tok_s"], 3)
        r["prefill_speedup"] = round(r["prefill_tok_s"] / base["prefill_tok_s"], 3)
    import torch

    write("llm_tp_gpu", torch.cuda.get_device_name(), rows,
          f"python benchmarks/llm_tp_gpu.py --shape {args.shape} --prompt {args.prompt} --steps {args.steps}")


if __name__ == "__main__":
    main()
