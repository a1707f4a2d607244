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
        # entries whose name an entry of another task already has, by (name, task)
        self._tasked: dict[tuple[str, PipelineTask], SupportedArchitecture] = {}
        self._gguf: dict[str, str] = {}
        for a in architectures:
            self.register(a)

    def register(self, architecture: SupportedArchitecture, *, allow_override: bool = False) -> None:
        """Adds an architecture; ValueError when its name is taken for the same task, unless
        `allow_override`. A name taken by an entry of another task goes into a second table keyed
        by (name, task), which lookups with a task consult."""
        name, task = architecture.name, architecture.task
        first = self.architectures.get(name)
        if first is not None and first.task != task:
            if (name, task) in self._tasked and not allow_override:
                raise ValueError(f"architecture {name!r} is already registered for {task.value}")
            self._tasked[(name, task)] = architecture
            return
        if first is not None and not allow_override:
            raise ValueError(f"architecture {name!r} is already registered")
        self.architectures[name] = architecture
        for g in architecture.gguf_names:
            self._gguf[g] = name

    def _of_task(self, arch: SupportedArchitecture | None, task: PipelineTask | None) -> SupportedArchitecture | None:
        """`arch`, or the entry of its name registered for `task` when that is another task."""
        if arch is None or task is None or arch.task == task:
            return arch
        return self._tasked.get((arch.name, task))

    def names(self) -> list[str]:
        """The registered architecture names, sorted."""
        return sorted(self.architectures)

    def retrieve_architecture(self, huggingface_repo: Any = None, use_legacy_module: bool = True,
                              task: PipelineTask | None = None, *, name: str | None = None) -> SupportedArchitecture | None:
        """The entry for an architecture name (or for a resolved model source)."""
        if name is None:
            name = getattr(huggingface_repo, "architecture", huggingface_repo)
        return self._of_task(self.architectures.get(str(name)) if name else None, task)

    def architecture_for(self, source: Any, task: PipelineTask | None = None,
                         override: str | None = None) -> SupportedArchitecture:
        """The entry for a model source (or the registered architecture `override` names);
        ValueError listing the supported ones otherwise."""
        if override is not None:
            found = self.architectures.get(override)
            if found is None:
                raise ValueError(f"override_architecture {override!r} is not a registered architecture; "
                                 f"registered: {', '.join(self.names())}")
            arch = self._of_task(found, task)
            if arch is None:
                raise ValueError(f"architecture {override!r} is a {found.task.value} architecture, "
                                 f"not a {task.value if task else ''} one")
            return arch
        name = source.architecture
        arch = self._of_task(self.architectures.get(name), task) or self.architectures.get(name)
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

        pipeline = load_pipeline(pipeline_config, task=task, registry=self, architecture=override_architecture)
        return pipeline.tokenizer, pipeline

    def retrieve_factory(self, pipeline_config: PipelineConfig, task: PipelineTask = PipelineTask.TEXT_GENERATION,
                         override_architecture: str | None = None, **kwargs: Any) -> tuple[Any, Callable[[], Any]]:
        """(tokenizer, a function that loads a new pipeline at each call) for `pipeline_config`:
        the model is loaded when the function is called, not here."""
        from max.pipelines.lib.pipeline import load_pipeline

        tokenizer = self.retrieve_tokenizer(pipeline_config, override_architecture, task)
        return tokenizer, lambda: load_pipeline(pipeline_config, task=task, registry=self,
                                                architecture=override_architecture)

    def _source(self, pipeline_config: PipelineConfig) -> Any:
        """The config's model source (its custom architectures registered first)."""
        from max.pipelines.lib.model_source import resolve

        if pipeline_config.custom_architectures:
            self.load_custom(pipeline_config.custom_architectures)
        mc = pipeline_config.model
        return resolve(mc.model_path, mc.weight_path)

    def retrieve_pipeline_task(self, pipeline_config: PipelineConfig) -> PipelineTask:
        """The task of the config's model's architecture (ValueError for an unsupported one)."""
        return self.architecture_for(self._source(pipeline_config)).task

    def retrieve_tokenizer(self, pipeline_config: PipelineConfig, override_architecture: str | None = None,
                           task: PipelineTask | None = None) -> Any:
        """The tokenizer of the config's model (nothing else is loaded)."""
        source = self._source(pipeline_config)
        return self.architecture_for(source, task, override_architecture).tokenizer(source, pipeline_config)

    def retrieve_context_type(self, pipeline_config: PipelineConfig, override_architecture: str | None = None,
                              task: PipelineTask | None = None) -> type:
        """The request context class of the config's model: ``TextContext``, or
        ``EmbeddingContext`` for an embedding model."""
        from max.pipelines.lib.context import EmbeddingContext, TextContext

        arch = self.architecture_for(self._source(pipeline_config), task, override_architecture)
        return EmbeddingContext if arch.task == PipelineTask.EMBEDDINGS_GENERATION else TextContext

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
