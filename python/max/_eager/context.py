"""Realization contexts: where unrealized tensors are staged and how they get real data.

With no context active (the default), each eager op runs at once through the op cache
(``dispatch``). A context collects ops into one graph instead:

- ``StagingContext``: a fresh graph whose inputs are the real tensors it reads ("sources") and
  whose outputs are the unrealized tensors still alive when it realizes. ``F.functional`` uses one
  that realizes on exit (one fused graph per call); ``F.lazy()`` one that realizes only when a value
  is needed. The compiled graph is cached by the recorded op sequence, so a repeated call stages
  again but compiles once.
- ``GraphContext``: tensors are symbolic values of a user's graph (``Module.compile``); they can
  never be realized."""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from max.graph import Graph, TensorValue, ops
from max._eager import compiled

if TYPE_CHECKING:
    from max.tensor import Tensor

CURRENT: contextvars.ContextVar[RealizationContext | None] = contextvars.ContextVar("max_realization", default=None)


class RealizationState:
    """State of an unrealized tensor: its symbolic value and the context that can realize it."""

    __slots__ = {
        "value": "The tensor's symbolic value in the context's graph.",
        "ctx": "The RealizationContext that computes the value.",
    }

    def __init__(self, value: Any, ctx: RealizationContext) -> None:
        self.value = value
        self.ctx = ctx

    def __repr__(self) -> str:
        return f"RealizationState({self.value!r}, {type(self.ctx).__name__})"


class RealizationContext:
    """Tracks symbolic computation for unrealized tensors and realizes them on request."""

    graph: Graph

    def add_source(self, tensor: Tensor) -> RealizationState:
        """Makes a real tensor an input of this context's graph; returns its state there."""
        raise NotImplementedError

    def create_unrealized(self, value: Any) -> Tensor:
        """A new unrealized Tensor for `value`, a value of this context's graph."""
        from max.tensor import Tensor

        t = Tensor(state=RealizationState(value, self))
        self._track(t)
        return t

    def _track(self, tensor: Tensor) -> None:
        pass

    def value_of(self, tensor: Tensor) -> TensorValue:
        """`tensor` as a value of this context's graph (its own value, or a new source)."""
        st = tensor.state
        if st is not None:
            if st.ctx is self:
                return st.value
            tensor._realize()
        return self.add_source(tensor).value

    def record(self, entry: Any) -> None:
        """Notes an operation staged in this context (contexts that replay work keep it)."""
        pass

    def realize(self) -> None:
        """Computes every unrealized tensor of this context and gives each its values."""
        raise NotImplementedError

    async def realize_all(self) -> list[Tensor]:
        """Awaitable form of ``realize``."""
        return self.realize()  # type: ignore[return-value]

    def __enter__(self) -> RealizationContext:
        self._token = CURRENT.set(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        CURRENT.reset(self._token)


class StagingContext(RealizationContext):
    """Stages ops into one graph; realizes the live unrealized tensors as its outputs.
    ``realize_on_exit`` gives eager semantics (``F.functional``), otherwise lazy (``F.lazy``)."""

    def __init__(self, realize_on_exit: bool, name: str = "eager") -> None:
        self.realize_on_exit = realize_on_exit
        self.name = name
        self._reset()

    def _reset(self) -> None:
        self.graph = Graph(self.name)
        self._sources: list[Any] = []  # a real Tensor, or a callable making the input's Buffer
        self._source_ids: dict[int, TensorValue] = {}
        self._unrealized: list[weakref.ref] = []
        self._tape: list[Any] = []
        self._cacheable = True

    def _add_input(self, tensor_type: Any) -> TensorValue:
        from max.graph.value import Value

        g = self.graph
        vid = g._ir.add_input(tensor_type._core())
        g._input_types.append(tensor_type)
        value = Value._from_id(g, vid)
        g._inputs.append(value)
        return value  # type: ignore[return-value]

    def add_source(self, tensor: Tensor) -> RealizationState:
        value = self._source_ids.get(id(tensor))
        if value is None:
            value = self._add_input(tensor.type)
            self._sources.append(tensor)
            self._source_ids[id(tensor)] = value
        return RealizationState(value, self)

    def deferred_source(self, tensor_type: Any, make: Callable[[], Any]) -> Tensor:
        """An unrealized tensor whose data `make()` produces only if it is ever realized."""
        value = self._add_input(tensor_type)
        self._sources.append(make)
        self._tape.append(("deferred", compiled.type_key(tensor_type)))
        return self.create_unrealized(value)

    def _track(self, tensor: Tensor) -> None:
        self._unrealized.append(weakref.ref(tensor))

    def record(self, entry: Any) -> None:
        if entry is None:
            self._cacheable = False
        else:
            self._tape.append(entry)

    def realize(self, need: Tensor | None = None) -> list[Tensor]:
        """Computes the live unrealized tensors together. When that fails and `need` (the
        tensor asked for) is one of several, `need` alone is computed, and the others stay
        pending: an error of one of them (an index out of range) is raised when it is asked for,
        not for every tensor of the context."""
        live = []
        for r in self._unrealized:
            t = r()
            if t is not None and t.state is not None and t.state.ctx is self:
                live.append(t)
        if not live:
            self._reset()
            return []
        try:
            return self._compute(live, reset=True)
        except Exception:
            if need is None or len(live) == 1 or not any(t is need for t in live):
                raise
            return self._compute([need], reset=False)

    def _compute(self, live: list[Tensor], reset: bool) -> list[Tensor]:
        """Runs the graph with `live`'s values as outputs and gives each its buffer; `reset`
        starts a new graph after (the others pending otherwise stay in this one)."""
        values = [t.state.value for t in live]
        key = None
        if self._cacheable:
            srcs = tuple(compiled.type_key(t) for t in self.graph._input_types)
            key = ("staged", tuple(self._tape), srcs, tuple(v._id for v in values))
        entry = compiled.lookup(key)
        if entry is None:
            self.graph.output(*values)
            entry = compiled.compile_graph(self.graph, None)
            compiled.store(key, entry)
        bufs = [s() if callable(s) else s.storage for s in self._sources]
        outs = entry.execute(bufs)
        for t, b, k in zip(live, outs, entry.out_keys):
            t.storage = b
            t.state = None
            t._k = k
        if reset:
            self._reset()
        return live

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        if self.realize_on_exit and exc[0] is None:
            self.realize()


class GraphContext(RealizationContext):
    """Tensors as symbolic values of an existing graph (``Module.compile``). Real tensors read
    inside become constants of the graph unless bound first (parameters bound to weights)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._bound: dict[int, TensorValue] = {}
        self._keep: list[Any] = []

    def bind(self, tensor: Tensor, value: TensorValue) -> None:
        self._bound[id(tensor)] = value
        self._keep.append(tensor)

    def add_source(self, tensor: Tensor) -> RealizationState:
        value = self._bound.get(id(tensor))
        if value is None:
            with self.graph:
                value = ops.constant(tensor.storage, tensor.dtype, tensor.type.device)
            self.bind(tensor, value)
        return RealizationState(value, self)

    def realize(self) -> list[Tensor]:
        raise TypeError(
            f"a tensor of graph {self.graph.name!r} is symbolic: its value is only known when the compiled "
            "model runs (item(), printing and conversions need a real tensor)"
        )


def current() -> RealizationContext | None:
    """The realization context in effect (None outside ``F.lazy``, ``F.functional`` or a trace)."""
    return CURRENT.get()


@contextlib.contextmanager
def realization_context(ctx: RealizationContext) -> Iterator[RealizationContext]:
    """Makes `ctx` the current realization context inside the block."""
    token = CURRENT.set(ctx)
    try:
        yield ctx
    finally:
        CURRENT.reset(token)
