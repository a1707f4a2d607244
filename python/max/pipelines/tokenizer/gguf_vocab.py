"""Build a ``tokenizers.Tokenizer`` from the vocabulary stored in a GGUF file.

A GGUF file carries no ``tokenizer.json``: its tokenizer is a handful of
metadata keys (``tokenizer.ggml.*``).  This module turns those keys into a
``tokenizers.Tokenizer`` that segments text the way llama.cpp does for the
same file, for the two tokenizer families that cover most chat models:

* ``gpt2``: byte-level BPE with explicit merges, split first by the regular
  expressions that ``tokenizer.ggml.pre`` names (see ``gguf_pretokenizers``);
* ``llama``: SentencePiece BPE.  The file stores a score per piece instead of
  merges; merging the adjacent pair whose joined piece scores highest (ties:
  leftmost first) is what SentencePiece does, and a BPE model whose merge ranks
  follow the scores does exactly that.  Spaces become ``▁``, a ``▁`` is put in
  front of every run of text (``tokenizer.ggml.add_space_prefix``), characters
  outside the vocabulary fall back to ``<0xNN>`` byte pieces.

Control tokens (type 3) and the unknown token (type 2) become special added
tokens and user-defined tokens (type 4) plain added tokens, so that all of them
are matched whole in the input text and never cut into pieces.

BOS/EOS insertion is *not* put into the tokenizer; ``GGUFTokenizerInfo`` says
whether the caller should add them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .gguf_pretokenizers import PreTokenizerSpec, pre_tokenizer_spec

__all__ = [
    "GGUFTokenizerInfo",
    "TOKEN_TYPE_BYTE",
    "TOKEN_TYPE_CONTROL",
    "TOKEN_TYPE_NORMAL",
    "TOKEN_TYPE_UNKNOWN",
    "TOKEN_TYPE_UNUSED",
    "TOKEN_TYPE_USER_DEFINED",
    "build_tokenizer_from_gguf",
    "byte_level_pre_tokenizer",
    "read_gguf_metadata",
    "supported_tokenizer_models",
]

# Values of ``tokenizer.ggml.token_type``.
TOKEN_TYPE_UNDEFINED = 0
TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_UNKNOWN = 2
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4
TOKEN_TYPE_UNUSED = 5
TOKEN_TYPE_BYTE = 6

_SPACE_MARK = "\u2581"  # "▁", SentencePiece's visible space

# Tokens that end a turn in common chat formats.  llama.cpp treats every one of
# them that a vocabulary holds as an end-of-generation token, whatever the
# file's eos id says; so do we.
_END_OF_TURN_TEXTS = frozenset(
    {
        "<|eot_id|>",
        "<|eom_id|>",
        "<|im_end|>",
        "<|end|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "<|end_of_text|>",
        "<EOT>",
        "_<EOT>",
        "<｜end▁of▁sentence｜>",
        "<end_of_utterance>",
        "<|return|>",
        "<|call|>",
    }
)


def supported_tokenizer_models() -> list[str]:
    """The ``tokenizer.ggml.model`` values this module can build."""
    return ["gpt2", "llama"]


@dataclass(frozen=True)
class GGUFTokenizerInfo:
    """What a GGUF file says about its tokenizer, besides the vocabulary itself."""

    model: str
    pre: str | None
    vocab_size: int
    bos_token_id: int | None
    eos_token_id: int | None
    unk_token_id: int | None
    pad_token_id: int | None
    add_bos_token: bool
    add_eos_token: bool
    # Every id that ends generation: eos, eot, eom, and known end-of-turn tokens.
    eog_token_ids: frozenset[int]
    # A template string, or named templates ({"default": ..., "tool_use": ...}).
    chat_template: str | dict[str, str] | None
    # "bos_token", "eos_token", "unk_token", "pad_token" -> token text.
    special_tokens_map: dict[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------
# Reading the file
# --------------------------------------------------------------------------


def read_gguf_metadata(
    path: str | os.PathLike[str], prefixes: Sequence[str] = ("tokenizer.", "general.")
) -> dict[str, Any]:
    """The key/value metadata of a GGUF file whose key starts with one of ``prefixes``.

    Arrays come back as Python lists, strings as ``str``, numbers as Python
    numbers.  Uses the ``gguf`` package's ``GGUFReader``.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"GGUF file not found: {path}")
    try:
        from gguf import GGUFReader
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(f"reading {path} needs the 'gguf' package (pip install gguf)") from exc
    try:
        reader = GGUFReader(path, "r")
    except Exception as exc:
        raise ValueError(f"{path} is not a readable GGUF file: {exc}") from exc

    metadata: dict[str, Any] = {}
    for name, fld in reader.fields.items():
        if prefixes and not any(name.startswith(p) for p in prefixes):
            continue
        try:
            value = fld.contents()
        except Exception as exc:
            raise ValueError(f"{path}: cannot decode metadata key {name!r}: {exc}") from exc
        metadata[name] = _plain(value)
    return metadata


def _plain(value: Any) -> Any:
    """Numpy scalars and arrays to plain Python values."""
    if isinstance(value, (str, bytes, bool, int, float)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    return value


# --------------------------------------------------------------------------
# Metadata helpers
# --------------------------------------------------------------------------


def _as_list(metadata: Mapping[str, Any], key: str) -> list[Any] | None:
    value = metadata.get(key)
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        raise ValueError(f"GGUF metadata key {key!r} should be an array, got a string")
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        value = tolist()
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"GGUF metadata key {key!r} should be an array, got {type(value).__name__}")
    return list(value)


def _text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _typed_list(metadata: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> list[Any] | None:
    """`_as_list`, every entry of type `kind` (never a bool): a ValueError naming the key otherwise."""
    values = _as_list(metadata, key)
    if values is not None:
        for i, v in enumerate(values):
            if not isinstance(v, kind) or isinstance(v, bool):
                raise ValueError(f"GGUF metadata key {key!r} must hold {what}; entry {i} is {v!r}")
    return values


def _as_int(metadata: Mapping[str, Any], key: str, n_tokens: int) -> int | None:
    value = metadata.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"GGUF metadata key {key!r} must be a token id, got {value!r}")
    if not 0 <= value < n_tokens:
        # llama.cpp ignores an out-of-range special id; so do we.
        return None
    return value


def _as_bool(metadata: Mapping[str, Any], key: str, default: bool) -> bool:
    value = metadata.get(key)
    if value is None:
        return default
    return bool(value)


def _chat_templates(metadata: Mapping[str, Any]) -> str | dict[str, str] | None:
    """``tokenizer.chat_template`` plus any named ``tokenizer.chat_template.<name>``."""
    default = metadata.get("tokenizer.chat_template")
    if default is not None and not isinstance(default, (str, bytes)):
        raise ValueError(f"GGUF metadata key 'tokenizer.chat_template' must be a string, got {type(default).__name__}")
    prefix = "tokenizer.chat_template."
    named = {}
    for key, value in metadata.items():
        if key.startswith(prefix):
            if not isinstance(value, (str, bytes)):
                raise ValueError(f"GGUF metadata key {key!r} must be a string, got {type(value).__name__}")
            named[key[len(prefix) :]] = _text(value)
    if not named:
        return None if default is None else _text(default)
    if default is not None:
        named = {"default": _text(default), **named}
    return named


# --------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------


def build_tokenizer_from_gguf(metadata: Mapping[str, Any]) -> tuple[Any, GGUFTokenizerInfo]:
    """A ``tokenizers.Tokenizer`` and its ``GGUFTokenizerInfo`` from GGUF metadata.

    ``metadata`` maps GGUF keys (``tokenizer.ggml.model``, ``tokenizer.ggml.tokens``,
    ...) to values, as ``read_gguf_metadata`` returns them.  Raises ``ValueError``
    for a tokenizer model or pre-tokenizer that is not supported, or for
    inconsistent metadata.
    """
    from tokenizers import Tokenizer  # noqa: F401  (fail early with a clear ImportError)

    model = metadata.get("tokenizer.ggml.model")
    if model is None:
        raise ValueError("GGUF metadata has no tokenizer: the key 'tokenizer.ggml.model' is missing")
    model = _text(model)
    if model not in supported_tokenizer_models():
        raise ValueError(
            f"GGUF tokenizer model {model!r} (tokenizer.ggml.model) is not supported; "
            f"supported models: {', '.join(repr(m) for m in supported_tokenizer_models())}"
        )

    tokens = _typed_list(metadata, "tokenizer.ggml.tokens", (str, bytes), "strings")
    if not tokens:
        raise ValueError("GGUF metadata has no vocabulary: 'tokenizer.ggml.tokens' is missing or empty")
    tokens = [_text(t) for t in tokens]
    n_tokens = len(tokens)
    # llama.cpp renames empty pieces so that every id keeps a distinct string.
    tokens = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
    seen: dict[str, int] = {}
    for i, t in enumerate(tokens):
        first = seen.setdefault(t, i)
        if first != i:
            raise ValueError(f"GGUF vocabulary has a duplicate token {t!r} at ids {first} and {i}")

    token_types = _typed_list(metadata, "tokenizer.ggml.token_type", int, "integers")
    if token_types is not None:
        if len(token_types) < n_tokens:
            raise ValueError(
                f"GGUF metadata 'tokenizer.ggml.token_type' has {len(token_types)} entries "
                f"for {n_tokens} tokens"
            )
        token_types = [int(t) for t in token_types[:n_tokens]]
    else:
        token_types = [TOKEN_TYPE_NORMAL] * n_tokens

    bos_id = _as_int(metadata, "tokenizer.ggml.bos_token_id", n_tokens)
    eos_id = _as_int(metadata, "tokenizer.ggml.eos_token_id", n_tokens)
    unk_id = _as_int(metadata, "tokenizer.ggml.unknown_token_id", n_tokens)
    pad_id = _as_int(metadata, "tokenizer.ggml.padding_token_id", n_tokens)
    pre = metadata.get("tokenizer.ggml.pre")
    pre = None if pre is None else _text(pre)

    if model == "gpt2":
        spec = pre_tokenizer_spec(pre)
        tokenizer = _byte_level_bpe(tokens, _typed_list(metadata, "tokenizer.ggml.merges", (str, bytes), "strings"),
                                    spec)
        add_bos_default = spec.add_bos
    else:  # "llama"
        scores = _typed_list(metadata, "tokenizer.ggml.scores", (int, float), "numbers")
        if scores is not None and len(scores) < n_tokens:
            raise ValueError(
                f"GGUF metadata 'tokenizer.ggml.scores' has {len(scores)} entries for {n_tokens} tokens"
            )
        # Files that predate the id keys get llama.cpp's SentencePiece defaults.
        if "tokenizer.ggml.bos_token_id" not in metadata and n_tokens > 1:
            bos_id = 1
        if "tokenizer.ggml.eos_token_id" not in metadata and n_tokens > 2:
            eos_id = 2
        if "tokenizer.ggml.unknown_token_id" not in metadata:
            unk_id = next((i for i, t in enumerate(token_types) if t == TOKEN_TYPE_UNKNOWN), 0)
        tokenizer = _sentencepiece_bpe(
            tokens,
            [float(s) for s in scores[:n_tokens]] if scores is not None else None,
            token_types,
            unk_id,
            _as_bool(metadata, "tokenizer.ggml.add_space_prefix", True),
        )
        add_bos_default = True

    _add_special_tokens(tokenizer, tokens, token_types, unk_id)

    # An explicit add_*_token without the token's id is an error (as in llama.cpp);
    # a default that cannot be honoured is dropped.
    add_bos = _as_bool(metadata, "tokenizer.ggml.add_bos_token", add_bos_default and bos_id is not None)
    add_eos = _as_bool(metadata, "tokenizer.ggml.add_eos_token", False)
    if add_bos and bos_id is None:
        raise ValueError("GGUF metadata sets tokenizer.ggml.add_bos_token but has no valid tokenizer.ggml.bos_token_id")
    if add_eos and eos_id is None:
        raise ValueError("GGUF metadata sets tokenizer.ggml.add_eos_token but has no valid tokenizer.ggml.eos_token_id")

    eog = {i for i in (eos_id,) if i is not None}
    for key in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
        extra = _as_int(metadata, key, n_tokens)
        if extra is not None:
            eog.add(extra)
    for i, t in enumerate(tokens):
        if t in _END_OF_TURN_TEXTS:
            eog.add(i)

    special_map = {
        name: tokens[i]
        for name, i in (("bos_token", bos_id), ("eos_token", eos_id), ("unk_token", unk_id), ("pad_token", pad_id))
        if i is not None
    }
    info = GGUFTokenizerInfo(
        model=model,
        pre=pre,
        vocab_size=n_tokens,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        unk_token_id=unk_id,
        pad_token_id=pad_id,
        add_bos_token=add_bos,
        add_eos_token=add_eos,
        eog_token_ids=frozenset(eog),
        chat_template=_chat_templates(metadata),
        special_tokens_map=special_map,
    )
    return tokenizer, info


def _byte_level_bpe(tokens: list[str], merges_raw: list[Any] | None, spec: PreTokenizerSpec) -> Any:
    from tokenizers import Tokenizer, decoders, models

    if merges_raw is None:
        raise ValueError("GGUF byte-level BPE vocabulary (gpt2) has no 'tokenizer.ggml.merges'")
    vocab = {t: i for i, t in enumerate(tokens)}
    merges: list[tuple[str, str]] = []
    for entry in merges_raw:
        entry = _text(entry)
        # The separator is the first space after the first character, so that a
        # merge whose left part is itself a space still splits right.
        cut = entry.find(" ", 1)
        if cut < 0:
            continue
        left, right = entry[:cut], entry[cut + 1 :]
        # A merge naming a piece outside the vocabulary can never fire; the
        # tokenizers library would refuse it outright, so drop it.
        if left in vocab and right in vocab and (left + right) in vocab:
            merges.append((left, right))

    tokenizer = Tokenizer(
        models.BPE(vocab=vocab, merges=merges, ignore_merges=spec.ignore_merges, fuse_unk=False)
    )
    tokenizer.normalizer = None
    tokenizer.pre_tokenizer = byte_level_pre_tokenizer(spec)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def byte_level_pre_tokenizer(spec: PreTokenizerSpec) -> Any:
    """The ``tokenizers`` pre-tokenizer for a byte-level vocabulary: the spec's
    splits, one after the other, then the mapping of bytes to printable characters."""
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in spec.regexes]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )


#: The longest SentencePiece piece that merges can build (see `_sentencepiece_merges`).
MAX_MERGED_PIECE = 1024


def _sentencepiece_merges(
    tokens: list[str], scores: list[float] | None, token_types: list[int]
) -> list[tuple[str, str]]:
    """BPE merges whose order reproduces SentencePiece's score-driven merging.

    Every way of cutting a mergeable piece into two mergeable pieces is a merge;
    merges are ranked by the joined piece's score, best first (ties: lower id
    first).  Control, unknown, unused and byte pieces never result from merging,
    nor do pieces longer than MAX_MERGED_PIECE characters (no real vocabulary
    has one; cutting them all ways would take time quadratic in their length).
    """
    mergeable_types = (TOKEN_TYPE_UNDEFINED, TOKEN_TYPE_NORMAL)
    if scores is None:
        # No scores: fall back to the vocabulary's order (earlier = merged first).
        scores = [-float(i) for i in range(len(tokens))]
    mergeable = {t: i for i, t in enumerate(tokens) if token_types[i] in mergeable_types}
    ranked: list[tuple[float, int, int, str, str]] = []
    for piece, piece_id in mergeable.items():
        if not 2 <= len(piece) <= MAX_MERGED_PIECE:
            continue
        score = scores[piece_id]
        for cut in range(1, len(piece)):
            left = piece[:cut]
            if left not in mergeable:
                continue
            right = piece[cut:]
            if right in mergeable:
                ranked.append((-score, piece_id, cut, left, right))
    ranked.sort()
    return [(left, right) for _, _, _, left, right in ranked]


def _sentencepiece_bpe(
    tokens: list[str],
    scores: list[float] | None,
    token_types: list[int],
    unk_id: int | None,
    add_space_prefix: bool,
) -> Any:
    from tokenizers import Tokenizer, decoders, models, normalizers

    vocab = {t: i for i, t in enumerate(tokens)}
    merges = _sentencepiece_merges(tokens, scores, token_types)
    tokenizer = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=merges,
            unk_token=tokens[unk_id] if unk_id is not None else None,
            fuse_unk=True,
            byte_fallback=True,
        )
    )
    # SentencePiece (and llama.cpp) put the dummy "▁" in front of every stretch
    # of text, including one that follows a special token; a normalizer runs on
    # each stretch between added tokens, which is exactly that.
    steps = [normalizers.Replace(" ", _SPACE_MARK)]
    if add_space_prefix:
        steps.insert(0, normalizers.Prepend(_SPACE_MARK))
    tokenizer.normalizer = normalizers.Sequence(steps)
    tokenizer.pre_tokenizer = None
    chain = [decoders.Replace(_SPACE_MARK, " "), decoders.ByteFallback(), decoders.Fuse()]
    if add_space_prefix:
        chain.append(decoders.Strip(content=" ", left=1, right=0))
    tokenizer.decoder = decoders.Sequence(chain)
    return tokenizer


def _add_special_tokens(tokenizer: Any, tokens: list[str], token_types: list[int], unk_id: int | None) -> None:
    from tokenizers import AddedToken

    special = [
        AddedToken(t, special=True, normalized=False)
        for i, t in enumerate(tokens)
        if token_types[i] in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_UNKNOWN) or i == unk_id
    ]
    if special:
        tokenizer.add_special_tokens(special)
    user_defined = [
        AddedToken(t, special=False, normalized=False)
        for i, t in enumerate(tokens)
        if token_types[i] == TOKEN_TYPE_USER_DEFINED
    ]
    if user_defined:
        tokenizer.add_tokens(user_defined)
