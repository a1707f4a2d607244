"""Tensor parallelism on two GPUs: batch-1 prefill and decode tokens/s of a random-weight
bfloat16 Llama of the 8B shape (hidden 4096, 32 layers, 32 heads over 8 KV heads, FFN 14336,
vocab 128256) at TP=1 (gpu:0) and TP=2 (gpu:0,1), in the same run. The checkpoint is written by
llm_files.py and timed with llm_gpu.py's rounds. `--shape smollm2-135m` runs the 135M shape
instead (quick check). `--dp-batch B` adds data parallelism: aggregate decode tokens/s of B
sequences on gpu:0 against 2B sequences on two replicas (gpu:0,1, --data-parallel-degree 2).
JSON to benchmarks/results/.

    python benchmarks/llm_tp_gpu.py [--prompt 512] [--steps 64] [--shape llama-3-8b] [--dp-batch 64]
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

CHECK_TOKENS = 32  # greedy tokens compared between TP=1 and TP=2
PROMPT = 24  # tokens of the comparison's prompt


def measure(model_path: Path, gpus: list[int], prompt: int, steps: int, repeats: int,
            forced: list[int] | None) -> dict:
    """Load time, prefill and decode speed on `gpus`; the greedy check's tokens, and the logits
    of each step with `forced` (TP=1's tokens; by default this run's own) fed back."""
    from max.driver import DeviceSpec
    from max.pipelines import PipelineConfig
    from max.pipelines.lib.pipeline import load_pipeline

    t = time.perf_counter()
    max_length = max(prompt + steps, PROMPT + CHECK_TOKENS) + 8
    p = load_pipeline(PipelineConfig(model_path=str(model_path), max_length=max_length, max_batch_size=1,
                                     device_specs=[DeviceSpec.accelerator(i) for i in gpus]))
    load = time.perf_counter() - t
    p.warm_up()
    prefill, decode = timed_rounds(p, 1, prompt, steps, repeats)
    ids = np.random.default_rng(7).integers(5, int(p.model.config["vocab_size"]), PROMPT).tolist()
    tokens = greedy(p, ids, CHECK_TOKENS)
    logits = forced_logits(p, ids, forced or tokens)
    del p
    return {"tp": len(gpus), "load_s": round(load, 1), "prefill_tok_s": round(prompt / prefill, 1),
            "decode_tok_s": round(steps / decode, 2), "decode_ms_per_token": round(decode / steps * 1000, 3),
            "_tokens": tokens, "_logits": logits}


def measure_dp(model_path: Path, batch: int, prompt: int, steps: int, repeats: int) -> list[dict]:
    """Aggregate decode tokens/s of `batch` sequences on gpu:0, then of 2 * `batch` on two
    replicas (gpu:0 and gpu:1, each running `batch`)."""
    from max.driver import DeviceSpec
    from max.pipelines import PipelineConfig
    from max.pipelines.lib.pipeline import load_pipeline

    rows = []
    for degree in (1, 2):
        p = load_pipeline(PipelineConfig(model_path=str(model_path), max_length=prompt + steps + 8,
                                         max_batch_size=batch, data_parallel_degree=degree,
                                         device_specs=[DeviceSpec.accelerator(i) for i in range(degree)]))
        p.warm_up()
        n = batch * degree
        prefill, decode = timed_rounds(p, n, prompt, steps, repeats)
        rows.append({"dp": degree, "batch": n, "decode_tok_s": round(n * steps / decode, 1),
                     "ms_per_step": round(decode / steps * 1000, 3), "prefill_tok_s": round(n * prompt / prefill, 1)})
        del p
    rows[1]["decode_speedup"] = round(rows[1]["decode_tok_s"] / rows[0]["decode_tok_s"], 3)
    return rows


def greedy(p, ids: list[int], n: int) -> list[int]:
    """`n` greedy tokens after `ids`, as `max generate` runs them."""
    from max.interfaces import SamplingParams
    from max.pipelines.lib.generate import Generator

    gen = Generator(p)
    return list(gen.run([gen.context(ids, SamplingParams(top_k=1, max_new_tokens=n, ignore_eos=True))])[0].tokens)


def forced_logits(p, ids: list[int], tokens: list[int]) -> list[np.ndarray]:
    """The logits (float64) of each step with `tokens` fed back in turn (teacher forcing):
    step i's logits predict tokens[i]."""
    from max import driver
    from max.pipelines.lib.context import TextContext

    ctx = TextContext(max_length=p.max_length, tokens=np.array(ids))
    p.kv_manager.claim(ctx.request_id)
    out = []
    try:
        for t in [None, *tokens[:-1]]:
            if t is not None:
                ctx.append(t)
            p.kv_manager.alloc(ctx)
            caches = p.kv_manager.get_runtime_inputs([[ctx]])
            offsets = np.array([0, ctx.active_length], np.uint32)
            y = p.model.execute(ctx.next_tokens, offsets, [b for c in caches for b in c])
            out.append(y.to(driver.CPU()).to_numpy().astype(np.float64)[0])
            p.kv_manager.step([[ctx]])
            ctx.commit()
    finally:
        p.release(ctx.request_id)
    return out


def agreement(one: dict, two: dict) -> dict:
    """TP=2 against TP=1 on TP=1's greedy run: the largest logit difference (relative to the
    largest logit) over its steps, the steps whose race TP=1 won by more than twice the
    bfloat16 tolerance (3e-2), whether TP=2 picks TP=1's token at all of those, and where
    TP=2's own greedy run first parts from TP=1's (None: never) and whether that step was clear."""
    tol = 3e-2
    a, b = one["_tokens"], two["_tokens"]
    worst, clear, clear_same = 0.0, [], True
    for i, (la, lb) in enumerate(zip(one["_logits"], two["_logits"])):
        scale = np.abs(la).max()
        worst = max(worst, float(np.abs(la - lb).max() / scale))
        if np.diff(np.sort(la)[-2:])[0] > 2 * tol * scale:
            clear.append(i)
            clear_same &= int(lb.argmax()) == a[i]
    parted = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    return {"greedy_tokens": len(a), "logits_max_diff_of_max": round(worst, 5), "clear_steps": len(clear),
            "same_token_at_clear_steps": clear_same, "tokens_equal": a == b, "parted_at": parted,
            "parted_at_clear_step": parted in clear}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--shape", choices=list(SHAPES), default="llama-3-8b")
    ap.add_argument("--dir", default=None, help="where to write the checkpoint (default: a temporary folder)")
    ap.add_argument("--model", default=None, help="an existing checkpoint of --shape (written by llm_files.py) to use")
    ap.add_argument("--dp-batch", type=int, default=0, help="also decode this many sequences per replica at DP=1 and DP=2")
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
            r = measure(path, gpus, args.prompt, args.steps, args.repeats, rows[0]["_tokens"] if rows else None)
            rows.append({"model": f"{args.shape}-bf16", **r})
            print({k: v for k, v in rows[-1].items() if not k.startswith("_")}, flush=True)
        dp_rows = [{"model": f"{args.shape}-bf16", "measure": "data_parallel", **r}
                   for r in (measure_dp(path, args.dp_batch, args.prompt, args.steps, args.repeats)
                             if args.dp_batch else [])]
        for r in dp_rows:
            print(r, flush=True)
    base = rows[0]
    rows[1]["vs_tp1"] = agreement(rows[0], rows[1])
    print("TP=2 against TP=1:", rows[1]["vs_tp1"], flush=True)
    for r in rows:
        r.pop("_tokens")
        r.pop("_logits")
        r["decode_speedup"] = round(r["decode_tok_s"] / base["decode_tok_s"], 3)
        r["prefill_speedup"] = round(r["prefill_tok_s"] / base["prefill_tok_s"], 3)
    import torch

    write("llm_tp_gpu", torch.cuda.get_device_name(), rows + dp_rows,
          f"python benchmarks/llm_tp_gpu.py --shape {args.shape} --prompt {args.prompt} --steps {args.steps}"
          + (f" --dp-batch {args.dp_batch}" if args.dp_batch else ""))


if __name__ == "__main__":
    main()
