"""The architectures of the registry; ``register_all_models`` adds each once."""

from __future__ import annotations

import importlib

_MODULES = ["llama3", "smollm3", "mistral", "granite", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "olmo2", "bert"]


def register_all_models() -> None:
    """Registers every supported architecture with the pipeline registry."""
    from max.pipelines.lib.registry import PIPELINE_REGISTRY

    for name in _MODULES:
        try:
            module = importlib.import_module(f"max.pipelines.architectures.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"max.pipelines.architectures.{name}":
                continue
            raise
        for arch in module.ARCHITECTURES:
            if arch.name not in PIPELINE_REGISTRY.architectures:
                PIPELINE_REGISTRY.register(arch)


__all__ = ["register_all_models"]
