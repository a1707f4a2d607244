"""A config file's values checked against the settings' types (config_file.py): the lax
conversions pydantic makes for MAX's config files (``"64"`` and ``64.0`` for an int, ``"1e3"``
for a float, ``"false"``/``"no"``/``0`` for a bool, an enum's value or name), anything else a
ValueError naming the setting, the file and (briefly) the value."""

from __future__ import annotations

import dataclasses
import enum
import math
import reprlib
import types
import typing
from pathlib import Path
from typing import Any

from max.dtype import DType

_BRIEF = reprlib.Repr()
_BRIEF.maxstring, _BRIEF.maxother, _BRIEF.maxlist, _BRIEF.maxdict, _BRIEF.maxlevel = 60, 60, 4, 4, 2
_TRUE, _FALSE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0"}


def brief(value: Any) -> str:
    """A short repr of a value from a file (an alias-built structure may be huge)."""
    return _BRIEF.repr(value)


def setting_types() -> dict[str, Any]:
    """Each PipelineConfig keyword argument the files may set, and its type."""
    from max.pipelines.lib import config as c

    out: dict[str, Any] = {}
    for cls in (c.ProfilingConfig, c.SamplingConfig, c.KVCacheConfig, c.MAXModelConfig, c.PipelineConfig):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            out[f.name] = hints[f.name]
    for nested in ("model", "draft_model", "sampling", "profiling", "kv_cache", "lora", "speculative"):
        out.pop(nested, None)
    return out


def coerce(name: str, value: Any, hint: Any, where: str) -> Any:
    """`value` as setting `name` of type `hint` takes it, or a ValueError."""

    def bad(expected: str) -> ValueError:
        return ValueError(f"{where}: {name} must be {expected}, got {brief(value)}")

    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        if len(rest) > 1:  # str | Path, str | DType: text
            if isinstance(value, str):
                return value
            raise bad("text" + (" or null" if type(None) in args else ""))
        hint = rest[0]
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise bad("true or false")
    if hint is int:
        if isinstance(value, bool):
            raise bad("an integer")
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                raise bad("an integer") from None
        if isinstance(value, int):
            return value
        raise bad("an integer")
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise bad("a number")
        try:
            return float(value)
        except ValueError:
            raise bad("a number") from None
    if hint is str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (str, int, float)):
            return str(value)
        raise bad("text")
    if hint is DType:
        if isinstance(value, str) and value.lower() in DType.__members__:
            return DType[value.lower()]
        raise bad("a dtype name")
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        for member in hint:
            if isinstance(value, str) and value.lower() in (str(member.value).lower(), member.name.lower()):
                return member
        raise bad("one of " + ", ".join(str(m.value) for m in hint))
    origin = typing.get_origin(hint)
    if origin is dict:
        if isinstance(value, dict):
            return value
        raise bad("a mapping")
    if origin is list:
        item = typing.get_args(hint)[0]
        if item is Path and isinstance(value, str):
            return [Path(value)]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return [Path(v) for v in value] if item is Path else list(value)
        if item in (str, Path):
            raise bad("a list of text")
        raise bad(f"given as {'devices' if name == 'device_specs' else 'a flag'}, not in a file")
    return value


__all__ = ["brief", "coerce", "setting_types"]
