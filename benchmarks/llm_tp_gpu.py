"""Tensor parallelism on two GPUs: batch-1 prefill and decode tokens/s of a random-weight
bfloat16 Llama of the 8B shape (Llama-3.1-8B: hidden 4096, 32 layers, 32 heads over 8 KV heads,
FFN 14336, vocab 128256) at TP=1 (gpu:0) and TP=2 (gpu:0,1), in the same run. Speed does not
depend on the weights' values, so they are random bits of a small magnitude (fast to write).
`--shape smollm2` runs the 135M shape instead (quick check). JSON to benchmarks/results/.

    python benchmarks/llm_tp_gpu.py [--prompt 512] [--steps 64] [--shape llama8b]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from common import write

SHAPES = {
    "llama8b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                    intermediate_size=14336, vocab_size=128256, tie_word_embeddings=False, rope_theta=500000.0),
    "smollm2": dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                    intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True, rope_theta=100000.0),
}


def write_model(directory: Path, shape: dict) -> Path:
    """A safetensors checkpoint of random bfloat16 weights in +-[2^-7, 2^-6), one file per layer."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    h, n, ffn, v = shape["hidden_size"], shape["num_hidden_layers"], shape["intermediate_size"], shape["vocab_size"]
    hd = h // shape["num_attention_heads"]
    kv = shape["num_key_value_heads"] * hd

    def w(*s: int) -> np.ndarray:
        bits = rng.integers(0, 1 << 16, size=s, dtype=np.uint16)
        return ((bits & 0x807F) | 0x3C00).view(np.uint16)

    def ones(k: int) -> np.ndarray:
        return np.full(k, 0x3F80, np.uint16)

    directory.mkdir(parents=True, exist_ok=True)
    index = {}

    def save(name: str, tensors: dict) -> None:
        import ml_dtypes

        save_file({k: t.view(ml_dtypes.bfloat16) for k, t in tensors.items()}, str(directory / name))
        index.update({k: name for k in tensors})

    top = {"model.embed_tokens.weight": w(v, h), "model.norm.weight": ones(h)}
    if not shape["tie_word_embeddings"]:
        top["lm_head.weight"] = w(v, h)
    save("top.safetensors", top)
    for i in range(n):
        p = f"model.layers.{i}."
        save(f"layer{i}.safetensors", {
            p + "self_attn.q_proj.weight": w(h, h), p + "self_attn.k_proj.weight": w(kv, h),
            p + "self_attn.v_proj.weight": w(kv, h), p + "self_attn.o_proj.weight": w(h, h),
            p + "mlp.gate_proj.weight": w(ffn, h), p + "mlp.up_proj.weight": w(ffn, h),
            p + "mlp.down_proj.weight": w(h, ffn), p + "input_layernorm.weight": ones(h),
            p + "post_attention_layernorm.weight": ones(h),
        })
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": index}))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "rms_norm_eps": 1e-5,
              "max_position_embeddings": 8192, "torch_dtype": "bfloat16", "hidden_act": "silu", **shape}
    (directory / "config.json").write_text(json.dumps(config))
    from tokenizers import Tokenizer, models

    Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")).save(str(directory / "tokenizer.json"))
    return directory


def measure(model_path: Path, gpus: list[int], prompt: int, steps: int, repeats: int) -> dict:
    from max.driver import DeviceSpec
    from max.interfaces import SamplingParams, TextGenerationInputs
    from max.pipelines import PipelineConfig
    from max.pipelines.lib.context import TextContext
    from max.pipelines.lib.pipeline import load_pipeline

    t = time.perf_counter()
    p = load_pipeline(PipelineConfig(model_path=str(model_path), max_length=prompt + steps + 8, max_batch_size=1,
                                     device_specs=[DeviceSpec.accelerator(i) for i in gpus]))
    load = time.perf_counter() - t
    p.warm_up()
    rng = np.random.default_rng(1)
    vocab = int(p.model.config["vocab_size"])
    prefill, decode = [], []
    for _ in range(repeats):
        ctx = TextContext(max_length=prompt + steps + 8, tokens=rng.integers(1, vocab, prompt),
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
    del p
    return {"tp": len(gpus), "load_s": round(load, 1), "prefill_tok_s": round(prompt / statistics.median(prefill), 1),
            "decode_tok_s": round(steps / statistics.median(decode), 2),
            "decode_ms_per_token": round(statistics.median(decode) / steps * 1000, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--shape", choices=list(SHAPES), default="llama8b")
    ap.add_argument("--dir", default=None, help="where to write the checkpoint (default: a temporary folder)")
    args = ap.parse_args()
    from max import driver

    if driver.accelerator_count() < 2:
        raise SystemExit(f"llm_tp_gpu: needs 2 GPUs, this machine has {driver.accelerator_count()}")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        t = time.perf_counter()
        path = write_model(Path(tmp) / args.shape, SHAPES[args.shape])
        print(f"wrote the {args.shape} checkpoint in {time.perf_counter() - t:.0f} s", flush=True)
        rows = []
        for gpus in ([0], [0, 1]):
            r = measure(path, gpus, args.prompt, args.steps, args.repeats)
            rows.append({"model": f"{args.shape}-bf16", **r})
            print(rows[-1], flush=True)
    base, two = rows
    for r in rows:
        r["decode_speedup"] = round(r["decode_tok_s"] / base["decode_tok_s"], 3)
        r["prefill_speedup"] = round(r["prefill_tok_s"] / base["prefill_tok_s"], 3)
    import torch

    write("llm_tp_gpu", torch.cuda.get_device_name(), rows,
          f"python benchmarks/llm_tp_gpu.py --shape {args.shape} --prompt {args.prompt} --steps {args.steps}")


if __name__ == "__main__":
    main()
