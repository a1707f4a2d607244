"""Compiling and running graphs (``max.engine``): ``InferenceSession.load(graph)`` compiles a
staged graph for the session's devices and returns a ``Model`` to execute."""

from max.engine.session import (
    CustomExtensionsType,
    GPUProfilingMode,
    InferenceSession,
    LogLevel,
    Model,
    TensorSpec,
)

__all__ = ["CustomExtensionsType", "GPUProfilingMode", "InferenceSession", "LogLevel", "Model", "TensorSpec"]
