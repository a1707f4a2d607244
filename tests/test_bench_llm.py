"""benchmarks/llm_gpu.py at tiny shapes on the CPU (`--tiny`): the random checkpoints it writes
(bf16 safetensors; a GGUF of Q4_0 linears and embedding with a Q6_K output) read back with our
loader, the safetensors package and gguf's reader, and the whole flow runs: decode at batches 1
and 2, prefill, and the time to first token of `max generate` in a new process (of the GGUF
model here; `python benchmarks/llm_gpu.py --tiny` measures it for every model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import llm_files  # noqa: E402

Q4_0_FILE = {"linear": "Q4_0", "embed": "Q4_0", "output": "Q6_K"}


def test_tiny_checkpoints_read_back(tmp_path):
    import gguf

    from max.pipelines.lib.model_source import resolve
    from max.pipelines.tokenizer import TextTokenizer

    shape = llm_files.tiny(llm_files.SHAPES["llama-3-8b"])
    names = list(llm_files.llama_tensors(shape))
    hf = llm_files.write_safetensors_model(tmp_path / "hf", shape)
    llm_files.check_safetensors(hf / "model.safetensors", len(names))
    embed = 2 * shape["vocab_size"] * shape["hidden_size"]  # untied: read a row at a time
    assert llm_files.streamed_bytes([hf / "model.safetensors"]) == llm_files.safetensors_bytes(shape) - embed

    path = llm_files.write_gguf_model(tmp_path / "q.gguf", shape, Q4_0_FILE)
    assert path.stat().st_size >= llm_files.gguf_bytes(shape, Q4_0_FILE)
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors}
    assert len(types) == len(names)
    assert (types["token_embd.weight"], types["output.weight"], types["blk.1.ffn_down.weight"],
            types["blk.0.attn_norm.weight"]) == ("Q4_0", "Q6_K", "Q4_0", "F32")
    tok = TextTokenizer.from_gguf_metadata(resolve(str(path)).metadata)
    assert len(tok.encode_sync(llm_files.prompt_text(12), add_special_tokens=False)) == 12


def test_llm_gpu_tiny_flow(tmp_path):
    env = {**os.environ, "MAX_BENCH_OUT": str(tmp_path / "out"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "llm_gpu.py"), "--tiny", "--dir", str(tmp_path),
           "--models", "llama-3-8b-bf16,llama-3-8b-q4_0", "--steps", "2", "--prefill-prompt", "24",
           "--ttft", "llama-3-8b-q4_0", "--ttft-runs", "1"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = json.loads((tmp_path / "out" / "llm_gpu_tiny-cpu.json").read_text())["rows"]
    got = {(row["model"], row["measure"], row["batch"]): row for row in rows}
    for model in ("llama-3-8b-bf16", "llama-3-8b-q4_0"):
        for b in (1, 2):
            assert got[model, "decode", b]["decode_tok_s"] > 0
        assert got[model, "prefill", 1]["prompt"] == 24
    ttft = got["llama-3-8b-q4_0", "ttft", 1]
    assert 0 < ttft["ttft_s"] <= ttft["exit_s"]
    assert ttft["prompt"] == 17 and ttft["child_load_s"] is not None  # 16 words and BOS
    assert ("llama-3-8b-bf16", "ttft", 1) not in got
    assert list(tmp_path.glob("tmp*")) == []  # the models were deleted


def test_llm_gpu_compare_takes_pipeline_settings(tmp_path):
    """--compare variants may set PipelineConfig fields beside tuning knobs: a bfloat16 KV cache
    under the tiny 8B-shaped Q4_0 model's float32 activations."""
    env = {**os.environ, "MAX_BENCH_OUT": str(tmp_path / "out"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "llm_gpu.py"), "--tiny", "--dir", str(tmp_path),
           "--models", "llama-3-8b-q4_0", "--steps", "2", "--prefill-prompt", "0", "--ttft", "",
           "--compare", "kv_cache_format=bfloat16,launch.pdl=0"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = json.loads((tmp_path / "out" / "llm_gpu_tiny-cpu.json").read_text())["rows"]
    caches = {(row.get("variant"), row["batch"]): row["kv_cache"] for row in rows if row["measure"] == "decode"}
    assert caches == {("default", 1): "float32", ("default", 2): "float32",
                      ("kv_cache_format=bfloat16,launch.pdl=0", 1): "bfloat16",
                      ("kv_cache_format=bfloat16,launch.pdl=0", 2): "bfloat16"}
    compared = [row for row in rows if row["measure"] == "compare"]
    assert [row["settings"] for row in compared] == ["kv_cache_format=bfloat16,launch.pdl=0"] * 2
    assert all(row["decode_tok_s_variant"] > 0 for row in compared)


def test_llm_gpu_compare_rounds_alternate(tmp_path):
    """--rounds: the default and each variant loaded and measured in turn, twice over; a row per
    variant, batch and round, and the comparison on the medians of the rounds."""
    env = {**os.environ, "MAX_BENCH_OUT": str(tmp_path / "out"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "llm_gpu.py"), "--tiny", "--dir", str(tmp_path),
           "--models", "llama-3-8b-bf16", "--batch", "1", "--steps", "2", "--prefill-prompt", "0", "--ttft", "",
           "--compare", "launch.pdl=0", "--rounds", "2"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = json.loads((tmp_path / "out" / "llm_gpu_tiny-cpu.json").read_text())["rows"]
    decoded = [(row["variant"], row["round"]) for row in rows if row["measure"] == "decode"]
    assert decoded == [("default", 0), ("launch.pdl=0", 0), ("default", 1), ("launch.pdl=0", 1)]
    (cmp,) = [row for row in rows if row["measure"] == "compare"]
    for side, label in (("default", "default"), ("variant", "launch.pdl=0")):
        tok = [row["decode_tok_s"] for row in rows if row["measure"] == "decode" and row["variant"] == label]
        assert cmp[f"decode_tok_s_{side}"] == pytest.approx(sum(tok) / 2, abs=0.06)
    assert cmp["rounds"] == 2
    bad = subprocess.run(cmd[:-1] + ["0"], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--rounds" in bad.stderr


def test_profile_llm_summary():
    # benchmarks/profile_llm.py's per-device figures from kernel spans (device, name, start us,
    # end us) over 2 steps of 100 us: overlapping kernels count once in the busy time
    import profile_llm

    spans = [(0, "gemv", 0.0, 10.0), (0, "norm", 5.0, 20.0), (0, "gemv", 30.0, 40.0), (1, "allreduce", 0.0, 5.0)]
    dev0, dev1 = profile_llm.summarize(spans, steps=2, wall_s=200e-6, top=1)
    assert (dev0["device"], dev0["wall_us_per_step"], dev0["busy_us_per_step"], dev0["gaps_us_per_step"]) == (0, 100.0, 15.0, 85.0)
    assert (dev0["kernels_per_step"], dev0["kernel_us_per_step"]) == (1.5, 17.5)
    assert dev0["top"] == [{"kernel": "gemv", "per_step": 1.0, "us_per_step": 10.0, "mean_us": 10.0}]
    assert (dev1["busy_us_per_step"], dev1["top"][0]["kernel"]) == (2.5, "allreduce")
    assert profile_llm.union_us([(0, 10), (35, 36), (5, 20), (30, 40)]) == 30.0


def test_profile_llm_tiny_flow(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "profile_llm.py"), "--tiny", "--models", "smollm2-135m-q4_1",
           "--keep-models", str(tmp_path)]
    for extra in ([], ["--prefill"]):
        r = subprocess.run(cmd + extra, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT / "benchmarks")
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (tmp_path / "smollm2-135m-q4_1.gguf").is_file()
