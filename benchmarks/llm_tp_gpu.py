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

import numpy as np

from common import write
from llm_files import SHAPES, write_safetensors_model
from llm_gpu import measure as timed_rounds

CHECK_TOKENS = 32


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
    tokens, logits = greedy(p, CHECK_TOKENS)
    del p
    return {"tp": len(gpus), "load_s": round(load, 1), "prefill_tok_s": round(prompt / prefill, 1),
            "decode_tok_s": round(steps / decode, 2), "decode_ms_per_token": round(decode / steps * 1000, 3),
            "_tokens": tokens, "_logits": logits}


def greedy(p, n: int) -> tuple[list[int], np.ndarray]:
    """The first step's logits (float64, on the host) and `n` greedy tokens for a fixed
    random prompt: what TP=2 must reproduce of TP=1."""
    from max import driver
    from max.interfaces import SamplingParams
    from max.pipelines.lib.context import TextContext
    from max.pipelines.lib.generate import Generator

    ids = np.random.default_rng(7).integers(5, int(p.model.config["vocab_size"]), 24)
    ctx = TextContext(max_length=p.max_length, tokens=ids)
    p.kv_manager.claim(ctx.request_id)
    try:
        p.kv_manager.alloc(ctx)
        caches = p.kv_manager.get_runtime_inputs([[ctx]])
        out = p.model.execute(ctx.next_tokens, np.array([0, len(ids)], np.uint32), [b for c in caches for b in c])
        logits = out.to(driver.CPU()).to_numpy().astype(np.float64)[0]
    finally:
        p.release(ctx.request_id)
    gen = Generator(p)
    tokens = gen.run([gen.context(ids.tolist(), SamplingParams(top_k=1, max_new_tokens=n, ignore_eos=True))])[0].tokens
    return list(tokens), logits


def agreement(one: dict, two: dict) -> dict:
    """How TP=2's greedy tokens and first logits compare with TP=1's."""
    a, b = one["_tokens"], two["_tokens"]
    same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    la, lb = one["_logits"], two["_logits"]
    return {"greedy_tokens": len(a), "tokens_equal_prefix": same, "tokens_equal": a == b,
            "logits_max_abs_diff_of_max": round(float(np.abs(la - lb).max() / np.abs(la).max()), 5),
            "top1_equal": int(la.argmax()) == int(lb.argmax())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--shape", choices=list(SHAPES), default="llama-3-8b")
    ap.add_argument("--dir", default=None, help="where to write the checkpoint (default: a temporary folder)")
    ap.add_argument("--model", default=None, help="an existing checkpoint of --shape (written by llm_files.py) to use")
    args = ap.parse_args()
    from max import driver

    if driver.accelerator_count() < 2:
        raise SystemExit(f"llm_tp_gpu: needs 2 GPUs, this machine has {driver.accelerator_count()}")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        t = time.perf_counter()
        if args.model:
            path = Path(args.model)
        else:
            path = write_safetensors_model(Path(tmp) / args.shape, SHAPES[args.shape])
            print(f"wrote the {args.shape} checkpoint in {time.perf_counter() - t:.0f} s", flush=True)
        rows = []
        for gpus in ([0], [0, 1]):
            r = measure(path, gpus, args.prompt, args.steps, args.repeats)
            rows.append({"model": f"{args.shape}-bf16", **r})
            print({k: v for k, v in rows[-1].items() if not k.startswith("_")}, flush=True)
    base = rows[0]
    rows[1]["vs_tp1"] = agreement(rows[0], rows[1])
    print("TP=2 against TP=1:", rows[1]["vs_tp1"], flush=True)
    for r in rows:
        r.pop("_tokens")
        r.pop("_logits")
        r["decode_speedup"] = round(r["decode_tok_s"] / base["decode_tok_s"], 3)
        r["prefill_speedup"] = round(r["prefill_tok_s"] / base["prefill_tok_s"], 3)
    import torch

    write("llm_tp_gpu", torch.cuda.get_device_name(), rows,
          f"python benchmarks/llm_tp_gpu.py --shape {args.shape} --prompt {args.prompt} --steps {args.steps}")


if __name__ == "__main__":
    main()
