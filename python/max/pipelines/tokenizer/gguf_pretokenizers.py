"""How a byte-level BPE vocabulary from a GGUF file splits text before merging.

A GGUF file names its pre-tokenizer with the string ``tokenizer.ggml.pre``; the
split rules themselves are not stored in the file.  The runtime that wrote the
name (llama.cpp) keeps a table from name to a list of regular expressions that
are applied one after the other: every expression cuts each piece left by the
previous one into the parts it matches and the gaps between them.  This module
is that table, written with the expressions of the original ``tokenizer.json``
files (Oniguruma syntax, which is what the ``tokenizers`` library speaks), plus
the per-name flags that change how the vocabulary behaves.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PreTokenizerSpec", "pre_tokenizer_spec", "supported_pre_tokenizers"]


@dataclass(frozen=True)
class PreTokenizerSpec:
    """The split rules and flags that go with one ``tokenizer.ggml.pre`` name."""

    # Regular expressions applied in order; matches and gaps both become pieces.
    regexes: tuple[str, ...]
    # A piece that is already a whole vocabulary entry is taken as is, without merging.
    ignore_merges: bool = False
    # Whether a BOS token is added when the file does not say (tokenizer.ggml.add_bos_token).
    add_bos: bool = False


# GPT-2's expression (also the one built into the ``ByteLevel`` pre-tokenizer).
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

# Llama 3 (tiktoken cl100k style): numbers in runs of up to three digits.
_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen 2: like Llama 3 but every digit on its own.
_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen 3.5: combining marks stay with their letters.
_QWEN35 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# GPT-4o / Llama 4 (tiktoken o200k style): case-aware word pieces.
_GPT4O = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Mistral's Tekken: as GPT-4o, single digits, no contractions.
_TEKKEN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _char_class(ranges: tuple[tuple[int, int], ...]) -> str:
    """A regex character class from code point ranges, written with escapes only.

    (Literal characters would be at the mercy of Unicode normalization: several
    of these code points have a canonical equivalent elsewhere, e.g. the Kelvin
    sign U+212A and "K", and a normalized copy of the class would no longer be
    the same class, or would not even compile.)
    """
    parts = []
    for first, last in ranges:
        parts.append(f"\\x{{{first:X}}}" if first == last else f"\\x{{{first:X}}}-\\x{{{last:X}}}")
    return "[" + "".join(parts) + "]"


# DeepSeek LLM (v1): letters of the Latin, Greek, Cyrillic, Armenian, Georgian,
# Cherokee... scripts listed range by range, as in its tokenizer.json.
_DEEPSEEK_LETTERS = (
    (0x0041, 0x005A), (0x0061, 0x007A), (0x00B5, 0x00B5), (0x00C0, 0x00D6), (0x00D8, 0x00F6), (0x00F8, 0x01BA),
    (0x01BC, 0x01BF), (0x01C4, 0x0293), (0x0295, 0x02AF), (0x0370, 0x0373), (0x0376, 0x0377), (0x037B, 0x037D),
    (0x037F, 0x037F), (0x0386, 0x0386), (0x0388, 0x038A), (0x038C, 0x038C), (0x038E, 0x03A1), (0x03A3, 0x03F5),
    (0x03F7, 0x0481), (0x048A, 0x052F), (0x0531, 0x0556), (0x10A0, 0x10C5), (0x13A0, 0x13F5), (0x13F8, 0x13FD),
    (0x1C90, 0x1CBA), (0x1CBD, 0x1CBF), (0x1D00, 0x1D2B), (0x1D6B, 0x1D77), (0x1D79, 0x1D9A), (0x1E00, 0x1F15),
    (0x1F18, 0x1F1D), (0x1F20, 0x1F45), (0x1F48, 0x1F4D), (0x1F50, 0x1F57), (0x1F59, 0x1F59), (0x1F5B, 0x1F5B),
    (0x1F5D, 0x1F5D), (0x1F5F, 0x1F7D), (0x1F80, 0x1FB4), (0x1FB6, 0x1FBC), (0x1FBE, 0x1FBE), (0x1FC2, 0x1FC4),
    (0x1FC6, 0x1FCC), (0x1FD0, 0x1FD3), (0x1FD6, 0x1FDB), (0x1FE0, 0x1FEC), (0x1FF2, 0x1FF4), (0x1FF6, 0x1FFC),
    (0x2102, 0x2102), (0x2107, 0x2107), (0x210A, 0x2113), (0x2115, 0x2115), (0x2119, 0x211D), (0x2124, 0x2124),
    (0x2126, 0x2126), (0x2128, 0x2128), (0x212A, 0x212D), (0x212F, 0x2134), (0x2139, 0x2139), (0x213C, 0x213F),
    (0x2145, 0x2149), (0x214E, 0x214E), (0x2183, 0x2184), (0x2C00, 0x2C7B), (0x2C7E, 0x2CE4), (0x2CEB, 0x2CEE),
    (0x2CF2, 0x2CF3), (0xA640, 0xA66D), (0xA680, 0xA69B), (0xA722, 0xA76F), (0xA771, 0xA787), (0xA78B, 0xA78E),
    (0xAB70, 0xABBF), (0xFB00, 0xFB06), (0xFB13, 0xFB17), (0xFF21, 0xFF3A), (0xFF41, 0xFF5A), (0x10400, 0x1044F),
    (0x104B0, 0x104D3), (0x104D8, 0x104FB), (0x10C80, 0x10CB2), (0x10CC0, 0x10CF2), (0x118A0, 0x118DF),
    (0x1E900, 0x1E943),
)

_CJK_HANGUL = r"[\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+"

_DEEPSEEK_LLM = (
    r"[\r\n]",
    r"\s?" + _char_class(_DEEPSEEK_LETTERS) + "+",
    r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+",
    r"\s+$",
    _CJK_HANGUL,
    r"\p{N}+",
)

_DEEPSEEK_CODER = (
    r"[\r\n]",
    r"\s?\p{L}+",
    r"\s?\p{P}+",
    _CJK_HANGUL,
    r"\p{N}",
)

_DEEPSEEK_V3 = (
    r"\p{N}{1,3}",
    r"[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+",
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
)

_BLOOM = r" ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+"


def _names(*names: str) -> tuple[str, ...]:
    return names


_TABLE: list[tuple[tuple[str, ...], PreTokenizerSpec]] = [
    (
        _names(
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ),
        PreTokenizerSpec((_LLAMA3,), ignore_merges=True, add_bos=True),
    ),
    (_names("dbrx", "smaug-bpe", "chatglm-bpe", "glm4"), PreTokenizerSpec((_LLAMA3,))),
    (_names("deepseek-llm"), PreTokenizerSpec(_DEEPSEEK_LLM)),
    (_names("deepseek-coder"), PreTokenizerSpec(_DEEPSEEK_CODER)),
    (_names("deepseek-v3"), PreTokenizerSpec(_DEEPSEEK_V3)),
    (
        _names("falcon"),
        PreTokenizerSpec((r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]")),
    ),
    (
        _names(
            "default",
            "gpt-2",
            "gpt2",
            "phi-2",
            "mpt",
            "olmo",
            "jais",
            "trillion",
            "granite-docling",
            "jina-es",
            "jina-de",
            "jina-v2-es",
            "jina-v2-de",
            "jina-v1-en",
            "jina-v2-code",
            "roberta-bpe",
            "gigachat",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "exaone4",
        ),
        PreTokenizerSpec((_GPT2,)),
    ),
    (
        _names(
            "starcoder",
            "refact",
            "command-r",
            "smollm",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ),
        PreTokenizerSpec((r"\p{N}", _GPT2)),
    ),
    (
        _names(
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "megrez",
            "stablelm2",
            "hunyuan",
            "solar-open",
        ),
        PreTokenizerSpec((_QWEN2,)),
    ),
    (_names("qwen35"), PreTokenizerSpec((_QWEN35,))),
    (_names("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), PreTokenizerSpec((_GPT4O,))),
    (_names("tekken"), PreTokenizerSpec((_TEKKEN,), ignore_merges=True, add_bos=True)),
    (_names("poro-chat", "bloom", "gpt3-finnish"), PreTokenizerSpec((_BLOOM,))),
    (_names("viking"), PreTokenizerSpec((_BLOOM, r"\p{N}"))),
]

_BY_NAME: dict[str, PreTokenizerSpec] = {name: spec for names, spec in _TABLE for name in names}


def supported_pre_tokenizers() -> list[str]:
    """The ``tokenizer.ggml.pre`` names this module knows, sorted."""
    return sorted(_BY_NAME)


def pre_tokenizer_spec(name: str | None) -> PreTokenizerSpec:
    """The split rules for a ``tokenizer.ggml.pre`` name.

    A file that names none (``None`` or ``""``) or says ``"default"`` gets GPT-2's
    expression, as the transformers GGUF loader does.  (llama.cpp uses an ad hoc
    list for that case and warns that quality will suffer; GPT-2's split is the
    one such old byte-level vocabularies were trained with.)

    Raises ``ValueError`` for a name that is not in the table, since guessing the
    wrong split silently degrades every prompt.
    """
    if not name:
        return _BY_NAME["default"]
    spec = _BY_NAME.get(name)
    if spec is None:
        raise ValueError(
            f"GGUF pre-tokenizer {name!r} (tokenizer.ggml.pre) is not supported; "
            f"known pre-tokenizers: {', '.join(supported_pre_tokenizers())}"
        )
    return spec
