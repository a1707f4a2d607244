"""``max.nn.norm.rms_norm``: root mean square normalization: ``RMSNorm(dim, eps=1e-6)``,
``GemmaRMSNorm`` (weights applied as ``1 + w``) and the function ``rms_norm``."""

from max.nn.layers import GemmaRMSNorm, RMSNorm, rms_norm

__all__ = ["GemmaRMSNorm", "RMSNorm", "rms_norm"]
