"""GGUF vocabularies for max.pipelines.tokenizer: SmolLM2 (byte-level BPE) against hand-checked ids
and transformers' GGUF conversion, the other byte-level pre-tokenizers, and SentencePiece
("llama") vocabularies against a direct, slow implementation of its merge rule written here."""

from __future__ import annotations

import asyncio
import os
import random

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

from max.pipelines.tokenizer import (  # noqa: E402
    TextTokenizer,
    build_tokenizer_from_gguf,
    byte_level_pre_tokenizer,
    pre_tokenizer_spec,
    supported_pre_tokenizers,
)

from tokenizer_util import (  # noqa: E402
    SAMPLE_TEXTS,
    _byte_level_metadata,
    SPACE,
    _smollm_path,
    _spm_metadata,
)

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


def test_ids_that_no_tokenizer_has_are_named(smollm):
    for bad in (-1, 2**40):
        with pytest.raises(ValueError, match=f"token id {bad} is not a token id"):
            smollm.decode_sync([5, bad])
        with pytest.raises(ValueError, match=f"token id {bad} is not a token id"):
            smollm.encode_sync([bad])


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


@pytest.mark.parametrize("key, value, needle", [
    ("tokenizer.ggml.token_type", 1, "'tokenizer.ggml.token_type' should be an array, got int"),
    ("tokenizer.ggml.scores", 0.5, "'tokenizer.ggml.scores' should be an array, got float"),
    ("tokenizer.ggml.token_type", ["1"] * 400, "'tokenizer.ggml.token_type' must hold integers"),
    ("tokenizer.ggml.tokens", [1, 2, 3], "'tokenizer.ggml.tokens' must hold strings"),
    ("tokenizer.ggml.bos_token_id", "1", "'tokenizer.ggml.bos_token_id' must be a token id"),
    ("tokenizer.chat_template", 5, "'tokenizer.chat_template' must be a string"),
    ("tokenizer.chat_template.tool_use", [1], "'tokenizer.chat_template.tool_use' must be a string"),
])
def test_gguf_tokenizer_fields_of_the_wrong_type(key, value, needle):
    """Model files are untrusted: a tokenizer field of the wrong type is an error naming it."""
    with pytest.raises(ValueError, match=needle):
        TextTokenizer.from_gguf_metadata({**_spm_metadata(), key: value})


def test_spm_vocabulary_with_a_huge_piece_builds_quickly():
    """Model files are untrusted: a 1,000,000-character piece would cost quadratic time to cut
    every way into merges; pieces that long are kept as tokens but never built by merging."""
    from max.pipelines.tokenizer.gguf_vocab import MAX_MERGED_PIECE, _sentencepiece_merges

    metadata = _spm_metadata()
    huge = "a" * 1_000_000
    metadata["tokenizer.ggml.tokens"] = [*metadata["tokenizer.ggml.tokens"], "aa", huge]
    metadata["tokenizer.ggml.token_type"] = [*metadata["tokenizer.ggml.token_type"], 1, 1]
    metadata["tokenizer.ggml.scores"] = [*metadata["tokenizer.ggml.scores"], 0.0, 0.0]
    merges = _sentencepiece_merges(metadata["tokenizer.ggml.tokens"], metadata["tokenizer.ggml.scores"],
                                   metadata["tokenizer.ggml.token_type"])
    assert ("a", "a") in merges and all(len(a) + len(b) <= MAX_MERGED_PIECE for a, b in merges)
    tok = TextTokenizer.from_gguf_metadata(metadata)
    assert tok.encode_sync("the", add_special_tokens=False).tolist() == _piece_ids(metadata, SPACE + "the")


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
# token_bytes: each token's own bytes, which joined give the decoded text
# --------------------------------------------------------------------------


def test_byte_level_alphabet_is_the_tokenizers_one():
    from tokenizers.pre_tokenizers import ByteLevel

    from max.pipelines.tokenizer.token_bytes import byte_level_alphabet

    table = byte_level_alphabet()
    assert sorted(table) == sorted(ByteLevel.alphabet()) and sorted(table.values()) == list(range(256))


@pytest.mark.parametrize("text", [t for t in SAMPLE_TEXTS if t])
def test_smollm_token_bytes_join_to_the_text(smollm, text):
    ids = smollm.encode_sync(text, add_special_tokens=False).tolist()
    pieces = [smollm.token_bytes(i) for i in ids]
    assert b"".join(pieces) == smollm.decode_sync(ids).encode()
    # A piece of a multi-byte character is those bytes alone, not U+FFFD.
    assert all(b"\xef\xbf\xbd" not in p for p in pieces)


@pytest.mark.parametrize("text", ["hello world", "hé there", "xabc! hello<tool>world"])
def test_spm_token_bytes_join_to_the_text(spm, text):
    ids = spm.encode_sync(text, add_special_tokens=False).tolist()
    joined = b"".join(spm.token_bytes(i) for i in ids)
    # The decoder strips the space the first piece's "▁" stands for.
    assert joined == b" " + spm.decode_sync(ids).encode()
    assert spm.token_bytes(_piece_ids(_spm_metadata(), "<0xC3>")[0]) == b"\xc3"
