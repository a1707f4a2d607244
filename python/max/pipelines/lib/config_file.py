"""Pipeline settings from a YAML (or JSON) file: ``PipelineConfig(config_file=..., section_name=...)``
and ``max generate|encode|serve|warm-cache --config-file FILE``.

The file is a mapping of ``PipelineConfig`` keyword arguments (``max_length: 4096``,
``kv_cache_page_size: 256``; dashes may stand for underscores, as in the flags). Mappings under
``model``, ``kv_cache``, ``sampling`` and ``profiling`` are read as the same arguments, so a file
may group them; a string under ``model`` is the model path, and ``devices`` takes the flag's
spelling (``gpu:0,1``). With a section name the settings are the mapping under that top-level
key. Arguments given in code or on the command line win over the file's. Values are checked
against the settings' types (config_values.py); a key given twice is an error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from max.pipelines.lib.config_values import brief, coerce, setting_types

_GROUPS = ("model", "kv_cache", "sampling", "profiling")


def read_config_file(config_file: str | Path, section_name: str | None = None) -> dict[str, Any]:
    """The keyword arguments a config file holds (see the module's docstring). Raises
    FileNotFoundError, KeyError for a missing section (naming the sections there are) and
    ValueError for a file that is not a mapping of settings."""
    path = Path(config_file).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"config file {str(config_file)!r} not found")
    data = _load(path)
    if section_name is not None:
        if not isinstance(data, dict) or section_name not in data:
            sections = [k for k, v in data.items() if isinstance(v, dict)] if isinstance(data, dict) else []
            raise KeyError(f"section {section_name!r} not in config file {str(path)!r} "
                           f"(sections there: {brief(sections)})")
        data = data[section_name]
    where = f"config file {str(path)!r}" + (f", section {section_name!r}" if section_name is not None else "")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping of settings, got {type(data).__name__}")
    return _flatten(data, where)


def _load(path: Path) -> Any:
    import yaml

    class Loader(yaml.SafeLoader):
        """YAML's safe loader, refusing a key given twice in one mapping (YAML keeps the last)."""

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if isinstance(key, str) and key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"{key!r} is given twice", key_node.start_mark)
                if isinstance(key, str):
                    seen.add(key)
            return super().construct_mapping(node, deep=deep)

    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=Loader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as e:
        raise ValueError(f"config file {str(path)!r} is not valid YAML: {e}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"config file {str(path)!r} is not UTF-8 text ({e})") from None


def _flatten(data: dict[Any, Any], where: str) -> dict[str, Any]:
    types = setting_types()
    out: dict[str, Any] = {}

    def put(key: Any, value: Any) -> None:
        if not isinstance(key, str):
            raise ValueError(f"{where}: setting names must be text, got {brief(key)}")
        name = key.replace("-", "_")
        name = "model_path" if name == "model_name" else name  # (MAX's other name for it)
        if name == "device_specs":
            raise ValueError(f"{where}: give the devices as devices: cpu, gpu or gpu:0,1")
        if name in out:
            raise ValueError(f"{where}: {name!r} is given twice")
        out[name] = coerce(name, value, types[name], where) if name in types else value

    for key, value in data.items():
        name = key.replace("-", "_") if isinstance(key, str) else key
        if name in _GROUPS and not (name == "model" and isinstance(value, str)):
            if not isinstance(value, dict):
                what = "the model's path or a mapping" if name == "model" else "a mapping"
                raise ValueError(f"{where}: {name} must be {what} of its settings, got {brief(value)}")
            for k, v in value.items():
                put(k, v)
        elif name == "model":
            put("model_path", value)
        elif name == "devices":
            from max.entrypoints.cli.options import parse_devices

            if not isinstance(value, str):
                raise ValueError(f"{where}: devices must be text such as cpu, gpu or gpu:0,1, got {brief(value)}")
            try:
                out["device_specs"] = parse_devices(value)
            except Exception as e:  # noqa: BLE001 - argparse's error type, re-raised as a ValueError
                raise ValueError(f"{where}: devices: {e}") from None
        else:
            put(key, value)
    return out


__all__ = ["read_config_file"]
