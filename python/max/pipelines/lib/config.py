"""Pipeline configuration (MAX's ``PipelineConfig``, ``MAXModelConfig``, ``KVCacheConfig``,
``SamplingConfig``), keyword-only dataclasses with MAX's field names and defaults. As in MAX,
``PipelineConfig(model_path=...)`` routes fields of the nested configs to them."""

from __future__ import annotations

import dataclasses
import enum
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from max.driver import DeviceSpec
from max.dtype import DType
from max.nn.kv_cache import KVCacheStrategy


class PipelineRole(str, enum.Enum):
    """Which phases a pipeline serves: prefill and decode, or only one of them."""
    PrefillAndDecode = "prefill_and_decode"
    PrefillOnly = "prefill_only"
    DecodeOnly = "decode_only"


class RopeType(str, enum.Enum):
    """How rotary embeddings pair dims: ``normal`` adjacent pairs (GGUF Llama), ``neox`` halves."""

    none = "none"
    normal = "normal"
    neox = "neox"
    longrope = "longrope"
    yarn = "yarn"


@dataclass(kw_only=True)
class KVCacheConfig:
    """The paged KV cache: page size in tokens, prefix caching, and how much device memory the
    cache may take (``device_memory_utilization`` of what is free after the weights)."""

    cache_strategy: KVCacheStrategy = KVCacheStrategy.MODEL_DEFAULT
    kv_cache_page_size: int = 128
    enable_prefix_caching: bool = False
    enable_kvcache_swapping_to_host: bool = False
    device_memory_utilization: float = 0.9
    host_kvcache_swap_space_gb: float = 50.0
    kv_cache_format: str | DType | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.kv_cache_page_size <= 65536:
            raise ValueError(f"kv_cache_page_size must be from 1 to 65536 tokens, got {self.kv_cache_page_size}")
        if not 0 < self.device_memory_utilization <= 1:
            raise ValueError(f"device_memory_utilization must be in (0, 1], got {self.device_memory_utilization}")
        if self.enable_kvcache_swapping_to_host:
            raise NotImplementedError("swapping KV-cache pages to host memory is not supported yet")
        self.cache_dtype()  # a bad kv_cache_format fails here, with the values it may take

    def cache_dtype(self) -> DType | None:
        """The KV cache's dtype `kv_cache_format` names (None: the model's activation dtype).
        float8_e4m3fn, which MAX also takes, is not supported yet."""
        fmt = self.kv_cache_format
        if fmt is None:
            return None
        name = (fmt.name if isinstance(fmt, DType) else str(fmt)).lower()
        for d in (DType.float32, DType.bfloat16, DType.float16):
            if name == d.name:
                return d
        if name == "float8_e4m3fn":
            raise NotImplementedError("kv_cache_format float8_e4m3fn: float8 KV caches are not supported yet")
        raise ValueError(f"kv_cache_format must be float32, bfloat16 or float16, got {fmt!r}")


@dataclass(kw_only=True)
class MAXModelConfig:
    """Which model: a local Hugging Face directory or GGUF file (`model_path`), optional explicit
    weight files, the weight encoding, devices and cache settings."""

    model_path: str = ""
    served_model_name: str | None = None
    weight_path: list[Path] = field(default_factory=list)
    quantization_encoding: Any = None
    huggingface_model_revision: str = "main"
    huggingface_weight_revision: str = "main"
    trust_remote_code: bool = False
    device_specs: list[DeviceSpec] = field(default_factory=list)
    force_download: bool = False
    vision_config_overrides: dict[str, Any] = field(default_factory=dict)
    rope_type: RopeType | None = None
    use_subgraphs: bool = True
    data_parallel_degree: int = 1
    allow_safetensors_weights_fp32_bf6_bidirectional_cast: bool = False
    kv_cache: KVCacheConfig = field(default_factory=KVCacheConfig)

    def __post_init__(self) -> None:
        if isinstance(self.weight_path, (str, Path)):
            self.weight_path = [Path(self.weight_path)]
        self.weight_path = [Path(p) for p in self.weight_path]
        for which in ("huggingface_model_revision", "huggingface_weight_revision"):
            if getattr(self, which) != "main":
                raise NotImplementedError(f"{which} {getattr(self, which)!r}: models are read as they are on disk "
                                          "(the Hugging Face cache's main revision); other revisions are not supported")
        if self.force_download:
            raise NotImplementedError("force_download: models are read from disk (a local directory, a .gguf file or "
                                      "the Hugging Face cache); nothing is downloaded")
        if self.rope_type is not None:
            raise NotImplementedError(f"rope_type {self.rope_type!r}: the rotary embedding comes from the model's "
                                      "architecture and weight format and cannot be overridden")
        if int(self.data_parallel_degree) < 1:
            raise ValueError(f"--data-parallel-degree must be at least 1, got {self.data_parallel_degree}")


@dataclass(kw_only=True)
class SamplingConfig:
    """Sampling features the model is built with."""

    in_dtype: DType = DType.float32
    out_dtype: DType = DType.float32
    enable_structured_output: bool = False
    enable_variable_logits: bool = False
    enable_penalties: bool = True
    enable_min_tokens: bool = True
    do_penalties: bool = True


@dataclass(kw_only=True)
class ProfilingConfig:
    gpu_profiling: str = "off"


@dataclass(kw_only=True, init=False)
class PipelineConfig:
    """Everything a pipeline needs. Unknown keyword arguments are an error naming them.

    ``enable_overlap_scheduler``: each ``execute`` of several decode steps also queues the next
    call's first step, which the device runs while the host hands the tokens out (used when the
    next call is for the same requests in the same state, else dropped; the tokens are the same
    either way). None (the default) turns it on for accelerators; the CPU's steps are the host's
    own work.

    ``config_file`` (with ``section_name``) reads settings from a YAML file (see config_file.py);
    the keyword arguments given here win over the file's. ``pdl_level``, ``zmq_endpoint_base``,
    ``use_vendor_blas`` and ``use_experimental_kernels`` are taken for compatibility and change
    nothing: launch overlap (PDL) is the ``launch.pdl`` tuning knob's, and there are no vendor BLAS
    or experimental kernels to pick."""

    config_file: str | None = None
    section_name: str | None = None
    max_length: int | None = None
    pipeline_role: PipelineRole = PipelineRole.PrefillAndDecode
    max_batch_size: int | None = None
    max_queue_size_tg: int | None = None
    min_batch_size_tg: int | None = None
    ep_size: int = 1
    ce_delay_ms: float = 0.0
    enable_prioritize_first_decode: bool = False
    enable_chunked_prefill: bool = True
    enable_in_flight_batching: bool = False
    max_num_steps: int = -1
    max_batch_input_tokens: int = 8192
    enable_echo: bool = False
    pool_embeddings: bool = True
    chat_template: str | Path | None = None
    use_experimental_kernels: str = "false"
    use_vendor_blas: str = "false"
    pdl_level: str = "0"
    zmq_endpoint_base: str = ""
    custom_architectures: list[str] = field(default_factory=list)
    execute_empty_batches: bool = False
    max_batch_total_tokens: int | None = None
    device_graph_capture: bool = False
    force: bool = False
    kvcache_ce_watermark: float = 0.95
    enable_overlap_scheduler: bool | None = None
    use_legacy_module: bool = True
    defer_resolve: bool = False
    model: MAXModelConfig = field(default_factory=MAXModelConfig)
    draft_model: MAXModelConfig | None = None
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    profiling: ProfilingConfig = field(default_factory=ProfilingConfig)
    lora: Any = None
    speculative: Any = None

    def __init__(self, **kwargs: Any) -> None:
        if "model_name" in kwargs:  # (MAX's other name for model_path, which wins when both are given)
            name = kwargs.pop("model_name")
            kwargs.setdefault("model_path", name)
        if kwargs.get("config_file") is not None:
            from max.pipelines.lib.config_file import read_config_file

            kwargs["config_file"] = str(kwargs["config_file"])
            from_file = read_config_file(kwargs["config_file"], kwargs.get("section_name"))
            from_file.pop("config_file", None)
            from_file.pop("section_name", None)
            kwargs = {**from_file, **kwargs}
        elif kwargs.get("section_name") is not None:
            raise ValueError("PipelineConfig: section_name needs a config_file")
        own = {f.name: f for f in dataclasses.fields(PipelineConfig)}
        model_fields = {f.name for f in dataclasses.fields(MAXModelConfig)}
        kv_fields = {f.name for f in dataclasses.fields(KVCacheConfig)}
        sampling_fields = {f.name for f in dataclasses.fields(SamplingConfig)}
        model_kw = {k: kwargs.pop(k) for k in list(kwargs) if k in model_fields and k not in own}
        kv_kw = {k: kwargs.pop(k) for k in list(kwargs) if k in kv_fields}
        sampling_kw = {k: kwargs.pop(k) for k in list(kwargs) if k in sampling_fields and k not in own}
        profiling_fields = {f.name for f in dataclasses.fields(ProfilingConfig)}
        profiling_kw = {k: kwargs.pop(k) for k in list(kwargs) if k in profiling_fields and k not in own}
        unknown = [k for k in kwargs if k not in own]
        if unknown:
            raise TypeError(f"PipelineConfig: unknown arguments: {', '.join(sorted(unknown))}")
        for name, f in own.items():
            if name in kwargs:
                value = kwargs[name]
            elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                value = f.default_factory()  # type: ignore[misc]
            else:
                value = f.default
            object.__setattr__(self, name, value)
        if model_kw or kv_kw:
            base = self.model
            if kv_kw:
                model_kw["kv_cache"] = dataclasses.replace(base.kv_cache, **kv_kw)
            self.model = dataclasses.replace(base, **model_kw)
        if sampling_kw:
            self.sampling = dataclasses.replace(self.sampling, **sampling_kw)
        if profiling_kw:
            self.profiling = dataclasses.replace(self.profiling, **profiling_kw)
        self._validate()

    def _validate(self) -> None:
        for name in ("max_length", "max_batch_size", "max_batch_input_tokens", "max_num_steps"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Integral)):
                raise ValueError(f"{name} must be an integer, got {v!r}")
        if self.max_length is not None and self.max_length < 1:
            raise ValueError(f"max_length must be positive, got {self.max_length}")
        if self.max_batch_size is not None and self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be positive, got {self.max_batch_size}")
        if self.max_batch_input_tokens < 1:
            raise ValueError(f"max_batch_input_tokens must be positive, got {self.max_batch_input_tokens}")
        if self.draft_model is not None or self.speculative is not None:
            raise NotImplementedError("speculative decoding is not supported")
        if self.lora is not None:
            raise NotImplementedError("LoRA adapters are not supported")
        if self.pipeline_role != PipelineRole.PrefillAndDecode:
            raise NotImplementedError(f"pipeline_role {PipelineRole(self.pipeline_role).value}: disaggregated prefill "
                                      "and decode are not supported (every pipeline does both)")
        if self.profiling.gpu_profiling not in ("off", "on", "detailed"):
            raise ValueError(f"gpu_profiling must be off, on or detailed, got {self.profiling.gpu_profiling!r}")
        if self.ep_size != 1:
            raise NotImplementedError(f"ep_size {self.ep_size}: expert parallelism is not supported")

    # MAX exposes the model's fields on the pipeline config too.
    @property
    def model_path(self) -> str:
        """The model's path (the model config's ``model_path``)."""
        return self.model.model_path

    @property
    def weight_path(self) -> list[Path]:
        """Explicit weight files, if any (the model config's ``weight_path``)."""
        return self.model.weight_path

    @property
    def quantization_encoding(self) -> Any:
        """The requested weight encoding, if any (the model config's)."""
        return self.model.quantization_encoding


__all__ = ["KVCacheConfig", "MAXModelConfig", "PipelineConfig", "PipelineRole", "ProfilingConfig", "RopeType",
           "SamplingConfig"]
