"""The eager layers of ``max.nn``: ``Linear``, ``Embedding``, ``RMSNorm``/``GemmaRMSNorm`` (and
``rms_norm``), ``Sequential`` and ``ModuleList``. Their math is written with ``max.functional``,
so it runs on Tensors and stages on graph values alike; the normalisation is the graph layers'
own kernel function, the one implementation of both. Each name also builds the graph layer
when called with its signature (see ``_dual``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

from max import functional as F
from max import random
from max.graph.dim import Dim, StaticDim
from max.graph.shape import Shape
from max.nn import _dual, kernels
from max.nn import embedding as _embedding
from max.nn import linear as _linear
from max.nn import _legacy_norm as _norm
from max.nn import _legacy_sequential as _sequential
from max.nn.module import Module
from max.tensor import Tensor
from max._eager.dispatch import apply


class Linear(Module):
    """``f(x) = x @ W.T + b``; W is ``[out_dim, in_dim]``, both initialised uniform in
    ``+-1/sqrt(in_dim)``; ``bias=False`` leaves ``bias`` at 0."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        keys = {"dtype", "device", "has_bias", "quantization_encoding", "float8_config", "name", "clip_weight"}
        return _dual.route(cls, _linear.Linear, args, kwargs, 2, keys)

    def __init__(self, in_dim: Any, out_dim: Any, *, bias: bool = True) -> None:
        for name, v in (("in_dim", in_dim), ("out_dim", out_dim)):
            ok = not isinstance(v, bool) and (isinstance(v, (int, StaticDim)) or hasattr(v, "__index__"))
            if not ok or int(v) <= 0:
                raise ValueError(f"Linear: {name} must be a positive int, got {v!r}")
        bound = 1.0 / math.sqrt(int(in_dim))
        self.weight = random.uniform([out_dim, in_dim], range=(-bound, bound))
        self.bias: Tensor | int = random.uniform([out_dim], range=(-bound, bound)) if bias else 0

    @property
    def in_dim(self) -> Dim:
        """The input feature size (the weight's second dim)."""
        return self.weight.shape[1]

    @property
    def out_dim(self) -> Dim:
        """The output feature size (the weight's first dim)."""
        return self.weight.shape[0]

    def forward(self, x: Any) -> Any:
        """``x @ weight.T + bias`` over the last dim of `x`."""
        y = x @ self.weight.T if isinstance(x, Tensor) else F.matmul(x, F.transpose(self.weight, -1, -2))
        return y + self.bias if isinstance(self.bias, Tensor) else y

    def __repr__(self) -> str:
        return f"Linear(in_dim={self.in_dim}, out_dim={self.out_dim}, bias={isinstance(self.bias, Tensor)})"


class Embedding(Module):
    """A lookup table ``[vocab_size, *dims]`` (normal initial values): each index becomes its row."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return _dual.route(cls, _embedding.Embedding, args, kwargs, 1, {"hidden_dim", "dtype", "device",
                                                                        "quantization_encoding", "name"})

    def __init__(self, vocab_size: Any, *, dim: Any = None, dims: Iterable[Any] | None = None) -> None:
        if (dim is None) == (dims is None):
            raise ValueError("Embedding: give exactly one of dim= or dims=")
        shape = [dim] if dim is not None else list(dims)  # type: ignore[arg-type]
        self.weight = random.normal([vocab_size, *shape])

    @property
    def vocab_size(self) -> Dim:
        """The number of rows (tokens) of the table."""
        return self.weight.shape[0]

    @property
    def dims(self) -> Shape:
        """The shape of one embedding vector."""
        return self.weight.shape[1:]

    @property
    def dim(self) -> Dim:
        """The size of a one-dim embedding vector (TypeError when it has more dims)."""
        if len(self.dims) != 1:
            raise TypeError(f"Embedding.dim: the embedding has {len(self.dims)} dims {list(self.dims)}; use .dims")
        return self.dims[0]

    def forward(self, indices: Any) -> Any:
        """The table rows at `indices` (any integer shape; the vector dims are appended)."""
        return F.gather(self.weight, indices, axis=0)

    def __repr__(self) -> str:
        return f"Embedding(vocab_size={self.vocab_size}, dims={list(self.dims)})"


def rms_norm(x: Any, weight: Any, eps: float, weight_offset: float = 0.0, multiply_before_cast: bool = False) -> Any:
    """``x / sqrt(mean(x**2) + eps) * (weight + weight_offset)`` over the last dim (Tensors or
    graph values): the graph layers' kernel function."""
    return apply(kernels.rms_norm, (x, weight, eps, weight_offset, multiply_before_cast))


class RMSNorm(Module):
    """Root-mean-square normalisation over the last dim, with a weight of ones."""

    _offset = 0.0
    _before_cast = False

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        legacy = _norm.GemmaRMSNorm if cls.__name__ == "GemmaRMSNorm" else _norm.RMSNorm
        return _dual.route(cls, legacy, args, kwargs, 2, {"dtype", "weight_offset", "multiply_before_cast"})

    def __init__(self, dim: Any, eps: float = 1e-6) -> None:
        self.weight = Tensor.ones([dim])
        self.eps = float(eps)

    @property
    def dim(self) -> Dim:
        """The size of the normalised (last) dim."""
        return self.weight.shape[0]

    def forward(self, x: Any) -> Any:
        """`x` divided by the root mean square of its last dim (plus eps), times the weight."""
        w = self.weight
        if w.dtype != x.dtype:
            w = F.cast(w, x.dtype)
        return rms_norm(x, w, self.eps, self._offset, self._before_cast)


class GemmaRMSNorm(RMSNorm):
    """Gemma's RMSNorm: ``x * (1 + w)``, the weight applied before the cast to x's dtype."""

    _offset = 1.0
    _before_cast = True

    def __init__(self, dim: Any, eps: float = 1e-6) -> None:
        super().__init__(dim, eps)
        self.weight = Tensor.zeros([dim])


class ModuleList(Module):
    """A list of modules, named "0", "1", ... in qualified paths."""

    def __init__(self, iterable: Iterable[Any] = (), /) -> None:
        object.__setattr__(self, "_items", [])
        for m in iterable:
            self.append(m)

    def append(self, module: Any) -> None:
        """Adds `module` at the end; it is named by its index."""
        setattr(self, str(len(self._items)), module)
        self._items.append(module)

    def extend(self, modules: Iterable[Any]) -> None:
        """Appends each of `modules`."""
        for m in modules:
            self.append(m)

    def insert(self, index: int, module: Any) -> None:
        """Puts `module` before position `index`; the modules after it are renamed by their new
        indices (as a list's items move)."""
        items = list(self._items)
        items.insert(index, module)
        self._rename(items)

    def pop(self, index: int = -1) -> Any:
        """Removes and returns the module at `index`; the ones after it are renamed."""
        items = list(self._items)
        out = items.pop(index)
        self._rename(items)
        return out

    def __setitem__(self, index: int, module: Any) -> None:
        items = list(self._items)
        items[index] = module
        self._rename(items)

    def __delitem__(self, index: int | slice) -> None:
        items = list(self._items)
        del items[index]
        self._rename(items)

    def _rename(self, items: list[Any]) -> None:
        """Holds `items`, named "0", "1", ... again."""
        for i in range(len(self._items)):
            if str(i) in vars(self):
                object.__delattr__(self, str(i))
        object.__setattr__(self, "_items", [])
        self.extend(items)

    def _clone(self) -> ModuleList:
        # (the copy's children are clones: its list must hold them, not the originals)
        new = super()._clone()
        object.__setattr__(new, "_items", [getattr(new, str(i)) for i in range(len(self._items))])
        return new  # type: ignore[return-value]

    def _attrs(self) -> Iterable[tuple[str, Any]]:
        return ((str(i), m) for i, m in enumerate(self._items))

    def __getitem__(self, i: int) -> Any:
        return self._items[i]

    def __contains__(self, module: Any) -> bool:
        return any(m is module for m in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._items)

    def __repr__(self) -> str:
        inner = ",\n    ".join(repr(m).replace("\n", "\n    ") for m in self._items)
        return f"{type(self).__name__}(\n    {inner}\n)" if self._items else f"{type(self).__name__}()"


class Sequential(ModuleList):
    """Unary modules applied in order: ``Sequential(a, b)(x) == b(a(x))``."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        graph_call = len(args) == 1 and isinstance(args[0], (list, tuple)) or "layers" in kwargs
        return _sequential.Sequential(*args, **kwargs) if graph_call else object.__new__(cls)

    def __init__(self, *modules: Any) -> None:
        super().__init__(modules)

    def forward(self, x: Any) -> Any:
        """`x` passed through each module in turn."""
        for m in self._items:
            x = m(x)
        return x


__all__ = ["Embedding", "GemmaRMSNorm", "Linear", "ModuleList", "RMSNorm", "Sequential", "rms_norm"]
