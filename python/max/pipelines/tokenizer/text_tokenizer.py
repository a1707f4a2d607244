"""``TextTokenizer``: the text pipelines' tokenizer (MAX's ``max.pipelines.lib.tokenizer`` API).

It loads from a Hugging Face model directory (``tokenizer.json`` and friends),
from a ``.gguf`` file (vocabulary in the metadata), or from GGUF metadata
already read by the caller (``TextTokenizer.from_gguf_metadata``).  The
backend is always a ``tokenizers.Tokenizer``.

Async methods follow MAX (``encode``, ``decode``); the generation loop uses
the synchronous twins (``encode_sync``, ``decode_sync``), ``eos_token_ids``
and the streaming helpers (``incremental_detokenizer``, ``streaming_decoder``).
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from .chat_template import ChatTemplateError, render_chat_template, select_chat_template
from .gguf_vocab import build_tokenizer_from_gguf, read_gguf_metadata
from .hf_files import load_hf_tokenizer_dir
from .streaming import IncrementalDetokenizer, StreamingDecoder
from .token_bytes import TokenBytes

__all__ = [
    "IdentityPipelineTokenizer",
    "TextTokenizer",
    "max_tokens_to_generate",
    "run_with_default_executor",
]

_R = TypeVar("_R")


async def run_with_default_executor(fn: Callable[..., _R], *args: Any, **kwargs: Any) -> _R:
    """Run ``fn(*args, **kwargs)`` in the event loop's default thread pool."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(fn, *args, **kwargs))


def max_tokens_to_generate(prompt_size: int, max_length: int | None, max_new_tokens: int | None = None) -> int | None:
    """How many tokens may still be generated after a prompt of ``prompt_size`` tokens.

    ``max_length`` bounds prompt plus generation; ``max_new_tokens`` bounds the
    generation alone; ``None`` means no bound.
    """
    if max_length is None:
        return max_new_tokens
    room = max(max_length - prompt_size, 0)
    if max_new_tokens is None:
        return room
    return min(max_new_tokens, room)


@dataclass
class _Source:
    """A loaded backend plus what the files said about it."""

    tokenizer: Any  # tokenizers.Tokenizer
    origin: str
    special_tokens_map: dict[str, str]
    chat_template: str | dict[str, str] | None
    bos_token_id: int | None
    eos_token_id: int | None
    add_bos_token: bool
    add_eos_token: bool
    eos_token_ids: set[int] = field(default_factory=set)


def _source_from_gguf_metadata(metadata: Mapping[str, Any], origin: str) -> _Source:
    tokenizer, info = build_tokenizer_from_gguf(metadata)
    return _Source(
        tokenizer=tokenizer,
        origin=origin,
        special_tokens_map=dict(info.special_tokens_map),
        chat_template=info.chat_template,
        bos_token_id=info.bos_token_id,
        eos_token_id=info.eos_token_id,
        add_bos_token=info.add_bos_token,
        add_eos_token=info.add_eos_token,
        eos_token_ids=set(info.eog_token_ids),
    )


def _source_from_gguf_file(path: str) -> _Source:
    metadata = read_gguf_metadata(path)
    try:
        return _source_from_gguf_metadata(metadata, path)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


def _source_from_path(model_path: str) -> _Source:
    if os.path.isfile(model_path):
        if model_path.lower().endswith(".gguf"):
            return _source_from_gguf_file(model_path)
        if os.path.basename(model_path) == "tokenizer.json":
            return _source_from_path(os.path.dirname(model_path) or ".")
        raise ValueError(f"{model_path} is neither a model directory, a tokenizer.json nor a .gguf file")
    if not os.path.isdir(model_path):
        raise FileNotFoundError(
            f"tokenizer path not found: {model_path} (expected a local model directory or a .gguf file; "
            "nothing is downloaded)"
        )
    if os.path.isfile(os.path.join(model_path, "tokenizer.json")):
        files = load_hf_tokenizer_dir(model_path)
        return _Source(
            tokenizer=files.tokenizer,
            origin=os.path.join(model_path, "tokenizer.json"),
            special_tokens_map=files.special_tokens_map,
            chat_template=files.chat_template,
            bos_token_id=files.bos_token_id,
            eos_token_id=files.eos_token_id,
            add_bos_token=files.add_bos_token,
            add_eos_token=files.add_eos_token,
            eos_token_ids=files.eos_token_ids,
        )
    ggufs = sorted(name for name in os.listdir(model_path) if name.lower().endswith(".gguf"))
    if len(ggufs) == 1:
        return _source_from_gguf_file(os.path.join(model_path, ggufs[0]))
    if len(ggufs) > 1:
        raise ValueError(
            f"{model_path} has no tokenizer.json and several GGUF files ({', '.join(ggufs)}); "
            "pass the path of the one to use"
        )
    raise FileNotFoundError(f"no tokenizer.json and no .gguf file in {model_path}")


def _id_list(encoded: Any) -> list[int]:
    if isinstance(encoded, (int, np.integer)):
        return [int(encoded)]
    array = np.asarray(encoded)
    if array.ndim == 0:
        return [int(array)]
    if array.ndim != 1:
        raise ValueError(f"expected a 1-D sequence of token ids, got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"token ids must be integers, got dtype {array.dtype}")
    ids = [int(i) for i in array.tolist()]
    bad = next((i for i in ids if not 0 <= i < 2**32), None)
    if bad is not None:  # (the tokenizers library's own message is an OverflowError naming no id)
        raise ValueError(f"token id {bad} is not a token id (ids are 0 <= id < 2**32)")
    return ids


class TextTokenizer:
    """Encodes prompts, decodes generated ids and applies the chat template.

    Args:
        model_path: a local model directory holding ``tokenizer.json`` (or a
            single ``.gguf`` file), or the path of a ``.gguf`` file.
        pipeline_config: accepted for MAX compatibility; not used.
        revision: accepted for MAX compatibility; only local files are read.
        max_length: longest prompt, in tokens, that ``encode`` accepts.
        trust_remote_code: accepted for MAX compatibility; no code is run.
        enable_llama_whitespace_fix: decode a lone token with a leading
            reference token, so that a SentencePiece word keeps its leading
            space when streamed one token at a time.
        chat_template: a template to use instead of the model's, or the
            name of one of the model's named templates.
        context_validators: kept on the instance for the pipeline to run.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        pipeline_config: Any = None,
        *,
        revision: str | None = None,
        max_length: int | None = None,
        trust_remote_code: bool = False,
        enable_llama_whitespace_fix: bool = False,
        chat_template: str | None = None,
        context_validators: list[Callable[..., None]] | None = None,
        **unused_kwargs: Any,
    ) -> None:
        self.model_path = os.fspath(model_path)
        self.pipeline_config = pipeline_config
        self.revision = revision
        self.trust_remote_code = trust_remote_code
        self.context_validators = list(context_validators or [])
        self._setup(
            _source_from_path(self.model_path),
            max_length=max_length,
            chat_template=chat_template,
            enable_llama_whitespace_fix=enable_llama_whitespace_fix,
        )

    @classmethod
    def from_gguf_metadata(
        cls,
        metadata: Mapping[str, Any],
        *,
        max_length: int | None = None,
        chat_template: str | None = None,
        enable_llama_whitespace_fix: bool = False,
        name: str = "<GGUF metadata>",
    ) -> TextTokenizer:
        """A tokenizer from GGUF key/values (``tokenizer.ggml.*``) the caller has read."""
        self = cls.__new__(cls)
        self.model_path = name
        self.pipeline_config = None
        self.revision = None
        self.trust_remote_code = False
        self.context_validators = []
        self._setup(
            _source_from_gguf_metadata(metadata, name),
            max_length=max_length,
            chat_template=chat_template,
            enable_llama_whitespace_fix=enable_llama_whitespace_fix,
        )
        return self

    def _setup(
        self,
        source: _Source,
        *,
        max_length: int | None,
        chat_template: str | None,
        enable_llama_whitespace_fix: bool,
    ) -> None:
        if max_length is not None and max_length <= 0:
            raise ValueError(f"max_length must be positive, got {max_length}")
        self._source = source
        self._tokenizer = source.tokenizer
        self.max_length = max_length
        self._chat_template_override = chat_template
        self._enable_llama_whitespace_fix = enable_llama_whitespace_fix
        self._whitespace_ref_id: int | None = None
        self._token_bytes: TokenBytes | None = None
        if enable_llama_whitespace_fix:
            ref = self._tokenizer.encode("a", add_special_tokens=False).ids
            self._whitespace_ref_id = ref[-1] if ref else None

    # ------------------------------------------------------------------
    # Properties
    # ------------------------------------------------------------------

    @property
    def delegate(self) -> Any:
        """The backing ``tokenizers.Tokenizer``."""
        return self._tokenizer

    @property
    def eos(self) -> int | None:
        """The end-of-sequence token id (``None`` if the tokenizer has none)."""
        return self._source.eos_token_id

    @property
    def eos_token_ids(self) -> set[int]:
        """Every id that ends generation (eos, generation_config ids, end-of-turn tokens)."""
        return set(self._source.eos_token_ids)

    @property
    def bos_token_id(self) -> int | None:
        return self._source.bos_token_id

    @property
    def vocab_size(self) -> int:
        """Number of ids, added tokens included."""
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def expects_content_wrapping(self) -> bool:
        """Text-only: message content is passed to the template as given."""
        return False

    @property
    def special_tokens_map(self) -> dict[str, str]:
        """``bos_token``, ``eos_token``, ... -> token text (template variables)."""
        return dict(self._source.special_tokens_map)

    @property
    def chat_template(self) -> str | dict[str, str] | None:
        """The override if one was given, else the model's template(s)."""
        if self._chat_template_override is not None:
            return self._chat_template_override
        return self._source.chat_template

    # ------------------------------------------------------------------
    # Encoding
    # ------------------------------------------------------------------

    def encode_sync(self, prompt: str | Sequence[int], add_special_tokens: bool = True) -> np.ndarray:
        """Token ids (int64) for ``prompt``; a list of ids is passed through.

        Raises ``ValueError`` when the result is longer than ``max_length``.
        """
        if isinstance(prompt, str):
            try:
                ids = self._tokenizer.encode(prompt, add_special_tokens=add_special_tokens).ids
            except TypeError:  # the tokenizers library refuses a str it cannot encode as UTF-8
                prompt.encode("utf-8")  # raises UnicodeEncodeError (a ValueError) saying where
                raise
            if add_special_tokens:
                if self._source.add_bos_token and self._source.bos_token_id is not None:
                    ids = [self._source.bos_token_id, *ids]
                if self._source.add_eos_token and self._source.eos_token_id is not None:
                    ids = [*ids, self._source.eos_token_id]
        else:
            ids = _id_list(prompt)
        if self.max_length is not None and len(ids) > self.max_length:
            raise ValueError(
                f"the prompt is {len(ids)} tokens long, longer than the maximum length "
                f"of {self.max_length} tokens"
            )
        return np.asarray(ids, dtype=np.int64)

    async def encode(self, prompt: str | Sequence[int], add_special_tokens: bool = True) -> np.ndarray:
        """Transform ``prompt`` into a token array (runs in the default executor)."""
        if isinstance(prompt, str) and len(prompt) > 4096:
            return await run_with_default_executor(self.encode_sync, prompt, add_special_tokens)
        return self.encode_sync(prompt, add_special_tokens)

    # ------------------------------------------------------------------
    # Decoding
    # ------------------------------------------------------------------

    def decode_sync(self, encoded: Any, skip_special_tokens: bool = False) -> str:
        """Text for token ids (a list, a 1-D array, or one id)."""
        ids = _id_list(encoded)
        if self._enable_llama_whitespace_fix and len(ids) == 1 and self._whitespace_ref_id is not None:
            ref = [self._whitespace_ref_id]
            with_ref = self._tokenizer.decode(ref + ids, skip_special_tokens=skip_special_tokens)
            ref_text = self._tokenizer.decode(ref, skip_special_tokens=skip_special_tokens)
            if with_ref.startswith(ref_text):
                return with_ref[len(ref_text) :]
        return self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    async def decode(self, encoded: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str:
        """Transform token ids back into text."""
        return self.decode_sync(encoded, skip_special_tokens=skip_special_tokens)

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes token `token_id` stands for in decoded text, also when it holds only part
        of a character (see ``token_bytes.TokenBytes``)."""
        if self._token_bytes is None:
            self._token_bytes = TokenBytes(self._tokenizer)
        return self._token_bytes(token_id)

    def incremental_detokenizer(self, skip_special_tokens: bool = True) -> IncrementalDetokenizer:
        """A streaming detokenizer over this tokenizer (see ``streaming.IncrementalDetokenizer``)."""
        return IncrementalDetokenizer(
            lambda ids: self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
        )

    def streaming_decoder(
        self, stop_strings: Iterable[str] | None = None, skip_special_tokens: bool = True, min_tokens: int = 0
    ) -> StreamingDecoder:
        """Incremental detokenizer plus stop-string handling (see ``streaming.StreamingDecoder``;
        stop strings count from `min_tokens` generated tokens on)."""
        return StreamingDecoder(
            lambda ids: self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens), stop_strings, min_tokens
        )

    # ------------------------------------------------------------------
    # Chat
    # ------------------------------------------------------------------

    def apply_chat_template(
        self,
        messages: Sequence[Any],
        tools: Sequence[Mapping[str, Any]] | None = None,
        chat_template_options: Mapping[str, Any] | None = None,
    ) -> str:
        """The prompt text for ``messages`` (with ``add_generation_prompt=True`` unless the options say otherwise).

        ``chat_template_options`` become template variables (``documents``,
        ``enable_thinking``, ``add_generation_prompt``, ...).  Raises
        ``ValueError`` when there is no template or it fails.
        """
        options = dict(chat_template_options or {})
        reserved = sorted({"messages", "template", "special_tokens"} & set(options))
        if reserved:
            raise ChatTemplateError(f"chat template options may not set {', '.join(reserved)}")
        add_generation_prompt = bool(options.pop("add_generation_prompt", True))
        option_tools = options.pop("tools", None)
        if tools is None:
            tools = option_tools
        template = select_chat_template(self._source.chat_template, self._chat_template_override, tools=tools)
        return render_chat_template(
            template,
            messages,
            add_generation_prompt=add_generation_prompt,
            tools=tools,
            special_tokens=self._source.special_tokens_map,
            **options,
        )

    def __repr__(self) -> str:
        return f"TextTokenizer({self._source.origin!r}, vocab_size={self.vocab_size})"


class IdentityPipelineTokenizer:
    """A tokenizer that does nothing: prompts and outputs stay strings."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    @property
    def eos(self) -> int:
        return 0

    @property
    def expects_content_wrapping(self) -> bool:
        return False

    async def encode(self, prompt: str, add_special_tokens: bool = False) -> str:
        return prompt

    async def decode(self, encoded: str, **kwargs: Any) -> str:
        return encoded
