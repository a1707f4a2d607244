"""The real test models, per device: SmolLM2-135M-Instruct (Q4_1 GGUF) greedy decoding gives
the token ids of the float64 reference (tests/reference/smollm2_greedy.json), and
all-MiniLM-L6-v2 embeddings match the float64 reference on its safetensors weights, through the
pipeline, the Python API and ``max encode``, with batches equal to single prompts."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file

from max.driver import DeviceSpec
from max.entrypoints.llm import LLM
from max.interfaces import SamplingParams
from max.pipelines import PipelineConfig
from max.pipelines.lib.generate import Generator
from max.pipelines.lib.pipeline import load_pipeline
from models import minilm_dir, smollm2_gguf
from reference.llm import bert_embeddings
from reference.smollm2 import load_expected

SENTENCES = [
    "A man is eating food.",
    "The new movie is awesome, I loved every minute of it!",
    "Quantum computers exploit superposition and entanglement to solve certain problems faster.",
    "hi",
]


def _spec(device):
    return [DeviceSpec.cpu()] if device.is_host else [DeviceSpec.accelerator(device.id)]


def test_smollm2_greedy_ids_match_the_reference(device):
    expected = load_expected()
    p = load_pipeline(PipelineConfig(model_path=str(smollm2_gguf()), max_length=256, device_specs=_spec(device)))
    gen = Generator(p)
    assert p.tokenizer.encode_sync(expected["prompt"]).tolist() == expected["prompt_ids"]
    ctx = gen.context(expected["prompt"], SamplingParams(top_k=1, max_new_tokens=len(expected["greedy_ids"]),
                                                         ignore_eos=True))
    (r,) = gen.run([ctx])
    assert r.tokens == expected["greedy_ids"]
    assert r.text == expected["greedy_text"]


@pytest.fixture(scope="module")
def minilm_reference():
    d = minilm_dir()
    config = json.loads((d / "config.json").read_text())
    weights = {k: v for k, v in load_file(str(d / "model.safetensors")).items() if v.dtype.kind == "f"}
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    tok.no_padding()  # the file pads every sentence to 128 tokens; sentence-transformers does not
    tok.no_truncation()
    return d, [bert_embeddings(config, weights, tok.encode(s).ids, normalize=True) for s in SENTENCES]


def _cos(a, b):
    return float(np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b))


def test_minilm_matches_the_reference(device, minilm_reference):
    d, want = minilm_reference
    llm = LLM(PipelineConfig(model_path=str(d), device_specs=_spec(device)))
    together = llm.encode(SENTENCES)
    assert together.shape == (len(SENTENCES), 384) and together.dtype == np.float32
    assert llm.encode([]).shape == (0, 384)  # (it was (0, 0))
    for i, s in enumerate(SENTENCES):
        assert _cos(together[i], want[i]) >= 0.9999, s
        alone = llm.encode([s])[0]
        assert _cos(alone, together[i]) >= 0.99999
        np.testing.assert_allclose(alone, together[i], rtol=1e-4, atol=2e-6)


def test_max_encode_prints_one_json_list_per_prompt(device, minilm_reference):
    d, want = minilm_reference
    devices = "cpu" if device.is_host else f"gpu:{device.id}"
    args = [sys.executable, "-m", "max", "encode", "--model-path", str(d), "--devices", devices]
    for s in SENTENCES[:2]:
        args += ["--prompt", s]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 2
    for line, w in zip(lines, want):
        assert _cos(np.array(json.loads(line)), w) >= 0.9999
