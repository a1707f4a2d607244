"""``max.nn.legacy``: the name MAX 26.1/26.2 give the graph-building layers. The same classes
as ``max.nn``; the submodules (``max.nn.legacy.linear``, ``.norm``, ``.attention``, ...) are
the same modules too."""

import sys as _sys

from max import nn as _nn
from max.nn import *  # noqa: F403
from max.nn import __all__ as _all
from max.nn import attention, embedding, kernels, kv_cache, layer, linear, norm, rotary_embedding, sequential
from max.nn import transformer

for _name in ["attention", "embedding", "kernels", "kv_cache", "layer", "linear", "norm", "rotary_embedding",
              "sequential", "transformer", "attention.attention_with_rope", "attention.multihead_attention",
              "attention.mask_config", "kv_cache.cache_params", "transformer.transformer"]:
    _sys.modules[f"{__name__}.{_name}"] = _sys.modules[f"max.nn.{_name}"]

__all__ = [*_all, "attention", "embedding", "kernels", "kv_cache", "layer", "linear", "norm", "rotary_embedding",
           "sequential", "transformer"]
del _nn
