"""``Module``: the base class of the graph-building layers. It tracks the Weights and sub-modules
assigned to its attributes, names every weight by its attribute path (``layers.0.mlp.up_proj
.weight``), and holds the values loaded for them (``load_state_dict``), which
``InferenceSession.load(graph, weights_registry=module.state_dict())`` takes as is.
Also ``LayerList``, the ``Shardable`` protocol and layer hooks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from max.dtype import DType
from max.graph import Weight

_HOOKS: list[Callable[..., Any]] = []


def add_layer_hook(fn: Callable[..., Any]) -> None:
    """Calls ``fn(layer, input_args, input_kwargs, outputs)`` after each layer's ``__call__``;
    a value it returns replaces the outputs."""
    _HOOKS.append(fn)


def clear_hooks() -> None:
    """Removes every hook added with ``add_layer_hook``."""
    _HOOKS.clear()


def _shape_of(value: Any) -> tuple[int, ...]:
    if hasattr(value, "shape"):
        return tuple(int(d) for d in value.shape)
    return tuple(np.asarray(value).shape)


def _dtype_of(value: Any) -> DType | None:
    dtype = getattr(value, "dtype", None)
    if isinstance(dtype, DType):
        return dtype
    if isinstance(value, np.ndarray):
        try:
            return DType.from_numpy(value.dtype)
        except (TypeError, ValueError, KeyError):
            return None
    return None


def _zeros(weight: Weight) -> np.ndarray:
    shape = tuple(int(d) for d in weight.shape)
    return np.zeros(shape, dtype=weight.dtype.to_numpy())


class Module:
    """Base class of the graph layers: sub-modules and ``Weight`` attributes are registered as
    they are assigned, so ``raw_state_dict`` / ``state_dict`` / ``load_state_dict`` see the
    whole tree. Subclasses define ``__call__``, which stages ops on graph values."""

    def __init__(self) -> None:
        object.__setattr__(self, "_sublayers", {})
        object.__setattr__(self, "_layer_weights", {})
        object.__setattr__(self, "_shared_weights", {})

    def _ensure(self) -> None:
        if "_sublayers" not in self.__dict__:
            Module.__init__(self)

    def __setattr__(self, name: str, value: Any) -> None:
        self._ensure()
        self._sublayers.pop(name, None)
        self._layer_weights.pop(name, None)
        if isinstance(value, Module):
            self._sublayers[name] = value
        elif isinstance(value, Weight):
            self._layer_weights[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self._ensure()
        self._sublayers.pop(name, None)
        self._layer_weights.pop(name, None)
        object.__delattr__(self, name)

    # Subclasses implement __call__; hooks run around it.
    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        call = cls.__dict__.get("__call__")
        if call is not None and not getattr(call, "_hooked", False):

            def hooked(self: Module, *args: Any, **kw: Any) -> Any:
                out = call(self, *args, **kw)
                for hook in list(_HOOKS):
                    replaced = hook(self, args, kw, out)
                    if replaced is not None:
                        out = replaced
                return out

            hooked._hooked = True  # type: ignore[attr-defined]
            hooked.__doc__ = call.__doc__
            hooked.__name__ = "__call__"
            cls.__call__ = hooked  # type: ignore[method-assign]

    @property
    def sublayers(self) -> dict[str, Module]:
        """The modules assigned to this one's attributes, by attribute name."""
        self._ensure()
        return dict(self._sublayers)

    @property
    def layer_weights(self) -> dict[str, Weight]:
        """The weights assigned to this module's own attributes, by attribute name."""
        self._ensure()
        return dict(self._layer_weights)

    def set_shared_weight(self, name: str, weight: Weight) -> None:
        """Makes attribute `name` this existing weight (tied embeddings): it keeps its owner's
        name and value and is not listed again in the state dict."""
        self._ensure()
        object.__setattr__(self, name, weight)
        self._shared_weights[name] = weight
        self._layer_weights.pop(name, None)

    def _walk(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        yield prefix, self
        for name, sub in self.sublayers.items():
            yield from sub._walk(f"{prefix}{name}.")

    def raw_state_dict(self) -> dict[str, Weight]:
        """Every weight of the tree by its qualified name (which becomes the weight's name)."""
        out: dict[str, Weight] = {}
        seen: set[int] = set()
        for prefix, module in self._walk():
            for name, weight in module.layer_weights.items():
                if id(weight) in seen:
                    continue
                seen.add(id(weight))
                full = f"{prefix}{name}"
                weight.name = full
                out[full] = weight
        return out

    def load_state_dict(
        self,
        state_dict: Mapping[str, Any],
        *,
        override_quantization_encoding: bool = False,
        weight_alignment: int | None = None,
        strict: bool = True,
    ) -> None:
        """Sets the value of every weight from `state_dict` (qualified name -> numpy array,
        Buffer, DLPack array or WeightData). Shapes must match (a quantized weight's shape is
        its bytes per row); a float value of another float dtype is converted. With `strict`,
        missing and unused names are a ValueError that lists them."""
        from max.graph.weights import WeightData

        weights = self.raw_state_dict()
        missing = [n for n in weights if n not in state_dict]
        unused = [n for n in state_dict if n not in weights]
        if strict and (missing or unused):
            parts = []
            if missing:
                parts.append(f"missing weights: {', '.join(missing[:10])}{' ...' if len(missing) > 10 else ''}")
            if unused:
                parts.append(f"unused weights: {', '.join(unused[:10])}{' ...' if len(unused) > 10 else ''}")
            raise ValueError(f"load_state_dict: {'; '.join(parts)}")
        for name, weight in weights.items():
            if name not in state_dict:
                continue
            value = state_dict[name]
            encoding = getattr(value, "quantization_encoding", None)
            if override_quantization_encoding and encoding is not None:
                weight.quantization_encoding = encoding
            want = tuple(int(d) for d in weight.shape)
            got = _shape_of(value)
            if got != want:
                raise ValueError(f"load_state_dict: {name}: the module expects shape {list(want)}, got {list(got)}")
            dtype = _dtype_of(value)
            if dtype is not None and dtype != weight.dtype:
                if dtype.is_float() and weight.dtype.is_float() and isinstance(value, WeightData):
                    try:
                        value = value.astype(weight.dtype)
                    except ValueError as e:  # a float type the host cannot convert (e.g. float8_e8m0fnu)
                        raise ValueError(
                            f"load_state_dict: {name}: cannot convert {dtype} to {weight.dtype}: {e}"
                        ) from None
                elif dtype.is_float() and weight.dtype.is_float() and isinstance(value, np.ndarray):
                    value = value.astype(weight.dtype.to_numpy())
                else:
                    raise ValueError(
                        f"load_state_dict: {name}: the module expects {weight.dtype}, got {dtype}"
                    )
            if weight_alignment is not None:
                weight.align = weight_alignment
            weight._loaded_value = value  # type: ignore[attr-defined]

    def state_dict(self, auto_initialize: bool = True) -> dict[str, Any]:
        """The value of every weight by qualified name: what ``load_state_dict`` set, or zeros
        (with `auto_initialize`; otherwise an unset weight is a ValueError)."""
        out: dict[str, Any] = {}
        for name, weight in self.raw_state_dict().items():
            value = weight.__dict__.get("_loaded_value")
            if value is not None:
                out[name] = value
            elif auto_initialize:
                weight._loaded_value = _zeros(weight)  # type: ignore[attr-defined]
                out[name] = weight._loaded_value  # type: ignore[attr-defined]
            else:
                raise ValueError(f"state_dict: weight {name!r} has no value (call load_state_dict first)")
        return out

    def build_subgraph(self, name: str, input_types: Sequence[Any], weight_prefix: str = "") -> Any:
        """A subgraph of the graph being staged whose body calls this module on its inputs."""
        from max.graph import Graph

        flat = [t for group in input_types for t in (group if isinstance(group, list) else [group])]
        return Graph.current.add_subgraph(name, lambda *args: self(*args), input_types=flat)

    def __repr__(self) -> str:
        subs = ", ".join(self.sublayers)
        return f"{type(self).__name__}({subs})"


# MAX's deprecated name for the same base class.
Layer = Module


class LayerList(Module):
    """A list of modules, named "0", "1", ... in the state dict."""

    def __init__(self, layers: Iterable[Any]) -> None:
        super().__init__()
        self.layers = list(layers)
        for i, layer in enumerate(self.layers):
            if isinstance(layer, Module):
                self._sublayers[str(i)] = layer

    def __getitem__(self, i: int) -> Any:
        return self.layers[i]

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.layers)

    def append(self, layer: Any) -> None:
        """Adds `layer` at the end; a Module is registered as the sublayer named by its index."""
        self.layers.append(layer)
        if isinstance(layer, Module):
            self._sublayers[str(len(self.layers) - 1)] = layer

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        x = args
        for layer in self.layers:
            x = (layer(*x, **kwargs),)
        return x[0]


@runtime_checkable
class Shardable(Protocol):
    """Objects that can be split across devices (``shard(devices)``)."""

    @property
    def sharding_strategy(self) -> Any:
        """How the object is split across devices."""

    def shard(self, devices: Iterable[Any]) -> Sequence[Any]:
        """One piece per device of `devices`."""


__all__ = ["Layer", "LayerList", "Module", "Shardable", "add_layer_hook", "clear_hooks"]
