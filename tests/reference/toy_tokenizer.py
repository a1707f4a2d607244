"""Small deterministic tokenizers for the tiny test checkpoints (built with the `tokenizers` library).

- `bpe_tokenizer(family, pretokenizer)`: a byte-level BPE (~400 tokens: 256 bytes, merges learnt on
  `CORPUS`, the family's special tokens) with the pre-tokenizer llama.cpp calls `pretokenizer`.
- `wordpiece_tokenizer()`: an uncased BERT WordPiece with [PAD] [UNK] [CLS] [SEP] [MASK].
- `SPECIALS[family]`: special tokens, their roles, whether BOS is prepended, and the chat template
  that goes into tokenizer_config.json (and from there into the GGUF).
"""

from __future__ import annotations

import itertools

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from .gguf_model import byte_level_pre_tokenizer

_SUBJECTS = ["The cat", "A small dog", "My friend", "The old man", "Our teacher", "The robot", "She", "They"]
_VERBS = ["likes", "reads", "writes about", "walks to", "looks at", "talks about"]
_OBJECTS = ["the river", "a red book", "the city of Paris", "green apples", "the quiet garden", "music and art"]
_EXTRA = [
    "What is the capital of France? The capital of France is Paris.",
    "Hello! How are you today? I'm fine, thank you.",
    "Don't worry, it's only 3 o'clock; we'll be there by 4:30.",
    "In 2024, the team scored 157 points in 12 games.",
    "The quick brown fox jumps over the lazy dog.",
    "Please write a short poem about the sea.\nThe sea is wide, the sea is deep.",
    "def add(a, b):\n    return a + b",
    "Temperatures rose to 38.5 degrees, or 101.3 F.",
    "You are a helpful assistant. Answer briefly.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 12345.",
    "Café, naïve, über — unicode words appear too.",
    "Yes.  No.   Maybe!!! (Really?) [sure] {ok}",
]
# A few hundred sentences: every subject/verb/object combination, plus the lines above.
CORPUS = [f"{s} {v} {o}." for s, v, o in itertools.product(_SUBJECTS, _VERBS, _OBJECTS)] + _EXTRA * 4

_CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_GEMMA_CHAT = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)

# tokens: the special tokens (`first`: they take ids 0.. as in Gemma, else they follow the BPE vocab as in
# Llama 3 / Qwen); bos/eos/pad name their roles; extra_eos: more end-of-generation tokens for config.json.
SPECIALS = {
    "llama": dict(
        tokens=["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"],
        first=False, bos="<|begin_of_text|>", eos="<|im_end|>", pad="<|end_of_text|>", add_bos=True,
        extra_eos=[], chat_template="{{ bos_token }}" + _CHATML,
    ),
    "qwen": dict(
        tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        first=False, bos=None, eos="<|im_end|>", pad="<|endoftext|>", add_bos=False,
        extra_eos=["<|endoftext|>"], chat_template=_CHATML,
    ),
    "gemma3": dict(
        tokens=["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"],
        first=True, bos="<bos>", eos="<eos>", pad="<pad>", add_bos=True,
        extra_eos=["<end_of_turn>"], chat_template=_GEMMA_CHAT,
    ),
}


def bpe_tokenizer(family: str, pretokenizer: str = "gpt-2", vocab_size: int = 400) -> Tokenizer:
    """Byte-level BPE trained on CORPUS. `family`: a SPECIALS key; `pretokenizer`: a llama.cpp name
    ("gpt-2", "llama-bpe", "qwen2", "smollm"). For "llama-bpe", whole words in the vocabulary skip the
    merges (`ignore_merges`), as in Llama 3's tokenizer.json and llama.cpp."""
    spec = SPECIALS[family]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = byte_level_pre_tokenizer(pretokenizer)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size if spec["first"] else vocab_size - len(spec["tokens"]),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=spec["tokens"] if spec["first"] else [],
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    if not spec["first"]:
        tok.add_special_tokens(spec["tokens"])
    if pretokenizer in ("llama-bpe", "llama3"):
        tok.model.ignore_merges = True
    if spec["add_bos"]:
        bos = (spec["bos"], tok.token_to_id(spec["bos"]))
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos[0]} $A", pair=f"{bos[0]} $A {bos[0]} $B", special_tokens=[bos]
        )
    return tok


def wordpiece_tokenizer(vocab_size: int = 300) -> Tokenizer:
    """An uncased BERT WordPiece tokenizer trained on CORPUS; encode() adds [CLS] ... [SEP]."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=None, clean_text=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return tok

