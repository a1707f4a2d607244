"""The ``max`` command's handling of odd input: flags that only make sense together, values that
name missing files, zero new tokens, an encoder's --max-length, a reader that leaves the pipe,
and the offline API's prompt types."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from models import minilm_dir, smollm2_gguf


def _max(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "max", *args], capture_output=True, text=True, timeout=timeout)


def _error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    return r.stderr


def _generate(*flags: str) -> subprocess.CompletedProcess:
    return _max("generate", "--model-path", str(smollm2_gguf()), "--devices", "cpu", *flags)


@pytest.mark.parametrize("flags,needle", [
    (["--prompt", "Hi", "--system", "Answer in French"], "--system applies to --chat prompts"),
    (["--messages", "/nonexistent/chat.json"], "--messages: no such file '/nonexistent/chat.json'"),
    (["--prompt", "Hi", "--chat", "--chat-template", "/nonexistent/t.jinja"],
     "chat template: no such file '/nonexistent/t.jinja'"),
    (["--prompt", "Hi", "--num-warmups", "-1"], "--num-warmups must be >= 0, got -1"),
])
def test_flags_that_cannot_work_are_refused(flags, needle):
    assert needle in _error(_generate(*flags))


def test_messages_and_templates_given_as_text_still_work():
    msgs = json.dumps([{"role": "user", "content": "What is the capital of France?"}])
    r = _generate("--messages", msgs, "--max-new-tokens", "12", "--top-k", "1")
    assert r.returncode == 0 and "Paris" in r.stdout, r.stderr
    parts = json.dumps([{"role": "user", "content": [{"type": "text", "text": "What is the capital "},
                                                    {"type": "text", "text": "of France?"}]}])
    r2 = _generate("--messages", parts, "--max-new-tokens", "12", "--top-k", "1")  # (OpenAI's text parts)
    assert r2.returncode == 0 and r2.stdout == r.stdout, r2.stderr
    assert "content parts must be" in _error(_generate("--messages", json.dumps(
        [{"role": "user", "content": [{"type": "image_url"}]}])))
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    r = _generate("--prompt", "The capital of France is", "--chat", "--chat-template", template,
                  "--max-new-tokens", "4", "--top-k", "1")
    assert r.returncode == 0, r.stderr


def test_zero_new_tokens_generates_none():
    r = _generate("--prompt", "Hello", "--max-new-tokens", "0", "--no-detokenize")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "\n"
    assert "(0 tokens)" in r.stderr.strip().splitlines()[-1]
    r = _generate("--prompt", "Hello", "--max-new-tokens", "0")
    assert r.returncode == 0 and r.stdout == "Hello\n", (r.stdout, r.stderr)


def test_a_reader_leaving_the_pipe_ends_generation_quietly():
    cmd = [sys.executable, "-m", "max", "generate", "--model-path", str(smollm2_gguf()), "--devices", "cpu",
           "--prompt", "Once upon a time", "--max-new-tokens", "60", "--ignore-eos"]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as p:
        assert p.stdout is not None and p.stderr is not None
        assert p.stdout.read(8)
        p.stdout.close()
        err = p.stderr.read().decode()
        p.wait(timeout=120)
    assert p.returncode == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_an_unknown_gguf_architecture_is_named(tmp_path):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "odd.gguf"
    w = gguf.GGUFWriter(str(path), "llamb")
    w.add_uint32("llamb.block_count", 1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    err = _error(_max("generate", "--model-path", str(path), "--prompt", "hi"))
    assert "unsupported GGUF architecture 'llamb'" in err and "llama" in err, err


def _embed(*flags: str) -> list[float]:
    r = _max("encode", "--model-path", str(minilm_dir()), "--devices", "cpu", "--prompt", "word " * 300, *flags)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[0])


def test_encode_truncates_prompts_to_max_length():
    whole, four = np.array(_embed()), np.array(_embed("--max-length", "4"))
    assert whole.shape == four.shape and not np.allclose(whole, four, atol=1e-3)
    err = _error(_max("encode", "--model-path", str(minilm_dir()), "--devices", "cpu", "--prompt", "a",
                      "--max-length", "100000"))
    assert "max_length 100000 exceeds the model's 512 positions" in err


def test_generate_takes_strings_token_ids_or_lists_of_either():
    from max.entrypoints.llm import _prompt_list

    assert _prompt_list("a") == ["a"]
    assert _prompt_list([1, 2]) == [[1, 2]]
    assert _prompt_list(["a", "b"]) == ["a", "b"]
    assert _prompt_list([[1], [2, 3]]) == [[1], [2, 3]]
    assert len(_prompt_list(np.array([1, 2]))) == 1
    for bad in (b"Hi", 5, [b"x"], None, [1, "a"]):
        with pytest.raises(TypeError, match="prompts must be a string, a list of token ids, or a list of either"):
            _prompt_list(bad)
