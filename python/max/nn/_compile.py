"""``Module.compile``: trace ``forward`` on symbolic Tensors into a Graph whose weights are the
module's parameters (by qualified name), compile it, and call it with Tensors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from max import driver
from max.graph import Graph, TensorType, Weight
from max.graph.value import Value
from max.tensor import Tensor
from max._eager import compiled
from max._eager.context import GraphContext, realization_context


class CompiledModule:
    """A compiled module: call it with Tensors (or arrays) as ``forward`` takes them."""

    def __init__(self, entry: compiled.Entry, name: str) -> None:
        self._entry = entry
        self.name = name

    @property
    def model(self) -> Any:
        return self._entry.model

    def __call__(self, *args: Any) -> Any:
        bufs = []
        for i, a in enumerate(args):
            t = a if isinstance(a, Tensor) else Tensor.from_dlpack(a)
            bufs.append(t._realize().storage)
        outs = self._entry.execute(bufs)
        tensors = [Tensor._wrap(b) for b in outs]
        s = self._entry.structure
        return tensors[0] if s is None else s(tensors)

    def __repr__(self) -> str:
        return f"CompiledModule({self.name!r})"


def _weight_buffer(name: str, value: Any) -> driver.Buffer:
    from max.nn.module import _as_tensor

    t = _as_tensor(value)._realize()
    return t.storage if t.storage.is_host else t.storage.to(driver.CPU())


def compile_module(module: Any, input_types: Sequence[Any], weights: Mapping[str, Any] | None) -> CompiledModule:
    for i, t in enumerate(input_types):
        if not isinstance(t, TensorType):
            raise TypeError(f"{type(module).__name__}.compile: input_types[{i}] must be a TensorType, got {t!r}")
    params = dict(module.parameters)
    who = f"{type(module).__name__}.compile"
    if weights is not None:
        # As load_state_dict: a weight for every parameter, and none that matches no parameter.
        missing = [n for n in params if n not in weights]
        if missing:
            raise KeyError(f"{who}: no weight given for {', '.join(map(repr, missing))}")
        unused = sorted(set(weights) - set(params))
        if unused:
            raise ValueError(f"{who}: weights that match no parameter: {', '.join(unused)}")
    graph = Graph(type(module).__name__, input_types=list(input_types))
    ctx = GraphContext(graph)
    registry: dict[str, driver.Buffer] = {}
    with realization_context(ctx), graph:
        for name, p in params.items():
            ptype = p.type
            value = graph.add_weight(Weight(name, ptype.dtype, ptype.shape, ptype.device))
            ctx.bind(p, value)
            buf = _weight_buffer(name, weights[name] if weights is not None else p)
            want = [int(d) for d in ptype.shape]
            if buf.dtype != ptype.dtype or list(buf.shape) != want:
                raise ValueError(
                    f"{who}: weight {name!r}: the module expects {ptype.dtype.name}{want}, "
                    f"got {buf.dtype.name}{list(buf.shape)}"
                )
            registry[name] = buf
        inputs = [ctx.create_unrealized(v.tensor) for v in graph.inputs]
        out = module.forward(*inputs)
        flat = list(out) if isinstance(out, (list, tuple)) else [out]
        values = []
        for o in flat:
            if isinstance(o, Tensor):
                values.append(ctx.value_of(o))
            elif isinstance(o, Value):
                values.append(o)
            else:
                raise TypeError(f"{type(module).__name__}.forward returned {type(o).__name__}, not a Tensor")
        graph.output(*values)
    structure = type(out) if isinstance(out, (list, tuple)) else None
    entry = compiled.compile_graph(graph, structure, weights=registry)
    return CompiledModule(entry, graph.name)
