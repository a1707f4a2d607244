"""Model pipelines (MAX's ``max.pipelines``): configure a model (``PipelineConfig``), find its
architecture in ``PIPELINE_REGISTRY`` and build its tokenizer and pipeline."""

from max.pipelines.lib.config import (
    KVCacheConfig,
    MAXModelConfig,
    PipelineConfig,
    PipelineRole,
    ProfilingConfig,
    RopeType,
    SamplingConfig,
)
from max.pipelines.lib.context import EmbeddingContext, TextContext
from max.pipelines.lib.registry import (
    PIPELINE_REGISTRY,
    PipelineRegistry,
    SupportedArchitecture,
    SupportedEncoding,
    WeightsFormat,
)
from max.interfaces import PipelineTask
from max.pipelines.architectures import register_all_models

register_all_models()

__all__ = [
    "PIPELINE_REGISTRY", "EmbeddingContext", "KVCacheConfig", "MAXModelConfig", "PipelineConfig", "PipelineRegistry",
    "PipelineRole", "PipelineTask", "ProfilingConfig", "RopeType", "SamplingConfig", "SupportedArchitecture",
    "SupportedEncoding", "TextContext", "WeightsFormat", "register_all_models",
]
