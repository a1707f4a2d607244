"""The bytes one token stands for in decoded text (OpenAI's ``bytes`` of a log-probability
entry). Decoding a lone token cannot give them when the token holds part of a multi-byte
character (it decodes to U+FFFD), so the token's vocabulary piece is mapped back by the rule of
the tokenizer's decoder: byte-level BPE pieces through GPT-2's byte alphabet, SentencePiece
byte pieces (``<0x0A>``) as that byte and ``▁`` as a space; added tokens are their content.
Other decoders (WordPiece, ...) fall back to the lone token's decoded text."""

from __future__ import annotations

import functools
import json
import re
from typing import Any

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@functools.lru_cache(maxsize=1)
def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet, character -> byte: printable bytes stand for themselves,
    the others for the characters from U+0100 on, in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def _decoder_types(decoder: Any) -> set[str]:
    """The ``type`` of a ``tokenizers`` decoder and of every decoder it is a sequence of."""
    if decoder is None:
        return set()
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("type"), str):
                found.add(node["type"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(decoder.__getstate__()))
    return found


class TokenBytes:
    """Token id -> bytes for one ``tokenizers.Tokenizer``."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        kinds = _decoder_types(tokenizer.decoder)
        self._byte_level = "ByteLevel" in kinds
        self._byte_fallback = "ByteFallback" in kinds
        self._metaspace = bool(kinds & {"Metaspace", "Replace"})
        self._added = set(tokenizer.get_added_tokens_decoder())

    def __call__(self, token_id: int) -> bytes:
        token_id = int(token_id)
        piece = self._tokenizer.id_to_token(token_id)
        if piece is None:
            return b""
        if token_id in self._added:
            return piece.encode()
        if self._byte_level:
            alphabet = byte_level_alphabet()
            if all(c in alphabet for c in piece):
                return bytes(alphabet[c] for c in piece)
        if self._byte_fallback:
            m = _BYTE_PIECE.fullmatch(piece)
            if m:
                return bytes([int(m.group(1), 16)])
        if self._metaspace:
            return piece.replace("\u2581", " ").encode()
        return self._tokenizer.decode([token_id], skip_special_tokens=False).encode()


__all__ = ["TokenBytes", "byte_level_alphabet"]
