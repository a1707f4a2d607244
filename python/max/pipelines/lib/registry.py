"""``PIPELINE_REGISTRY``: the architectures this engine runs, chosen by the model's
``config.json`` ``architectures[0]`` (or a GGUF file's ``general.architecture``), each a
``SupportedArchitecture`` entry (MAX's fields) naming the model class that builds its graph."""

from __future__ import annotations

import enum
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from max.dtype import DType
from max.graph.quantization import QuantizationEncoding
from max.interfaces import PipelineTask
from max.pipelines.lib.config import PipelineConfig, RopeType


class SupportedEncoding(str, enum.Enum):
    """Weight encodings: float types, and GGUF block encodings (which keep their blocks)."""

    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"
    q4_0 = "q4_0"
    q4_1 = "q4_1"
    q8_0 = "q8_0"
    q4_k = "q4_k"
    q5_k = "q5_k"
    q6_k = "q6_k"
    gptq = "gptq"
    float8_e4m3fn = "float8_e4m3fn"
    float4_e2m1fnx2 = "float4_e2m1fnx2"

    @classmethod
    def parse(cls, value: Any) -> SupportedEncoding:
        """The SupportedEncoding named by `value` (a member or its name); ValueError listing the names."""
        if isinstance(value, SupportedEncoding):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            names = ", ".join(e.value for e in cls)
            raise ValueError(f"unknown quantization encoding {value!r} (known: {names})") from None

    @property
    def dtype(self) -> DType:
        """The dtype of a float encoding (GGUF blocks: float32; decoder.choose_dtype picks
        bfloat16 for them on a GPU)."""
        return {SupportedEncoding.bfloat16: DType.bfloat16, SupportedEncoding.float16: DType.float16}.get(
            self, DType.float32
        )

    @property
    def quantization_encoding(self) -> QuantizationEncoding | None:
        """The graph QuantizationEncoding of a GGUF block encoding, else None."""
        return {
            SupportedEncoding.q4_0: QuantizationEncoding.Q4_0,
            SupportedEncoding.q4_1: QuantizationEncoding.Q4_1,
            SupportedEncoding.q8_0: QuantizationEncoding.Q8_0,
            SupportedEncoding.q4_k: QuantizationEncoding.Q4_K,
            SupportedEncoding.q5_k: QuantizationEncoding.Q5_K,
            SupportedEncoding.q6_k: QuantizationEncoding.Q6_K,
            SupportedEncoding.gptq: QuantizationEncoding.GPTQ,
        }.get(self)


class WeightsFormat(str, enum.Enum):
    """A checkpoint's file format: safetensors or GGUF."""
    safetensors = "safetensors"
    gguf = "gguf"


@dataclass
class SupportedArchitecture:
    """One architecture: its Hugging Face name, examples, encodings, the model class that builds
    and runs its graph, its task and tokenizer, and weight adapters per weights format."""

    name: str
    example_repo_ids: list[str]
    default_encoding: SupportedEncoding
    supported_encodings: dict[SupportedEncoding, list[Any]]
    pipeline_model: type
    task: PipelineTask
    tokenizer: Callable[..., Any]
    default_weights_format: WeightsFormat = WeightsFormat.safetensors
    context_type: type | None = None
    config: type | None = None
    rope_type: RopeType = RopeType.none
    weight_adapters: dict[WeightsFormat, Callable[..., Any]] = field(default_factory=dict)
    multi_gpu_supported: bool = False
    required_arguments: dict[str, Any] = field(default_factory=dict)
    context_validators: list[Callable[..., Any]] = field(default_factory=list)
    supports_empty_batches: bool = False
    requires_max_batch_context_length: bool = False
    gguf_names: list[str] = field(default_factory=list)

    @property
    def tokenizer_cls(self) -> Callable[..., Any]:
        """The tokenizer class (or factory) of the architecture."""
        return self.tokenizer


class PipelineRegistry:
    """Architectures by name; ``retrieve`` builds the tokenizer and pipeline for a config."""

    def __init__(self, architectures: Sequence[SupportedArchitecture] = ()) -> None:
        self.architectures: dict[str, SupportedArchitecture] = {}
        self._gguf: dict[str, str] = {}
        for a in architectures:
            self.register(a)

    def register(self, architecture: SupportedArchitecture, *, allow_override: bool = False) -> None:
        """Adds an architecture; ValueError when its name is taken, unless `allow_override`."""
        if architecture.name in self.architectures and not allow_override:
            raise ValueError(f"architecture {architecture.name!r} is already registered")
        self.architectures[architecture.name] = architecture
        for g in architecture.gguf_names:
            self._gguf[g] = architecture.name

    def names(self) -> list[str]:
        """The registered architecture names, sorted."""
        return sorted(self.architectures)

    def retrieve_architecture(self, huggingface_repo: Any = None, use_legacy_module: bool = True,
                              task: PipelineTask | None = None, *, name: str | None = None) -> SupportedArchitecture | None:
        """The entry for an architecture name (or for a resolved model source)."""
        if name is None:
            name = getattr(huggingface_repo, "architecture", huggingface_repo)
        arch = self.architectures.get(str(name)) if name else None
        if arch is not None and task is not None and arch.task != task:
            return None
        return arch

    def architecture_for(self, source: Any, task: PipelineTask | None = None) -> SupportedArchitecture:
        """The entry for a model source; ValueError listing the supported ones otherwise."""
        name = source.architecture
        arch = self.architectures.get(name)
        if arch is None and name.startswith("gguf:"):
            arch = self.architectures.get(self._gguf.get(name[5:], ""))
        if arch is None:
            shown = name[5:] + " (GGUF)" if name.startswith("gguf:") else (name or "none given")
            raise ValueError(
                f"unsupported architecture {shown} in {source.model_path}; supported: {', '.join(self.names())}"
            )
        if task is not None and arch.task != task:
            raise ValueError(
                f"{source.model_path} is a {arch.name} model ({arch.task.value}), not a {task.value} model"
            )
        return arch

    def retrieve(self, pipeline_config: PipelineConfig, task: PipelineTask = PipelineTask.TEXT_GENERATION,
                 override_architecture: str | None = None) -> tuple[Any, Any]:
        """(tokenizer, pipeline) for the config's model."""
        from max.pipelines.lib.pipeline import load_pipeline

        pipeline = load_pipeline(pipeline_config, task=task, registry=self)
        return pipeline.tokenizer, pipeline

    def retrieve_factory(self, pipeline_config: PipelineConfig, task: PipelineTask = PipelineTask.TEXT_GENERATION,
                         **kwargs: Any) -> tuple[Any, Callable[[], Any]]:
        """(tokenizer, a function returning the pipeline) for `pipeline_config`."""
        tokenizer, pipeline = self.retrieve(pipeline_config, task)
        return tokenizer, lambda: pipeline

    def load_custom(self, specs: Sequence[str]) -> None:
        """Registers the ``ARCHITECTURES`` list of each module (``module`` or ``path:module``)."""
        import os
        import sys

        for spec in specs:
            path, _, module = spec.rpartition(":")
            if path:
                if not os.path.isdir(path):
                    raise ValueError(f"--custom-architectures {spec}: no such directory {path!r}")
                sys.path.insert(0, path)
            try:
                mod = importlib.import_module(module)
            except ImportError as e:
                raise ValueError(f"--custom-architectures {spec}: cannot import {module!r}: {e}") from None
            for arch in getattr(mod, "ARCHITECTURES", []):
                self.register(arch, allow_override=True)

    def reset(self) -> None:
        """Forgets every registered architecture."""
        self.architectures.clear()
        self._gguf.clear()


PIPELINE_REGISTRY = PipelineRegistry()

__all__ = ["PIPELINE_REGISTRY", "PipelineRegistry", "SupportedArchitecture", "SupportedEncoding", "WeightsFormat"]
