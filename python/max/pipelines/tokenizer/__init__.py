"""Tokenizers for the text pipelines (MAX's ``max.pipelines.lib.tokenizer`` API).

* ``TextTokenizer``: loads ``tokenizer.json`` model directories and GGUF files,
  encodes, decodes and applies chat templates;
* ``gguf_vocab``: builds a ``tokenizers.Tokenizer`` from GGUF metadata;
* ``chat_template``: renders Jinja chat templates as transformers does;
* ``streaming``: incremental detokenization and stop strings.

Needs the ``tokenizers`` and ``jinja2`` packages (and ``gguf`` to read
``.gguf`` files); nothing here depends on the compiled ``max._core``.
"""

from .chat_template import (
    ChatTemplateError,
    compile_chat_template,
    normalize_chat_templates,
    render_chat_template,
    select_chat_template,
)
from .gguf_pretokenizers import PreTokenizerSpec, pre_tokenizer_spec, supported_pre_tokenizers
from .gguf_vocab import (
    GGUFTokenizerInfo,
    build_tokenizer_from_gguf,
    byte_level_pre_tokenizer,
    read_gguf_metadata,
    supported_tokenizer_models,
)
from .hf_files import HFTokenizerFiles, load_hf_tokenizer_dir
from .streaming import (
    IncrementalDetokenizer,
    StopStringMatcher,
    StreamDelta,
    StreamingDecoder,
    find_stop_string,
    partial_stop_length,
)
from .text_tokenizer import IdentityPipelineTokenizer, TextTokenizer, max_tokens_to_generate, run_with_default_executor

__all__ = [
    "ChatTemplateError",
    "GGUFTokenizerInfo",
    "HFTokenizerFiles",
    "IdentityPipelineTokenizer",
    "IncrementalDetokenizer",
    "PreTokenizerSpec",
    "StopStringMatcher",
    "StreamDelta",
    "StreamingDecoder",
    "TextTokenizer",
    "build_tokenizer_from_gguf",
    "byte_level_pre_tokenizer",
    "compile_chat_template",
    "find_stop_string",
    "load_hf_tokenizer_dir",
    "max_tokens_to_generate",
    "normalize_chat_templates",
    "partial_stop_length",
    "pre_tokenizer_spec",
    "read_gguf_metadata",
    "render_chat_template",
    "run_with_default_executor",
    "select_chat_template",
    "supported_pre_tokenizers",
    "supported_tokenizer_models",
]
