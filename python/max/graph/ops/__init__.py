"""Ops you can add while staging a graph (``max.graph.ops``), one module per family; random
tensors are the submodule ``ops.random`` (``ops.random.set_seed``, ``ops.random.uniform``, ...).
``TensorType``, ``DeviceRef`` and ``Callable`` are here too, as MAX lists them."""

from collections.abc import Callable

from max.graph.ops import allreduce, random, reducescatter
from max.graph.ops.buffer import *  # noqa: F403
from max.graph.ops.buffer import __all__ as _buffer
from max.graph.ops.collective import *  # noqa: F403
from max.graph.ops.collective import __all__ as _collective
from max.graph.ops.control import *  # noqa: F403
from max.graph.ops.control import __all__ as _control
from max.graph.ops.conv import *  # noqa: F403
from max.graph.ops.conv import __all__ as _conv
from max.graph.ops.creation import *  # noqa: F403
from max.graph.ops.creation import __all__ as _creation
from max.graph.ops.elementwise import *  # noqa: F403
from max.graph.ops.elementwise import __all__ as _elementwise
from max.graph.ops.indexing import *  # noqa: F403
from max.graph.ops.indexing import __all__ as _indexing
from max.graph.ops.irfft import *  # noqa: F403
from max.graph.ops.irfft import __all__ as _irfft
from max.graph.ops.layout import *  # noqa: F403
from max.graph.ops.layout import __all__ as _layout
from max.graph.ops.linalg import *  # noqa: F403
from max.graph.ops.linalg import __all__ as _linalg
from max.graph.ops.quant import *  # noqa: F403
from max.graph.ops.quant import __all__ as _quant
from max.graph.ops.reduction import *  # noqa: F403
from max.graph.ops.reduction import __all__ as _reduction
from max.graph.ops.resize import *  # noqa: F403
from max.graph.ops.resize import __all__ as _resize
from max.graph.ops.window import *  # noqa: F403
from max.graph.ops.window import __all__ as _window
from max.graph.type import DeviceRef, TensorType

__all__ = sorted(
    {"allreduce", "reducescatter", *_buffer, *_collective, *_control, *_conv, *_creation, *_elementwise,
     *_indexing, *_irfft, *_layout, *_linalg, *_quant, *_reduction, *_resize, *_window,
     "Callable", "DeviceRef", "TensorType"}
)
