"""``Graph``: a function being staged. Ops called inside ``with graph:`` (or inside the
``forward`` callable) are validated and typed in Rust as they are added."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from max._core.graph import GraphIR
from max.graph.type import TensorType, Type, _ChainType, _from_core
from max.graph.value import BufferValue, TensorValue, Value, _ChainValue

_CURRENT: contextvars.ContextVar[tuple[Graph, ...]] = contextvars.ContextVar("max_graph_stack", default=())


class _CurrentGraph:
    """``Graph.current``: the innermost graph being staged."""

    def __get__(self, obj: Any, owner: Any) -> Graph:
        stack = _CURRENT.get()
        if not stack:
            raise LookupError("no graph is being staged: build ops inside `with Graph(...):`")
        return stack[-1]


class Graph:
    """A graph being staged: a name, typed inputs, ops, and outputs."""

    current = _CurrentGraph()

    def __init__(
        self,
        name: str,
        forward: Callable[..., Any] | None = None,
        input_types: Iterable[Type] = (),
        path: Path | None = None,
        *args: Any,
        custom_extensions: Iterable[Path] = (),
        kernel_library: Any = None,
        module: Any = None,
        **kwargs: Any,
    ) -> None:
        if path is not None or module is not None:
            raise NotImplementedError("loading a saved graph (path=, module=) is not supported")
        if list(custom_extensions) or kernel_library is not None:
            raise NotImplementedError("custom kernel libraries are not supported")
        if not isinstance(name, str):
            raise TypeError(f"Graph name must be a str, got {type(name).__name__}")
        self.name = name
        self._tokens: list[contextvars.Token] = []
        self._ir = GraphIR(name)
        self._weights: dict[str, tuple[Any, TensorValue]] = {}
        self._chain: _ChainValue | None = None
        self._ready: _ChainValue | None = None
        self._subgraphs: dict[str, Graph] = {}
        self._input_types = list(input_types)
        for t in self._input_types:
            if not isinstance(t, Type):
                raise TypeError(f"Graph {name!r}: input_types must hold TensorType or BufferType values, got {t!r}")
        ids = [self._ir.add_input(t._core()) for t in self._input_types]
        self._inputs = [Value._from_id(self, i) for i in ids]
        if forward is not None:
            with self:
                result = forward(*self._inputs, *args, **kwargs)
                if result is None:
                    self.output()
                elif _one_output(result):
                    self.output(result)
                else:
                    self.output(*result)

    def __enter__(self) -> Graph:
        self._tokens.append(_CURRENT.set(_CURRENT.get() + (self,)))
        return self

    def __exit__(self, *exc: Any) -> None:
        _CURRENT.reset(self._tokens.pop())

    @property
    def inputs(self) -> list[Value]:
        """The graph's input values."""
        return list(self._inputs)

    def output(self, *outputs: Any) -> None:
        """Sets the graph's outputs (tensors, or anything ops.constant accepts)."""
        from max.graph.ops._stage import as_tensor

        values = []
        for i, o in enumerate(outputs):
            if isinstance(o, BufferValue):
                values.append(o)
            else:
                values.append(as_tensor(o, graph=self, op="Graph.output", arg=f"outputs[{i}]"))
        self._ir.set_outputs([v._id for v in values])

    @property
    def output_types(self) -> list[Type]:
        """The types of the graph's outputs (empty until ``output`` is called)."""
        ids = self._ir.outputs() or []
        return [_from_core(self._ir.value_type(i)) for i in ids]

    def add_weight(self, weight: Any, force_initial_weight_on_host: bool = True) -> TensorValue:
        """Adds a Weight to the graph (once per name) and returns its value: the value it has
        already for the same weight (or an identical one); ValueError for another weight of
        that name (another type, quantization encoding or alignment)."""
        from max.graph.weight import Weight

        if not isinstance(weight, Weight):
            raise TypeError(f"Graph {self.name!r}: add_weight expects a Weight, got {type(weight).__name__}")
        existing = self._weights.get(weight.name)
        if existing is not None:
            old = existing[0]
            differ = [what for what, a, b in (("type", old.type, weight.type),
                                              ("quantization_encoding", old.quantization_encoding,
                                               weight.quantization_encoding),
                                              ("align", old.align, weight.align)) if a != b]
            if old is not weight and differ:
                raise ValueError(f"Graph {self.name!r}: a weight named {weight.name!r} already exists with another "
                                 f"{' and '.join(differ)} ({old.type}, {old.quantization_encoding}, align {old.align})")
            return existing[1]
        attrs = {"name": weight.name, "type": ("types", [weight.type._core()]), "align": weight.align}
        (vid,) = self._ir.add_op_to_body("constant_external", attrs)
        value = Value._from_id(self, vid)
        self._weights[weight.name] = (weight, value)
        return value

    def add_subgraph(
        self,
        name: str,
        forward: Callable[..., Any] | None = None,
        input_types: Iterable[Type] = (),
        path: Path | None = None,
        custom_extensions: Iterable[Path] = (),
        devices: Iterable[Any] = (),
    ) -> Graph:
        """A graph callable from this one with ``ops.call`` (its body is inlined at each call)."""
        if name in self._subgraphs:
            raise ValueError(f"Graph {self.name!r} already has a subgraph named {name!r}")
        sub = Graph(name, forward, input_types, path, custom_extensions=custom_extensions)
        self._subgraphs[name] = sub
        return sub

    @property
    def always_ready_chain(self) -> _ChainValue:
        """A chain value that is always ready: side-effecting ops may start from it. Created once
        per graph and never advanced by the graph's own side effects (those follow the current
        chain)."""
        if self._ready is None:
            (cid,) = self._ir.add_op("chain_create", [], None)
            self._ready = Value._from_id(self, cid)  # type: ignore[assignment]
        return self._ready  # type: ignore[return-value]

    @property
    def _current_chain(self) -> _ChainValue:
        if self._chain is None:
            (cid,) = self._ir.add_op("chain_create", [], None)
            self._chain = Value._from_id(self, cid)  # type: ignore[assignment]
        return self._chain  # type: ignore[return-value]

    @_current_chain.setter
    def _current_chain(self, chain: _ChainValue) -> None:
        self._chain = chain

    @property
    def kernel_libraries_paths(self) -> list[Path]:
        """Paths of custom kernel libraries (always empty: this engine has no Mojo kernels)."""
        return []

    def _verify(self) -> None:
        self._ir.verify()

    def __str__(self) -> str:
        return str(self._ir)

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {self._ir.num_nodes} ops)"


def _one_output(result: Any) -> bool:
    """Whether what a graph's `forward` returned is one output (a value, weight, shape, dim,
    number or array, as ``Graph.output`` takes one) rather than a sequence of them."""
    from max.graph.dim import Dim
    from max.graph.shape import Shape
    from max.graph.weight import Weight

    import numpy as np

    return isinstance(result, (Value, Weight, Shape, Dim, int, float, np.generic)) or hasattr(result, "__dlpack__")
