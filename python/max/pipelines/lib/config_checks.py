"""Checks of an untrusted model's configuration, before anything is built from it: each value an
architecture reads has its type and range checked here (a wrong one is a ValueError naming the
key), JSON side files are read with errors that name the file, a missing key is an error that
names it, and the layer count must match the layers the weights hold (so a config cannot make
the engine build a million layers)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any

#: The longest sequence (and position table) a model may claim: 4M positions.
LONGEST_SEQUENCE = 1 << 22
#: The largest width, count or vocabulary a config may give (dims are int32 inside).
LARGEST_DIM = (1 << 31) - 1

# Keys every architecture may read: whole numbers >= 1 (and their upper bound).
_COUNTS = {
    "hidden_size": LARGEST_DIM, "intermediate_size": LARGEST_DIM, "num_attention_heads": LARGEST_DIM,
    "num_key_value_heads": LARGEST_DIM, "num_hidden_layers": LARGEST_DIM, "head_dim": LARGEST_DIM,
    "vocab_size": LARGEST_DIM,
    "max_position_embeddings": LONGEST_SEQUENCE, "original_max_position_embeddings": LONGEST_SEQUENCE,
    "sliding_window": LONGEST_SEQUENCE, "sliding_window_pattern": LARGEST_DIM, "type_vocab_size": LARGEST_DIM,
}
# Finite numbers > 0.
_POSITIVE = ("rope_theta", "rms_norm_eps", "layer_norm_eps", "query_pre_attn_scalar", "attn_logit_softcapping",
             "final_logit_softcapping", "rope_local_base_freq", "logits_scaling")
# Finite numbers.
_FINITE = ("embedding_multiplier", "residual_multiplier", "attention_multiplier")


class MissingKey(KeyError, ValueError):
    """A key the model needs and its config lacks (a ValueError, and a KeyError for ``in``-style
    callers)."""

    def __str__(self) -> str:
        return str(self.args[0])


class ModelConfig(dict):
    """A checked config: ``config[key]`` for a missing key says which one the model lacks."""

    def __missing__(self, key: str) -> Any:
        raise MissingKey(f"the model's config lacks {key!r}")


class Weights(dict):
    """Weights by name: ``weights[name]`` for a missing one says the checkpoint lacks it."""

    def __missing__(self, key: str) -> Any:
        raise MissingKey(f"the checkpoint lacks the weight {key!r}")


def read_json(path: Path, expect: type | tuple[type, ...] = dict) -> Any:
    """A JSON file of a model, of type `expect`; a ValueError naming the file otherwise."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except OSError:
        raise
    except (ValueError, RecursionError) as e:  # (UnicodeDecodeError is a ValueError)
        raise ValueError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(value, expect):
        want = " or ".join(t.__name__ for t in (expect if isinstance(expect, tuple) else (expect,)))
        raise ValueError(f"{path} must hold a JSON {'object' if want == 'dict' else want}, got {type(value).__name__}")
    return value


def inside(relative: str) -> bool:
    """Whether a file name from a model's index stays inside the model's directory: relative,
    without ``..`` (checked as text: Hugging Face cache snapshots are symlinks into blobs/)."""
    parts = PurePosixPath(relative.replace("\\", "/")).parts
    return bool(parts) and not PurePosixPath(relative).is_absolute() and ".." not in parts and ":" not in parts[0]


def whole(value: Any, key: str, low: int = 1, high: int = LARGEST_DIM) -> int:
    """`value` as an int in [low, high] (no bools, no fractions); a ValueError naming `key`."""
    ok = isinstance(value, int) and not isinstance(value, bool)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value, ok = int(value), True
    if not ok or not low <= value <= high:
        raise ValueError(f"the model's {key} must be a whole number from {low} to {high}, got {value!r}")
    return int(value)


def real(value: Any, key: str, positive: bool = True) -> float:
    """`value` as a finite float (> 0 when `positive`); a ValueError naming `key`."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or (positive and not value > 0):
        raise ValueError(f"the model's {key} must be a finite{' positive' if positive else ''} number, got {value!r}")
    return float(value)


def _check_rope_scaling(scaling: Any, key: str) -> None:
    if scaling is None:
        return
    if not isinstance(scaling, dict):
        raise ValueError(f"the model's {key} must be an object, got {scaling!r}")
    kind = scaling.get("rope_type") or scaling.get("type")
    if kind is not None and not isinstance(kind, str):
        raise ValueError(f"the model's {key}.rope_type must be a string, got {kind!r}")
    for k in ("factor", "low_freq_factor", "high_freq_factor", "attention_factor", "beta_fast", "beta_slow"):
        if scaling.get(k) is not None:
            real(scaling[k], f"{key}.{k}")
    if scaling.get("original_max_position_embeddings") is not None:
        whole(scaling["original_max_position_embeddings"], f"{key}.original_max_position_embeddings",
              high=LONGEST_SEQUENCE)
    if kind == "llama3":
        for k in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
            if scaling.get(k) is None:
                raise ValueError(f"the model's {key} (llama3) lacks {k}")
        if not scaling["low_freq_factor"] < scaling["high_freq_factor"]:
            raise ValueError(f"the model's {key}: low_freq_factor must be below high_freq_factor")
    if kind in ("linear", "dynamic") and scaling.get("factor") is None:
        raise ValueError(f"the model's {key} ({kind}) lacks factor")
    for k in ("short_factor", "long_factor"):
        if k in scaling:
            values = scaling[k]
            if not isinstance(values, list) or not values:
                raise ValueError(f"the model's {key}.{k} must be a list of numbers")
            for i, v in enumerate(values):
                real(v, f"{key}.{k}[{i}]")


def check_config(config: Any, source: str = "config.json") -> ModelConfig:
    """The config, checked (see the module docstring); `source` names it in errors."""
    if not isinstance(config, dict):
        raise ValueError(f"{source} must hold a JSON object, got {type(config).__name__}")
    # A known number given as null is absent: `config[key]` then names it as missing.
    config = {k: v for k, v in config.items() if not (v is None and (k in _COUNTS or k in _POSITIVE or k in _FINITE))}
    archs = config.get("architectures")
    if archs is not None and (not isinstance(archs, list) or not all(isinstance(a, str) for a in archs)):
        raise ValueError(f"the model's architectures must be a list of names, got {archs!r}")
    for key, high in _COUNTS.items():  # (written back: 4096.0 becomes 4096)
        if config.get(key) is not None:
            config[key] = whole(config[key], key, high=high)
    for key in _POSITIVE:
        if config.get(key) is not None:
            config[key] = real(config[key], key)
    for key in _FINITE:
        if config.get(key) is not None:
            config[key] = real(config[key], key, positive=False)
    factor = config.get("partial_rotary_factor")
    if factor is not None and not 0 < real(factor, "partial_rotary_factor") <= 1:
        raise ValueError(f"the model's partial_rotary_factor must be in (0, 1], got {factor!r}")
    _check_rope_scaling(config.get("rope_scaling"), "rope_scaling")
    params = config.get("rope_parameters")
    if isinstance(params, dict) and ("full_attention" in params or "sliding_attention" in params):
        for name, p in params.items():
            _check_rope_scaling(p, f"rope_parameters.{name}")
    else:
        _check_rope_scaling(params, "rope_parameters")
    _classic_rope_keys(config)
    types = config.get("layer_types")
    if types is not None:
        n = config.get("num_hidden_layers")
        known = ("full_attention", "sliding_attention")
        if not isinstance(types, list) or not all(t in known for t in types) or (n is not None and len(types) != n):
            raise ValueError(f"the model's layer_types must list {known[0]!r} or {known[1]!r} for each of its "
                             f"{n} layers")
    return ModelConfig(config)


def _classic_rope_keys(config: dict) -> None:
    """Configs saved by transformers 5 give rope settings as ``rope_parameters`` (flat, or per
    layer type); the classic keys the architectures read (``rope_theta``, ``rope_scaling``,
    ``partial_rotary_factor``, Gemma's ``rope_local_base_freq``) are filled in from it where a
    config lacks them."""
    params = config.get("rope_parameters")
    if not isinstance(params, dict):
        return
    full, sliding = params, None
    if "full_attention" in params or "sliding_attention" in params:
        full, sliding = params.get("full_attention") or {}, params.get("sliding_attention")
    if full.get("rope_theta") is not None and config.get("rope_theta") is None:
        config["rope_theta"] = real(full["rope_theta"], "rope_parameters.rope_theta")
    if full.get("partial_rotary_factor") is not None and config.get("partial_rotary_factor") is None:
        config["partial_rotary_factor"] = real(full["partial_rotary_factor"], "rope_parameters.partial_rotary_factor")
    kind = full.get("rope_type") or full.get("type")
    if kind not in (None, "default") and config.get("rope_scaling") is None:
        config["rope_scaling"] = {k: v for k, v in full.items() if k not in ("rope_theta", "partial_rotary_factor")}
    if isinstance(sliding, dict) and sliding.get("rope_theta") is not None and "rope_local_base_freq" not in config:
        config["rope_local_base_freq"] = real(sliding["rope_theta"], "rope_parameters.sliding_attention.rope_theta")


def check_layers(names: Iterable[str], layers: int, pattern: str = r"layers\.(\d+)\.") -> None:
    """The weights hold exactly layers 0 .. layers-1 (`pattern` finds a name's layer index):
    a config claiming more or fewer layers than the checkpoint is an error, not a model built
    with missing or ignored weights."""
    found = {int(m.group(1)) for n in names if (m := re.search(pattern, n))}
    if found != set(range(layers)):
        have = f"layers 0 to {max(found)}" if found and found == set(range(max(found) + 1)) else \
            f"{len(found)} layers" if found else "no layers"
        raise ValueError(f"the model's config gives {layers} layers but its weights hold {have}")


__all__ = ["LARGEST_DIM", "LONGEST_SEQUENCE", "MissingKey", "ModelConfig", "Weights", "check_config", "check_layers",
           "inside", "read_json", "real", "whole"]
