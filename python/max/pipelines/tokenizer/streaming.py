"""Streaming helpers: turn generated token ids into printable text, and stop strings.

``IncrementalDetokenizer`` decodes a growing list of token ids into text
deltas.  Decoding each new token on its own goes wrong in two ways: a token can
hold only part of a multi-byte UTF-8 character (it decodes to "\ufffd"), and
SentencePiece-style decoders drop a token's leading space when it starts the
text.  So it keeps two offsets into the id list: text is produced by decoding
from ``prefix_offset`` (a few already-printed tokens, for context) and
subtracting the decoding of the already-printed part ``[prefix_offset,
read_offset)``; when the result ends in an incomplete character, nothing is
printed and the tokens wait for the next step.

``StopStringMatcher`` watches the printed text for stop strings.  Text that
could be the beginning of a stop string is held back until it is clear that it
is not; at a stop, the text before it is released and everything after it is
dropped.

``StreamingDecoder`` chains the two.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "IncrementalDetokenizer",
    "StopStringMatcher",
    "StreamDelta",
    "StreamingDecoder",
    "find_stop_string",
    "partial_stop_length",
]

_REPLACEMENT_CHAR = "\ufffd"


class IncrementalDetokenizer:
    """Text deltas for a growing list of generated token ids.

    ``decode`` maps a list of ids to text (for example
    ``lambda ids: tokenizer.decode(ids, skip_special_tokens=True)``).  Call
    ``step(ids)`` with the whole list generated so far after each new token;
    the concatenation of everything ``step`` and ``flush`` return equals
    ``decode(ids)``.
    """

    def __init__(self, decode: Callable[[list[int]], str]) -> None:
        self._decode = decode
        self._prefix_offset = 0
        self._read_offset = 0
        self._prefix_text = ""
        self._last: Sequence[int] = []

    @property
    def read_offset(self) -> int:
        """How many ids have been turned into printed text."""
        return self._read_offset

    def _window(self, token_ids: Sequence[int] | Any) -> tuple[int, list[int]]:
        """The list's length, and its ids from ``prefix_offset`` on (only those are decoded)."""
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        count = len(token_ids)
        if count < self._read_offset:
            raise ValueError(
                f"the token list shrank to {count} ids after {self._read_offset} were printed; "
                "pass the whole list of generated ids each time"
            )
        self._last = token_ids
        return count, [int(i) for i in token_ids[self._prefix_offset :]]

    def _advance(self, count: int, window: list[int], *, final: bool) -> str:
        if count == self._read_offset:
            return ""
        text = self._decode(window)
        if not final:
            # Hold back while the newest bytes are an incomplete character, or
            # while the new tokens print nothing yet.
            if len(text) <= len(self._prefix_text) or text.endswith(_REPLACEMENT_CHAR):
                return ""
        delta = text[len(self._prefix_text) :]
        # The tokens just printed become the context of the next step.
        printed = window[self._read_offset - self._prefix_offset :]
        self._prefix_offset, self._read_offset = self._read_offset, count
        self._prefix_text = self._decode(printed)
        return delta

    def step(self, token_ids: Sequence[int]) -> str:
        """The new printable text after ``token_ids`` (all ids generated so far)."""
        return self._advance(*self._window(token_ids), final=False)

    def flush(self, token_ids: Sequence[int] | None = None) -> str:
        """Whatever is still held back (an incomplete character prints as "\ufffd").

        ``token_ids`` defaults to the list passed to the last ``step``.
        """
        return self._advance(*self._window(self._last if token_ids is None else token_ids), final=True)


def find_stop_string(text: str, stop_strings: Iterable[str], start: int = 0) -> tuple[int, str] | None:
    """The earliest ``(index, stop_string)`` in ``text[start:]``, or ``None``.

    When several stop strings start at the same index the longest wins.
    """
    best: tuple[int, str] | None = None
    for stop in stop_strings:
        if not stop:
            continue
        index = text.find(stop, start)
        if index < 0:
            continue
        if best is None or index < best[0] or (index == best[0] and len(stop) > len(best[1])):
            best = (index, stop)
    return best


def partial_stop_length(text: str, stop_strings: Iterable[str]) -> int:
    """Length of the longest end of ``text`` that is the start (not the whole) of a stop string."""
    longest = 0
    for stop in stop_strings:
        for size in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:size]):
                longest = size
                break
    return longest


@dataclass(frozen=True)
class StreamDelta:
    """Text safe to print now, and whether a stop string ended the stream."""

    text: str
    stopped: bool = False
    stop_string: str | None = None


class StopStringMatcher:
    """Hold back streamed text that might start a stop string; cut at the first stop.

    Feed it text deltas with ``push``; it returns what may be printed.  After a
    stop string is seen, ``stopped`` is true, the text before the stop has been
    returned, and later pushes return nothing.  ``flush`` releases the held-back
    tail when generation ends for another reason.
    """

    def __init__(self, stop_strings: Iterable[str] | None) -> None:
        self.stop_strings: tuple[str, ...] = tuple(s for s in (stop_strings or ()) if s)
        self._pending = ""
        self.stopped = False
        self.stop_string: str | None = None

    def push(self, delta: str, may_stop: bool = True) -> StreamDelta:
        """What of `delta` may be printed. With `may_stop` false (before min_new_tokens) a
        whole stop string is ordinary text, but a tail that may begin one is still held back,
        so that a stop string begun before the minimum and completed after it is found."""
        if self.stopped:
            return StreamDelta("", True, self.stop_string)
        if not self.stop_strings:
            return StreamDelta(delta)
        buffer = self._pending + delta
        # Only the held-back part and the new text can hold the start of a stop
        # string: anything printed earlier ended in no possible stop prefix.
        found = find_stop_string(buffer, self.stop_strings) if may_stop else None
        if found is not None:
            index, stop = found
            self._pending = ""
            self.stopped = True
            self.stop_string = stop
            return StreamDelta(buffer[:index], True, stop)
        hold = partial_stop_length(buffer, self.stop_strings)
        self._pending = buffer[len(buffer) - hold :] if hold else ""
        return StreamDelta(buffer[: len(buffer) - hold])

    def flush(self) -> str:
        """The held-back text (empty after a stop)."""
        text, self._pending = ("" if self.stopped else self._pending), ""
        return text


class StreamingDecoder:
    """Token ids in, printable text out, honouring stop strings.

    ``push(ids)`` takes the whole list of generated ids so far; ``finish(ids)``
    returns the rest at the end of generation.  Stops happen only once ``min_tokens``
    ids have been generated (a stop string completed before that is text), but one begun
    before and completed after stops.
    """

    def __init__(self, decode: Callable[[list[int]], str], stop_strings: Iterable[str] | None = None,
                 min_tokens: int = 0) -> None:
        self.detokenizer = IncrementalDetokenizer(decode)
        self.stops = StopStringMatcher(stop_strings)
        self.min_tokens = int(min_tokens)

    @property
    def stopped(self) -> bool:
        return self.stops.stopped

    def push(self, token_ids: Sequence[int]) -> StreamDelta:
        text = self.detokenizer.step(token_ids)
        return self.stops.push(text, may_stop=len(token_ids) >= self.min_tokens)

    def finish(self, token_ids: Sequence[int] | None = None) -> StreamDelta:
        if self.stops.stopped:
            return StreamDelta("", True, self.stops.stop_string)
        last = self.stops.push(self.detokenizer.flush(token_ids))
        if last.stopped:
            return last
        return StreamDelta(last.text + self.stops.flush())
