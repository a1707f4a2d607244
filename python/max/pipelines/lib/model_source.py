"""Finding a model on disk: `model_path` is a local Hugging Face directory (config.json plus
safetensors weights, sharded or not) or one GGUF file (hyper-parameters, weights and tokenizer
all inside), or a repository id already in the local Hugging Face cache. There is no download:
anything else is a clear error. GGUF metadata is turned into the Hugging Face config keys the
architectures read."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from max.pipelines.lib.config_checks import ModelConfig, check_config, inside, read_json, real, whole


@dataclass
class ModelSource:
    """A resolved model: its format, files, Hugging Face style config and (GGUF) metadata."""

    model_path: str
    format: str  # "gguf" or "safetensors"
    weight_files: list[Path]
    config: ModelConfig
    directory: Path | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def architecture(self) -> str:
        archs = self.config.get("architectures") or []
        return archs[0] if archs else ""

    @property
    def gguf_file(self) -> Path | None:
        return self.weight_files[0] if self.format == "gguf" else None


def _hub_snapshot(repo_id: str) -> Path | None:
    """The newest snapshot of `repo_id` in the local Hugging Face cache, if any."""
    root = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub")
    snaps = root / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    if not snaps.is_dir():
        return None
    candidates = sorted((p for p in snaps.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    return candidates[0] if candidates else None


def _not_found(model_path: str) -> FileNotFoundError:
    if re.fullmatch(r"[\w.-]+/[\w.-]+", model_path):
        return FileNotFoundError(
            f"model {model_path!r} is not a local directory or file, and this engine does not download from the "
            f"Hugging Face Hub. Download it first (for example `huggingface-cli download {model_path} --local-dir "
            f"<dir>`) and pass --model-path <dir>, or pass the path of a .gguf file."
        )
    return FileNotFoundError(f"model path {model_path!r} does not exist")


def _safetensors_files(directory: Path) -> list[Path]:
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(f, str) for f in weight_map.values()):
            raise ValueError(f"{index} is not a valid safetensors index: its weight_map must map names to files")
        outside = sorted({f for f in weight_map.values() if not inside(f)})
        if outside:
            raise ValueError(f"{index} names shards outside the model directory: {', '.join(outside)}")
        files = sorted({directory / f for f in weight_map.values()})
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(f"{index} names shards that are missing: {', '.join(missing)}")
        return files
    single = directory / "model.safetensors"
    if single.is_file():
        return [single]
    return sorted(directory.glob("*.safetensors"))


def resolve(model_path: str, weight_path: list[Path] | None = None) -> ModelSource:
    """Locates the model and reads its configuration. Raises FileNotFoundError for missing
    paths and ValueError for files that are not what they claim to be."""
    if not model_path:
        raise ValueError("no model given: pass --model-path (a local directory or .gguf file)")
    path = Path(model_path).expanduser()
    if not path.exists():
        snap = _hub_snapshot(model_path)
        if snap is None:
            raise _not_found(model_path)
        path = snap
    weights = [Path(p).expanduser() for p in (weight_path or [])]
    for p in weights:
        if not p.is_absolute() and path.is_dir() and (path / p).exists():
            p = path / p
        if not p.exists():
            raise FileNotFoundError(f"weight path {str(p)!r} does not exist")
    weights = [path / p if not p.is_absolute() and path.is_dir() and (path / p).exists() else p for p in weights]
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ValueError(f"{path} is a file but not a .gguf file; pass a GGUF file or a model directory")
        others = [p for p in weights if p.resolve() != path.resolve()]
        if others:
            raise ValueError(f"--model-path {path} is a GGUF file, which holds the weights itself; --weight-path "
                             f"{', '.join(map(str, others))} would be ignored: pass the weights by one path or the other")
        return _from_gguf(str(model_path), path, None)
    if not path.is_dir():
        raise ValueError(f"model path {path} is neither a file nor a directory")
    ggufs = [p for p in weights if p.suffix.lower() == ".gguf"]
    if len(ggufs) > 1 or (ggufs and len(weights) > len(ggufs)):
        raise ValueError(f"--weight-path: {', '.join(map(str, weights))}: a GGUF model is one file (split GGUF files "
                         "are not supported), and GGUF and safetensors weights do not mix")
    if not weights:
        config_file = path / "config.json"
        if not config_file.is_file():
            found = sorted(path.glob("*.gguf"))
            if len(found) == 1:
                return _from_gguf(str(model_path), found[0], path)
            raise FileNotFoundError(f"{path} has no config.json (and not exactly one .gguf file)")
    if ggufs:
        return _from_gguf(str(model_path), ggufs[0], path)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{path} has no config.json")
    config = check_config(read_json(config_file, object), str(config_file))
    files = weights or _safetensors_files(path)
    if not files:
        raise FileNotFoundError(f"{path} holds no safetensors weights (model.safetensors or shards)")
    for f in files:
        if f.suffix.lower() != ".safetensors":
            raise ValueError(f"{f}: only safetensors and GGUF weights are supported")
        if not f.is_file():
            raise ValueError(f"{f} is not a regular file")
    return ModelSource(str(model_path), "safetensors", files, config, path)


def read_gguf_metadata(path: Path) -> dict[str, Any]:
    """The GGUF file's key/value metadata (plain Python values)."""
    from max.graph.weights import GGUFWeights

    return GGUFWeights(path).metadata


# GGUF general.architecture -> the Hugging Face architecture name it converts from.
GGUF_ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "granite": "GraniteForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
    "smollm3": "SmolLM3ForCausalLM",
    "bert": "BertModel",
}


def _number(value: Any, key: str, kind: type = int, positive: bool = True, per_layer: bool = False) -> Any:
    """A config or metadata value as `kind` (a whole number, or a finite float), or a ValueError
    naming the key (model files are untrusted). With `per_layer`, a list (a GGUF per-layer value,
    such as the heads of each layer) gives its first entry."""
    if per_layer and isinstance(value, list) and value:
        if any(v != value[0] for v in value):
            raise ValueError(f"the model's {key} differs between layers ({value[:8]}...), which is not supported")
        value = value[0]
    if kind is int:
        return whole(value, key, low=1 if positive else 0)
    return real(value, key, positive)


def gguf_to_hf_config(meta: dict[str, Any]) -> dict[str, Any]:
    """Hugging Face config keys from GGUF hyper-parameters (``{arch}.block_count`` ...)."""
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise ValueError("the GGUF file has no general.architecture")

    def get(key: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{key}", default)

    for key in ("embedding_length", "attention.head_count", "block_count"):
        if get(key) is None:
            if arch not in GGUF_ARCHITECTURES:
                raise ValueError(f"unsupported GGUF architecture {arch!r} (its file lacks {arch}.{key}); supported: "
                                 f"{', '.join(sorted(GGUF_ARCHITECTURES))}")
            raise ValueError(f"the GGUF file lacks {arch}.{key}")
    hidden = _number(get("embedding_length"), f"{arch}.embedding_length")
    heads = _number(get("attention.head_count"), f"{arch}.attention.head_count", per_layer=True)
    kv_heads = _number(get("attention.head_count_kv", heads), f"{arch}.attention.head_count_kv", per_layer=True)
    if heads % kv_heads:
        raise ValueError(f"the model's {heads} attention heads are not a multiple of its {kv_heads} kv heads")
    tokens = meta.get("tokenizer.ggml.tokens")
    config: dict[str, Any] = {
        "architectures": [GGUF_ARCHITECTURES.get(arch, f"gguf:{arch}")],
        "model_type": arch,
        "hidden_size": hidden,
        "num_hidden_layers": _number(get("block_count"), f"{arch}.block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "intermediate_size": _number(get("feed_forward_length", 4 * hidden), f"{arch}.feed_forward_length",
                                     per_layer=True),
        "max_position_embeddings": _number(get("context_length", 2048), f"{arch}.context_length"),
        "rms_norm_eps": _number(get("attention.layer_norm_rms_epsilon", 1e-6), f"{arch}.attention.layer_norm_rms_epsilon", float),
        "rope_theta": _number(get("rope.freq_base", 10000.0), f"{arch}.rope.freq_base", float),
        "vocab_size": _number(get("vocab_size", len(tokens) if tokens else 1), f"{arch}.vocab_size"),
        "head_dim": _number(get("attention.key_length", max(1, hidden // heads)), f"{arch}.attention.key_length"),
        "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": meta.get("tokenizer.ggml.eos_token_id"),
    }
    rot = get("rope.dimension_count")
    if rot is not None:
        rot = _number(rot, f"{arch}.rope.dimension_count")
        if rot % 2 or rot > config["head_dim"]:
            raise ValueError(f"the model's {arch}.rope.dimension_count must be even and at most its head size "
                             f"{config['head_dim']}, got {rot}")
        if rot != config["head_dim"]:
            config["partial_rotary_factor"] = rot / config["head_dim"]
    scaling = get("rope.scaling.type")
    if scaling not in (None, "none"):
        factor = _number(get("rope.scaling.factor", 1.0), f"{arch}.rope.scaling.factor", float)
        config["rope_scaling"] = {"rope_type": str(scaling), "factor": factor}
    if arch == "smollm3":  # llama.cpp hard-codes its NoPE layers: every fourth
        config["no_rope_layer_interval"] = 4
    if arch == "granite":  # the converter's *_scale keys hold the config's *_multiplier values
        for key, hf in (("embedding_scale", "embedding_multiplier"), ("residual_scale", "residual_multiplier"),
                        ("attention.scale", "attention_multiplier"), ("logit_scale", "logits_scaling")):
            if get(key) is not None:
                config[hf] = _number(get(key), f"{arch}.{key}", float)
    if arch == "phi3":  # a window of 0 is none; LongRoPE: its factors are tensors (rope_for reads them)
        config["sliding_window"] = _number(get("attention.sliding_window", 0), f"{arch}.attention.sliding_window",
                                           positive=False) or None
        original = get("rope.scaling.original_context_length")
        if original is not None:
            key = f"{arch}.rope.scaling.original_context_length"
            config["original_max_position_embeddings"] = _number(original, key)
        if get("rope.scaling.attn_factor") is not None:
            config["rope_scaling"] = {"rope_type": "longrope", "attention_factor": _number(
                get("rope.scaling.attn_factor"), f"{arch}.rope.scaling.attn_factor", float)}
    if arch in ("gemma2", "gemma3"):
        config["sliding_window"] = _number(get("attention.sliding_window", 4096), f"{arch}.attention.sliding_window")
        if arch == "gemma3":
            config["rope_local_base_freq"] = _number(get("rope.freq_base_swa", 10000.0), f"{arch}.rope.freq_base_swa",
                                                     float)
        config["hidden_activation"] = "gelu_pytorch_tanh"
        config["sliding_window_pattern"] = 6 if arch == "gemma3" else 2
        # llama.cpp scales Gemma queries by 1/sqrt(head_dim), except the 27B models' by hidden / heads
        # (Gemma 3 27B: 62 layers, Gemma 2 27B: 46).
        config["query_pre_attn_scalar"] = (
            hidden // heads if int(get("block_count")) == (62 if arch == "gemma3" else 46) else config["head_dim"]
        )
        for key in ("final_logit_softcapping", "attn_logit_softcapping"):
            config[key] = None if get(key) is None else _number(get(key), f"{arch}.{key}", float)
    return config


def _from_gguf(model_path: str, path: Path, directory: Path | None) -> ModelSource:
    if not path.is_file():
        raise ValueError(f"{path} is not a regular file")
    try:
        meta = read_gguf_metadata(path)
    except OSError:
        raise
    except ValueError as e:
        raise ValueError(f"{path} is not a readable GGUF file: {e}") from None
    return ModelSource(model_path, "gguf", [path], check_config(gguf_to_hf_config(meta), f"{path}'s metadata"),
                       directory, meta)


__all__ = ["GGUF_ARCHITECTURES", "ModelSource", "gguf_to_hf_config", "read_gguf_metadata", "resolve"]
