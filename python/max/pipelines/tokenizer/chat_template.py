"""Render Hugging Face style chat templates (Jinja2), the way ``transformers`` does.

Model repositories ship a Jinja2 template that turns a list of chat messages
into the prompt text the model was trained on.  Getting a single character
wrong (a newline, a space) changes the prompt, so this module sets Jinja up
with the same options and helpers that ``transformers``'
``apply_chat_template(..., tokenize=False)`` uses:

* a sandboxed, immutable environment with ``trim_blocks`` and ``lstrip_blocks``,
  the ``loopcontrols`` extension (``{% break %}``, ``{% continue %}``) and a
  no-op ``{% generation %}`` block (used to mark assistant text for training);
* ``raise_exception(msg)``, ``strftime_now(fmt)``, a ``tojson`` filter that
  does not HTML-escape and keeps non-ASCII characters (``json.dumps`` with
  ``ensure_ascii=False`` and optional ``indent``/``separators``/``sort_keys``);
* template variables ``messages``, ``tools``, ``documents``,
  ``add_generation_prompt``, the special token strings (``bos_token``,
  ``eos_token``, ...) and any extra keyword arguments;
* messages are passed as given, except that keys whose value is ``None`` are
  dropped and a message's reasoning is also offered under ``thinking`` and
  ``reasoning_content``, as transformers does.

Any failure (syntax error, ``raise_exception``, a Python error while rendering)
raises ``ChatTemplateError``, a ``ValueError``.

Templates come with model files, which are untrusted: besides the sandbox, a
rendering may loop over at most a million ``range`` items in all; the strings
and lists it builds with ``*``, ``+``, ``~`` and the ``center``, ``indent``,
``replace`` and ``format`` filters, and its output, may hold at most a million
items more than twice its inputs' size; whole numbers are raised to powers of
64 and 65536 bits at most; the string methods that pad (``ljust``, ``zfill``,
``format``, ...) are not available.
"""

from __future__ import annotations

import contextvars
import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

__all__ = [
    "ChatTemplateError",
    "compile_chat_template",
    "normalize_chat_templates",
    "render_chat_template",
    "select_chat_template",
]


class ChatTemplateError(ValueError):
    """A chat template could not be compiled or rendered."""


#: The most items a rendering's ``range`` calls may produce in all; a string or list a template
#: builds may hold MAX_BUILT items more than twice the size of the rendering's inputs.
MAX_LOOP_ITEMS = 1_000_000
MAX_BUILT = 1_000_000
# Per rendering: [range items left, the largest string or list it may build].
_budget: contextvars.ContextVar[list[int]] = contextvars.ContextVar("chat_template_budget")


def _too_big(what: str) -> Exception:
    import jinja2

    return jinja2.exceptions.SecurityError(f"the chat template {what}")


def _size_limit() -> int:
    budget = _budget.get(None)
    return MAX_BUILT if budget is None else budget[1]


def _check_size(size: int, what: str) -> None:
    if size > _size_limit():
        raise _too_big(f"{what} more than {_size_limit()} items")


def _bounded_range(*args: int) -> range:
    from jinja2.sandbox import safe_range

    r = safe_range(*args)
    budget = _budget.get(None)
    if budget is not None:
        budget[0] -= len(r)
        if budget[0] < 0:
            raise _too_big(f"loops over more than {MAX_LOOP_ITEMS} range items")
    return r


def _sized(value: Any) -> int | None:
    return len(value) if isinstance(value, (str, list, tuple)) else None


def _checked_binop(operator: str, left: Any, right: Any) -> None:
    """Refuses the products, sums and powers that would build something huge."""
    if operator == "*":
        for seq, n in ((left, right), (right, left)):
            size = _sized(seq)
            if size is not None and isinstance(n, int):
                _check_size(size * max(n, 0), "repeats a sequence to")
    elif operator == "+":
        a, b = _sized(left), _sized(right)
        if a is not None and b is not None:
            _check_size(a + b, "joins sequences to")
    elif operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
        if right > 64 or left.bit_length() * right > 1 << 16:
            raise _too_big("raises a number to a power above 64, or past 65536 bits")


def _bounded_concat(values: Any) -> str:
    """The ``~`` operator: the strings joined, within the size limit."""
    parts = [str(v) for v in values]
    _check_size(sum(len(p) for p in parts), "joins strings with ~ to")
    return "".join(parts)


#: String methods that pad to a width the template chooses.
_PADDING_METHODS = frozenset(["center", "ljust", "rjust", "zfill", "expandtabs", "format", "format_map"])


# --------------------------------------------------------------------------
# The Jinja environment
# --------------------------------------------------------------------------


def _template_tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own ``tojson`` escapes <, >, & and ' for HTML; chat templates want plain JSON.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _template_strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=1)
def _environment() -> Any:
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    import jinja2.utils
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationBlock(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}``: renders its body unchanged."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

        def _render_body(self, caller: Any) -> str:
            return caller()

    def raise_exception(message: Any) -> None:
        raise jinja2.exceptions.TemplateError(str(message))

    class GuardedNamespace(jinja2.utils.Namespace):
        """``namespace(...)`` that refuses names starting with an underscore."""

        def __init__(*args: Any, **kwargs: Any) -> None:
            self, rest = args[0], args[1:]
            values = dict(*rest, **kwargs)
            for name in values:
                GuardedNamespace._refuse_private(name)
            jinja2.utils.Namespace.__init__(self, values)

        def __setitem__(self, name: str, value: Any) -> None:
            GuardedNamespace._refuse_private(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _refuse_private(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"a chat template may not set the private attribute {name!r} on a namespace"
                )

    class DictMaker:
        """``dict(...)`` and ``dict.fromkeys(...)`` without exposing the ``dict`` type itself."""

        def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict.fromkeys(*args, **kwargs)

    from jinja2.compiler import CodeGenerator

    class BoundedCodeGenerator(CodeGenerator):
        """Compiles ``a ~ b`` to the environment's size-checked join."""

        def visit_Concat(self, node: Any, frame: Any) -> None:
            self.write("environment.bounded_concat((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        """The sandbox with its building bounded: the products, sums and powers of
        `_checked_binop`, ``~`` joins, and no padding string methods."""

        intercepted_binops = frozenset(["*", "+", "**"])
        code_generator_class = BoundedCodeGenerator
        bounded_concat = staticmethod(_bounded_concat)

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            _checked_binop(operator, left, right)
            return super().call_binop(context, operator, left, right)

        def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
            if isinstance(obj, str) and attr in _PADDING_METHODS:
                return False
            return bool(super().is_safe_attribute(obj, attr, value))

    def center(value: Any, width: int = 80) -> str:
        _check_size(max(len(str(value)), int(width)), "pads a string with center to")
        return str(value).center(int(width))

    def indent(value: Any, width: Any = 4, first: bool = False, blank: bool = False) -> str:
        text = str(value)
        pad = len(width) if isinstance(width, str) else int(width)
        _check_size(len(text) + (text.count("\n") + 1) * pad, "indents a string to")
        return base_indent(value, width, first, blank)

    def replace(text: Any, old: Any, new: Any, count: Any = None) -> str:
        text, old, new = str(text), str(old), str(new)
        hits = text.count(old) if old else len(text) + 1
        if count is not None:
            hits = min(hits, max(int(count), 0))
        _check_size(len(text) + hits * max(len(new) - len(old), 0), "replaces text in a string to")
        return text.replace(old, new, -1 if count is None else int(count))

    def format_(value: Any, *args: Any, **kwargs: Any) -> str:
        widths = [int(w) for w in re.findall(r"%[-+ #0]*(\d+)", str(value))]
        if "*" in str(value) or any(w > _size_limit() for w in widths):
            raise _too_big("formats to a width past the size limit")
        return base_format(value, *args, **kwargs)

    env = BoundedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[GenerationBlock, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _template_tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = _template_strftime_now
    env.globals["namespace"] = GuardedNamespace
    env.globals["dict"] = DictMaker()
    env.globals["range"] = _bounded_range
    base_indent, base_format = env.filters["indent"], env.filters["format"]
    env.filters.update(center=center, indent=indent, replace=replace, format=format_)
    return env


@lru_cache(maxsize=32)
def compile_chat_template(source: str) -> Any:
    """The compiled ``jinja2.Template`` for ``source`` (cached)."""
    import jinja2

    if not isinstance(source, str):
        raise ChatTemplateError(f"a chat template must be a string, got {type(source).__name__}")
    try:
        return _environment().from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ChatTemplateError(f"chat template has a syntax error at line {exc.lineno}: {exc.message}") from exc
    except jinja2.TemplateError as exc:
        raise ChatTemplateError(f"chat template cannot be compiled: {exc}") from exc


# --------------------------------------------------------------------------
# Template selection
# --------------------------------------------------------------------------


def normalize_chat_templates(value: Any) -> str | dict[str, str] | None:
    """A ``chat_template`` entry as found in config files, as a string or a name->template dict.

    ``tokenizer_config.json`` holds either one template string or a list of
    ``{"name": ..., "template": ...}`` objects.
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    if isinstance(value, Sequence):
        named: dict[str, str] = {}
        for entry in value:
            if not isinstance(entry, Mapping) or "name" not in entry or "template" not in entry:
                raise ChatTemplateError(
                    "a list of chat templates must hold objects with 'name' and 'template' keys, "
                    f"got {entry!r:.80}"
                )
            named[str(entry["name"])] = str(entry["template"])
        return named
    raise ChatTemplateError(f"unsupported chat_template value of type {type(value).__name__}")


def select_chat_template(
    templates: str | Mapping[str, str] | None,
    choice: str | None = None,
    *,
    tools: Any = None,
) -> str:
    """The template text to use.

    ``templates`` is what the model ships (one string or named templates);
    ``choice`` is a caller's override: either the name of one of the named
    templates or a whole template.  With named templates and no choice, the
    ``tool_use`` template is taken when tools are given and exists, otherwise
    ``default``.
    """
    if isinstance(templates, Mapping):
        if choice is not None:
            return templates.get(choice, choice)
        if tools is not None and "tool_use" in templates:
            return templates["tool_use"]
        if "default" in templates:
            return templates["default"]
        raise ChatTemplateError(
            "this model has several chat templates and none is named 'default'; choose one of: "
            + ", ".join(sorted(templates))
        )
    if choice is not None:
        return choice
    if templates is None:
        raise ChatTemplateError(
            "this tokenizer has no chat template (none in tokenizer_config.json, chat_template.jinja "
            "or the GGUF metadata) and none was given"
        )
    return templates


# --------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------

_REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")


# How deeply a template's inputs may nest (tool schemas nest a few levels; JSON parsers stop
# near 1000, and Python's recursion before that).
MAX_DEPTH = 64


def _plain_data(value: Any, what: str = "the input", depth: int = 0) -> Any:
    """Rebuild ``value`` from plain JSON-like types, so the sandbox sees no foreign objects;
    ChatTemplateError (naming `what`) past MAX_DEPTH levels of nesting."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if depth >= MAX_DEPTH:
        raise ChatTemplateError(f"{what} is nested more than {MAX_DEPTH} levels deep")

    def inner(v: Any) -> Any:
        return _plain_data(v, what, depth + 1)

    if isinstance(value, Mapping):
        return {inner(k): inner(v) for k, v in value.items()}
    if isinstance(value, list):
        return [inner(v) for v in value]
    if isinstance(value, tuple):
        return tuple(inner(v) for v in value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):  # pydantic models
        return _plain_data(dump(), what, depth)
    item = getattr(value, "item", None)
    if callable(item) and type(value).__module__ == "numpy":  # numpy scalars
        return _plain_data(item(), what, depth)
    # Anything else is shown to the template as an inert placeholder.
    return f"<{type(value).__name__}>"


def _prepare_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
    prepared: list[dict[str, Any]] = []
    for message in messages:
        dump = getattr(message, "model_dump", None)
        if callable(dump):
            message = dump()
        if not isinstance(message, Mapping):
            raise ChatTemplateError(f"each chat message must be a dict, got {type(message).__name__}")
        # Keys set to None are dropped: templates test for a key's presence.
        message = {k: v for k, v in message.items() if v is not None}
        message = _plain_data(message, "a message")
        reasoning = next((message[k] for k in _REASONING_KEYS if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        prepared.append(message)
    return prepared


def render_chat_template(
    template: str,
    messages: Sequence[Any],
    *,
    add_generation_prompt: bool = False,
    tools: Sequence[Mapping[str, Any]] | None = None,
    documents: Sequence[Mapping[str, Any]] | None = None,
    special_tokens: Mapping[str, str] | None = None,
    **template_kwargs: Any,
) -> str:
    """Render ``template`` for ``messages``; the same text as transformers' ``apply_chat_template``.

    ``special_tokens`` (``{"bos_token": "<s>", ...}``) become template
    variables; ``template_kwargs`` too, and they win over special tokens of the
    same name.
    """
    import jinja2

    compiled = compile_chat_template(template)
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ChatTemplateError("messages must be a list of {'role': ..., 'content': ...} dicts")
    if len(messages) == 0:
        raise ChatTemplateError("cannot apply a chat template to an empty list of messages")
    if tools is not None:
        for tool in tools:
            if not isinstance(tool, Mapping):
                raise ChatTemplateError(f"each tool must be a JSON schema dict, got {type(tool).__name__}")
    if documents is not None:
        for document in documents:
            if not isinstance(document, Mapping):
                raise ChatTemplateError("documents must be a list of dicts with 'title' and 'text' keys")

    variables: dict[str, Any] = dict(special_tokens or {})
    variables.update(template_kwargs)
    variables = _plain_data(variables, "chat_template_kwargs")
    inputs = dict(
        messages=_prepare_messages(messages),
        tools=_plain_data(list(tools), "tools") if tools is not None else None,
        documents=_plain_data(list(documents), "documents") if documents is not None else None,
    )
    size = len(json.dumps([inputs, variables], default=str, ensure_ascii=False))
    budget = _budget.set([MAX_LOOP_ITEMS, MAX_BUILT + 2 * size])
    try:
        text = compiled.render(add_generation_prompt=add_generation_prompt, **inputs, **variables)
        if len(text) > MAX_BUILT + 2 * size:
            raise ChatTemplateError(f"the chat template made {len(text)} characters of {size} characters of input")
        return text
    except ChatTemplateError:
        raise
    except jinja2.TemplateError as exc:
        raise ChatTemplateError(f"chat template error: {exc}") from exc
    except Exception as exc:
        raise ChatTemplateError(f"chat template failed while rendering: {type(exc).__name__}: {exc}") from exc
    finally:
        _budget.reset(budget)
