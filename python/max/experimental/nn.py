"""``max.experimental.nn``: MAX 26.7's name for the eager modules of ``max.nn``."""

from max.nn.layers import Embedding, GemmaRMSNorm, Linear, ModuleList, RMSNorm, Sequential, rms_norm
from max.nn.module import Module, module_dataclass
from max.nn.rope import RotaryEmbedding, TransposedRotaryEmbedding

__all__ = [
    "Embedding", "GemmaRMSNorm", "Linear", "Module", "ModuleList", "RMSNorm", "RotaryEmbedding", "Sequential",
    "TransposedRotaryEmbedding", "module_dataclass", "rms_norm",
]
