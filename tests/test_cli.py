"""The ``max`` command: help without a model or GPU, and clear errors (exit status 2, one line
naming the problem) for bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from models import smollm2_gguf


def _max(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "max", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("cmd", [[], ["generate"], ["encode"], ["list"], ["warm-cache"], ["serve"], ["benchmark"]])
def test_help_works_without_a_model(cmd):
    r = _max(*cmd, "--help")
    assert r.returncode == 0, r.stderr
    assert "usage: max" in r.stdout
    if cmd in (["generate"], ["encode"], ["warm-cache"], ["serve"]):
        assert "--model-path" in r.stdout and "--devices" in r.stdout


def test_serve_and_benchmark_help_list_their_flags():
    serve = _max("serve", "--help").stdout
    for flag in ["--weight-path", "--port", "--host", "--max-batch-size", "--max-length", "--max-batch-input-tokens",
                 "--enable-prefix-caching", "--no-enable-prefix-caching", "--kv-cache-page-size",
                 "--device-memory-utilization", "--served-model-name", "--max-queue-size",
                 "--enable-overlap-scheduler", "--no-enable-overlap-scheduler"]:
        assert flag in serve, flag
    bench = _max("benchmark", "--help").stdout
    for flag in ["--num-prompts", "--request-rate", "--max-concurrency", "--dataset-name", "--dataset-path",
                 "--random-input-len", "--random-output-len", "--save-result", "--backend"]:
        assert flag in bench, flag


def test_generate_help_lists_the_sampling_flags():
    out = _max("generate", "--help").stdout
    for flag in ["--prompt", "--max-new-tokens", "--top-k", "--top-p", "--min-p", "--temperature", "--seed", "--stop",
                 "--max-length", "--max-batch-size", "--quantization-encoding", "--chat-template", "--chat",
                 "--messages", "--weight-path"]:
        assert flag in out, flag


def test_the_overlap_scheduler_flag_reaches_the_config():
    import argparse

    from max.entrypoints.cli.options import add_model_flags, pipeline_config

    p = argparse.ArgumentParser()
    add_model_flags(p)
    for flags, want in [([], None), (["--enable-overlap-scheduler"], True), (["--no-enable-overlap-scheduler"], False)]:
        config = pipeline_config(p.parse_args(["--model-path", "m.gguf", *flags]))
        assert config.enable_overlap_scheduler is want, flags


def test_list_names_the_architectures():
    r = _max("list")
    assert r.returncode == 0
    for name in ["LlamaForCausalLM", "SmolLM3ForCausalLM", "MistralForCausalLM", "GraniteForCausalLM",
                 "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM", "Phi3ForCausalLM",
                 "Olmo2ForCausalLM", "BertModel"]:
        assert name in r.stdout


def _error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    return r.stderr


def test_missing_model(tmp_path):
    err = _error(_max("generate", "--model-path", str(tmp_path / "nope.gguf"), "--prompt", "hi"))
    assert "does not exist" in err and "FileNotFoundError" in err


def test_repo_id_that_is_not_on_disk():
    err = _error(_max("generate", "--model-path", "HuggingFaceTB/SmolLM2-135M-Instruct-notcached", "--prompt", "hi"))
    assert "does not download" in err


def test_non_gguf_and_truncated_files(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"this is not a gguf file at all" * 10)
    err = _error(_max("generate", "--model-path", str(bad), "--prompt", "hi"))
    assert "not a valid GGUF" in err or "not a readable GGUF" in err
    src = smollm2_gguf()
    cut = tmp_path / "cut.gguf"
    with open(src, "rb") as f:
        cut.write_bytes(f.read(5_000_000))
    err = _error(_max("generate", "--model-path", str(cut), "--prompt", "hi"))
    assert "cut.gguf" in err


def test_unknown_architecture_lists_the_supported_ones(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["FalconForCausalLM"]}')
    (tmp_path / "model.safetensors").write_bytes(b"")
    err = _error(_max("generate", "--model-path", str(tmp_path), "--prompt", "hi"))
    assert "unsupported architecture FalconForCausalLM" in err and "LlamaForCausalLM" in err


def test_prompt_longer_than_max_length():
    err = _error(_max("generate", "--model-path", str(smollm2_gguf()), "--prompt", "word " * 100, "--max-length", "32"))
    assert "max" in err.lower() and "32" in err


@pytest.mark.parametrize("flags,needle", [
    (["--temperature", "-1"], "temperature must be a number >= 0 within float32"),
    (["--top-p", "0"], "top_p must be in (0, 1]"),
    (["--top-p", "1.5"], "top_p must be in (0, 1]"),
    (["--min-p", "2"], "min_p must be in [0, 1]"),
    (["--max-new-tokens", "-3"], "max_new_tokens must be >= 0"),
    (["--devices", "gpu:9"], "gpu:9"),
])
def test_bad_sampling_values(flags, needle):
    err = _error(_max("generate", "--model-path", str(smollm2_gguf()), "--prompt", "hi", *flags))
    assert needle in err, err


def test_generate_streams_and_summarises():
    r = _max("generate", "--model-path", str(smollm2_gguf()), "--prompt", "The capital of France is",
             "--max-new-tokens", "8", "--top-k", "1", "--devices", "cpu")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("The capital of France is Paris")
    line = r.stderr.strip().splitlines()[-1]
    for part in ["load", "time to first token", "prefill", "tok/s", "decode"]:
        assert part in line, line


def test_chat_applies_the_template_and_stops_at_end_of_turn():
    r = _max("generate", "--model-path", str(smollm2_gguf()), "--prompt", "What is the capital of France?", "--chat",
             "--max-new-tokens", "40", "--top-k", "1", "--devices", "cpu")
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout and "<|im_end|>" not in r.stdout
