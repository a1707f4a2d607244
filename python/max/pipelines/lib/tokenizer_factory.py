"""The tokenizer of a resolved model: from a GGUF file's metadata, or the directory's
tokenizer.json; the chat template from the config (``--chat-template``: text or a file) or
the model's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def chat_template_text(value: Any) -> str | None:
    """The template's text: the file `value` names, else `value` itself (a value that can only
    be a path, such as ``tmpl/chat.jinja``, and names no file is an error)."""
    if value is None:
        return None
    p = Path(str(value)).expanduser()
    if len(str(value)) < 4096 and p.is_file():
        return p.read_text()
    if isinstance(value, Path) or looks_like_path(str(value)):
        raise FileNotFoundError(f"chat template: no such file {str(value)!r}")
    return str(value)


def text_tokenizer(source: Any, pipeline_config: Any) -> Any:
    from max.pipelines.tokenizer import TextTokenizer

    template = chat_template_text(getattr(pipeline_config, "chat_template", None))
    max_length = getattr(pipeline_config, "max_length", None)
    if source.format == "gguf" and (source.directory is None or not (source.directory / "tokenizer.json").is_file()):
        return TextTokenizer.from_gguf_metadata(source.metadata, max_length=max_length, chat_template=template)
    return TextTokenizer(str(source.directory), max_length=max_length, chat_template=template)


def looks_like_path(value: str) -> bool:
    """Whether a flag's value that takes text or a file names a file: one line, no template or
    JSON syntax, and a path separator or a file suffix."""
    v = value.strip()
    if not v or "\n" in v or "{" in v or len(v) >= 4096:
        return False
    return "/" in v or "\\" in v or Path(v).suffix.lower() in (".json", ".jinja", ".jinja2", ".j2", ".txt", ".tmpl")


__all__ = ["chat_template_text", "looks_like_path", "text_tokenizer"]
