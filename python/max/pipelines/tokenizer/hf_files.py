"""Load a tokenizer from a Hugging Face model directory (``tokenizer.json`` and friends).

Files read, all optional except ``tokenizer.json``:

* ``tokenizer.json``: the ``tokenizers`` pipeline (normalizer, pre-tokenizer,
  model, post-processor, decoder, added tokens).  Its truncation and padding
  settings are switched off: a prompt is never cut or padded silently.
* ``tokenizer_config.json``: special token strings (``bos_token``,
  ``eos_token``, ...; a string or an ``{"content": ...}`` object),
  ``add_bos_token``/``add_eos_token`` and ``chat_template`` (a string or a
  list of ``{"name", "template"}``).  ``special_tokens_map.json`` fills in
  special tokens the config does not name.
* ``chat_template.jinja`` and ``chat_templates/<name>.jinja``: templates kept
  in their own files; when present they win over the config's entry.
* ``generation_config.json`` and ``config.json``: their ``eos_token_id`` (an
  int or a list) adds stop ids.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from .chat_template import ChatTemplateError, normalize_chat_templates

__all__ = ["HFTokenizerFiles", "load_hf_tokenizer_dir", "SPECIAL_TOKEN_NAMES"]

# The named special tokens that chat templates see as variables.
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


@dataclass
class HFTokenizerFiles:
    """Everything read from one model directory."""

    directory: str
    tokenizer: Any  # tokenizers.Tokenizer
    tokenizer_config: dict[str, Any]
    special_tokens_map: dict[str, str]
    chat_template: str | dict[str, str] | None
    bos_token_id: int | None
    eos_token_id: int | None
    # BOS/EOS the caller must add itself (the tokenizer.json has no post-processor that does).
    add_bos_token: bool
    add_eos_token: bool
    eos_token_ids: set[int] = field(default_factory=set)


def _read_json(path: str) -> dict[str, Any] | None:
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)
    except (OSError, ValueError, RecursionError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{path} should hold a JSON object, found {type(value).__name__}")
    return value


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, ValueError) as exc:  # (a UnicodeDecodeError is a ValueError)
        raise ValueError(f"cannot read {path}: {exc}") from exc


def _token_text(value: Any) -> str | None:
    """A special token entry: a string, or an AddedToken-like ``{"content": ...}`` object."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _ids_from(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def _load_chat_templates(directory: str, config: dict[str, Any]) -> str | dict[str, str] | None:
    templates: dict[str, str] = {}
    single = os.path.join(directory, "chat_template.jinja")
    if os.path.isfile(single):
        templates["default"] = _read_text(single)
    named_dir = os.path.join(directory, "chat_templates")
    if os.path.isdir(named_dir):
        for name in sorted(os.listdir(named_dir)):
            if name.endswith(".jinja"):
                templates[name[: -len(".jinja")]] = _read_text(os.path.join(named_dir, name))
    if templates:
        if list(templates) == ["default"]:
            return templates["default"]
        return templates
    try:
        return normalize_chat_templates(config.get("chat_template"))
    except ChatTemplateError as exc:
        raise ValueError(f"{os.path.join(directory, 'tokenizer_config.json')}: {exc}") from exc


def load_hf_tokenizer_dir(directory: str | os.PathLike[str]) -> HFTokenizerFiles:
    """Read the tokenizer files of a local Hugging Face model directory.

    Raises ``FileNotFoundError`` when the directory has no ``tokenizer.json``.
    """
    from tokenizers import Tokenizer

    directory = os.fspath(directory)
    tokenizer_path = os.path.join(directory, "tokenizer.json")
    if not os.path.isfile(tokenizer_path):
        raise FileNotFoundError(f"no tokenizer.json in {directory}")
    try:
        tokenizer = Tokenizer.from_file(tokenizer_path)
    except Exception as exc:
        raise ValueError(f"cannot load {tokenizer_path}: {exc}") from exc
    tokenizer.no_truncation()
    tokenizer.no_padding()

    config = _read_json(os.path.join(directory, "tokenizer_config.json")) or {}
    fallback = _read_json(os.path.join(directory, "special_tokens_map.json")) or {}
    special: dict[str, str] = {}
    for name in SPECIAL_TOKEN_NAMES:
        text = _token_text(config.get(name)) if name in config else _token_text(fallback.get(name))
        if text is not None:
            special[name] = text

    bos_id = tokenizer.token_to_id(special["bos_token"]) if "bos_token" in special else None
    eos_id = tokenizer.token_to_id(special["eos_token"]) if "eos_token" in special else None

    # A tokenizer.json with a post-processor already adds what the model wants.
    # Without one, honour the config's add_bos_token/add_eos_token ourselves.
    no_post_processor = tokenizer.post_processor is None
    add_bos = bool(no_post_processor and config.get("add_bos_token") and bos_id is not None)
    add_eos = bool(no_post_processor and config.get("add_eos_token") and eos_id is not None)

    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    eos_ids = {eos_id} if eos_id is not None else set()
    for extra_file in ("generation_config.json", "config.json"):
        extra = _read_json(os.path.join(directory, extra_file)) or {}
        eos_ids.update(i for i in _ids_from(extra.get("eos_token_id")) if 0 <= i < vocab_size)

    return HFTokenizerFiles(
        directory=directory,
        tokenizer=tokenizer,
        tokenizer_config=config,
        special_tokens_map=special,
        chat_template=_load_chat_templates(directory, config),
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        add_bos_token=add_bos,
        add_eos_token=add_eos,
        eos_token_ids=eos_ids,
    )
