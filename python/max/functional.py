"""``max.functional``: the ops of ``max.graph.ops`` for Tensors and graph values alike.

Each function takes Tensors (run eagerly, or staged in the current realization context) or graph
values inside a ``Graph`` (staged there, returning graph values). ``functional`` fuses a Python
function into one compiled graph per call; ``lazy`` defers execution until a value is needed."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeAlias

from max.dtype import DType
from max.graph import ops
from max.graph.graph import _CURRENT as _GRAPH_STACK
from max._eager import graph_fns
from max._eager.context import CURRENT, StagingContext
from max._eager.dispatch import apply
from max.tensor import Tensor

CustomExtensionType: TypeAlias = str | Path


def _lift(graph_fn: Callable[..., Any], name: str | None = None) -> Callable[..., Any]:
    """`graph_fn` (over graph values) as a function of Tensors and graph values."""

    def op(*args: Any, **kwargs: Any) -> Any:
        return apply(graph_fn, args, kwargs)

    op.__name__ = op.__qualname__ = name or graph_fn.__name__
    op.__doc__ = graph_fn.__doc__
    op.__wrapped__ = graph_fn  # type: ignore[attr-defined]
    return op


# Elementwise.
abs = _lift(ops.abs)  # noqa: A001
add = _lift(graph_fns.add)
sub = _lift(graph_fns.sub)
mul = _lift(graph_fns.mul)
div = _lift(graph_fns.div)
mod = _lift(graph_fns.mod)
pow = _lift(graph_fns.pow)  # noqa: A001
negate = _lift(ops.negate)
equal = _lift(graph_fns.equal)
not_equal = _lift(graph_fns.not_equal)
greater = _lift(graph_fns.greater)
greater_equal = _lift(graph_fns.greater_equal)
logical_and = _lift(graph_fns.logical_and)
logical_or = _lift(graph_fns.logical_or)
logical_xor = _lift(graph_fns.logical_xor)
logical_not = _lift(ops.logical_not)
exp = _lift(ops.exp)
log = _lift(ops.log)
log1p = _lift(ops.log1p)
sqrt = _lift(ops.sqrt)
rsqrt = _lift(ops.rsqrt)
sin = _lift(ops.sin)
cos = _lift(ops.cos)
tanh = _lift(ops.tanh)
atanh = _lift(ops.atanh)
erf = _lift(ops.erf)
floor = _lift(ops.floor)
round = _lift(ops.round)  # noqa: A001
trunc = _lift(ops.trunc)
relu = _lift(ops.relu)
gelu = _lift(ops.gelu)
sigmoid = _lift(ops.sigmoid)
silu = _lift(ops.silu)
is_nan = _lift(ops.is_nan)
is_inf = _lift(ops.is_inf)
where = _lift(ops.where)
cast = _lift(ops.cast)
clip = _lift(graph_fns.clip)

# Reductions and scans.
sum = _lift(graph_fns.sum)  # noqa: A001
mean = _lift(graph_fns.mean)
max = _lift(graph_fns.max)  # noqa: A001
min = _lift(graph_fns.min)  # noqa: A001
argmax = _lift(graph_fns.argmax)
argmin = _lift(graph_fns.argmin)
softmax = _lift(ops.softmax)
logsoftmax = _lift(ops.logsoftmax)
cumsum = _lift(graph_fns.cumsum)
top_k = _lift(ops.top_k)
argsort = _lift(ops.argsort)
layer_norm = _lift(ops.layer_norm)

# Linear algebra.
matmul = _lift(graph_fns.matmul)
outer = _lift(ops.outer)
band_part = _lift(ops.band_part)
complex_mul = _lift(graph_fns.complex_mul)

# Layout.
reshape = _lift(ops.reshape)
flatten = _lift(ops.flatten)
squeeze = _lift(ops.squeeze)
unsqueeze = _lift(ops.unsqueeze)
transpose = _lift(ops.transpose)
permute = _lift(ops.permute)
broadcast_to = _lift(ops.broadcast_to)
concat = _lift(ops.concat)
stack = _lift(ops.stack)
split = _lift(graph_fns.split)
chunk = _lift(ops.chunk)
tile = _lift(ops.tile)
pad = _lift(ops.pad)
repeat_interleave = _lift(ops.repeat_interleave)
slice_tensor = _lift(ops.slice_tensor)
as_interleaved_complex = _lift(ops.as_interleaved_complex)

# Indexing.
gather = _lift(ops.gather)
gather_nd = _lift(ops.gather_nd)
scatter = _lift(ops.scatter)
scatter_nd = _lift(ops.scatter_nd)
masked_scatter = _lift(ops.masked_scatter)
nonzero = _lift(ops.nonzero)

# Convolution and pooling.
conv2d = _lift(ops.conv2d)
conv2d_transpose = _lift(ops.conv2d_transpose)
conv3d = _lift(ops.conv3d)
avg_pool2d = _lift(ops.avg_pool2d)
max_pool2d = _lift(ops.max_pool2d)
fold = _lift(ops.fold)

# FFT.
irfft = _lift(ops.irfft)

# Creation and buffers.
arange = _lift(ops.range, "arange")
hann_window = _lift(graph_fns.hann_window)
constant_external = _lift(ops.constant_external)
buffer_store = _lift(ops.buffer_store)
buffer_store_slice = _lift(ops.buffer_store_slice)


def constant(value: Any, dtype: DType | None = None, device: Any = None) -> Any:
    """A constant: a graph value inside a Graph, else a Tensor."""
    if _GRAPH_STACK.get() and CURRENT.get() is None:
        return ops.constant(value, dtype, device)
    return Tensor.constant(value, dtype=dtype, device=device)


def transfer_to(x: Any, device: Any) -> Any:
    """`x` moved to `device`: a Tensor is copied there now, a graph value gets a transfer op."""
    if isinstance(x, Tensor):
        return x.to(device)
    return ops.transfer_to(x, device)


def _unsupported(name: str, why: str) -> Callable[..., Any]:
    def op(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{name}: {why}")

    op.__name__ = name
    op.__doc__ = f"Not supported by this engine: {why}."
    return op


def _staged_only(graph_fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """`graph_fn` over graph values; eager Tensors are refused (collectives are staged)."""

    def op(*args: Any, **kwargs: Any) -> Any:
        if not _GRAPH_STACK.get():
            raise NotImplementedError(f"{name}: collectives run inside a Graph (stage them with graph values)")
        return graph_fn(*args, **kwargs)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = graph_fn.__doc__
    return op


allgather = _staged_only(ops.allgather, "allgather")
allreduce_sum = _staged_only(ops.allreduce.sum, "allreduce_sum")
custom = _unsupported("custom", "custom (Mojo) kernels are not supported")
inplace_custom = _unsupported("inplace_custom", "custom (Mojo) kernels are not supported")


def in_graph_context() -> bool:
    """Whether a Graph is being staged."""
    return bool(_GRAPH_STACK.get())


def functional(op: Callable[..., Any]) -> Callable[..., Any]:
    """Runs `op` as one graph: its Tensor ops are staged together and the tensors it returns are
    realized by one compiled (fused) graph, cached per op sequence and input types. Inside a
    Graph or another realization context it simply runs there."""

    @functools.wraps(op)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if CURRENT.get() is not None or _GRAPH_STACK.get():
            return op(*args, **kwargs)
        with StagingContext(realize_on_exit=True, name=getattr(op, "__name__", "functional")):
            return op(*args, **kwargs)

    return wrapper


@contextlib.contextmanager
def lazy() -> Iterator[None]:
    """Tensor ops inside are recorded, not run; a tensor is computed when its value is needed
    (``item()``, printing, conversion, ``await t.realize``) and never if it is not."""
    ctx = CURRENT.get()
    if isinstance(ctx, StagingContext) and not ctx.realize_on_exit:
        yield
        return
    token = CURRENT.set(StagingContext(realize_on_exit=False, name="lazy"))
    try:
        yield
    finally:
        CURRENT.reset(token)


__all__ = [
    "CustomExtensionType", "abs", "add", "allgather", "allreduce_sum", "arange", "argmax", "argmin", "argsort",
    "as_interleaved_complex", "atanh", "avg_pool2d", "band_part", "broadcast_to", "buffer_store",
    "buffer_store_slice", "cast", "chunk", "clip", "complex_mul", "concat", "constant", "constant_external",
    "conv2d", "conv2d_transpose", "conv3d", "cos", "cumsum", "custom", "div", "equal", "erf", "exp", "flatten",
    "floor", "fold", "functional", "gather", "gather_nd", "gelu", "greater", "greater_equal", "hann_window",
    "in_graph_context", "inplace_custom", "irfft", "is_inf", "is_nan", "layer_norm", "lazy", "log", "log1p",
    "logical_and", "logical_not", "logical_or", "logical_xor", "logsoftmax", "masked_scatter", "matmul", "max",
    "max_pool2d", "mean", "min", "mod", "mul", "negate", "nonzero", "not_equal", "outer", "pad", "permute", "pow",
    "relu", "repeat_interleave", "reshape", "round", "rsqrt", "scatter", "scatter_nd", "sigmoid", "silu", "sin",
    "slice_tensor", "softmax", "split", "sqrt", "squeeze", "stack", "sub", "sum", "tanh", "tile", "top_k",
    "transfer_to", "transpose", "trunc", "unsqueeze", "where",
]
