"""Cross-check of the float64 reference against Hugging Face `transformers` itself (needs torch).

Skipped where torch is not installed (as in CI). Where it is, e.g. on a GPU machine:

    python3 -m pytest --noconftest tests/reference/test_against_transformers.py

(`--noconftest`: tests/conftest.py imports the engine, which this file does not need; the `gguf`
package is pure Python and can be put on PYTHONPATH where it is missing). It runs the tiny
checkpoints through transformers' own modelling code in float64, from the HF directory and from the
GGUF (transformers' GGUF loader: an independent reading of llama.cpp's conventions), and the tiny
BERT through sentence-transformers when that is installed.

Last run (torch 2.15, transformers 5.24, 16 decoder cases; the BERT test skipped, sentence-transformers
not installed): max |logit diff| 3.7e-6 to 2.1e-5 plain (transformers keeps rope, RMSNorm statistics and the
eager softmax in float32), 1.6e-14 to 8.3e-14 with those in float64, 4e-6 to 8.7e-6 through transformers'
GGUF loader (no granite, olmo2 or smollm3 there). Before (torch 2.11, transformers 5.17,
sentence-transformers 6.0.1): 2e-16 for BERT embeddings.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")

from .checkpoints import write_checkpoint  # noqa: E402
from .llm import bert_embeddings, causal_lm_logits, decoder_spec  # noqa: E402
from .test_reference import DECODER_CASES, TEXT  # noqa: E402


def _hf_logits(model, ids) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].double().numpy()


@pytest.mark.parametrize("case", sorted(DECODER_CASES))
def test_reference_matches_transformers(case, tmp_path):
    arch, overrides = DECODER_CASES[case]
    ck = write_checkpoint(arch, tmp_path, seed=4, config_overrides=overrides)
    ids = ck["tokenizer"].encode(TEXT).ids
    ours = causal_lm_logits(ck["config"], ck["weights"], ids)

    model = transformers.AutoModelForCausalLM.from_pretrained(ck["hf_dir"], dtype=torch.float64, attn_implementation="eager")
    theirs = _hf_logits(model, ids)
    print(case, "max |diff| vs transformers (HF dir):", np.abs(ours - theirs).max())
    # transformers computes rope and RMSNorm statistics in float32 even in a float64 model
    np.testing.assert_allclose(ours, theirs, atol=1e-5 * np.abs(ours).max(), rtol=0)


def _float64_rms_norm(self, x):
    """transformers' RMSNorm maths without its float32 cast (Gemma: 1 + w)."""
    eps = getattr(self, "variance_epsilon", getattr(self, "eps", None))
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * ((1.0 + self.weight) if "Gemma" in type(self).__name__ else self.weight)


@pytest.mark.parametrize("case", sorted(DECODER_CASES))
def test_reference_matches_transformers_in_float64(case, tmp_path, monkeypatch):
    """The same, with transformers' float32 islands removed: RMSNorm statistics and rope cos/sin in
    float64 (frequencies from the reference, chosen per layer type by transformers), SDPA attention
    (eager runs its softmax in float32; Gemma 2, which has no SDPA, runs eager with the softmax's
    dtype argument dropped). What is left is rounding: agreement to ~1e-13."""
    arch, overrides = DECODER_CASES[case]
    ck = write_checkpoint(arch, tmp_path, seed=4, config_overrides=overrides)
    ids = ck["tokenizer"].encode(TEXT).ids
    ours = causal_lm_logits(ck["config"], ck["weights"], ids)

    attention = "sdpa"
    if arch == "gemma2":
        attention, softmax = "eager", torch.nn.functional.softmax
        monkeypatch.setattr(torch.nn.functional, "softmax", lambda x, dim=None, dtype=None, **kw: softmax(x, dim=dim))
    model = transformers.AutoModelForCausalLM.from_pretrained(ck["hf_dir"], dtype=torch.float64, attn_implementation=attention)
    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm"):
            module.forward = types.MethodType(_float64_rms_norm, module)
    spec = decoder_spec(ck["config"])
    layers = spec.layers
    freqs = {
        "sliding_attention": torch.tensor(
            next((layer.inv_freq for layer in layers if layer.sliding_window), layers[0].inv_freq)),
        "full_attention": torch.tensor(
            next((layer.inv_freq for layer in layers if layer.sliding_window is None), layers[0].inv_freq)),
    }

    def rope(self, x, position_ids, layer_type=None):
        inv = freqs[layer_type or "full_attention"]
        if spec.long_inv_freq is not None and int(position_ids.max()) + 1 > spec.rope_original_max:
            inv = torch.tensor(spec.long_inv_freq)  # LongRoPE past the original context
        angles = position_ids[..., None].double() * inv
        emb = torch.cat((angles, angles), dim=-1)
        return emb.cos() * spec.rope_attention_factor, emb.sin() * spec.rope_attention_factor

    model.model.rotary_emb.forward = types.MethodType(rope, model.model.rotary_emb)
    theirs = _hf_logits(model, ids)
    print(case, "max |diff| vs transformers in float64:", np.abs(ours - theirs).max())
    np.testing.assert_allclose(ours, theirs, atol=1e-12 * np.abs(ours).max(), rtol=0)


# (transformers' GGUF loader has no granite, olmo2 or smollm3 architecture)
@pytest.mark.parametrize("case", sorted(c for c in DECODER_CASES if not c.startswith(("granite", "olmo2", "smollm3"))))
def test_transformers_reads_our_gguf_as_the_same_model(case, tmp_path):
    """transformers' GGUF loader undoes the tensor conventions (names, llama q/k permutation, Gemma
    1 + w norms, Q8_0) on its own. Its config reading lacks what llama.cpp hard-codes or keeps in
    tensors (Gemma 3 attention scale, Qwen3 head_dim, llama biases and rope_freqs), so the config is
    taken from the HF directory (for Mistral, the Llama config the GGUF stands for): this checks the
    tensors."""
    arch, overrides = DECODER_CASES[case]
    ck = write_checkpoint(arch, tmp_path, seed=5, config_overrides=overrides, gguf_quant="Q8_0")
    ids = ck["tokenizer"].encode(TEXT).ids
    ours = causal_lm_logits(ck["gguf_config"], ck["weights"], ids)
    config = transformers.AutoConfig.from_pretrained(ck["hf_dir"])
    if ck["gguf_config"] is not ck["config"]:
        config = transformers.LlamaConfig.from_dict(ck["gguf_config"])
    model = transformers.AutoModelForCausalLM.from_pretrained(
        ck["gguf"].parent, gguf_file=ck["gguf"].name, config=config, dtype=torch.float64, attn_implementation="eager"
    )
    theirs = _hf_logits(model, ids)
    print(case, "max |diff| vs transformers (GGUF):", np.abs(ours - theirs).max())
    np.testing.assert_allclose(ours, theirs, atol=1e-5 * np.abs(ours).max(), rtol=0)


def test_bert_matches_sentence_transformers(tmp_path):
    st = pytest.importorskip("sentence_transformers")
    ck = write_checkpoint("bert", tmp_path, seed=6)
    model = st.SentenceTransformer(str(ck["hf_dir"]), device="cpu")
    model = model.double()
    sentences = ["The cat likes music.", "The old man walks to the river and looks at a red book."]
    theirs = model.encode(sentences, convert_to_numpy=True, normalize_embeddings=False)
    for sentence, vec in zip(sentences, theirs):
        ids = ck["tokenizer"].encode(sentence).ids
        ours = bert_embeddings(ck["config"], ck["weights"], ids, normalize=True)
        print("bert max |diff| vs sentence-transformers:", np.abs(ours - vec).max())
        np.testing.assert_allclose(ours, vec, atol=1e-9)
