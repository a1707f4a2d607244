"""A flag for every pipeline setting MAX's commands take (``--max-num-steps``, ``--rope-type``,
``--cache-strategy``, ...): each field of ``PipelineConfig`` and of its model, KV-cache,
sampling and profiling configs that has no flag of its own in options.py gets one, named as in
MAX (``--field-name``) and typed by the field. These flags have no default: only those given
reach ``PipelineConfig``, which checks them (``config_kwargs``), and they win over a
``--config-file``'s settings."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import types
import typing
from typing import Any

from max.dtype import DType

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


def _configs() -> list[type]:
    from max.pipelines.lib.config import KVCacheConfig, MAXModelConfig, PipelineConfig, ProfilingConfig, SamplingConfig

    return [PipelineConfig, MAXModelConfig, KVCacheConfig, SamplingConfig, ProfilingConfig]


def _enum_type(cls: type[enum.Enum]) -> Any:
    def parse(value: str) -> enum.Enum:
        for member in cls:
            if value.lower() in (str(member.value).lower(), member.name.lower()):
                return member
        raise argparse.ArgumentTypeError(f"{value!r} is not one of {', '.join(str(m.value) for m in cls)}")

    parse.__name__ = cls.__name__
    return parse


def _dtype(value: str) -> DType:
    try:
        return DType[value.lower()]
    except KeyError:
        raise argparse.ArgumentTypeError(f"unknown dtype {value!r}") from None


def _json_object(value: str) -> dict[str, Any]:
    try:
        obj = json.loads(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected a JSON object ({e})") from None
    if not isinstance(obj, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return obj


def _flag_kwargs(hint: Any) -> dict[str, Any] | None:
    """argparse keyword arguments for a field of type `hint`, or None where there is no flag."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            textual = all(a in (str, DType) or getattr(a, "__name__", "") == "Path" for a in rest)
            return {"type": str} if textual else None
        hint = rest[0]
    if hint is bool:
        return {"action": argparse.BooleanOptionalAction}
    if hint in (int, float, str):
        return {"type": hint}
    if hint is DType:
        return {"type": _dtype, "metavar": "DTYPE"}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"type": _enum_type(hint), "metavar": "{" + ",".join(str(m.value) for m in hint) + "}"}
    if typing.get_origin(hint) is dict:
        return {"type": _json_object, "metavar": "JSON"}
    if typing.get_origin(hint) is list:
        return {"action": "append"}
    return None


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """Add the flags of the settings `parser` has no flag for (call it after the parser's own)."""
    have = {a.dest for a in parser._actions} | {s for a in parser._actions for s in a.option_strings}
    group = parser.add_argument_group("more pipeline settings (MAX's PipelineConfig fields; see docs/models.md)")
    for cls in _configs():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            flag = "--" + f.name.replace("_", "-")
            if f.name in _SKIP or f.name in have or flag in have:
                continue
            kw = _flag_kwargs(hints[f.name])
            if kw is None:
                continue
            have.add(f.name)
            kw.setdefault("metavar", f.name.upper())
            if kw.get("action") is not None:
                kw.pop("metavar")
            group.add_argument(flag, dest=_PREFIX + f.name, default=argparse.SUPPRESS,
                               help=_HELP.get(f.name, _NO_EFFECT), **kw)


def config_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given through add_config_flags' flags, as PipelineConfig keyword arguments."""
    return {k[len(_PREFIX):]: v for k, v in vars(args).items() if k.startswith(_PREFIX)}


__all__ = ["add_config_flags", "config_kwargs"]
