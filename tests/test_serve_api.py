"""``max serve`` through the real OpenAI client, on the CPU with SmolLM2: completions and chat,
whole and streamed, text and token-id prompts, stop strings, seeds, usage, the model list,
health and metrics. The greedy text the server returns equals the offline pipeline's."""

from __future__ import annotations

import numpy as np
import pytest

from models import smollm2_gguf
from serve_util import offline_generator, smollm_server


@pytest.fixture(scope="module")
def server():
    yield from smollm_server()


@pytest.fixture(scope="module")
def offline():
    """The pipeline run in this process, as the reference for greedy text."""
    return offline_generator(2)


def _greedy(gen, prompt, n, add_special_tokens=True):
    from max.interfaces import SamplingParams

    sp = SamplingParams(top_k=1, max_new_tokens=n)
    return gen.run([gen.context(prompt, sp, add_special_tokens=add_special_tokens)])[0]


def test_models_and_health(server):
    client = server.client()
    models = client.models.list().data
    assert [m.id for m in models] == ["smollm"]
    assert models[0].model_extra["max_model_len"] == 512
    assert server.get("/health")[0] == 200
    assert server.get("/v1/models/smollm")[0] == 200
    assert server.get("/v1/models/other")[0] == 404


def test_completion_equals_offline_greedy(server, offline):
    prompt = "The three primary colors are"
    r = server.client().completions.create(model="smollm", prompt=prompt, max_tokens=12, temperature=0)
    ref = _greedy(offline, prompt, 12)
    assert r.choices[0].text == ref.text
    assert r.choices[0].finish_reason == ("length" if len(ref.tokens) == 12 else "stop")
    assert r.usage.prompt_tokens == len(offline.tokenizer.encode_sync(prompt))
    assert r.usage.completion_tokens == len(ref.tokens)
    # The same prompt as token ids, and echo.
    ids = offline.tokenizer.encode_sync(prompt).tolist()
    r2 = server.client().completions.create(model="smollm", prompt=ids, max_tokens=12, temperature=0, echo=True)
    assert r2.choices[0].text == offline.tokenizer.decode_sync(ids) + ref.text


def test_list_of_prompts_gives_one_choice_each(server, offline):
    prompts = ["Once upon a time", "def add(a, b):", "Water boils at"]
    r = server.client().completions.create(model="smollm", prompt=prompts, max_tokens=6, temperature=0)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert [c.text for c in r.choices] == [_greedy(offline, p, 6).text for p in prompts]


def test_streamed_chat_equals_whole_chat(server, offline):
    client = server.client()
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name a planet."}]
    whole = client.chat.completions.create(model="smollm", messages=messages, max_tokens=10, temperature=0)
    chunks = list(client.chat.completions.create(model="smollm", messages=messages, max_tokens=10, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == \
        [whole.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    rendered = offline.tokenizer.apply_chat_template(messages)
    assert whole.choices[0].message.content == _greedy(offline, rendered, 10, add_special_tokens=False).text
    assert whole.usage.prompt_tokens == len(offline.tokenizer.encode_sync(rendered, add_special_tokens=False))


def test_streamed_completion_text_and_stop_string(server, offline):
    client = server.client()
    prompt = "Count: 1, 2, 3, 4,"
    full = _greedy(offline, prompt, 16).text
    stop = full[6:9]
    assert stop and stop in full
    pieces = list(client.completions.create(model="smollm", prompt=prompt, max_tokens=16, temperature=0, stream=True,
                                            stop=[stop]))
    text = "".join(p.choices[0].text for p in pieces)
    assert text == full[: full.index(stop)]
    assert pieces[-1].choices[0].finish_reason == "stop"


def test_seeded_sampling(server):
    client = server.client()

    def sample(seed):
        return client.completions.create(model="smollm", prompt="My favourite animal is", max_tokens=12,
                                         temperature=1.0, seed=seed).choices[0].text

    assert sample(7) == sample(7)
    assert len({sample(s) for s in (1, 2, 3, 4)}) > 1


def test_metrics_count_requests_and_tokens(server):
    before = server.metrics()
    server.client().completions.create(model="smollm", prompt="Hello there", max_tokens=5, temperature=0,
                                       extra_body={"ignore_eos": True})
    after = server.metrics()
    key = 'maxserve_request_count_total{code="200",path="/v1/completions"}'
    assert after[key] == before.get(key, 0) + 1
    assert after["maxserve_num_output_tokens_total"] - before.get("maxserve_num_output_tokens_total", 0) == 5
    assert after["maxserve_time_to_first_token_milliseconds_count"] > before.get(
        "maxserve_time_to_first_token_milliseconds_count", 0)
    assert after["maxserve_kv_cache_used_pages"] == 0 and after["maxserve_num_requests_running"] == 0
    assert np.isfinite(after["maxserve_queue_time_milliseconds_sum"])


def _benchmark(server, tmp_path, *flags):
    import json
    import subprocess
    import sys

    out = tmp_path / "result.json"
    r = subprocess.run([sys.executable, "-m", "max", "benchmark", "--base-url", server.url, "--seed", "3",
                        "--result-filename", str(out), *flags], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Serving Benchmark Result" in r.stdout and "P99 TPOT (ms)" in r.stdout
    return json.loads(out.read_text())


def test_benchmark_random_dataset(server, tmp_path):
    res = _benchmark(server, tmp_path, "--dataset-name", "random", "--num-prompts", "12", "--random-input-len", "24",
                     "--random-output-len", "6", "--request-rate", "50", "--max-concurrency", "4", "--ignore-eos",
                     "--tokenizer", str(smollm2_gguf()))
    assert res["completed"] == 12 and res["failed"] == 0
    assert res["total_output_tokens"] == 12 * 6 and res["total_input_tokens"] == 12 * 24
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        st = res[key]
        assert 0 < st["mean"] and st["median"] <= st["p90"] <= st["p99"], (key, st)
    assert res["ttft_ms"]["p99"] <= res["e2el_ms"]["p99"]
    assert res["output_throughput"] == pytest.approx(72 / res["duration_s"])
    # vLLM's flat names, which scripts reading vLLM's result files look for, hold the same figures.
    assert res["duration"] == res["duration_s"] and res["max_concurrency"] == 4
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p90", "p95", "p99"):
            assert res[f"{stat}_{metric}_ms"] == res[f"{metric}_ms"][stat], (metric, stat)


def test_benchmark_sharegpt_file_and_chat(server, tmp_path):
    import json

    conversations = [{"conversations": [{"from": "human", "value": f"Tell me about the number {i}, briefly please."},
                                        {"from": "gpt", "value": "It is a number that comes after another one."}]}
                     for i in range(8)]
    conversations.append({"conversations": [{"from": "human", "value": "hi"}]})  # no answer: skipped
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(conversations))
    res = _benchmark(server, tmp_path, "--backend", "modular-chat", "--dataset-name", "sharegpt", "--dataset-path",
                     str(path), "--num-prompts", "20", "--max-output-len", "5", "--model", "smollm",
                     "--tokenizer", str(smollm2_gguf()))
    assert res["completed"] == 8 and res["failed"] == 0
    assert 8 <= res["total_output_tokens"] <= 8 * 5
