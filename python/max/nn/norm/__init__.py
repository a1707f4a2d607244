"""``max.nn.norm``: normalization layers, as MAX 26.7 places them: the ``rms_norm`` module
(``RMSNorm``, ``GemmaRMSNorm``, the ``rms_norm`` function) and ``GemmaRMSNorm``. The classes are
``max.nn``'s: eager modules, or graph layers when called with the graph layers' signature (a
dtype). ``LayerNorm`` and the graph layers' module are ``max.nn.legacy.norm``."""

from max.nn._legacy_norm import LayerNorm
from max.nn.norm import rms_norm
from max.nn.norm.rms_norm import GemmaRMSNorm, RMSNorm

__all__ = ["GemmaRMSNorm", "LayerNorm", "RMSNorm", "rms_norm"]
