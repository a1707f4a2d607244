"""A flag for every pipeline setting MAX's commands take (``--max-num-steps``, ``--rope-type``,
``--cache-strategy``, ...): each field of ``PipelineConfig`` and of its model, KV-cache,
sampling and profiling configs that has no flag of its own in options.py gets one, named as in
MAX (``--field-name``) and typed by the field. These flags have no default: only those given
reach ``PipelineConfig``, which checks them (``config_kwargs``), and they win over a
``--config-file``'s settings."""

from __future__ import annotations

import argparse
import enum
import json
import types
import typing
from typing import Any

from max.dtype import DType
from max.pipelines.lib.config_values import coerce, setting_types

#: Fields that are not settings (nested configs, the config file itself) or that the commands
#: take through other flags (--devices, --config-file, --served-model-name on serve, ...).
_SKIP = {"model", "draft_model", "sampling", "profiling", "lora", "speculative", "kv_cache", "config_file",
         "device_specs", "weight_path", "quantization_encoding", "model_path"}
_PREFIX = "config__"

#: What the settings that change something here do (flag help).
_HELP = {
    "section_name": "the section of --config-file to read",
    "max_num_steps": "decode steps per scheduler call (default: 8 on a GPU, 1 on the CPU)",
    "pool_embeddings": "mean-pool an encoder's token embeddings (encode)",
    "served_model_name": "the model name clients use",
    "enable_structured_output": "JSON-schema structured output (response_format; needs llguidance)",
    "enable_penalties": "apply frequency/presence/repetition penalties (default on)",
    "enable_min_tokens": "honour min_tokens (default on)",
    "cache_strategy": "model_default or paged (both: the paged cache)",
    "pipeline_role": "only prefill_and_decode is supported",
    "ep_size": "expert parallelism: only 1 is supported",
    "force_download": "not supported: nothing is downloaded",
    "rope_type": "not supported: the model decides its rotary embedding",
    "enable_kvcache_swapping_to_host": "not supported",
    "huggingface_model_revision": "only main (the local Hugging Face cache's)",
    "huggingface_weight_revision": "only main (the local Hugging Face cache's)",
}
_NO_EFFECT = "taken for compatibility with MAX; no effect here"


def _parse(name: str, hint: Any) -> Any:
    """An argparse type for setting `name`: its text converted as a config file's value is
    (config_values.coerce)."""
    def parse(text: str) -> Any:
        try:
            return coerce(name, text, hint, "--" + name.replace("_", "-"))
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = name
    return parse


def _json_object(value: str) -> dict[str, Any]:
    try:
        obj = json.loads(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected a JSON object ({e})") from None
    if not isinstance(obj, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return obj


def _flag_kwargs(name: str, hint: Any) -> dict[str, Any] | None:
    """argparse keyword arguments for setting `name` of type `hint`, or None for no flag."""
    rest = [a for a in typing.get_args(hint) if a is not type(None)]
    base = rest[0] if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(rest) == 1 else hint
    if base is bool:
        return {"action": argparse.BooleanOptionalAction}
    if typing.get_origin(base) is dict:
        return {"type": _json_object, "metavar": "JSON"}
    if typing.get_origin(base) is list or base is Any:
        return None
    if base is DType:
        return {"type": _parse(name, hint), "metavar": "DTYPE"}
    if isinstance(base, type) and issubclass(base, enum.Enum):
        return {"type": _parse(name, hint), "metavar": "{" + ",".join(str(m.value) for m in base) + "}"}
    return {"type": _parse(name, hint), "metavar": name.upper()}


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """Add the flags of the settings `parser` has no flag for (call it after the parser's own)."""
    have = {a.dest for a in parser._actions} | {s for a in parser._actions for s in a.option_strings}
    group = parser.add_argument_group("more pipeline settings (MAX's PipelineConfig fields; see docs/models.md)")
    for name, hint in setting_types().items():
        flag = "--" + name.replace("_", "-")
        if name in _SKIP or name in have or flag in have:
            continue
        kw = _flag_kwargs(name, hint)
        if kw is not None:
            group.add_argument(flag, dest=_PREFIX + name, default=argparse.SUPPRESS,
                               help=_HELP.get(name, _NO_EFFECT), **kw)


def config_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given through add_config_flags' flags, as PipelineConfig keyword arguments."""
    return {k[len(_PREFIX):]: v for k, v in vars(args).items() if k.startswith(_PREFIX)}


__all__ = ["add_config_flags", "config_kwargs"]
