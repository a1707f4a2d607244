"""Streaming detokenization: the incremental detokenizer (SmolLM2 and SentencePiece vocabularies),
stop strings inside and across tokens, held-back text, and the max-tokens arithmetic."""

from __future__ import annotations

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

from max.pipelines.tokenizer import (  # noqa: E402
    StopStringMatcher,
    find_stop_string,
    max_tokens_to_generate,
    partial_stop_length,
)


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


def test_stop_strings_count_from_min_tokens():
    """A stop string in text generated before min_tokens ids does not stop the stream (it is
    printed); from min_tokens on it does."""
    from max.pipelines.tokenizer.streaming import StreamingDecoder

    decode = lambda ids: "".join("xbyz"[i] for i in ids)  # noqa: E731
    d = StreamingDecoder(decode, ["b"], min_tokens=3)
    out = [d.push([0]), d.push([0, 1]), d.push([0, 1, 2]), d.push([0, 1, 2, 1])]
    assert [o.stopped for o in out] == [False, False, False, True]
    assert "".join(o.text for o in out) == "xby"
    early = StreamingDecoder(decode, ["b"])
    assert early.push([0]).text == "x" and early.push([0, 1]).stopped


def test_a_stop_string_begun_before_min_tokens_stops_once_it_completes():
    """"Elara" over tokens " El" (before the minimum) and "ara" (at it) stops the stream, its
    start held back (it was printed, and the stop string then never matched)."""
    from max.pipelines.tokenizer.streaming import StreamingDecoder

    pieces = [" king", " El", "ara", " was"]
    decode = lambda ids: "".join(pieces[i] for i in ids)  # noqa: E731
    d = StreamingDecoder(decode, ["Elara"], min_tokens=3)
    out = [d.push(list(range(n))) for n in (1, 2, 3)]
    assert [o.stopped for o in out] == [False, False, True]
    assert "".join(o.text for o in out) == " king "
    complete_early = StreamingDecoder(decode, ["Elara"], min_tokens=4)  # (completed before the minimum: text)
    out = [complete_early.push(list(range(n))) for n in (1, 2, 3, 4)]
    assert not any(o.stopped for o in out) and "".join(o.text for o in out) + complete_early.finish().text == \
        " king Elara was"
