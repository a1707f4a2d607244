"""Decoder LLMs on the GPU, batch 1: prefill and decode tokens/s of random-weight models of real
shapes (SmolLM2-135M and Llama-3.2-1B, bfloat16), and of the real SmolLM2-135M Q4_1 GGUF when
it is present. Speed does not depend on the weights' values. llama.cpp's numbers for the same
shapes on this machine are in ../shared/LLM.md (section 2); JSON to benchmarks/results/.

    python benchmarks/llm_gpu.py [--prompt 512] [--steps 128]
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
    "smollm2-135m-bf16": dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                              intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True, rope_theta=100000.0),
    "llama-3.2-1b-bf16": dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                              intermediate_size=8192, vocab_size=128256, tie_word_embeddings=True, rope_theta=500000.0),
}
# A device-to-device copy on the H200 (torch, measured on the same machine): the rate a decode
# step can stream its weights at.
COPY_RATE = 4.19e12
# llama.cpp on the same GPU machine, measured apart: decode tg128 tok/s, prefill pp512 tok/s.
LLAMA_CPP = {"smollm2-135m-bf16": (994, 112000), "llama-3.2-1b-bf16": (788, 83600), "smollm2-135m-q4_1": (970, 53000)}


def write_model(directory: Path, shape: dict) -> Path:
    import ml_dtypes
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, models

    rng = np.random.default_rng(0)
    h, n, ffn, v = shape["hidden_size"], shape["num_hidden_layers"], shape["intermediate_size"], shape["vocab_size"]
    hd = h // shape["num_attention_heads"]
    kv = shape["num_key_value_heads"] * hd

    def w(*s):
        return (rng.standard_normal(s, dtype=np.float32) * 0.02).astype(ml_dtypes.bfloat16)

    tensors = {"model.embed_tokens.weight": w(v, h), "model.norm.weight": np.ones(h, ml_dtypes.bfloat16)}
    for i in range(n):
        p = f"model.layers.{i}."
        tensors |= {
            p + "self_attn.q_proj.weight": w(h, h), p + "self_attn.k_proj.weight": w(kv, h),
            p + "self_attn.v_proj.weight": w(kv, h), p + "self_attn.o_proj.weight": w(h, h),
            p + "mlp.gate_proj.weight": w(ffn, h), p + "mlp.up_proj.weight": w(ffn, h),
            p + "mlp.down_proj.weight": w(h, ffn),
            p + "input_layernorm.weight": np.ones(h, ml_dtypes.bfloat16),
            p + "post_attention_layernorm.weight": np.ones(h, ml_dtypes.bfloat16),
        }
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / "model.safetensors"))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "rms_norm_eps": 1e-5,
              "max_position_embeddings": 8192, "torch_dtype": "bfloat16", "hidden_act": "silu", **shape}
    (directory / "config.json").write_text(json.dumps(config))
    Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")).save(str(directory / "tokenizer.json"))
    return directory


def measure(model_path: Path, prompt: int, steps: int, repeats: int) -> dict:
    from max.driver import DeviceSpec
    from max.interfaces import SamplingParams, TextGenerationInputs
    from max.pipelines import PipelineConfig
    from max.pipelines.lib.context import TextContext
    from max.pipelines.lib.pipeline import load_pipeline

    t = time.perf_counter()
    p = load_pipeline(PipelineConfig(model_path=str(model_path), max_length=prompt + steps + 8, max_batch_size=1,
                                     device_specs=[DeviceSpec.accelerator(0)]))
    load = time.perf_counter() - t
    p.warm_up()
    rng = np.random.default_rng(1)
    prefill, decode = [], []
    for _ in range(repeats):
        vocab = int(p.model.config["vocab_size"])
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
    # The bandwidth floor of a decode step: every weight byte read once (the files hold little
    # else; a tied embedding is read whole by the output projection) at the device's copy rate.
    files = [model_path] if model_path.is_file() else list(model_path.glob("*.safetensors"))
    weight_bytes = sum(f.stat().st_size for f in files)
    return {"load_s": round(load, 2), "prefill_tok_s": round(prompt / statistics.median(prefill), 1),
            "decode_tok_s": round(steps / statistics.median(decode), 1),
            "decode_ms_per_token": round(statistics.median(decode) / steps * 1000, 3),
            "weight_bytes": weight_bytes, "floor_tok_s": round(COPY_RATE / weight_bytes, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from max import driver

    if driver.accelerator_count() == 0:
        raise SystemExit("llm_gpu: no GPU on this machine")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        models = {name: write_model(Path(tmp) / name, shape) for name, shape in SHAPES.items()}
        gguf = Path(__file__).resolve().parent.parent / ".gpu" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if gguf.is_file():
            models["smollm2-135m-q4_1"] = gguf
        for name, path in models.items():
            r = measure(path, args.prompt, args.steps, args.repeats)
            lc = LLAMA_CPP.get(name)
            rows.append({"model": name, **r, "llama_cpp_decode_tok_s": lc[0] if lc else None,
                         "llama_cpp_prefill_tok_s": lc[1] if lc else None})
            print(f"{name:20s} decode {r['decode_tok_s']:8.1f} tok/s ({r['decode_ms_per_token']:.3f} ms; floor "
                  f"{r['floor_tok_s']:.0f} tok/s, llama.cpp {lc[0] if lc else '-'})  prefill {r['prefill_tok_s']:9.1f} "
                  f"tok/s  load {r['load_s']} s", flush=True)
    import torch

    write("llm_gpu", torch.cuda.get_device_name(), rows,
          f"python benchmarks/llm_gpu.py --prompt {args.prompt} --steps {args.steps}")


if __name__ == "__main__":
    main()
