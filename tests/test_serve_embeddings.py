"""``POST /v1/embeddings`` through the OpenAI client with all-MiniLM-L6-v2 on the CPU: vectors
(float and base64) equal the numpy float64 reference, batched inputs come back in order, token
usage is counted, and a text-generation route on an encoder model is a clear 400."""

from __future__ import annotations

import base64
import json

import numpy as np
import openai
import pytest
from safetensors.numpy import load_file

from models import minilm_dir
from reference.llm import bert_embeddings
from serve_util import ServerProcess

SENTENCES = ["A cat sits on the mat.", "Quantum computers use qubits.", "I like green tea in the morning."]


@pytest.fixture(scope="module")
def server():
    s = ServerProcess(minilm_dir(), "--served-model-name", "minilm")
    yield s
    assert s.stop() == 0, s.errors()


@pytest.fixture(scope="module")
def reference():
    d = minilm_dir()
    config = json.loads((d / "config.json").read_text())
    weights = {k: v for k, v in load_file(str(d / "model.safetensors")).items() if v.dtype.kind == "f"}
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    ids = [tok.encode(s).ids for s in SENTENCES]
    return [bert_embeddings(config, weights, i, normalize=True) for i in ids], ids


def test_embeddings_equal_the_reference(server, reference):
    want, ids = reference
    client = server.client()
    # By default the client asks for base64 and decodes it; asked for explicitly, it does not.
    for fmt in (openai.NOT_GIVEN, "float", "base64"):
        r = client.embeddings.create(model="minilm", input=SENTENCES, encoding_format=fmt)
        assert [d.index for d in r.data] == [0, 1, 2]
        for d, w in zip(r.data, want):
            got = np.frombuffer(base64.b64decode(d.embedding), "<f4") if fmt == "base64" else np.asarray(d.embedding)
            np.testing.assert_allclose(got, w, rtol=1e-3, atol=2e-5)
        assert r.usage.prompt_tokens == sum(len(i) for i in ids)
    one = client.embeddings.create(model="minilm", input=ids[1])  # token ids
    np.testing.assert_allclose(np.asarray(one.data[0].embedding), want[1], rtol=1e-3, atol=2e-5)


def test_embedding_errors(server):
    client = server.client()
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="other", input="hi")
    with pytest.raises(openai.BadRequestError, match="embeddings"):
        client.completions.create(model="minilm", prompt="hi", max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="input"):
        client.embeddings.create(model="minilm", input=[])
    for ids in ([10**6], [-1], [10**20]):  # (500s or a silently wrapped id before)
        with pytest.raises(openai.BadRequestError, match="token ids must be in") as info:
            client.embeddings.create(model="minilm", input=ids)
        assert info.value.param == "input"
    status, err = server.post_raw("/v1/embeddings", b'{"model": "minilm", "input": "a\\udcffb"}')
    assert status == 400 and err["error"]["param"] == "input", err
    assert len(client.embeddings.create(model="minilm", input="still up").data[0].embedding) == 384
