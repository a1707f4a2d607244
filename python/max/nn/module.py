"""``max.nn.module``: the eager ``Module`` and ``module_dataclass``.

A Module holds Tensors (its parameters) and sub-modules in its attributes and computes with
``forward``; parameters are named by attribute path (``fc1.weight``). Calling it on Tensors runs
eagerly; on graph values inside a ``Graph`` it stages ops there (its parameters become
constants); ``compile(*input_types)`` traces ``forward`` into a graph whose weights are the
parameters. It extends the graph layers' ``Module`` (``max.nn.legacy``), so graph layers written
against ``max.nn.Module`` (``__call__`` over graph values, ``Weight`` attributes) keep working."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from max.nn.layer import Module as _GraphModule
from max.tensor import Tensor


class Module(_GraphModule):
    """The unit of composition of eager models: parameters, children and ``forward``."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The module's computation; subclasses define it, and calling the module runs it."""
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    # --- the tree ------------------------------------------------------------------------------

    def _attrs(self) -> Iterable[tuple[str, Any]]:
        return ((k, v) for k, v in vars(self).items() if not k.startswith("_"))

    @property
    def local_parameters(self) -> Iterable[tuple[str, Tensor]]:
        """(name, Tensor) of the parameters held directly by this module."""
        return [(k, v) for k, v in self._attrs() if isinstance(v, Tensor)]

    @property
    def children(self) -> Iterable[tuple[str, _GraphModule]]:
        """(name, module) of the modules held directly by this module."""
        return [(k, v) for k, v in self._attrs() if isinstance(v, _GraphModule)]

    @property
    def descendants(self) -> Iterable[tuple[str, _GraphModule]]:
        """(dotted name, module) of every module below this one, depth first."""
        out = []
        for name, child in self.children:
            out.append((name, child))
            if isinstance(child, Module):
                out.extend((f"{name}.{n}", m) for n, m in child.descendants)
        return out

    @property
    def parameters(self) -> Iterable[tuple[str, Tensor]]:
        """Every parameter, depth first, by qualified name."""
        out = list(self.local_parameters)
        for name, child in self.children:
            if isinstance(child, Module):
                out.extend((f"{name}.{n}", t) for n, t in child.parameters)
        return out

    def apply_to_local_parameters(self, f: Callable[[str, Tensor], Tensor]) -> None:
        """Replaces each local parameter by ``f(name, tensor)``, which must be a Tensor."""
        for name, t in self.local_parameters:
            setattr(self, name, _checked(f, name, t))

    def apply_to_parameters(self, f: Callable[[str, Tensor], Tensor]) -> None:
        """Replaces each parameter of the tree by ``f(qualified_name, tensor)``, which must be a
        Tensor (a value of another kind would drop the parameter from the tree)."""
        self._apply_tree(lambda n, t: _checked(f, n, t))

    def _apply_tree(self, f: Callable[[str, Tensor], Tensor]) -> None:
        for name, t in self.local_parameters:
            setattr(self, name, f(name, t))
        for name, child in self.children:
            if isinstance(child, Module):
                child._apply_tree(lambda n, t, p=name: f(f"{p}.{n}", t))

    def state_dict(self, auto_initialize: bool = True) -> dict[str, Any]:
        """Every parameter by qualified name (what ``load_state_dict`` takes back); a tree of
        graph layers holding ``Weight``s answers as ``max.nn.legacy`` modules do."""
        params: dict[str, Any] = dict(self.parameters)
        if self.raw_state_dict():  # graph layers' Weights inside (a tree mixing both kinds too)
            return {**super().state_dict(auto_initialize), **params}
        return params

    def map_parameters(self, f: Callable[[str, Tensor], Tensor]) -> Module:
        """A copy of the tree with parameters ``f(name, tensor)``; this one is unchanged."""
        clone = self._clone()
        clone.apply_to_parameters(f)
        return clone

    def _clone(self) -> Module:
        new = copy.copy(self)
        object.__setattr__(new, "_sublayers", dict(self.__dict__.get("_sublayers", {})))
        for name, child in self.children:
            if isinstance(child, Module):
                setattr(new, name, child._clone())
        return new

    def load_state(self, lookup: Callable[[str, Tensor], Any]) -> None:
        """Replaces each parameter by ``lookup(qualified_name, tensor)`` (any DLPack array)."""
        self.apply_to_parameters(lambda n, t: _as_tensor(lookup(n, t)))

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True, **kwargs: Any) -> None:  # type: ignore[override]
        """Loads parameters by qualified name. Shapes and dtypes must match; values on another
        device are copied to the parameter's. With `strict`, unused names are a ValueError;
        a parameter missing from `state` is a KeyError. (A tree of graph layers holding
        ``Weight``s loads as ``max.nn.legacy`` modules do.)"""
        params = dict(self.parameters)
        if not params and self.raw_state_dict():
            return super().load_state_dict(state, strict=strict, **kwargs)
        if strict:
            unused = sorted(set(state) - set(params))
            if unused:
                raise ValueError(f"load_state_dict: weights that match no parameter: {', '.join(unused)}")

        def load(name: str, old: Tensor) -> Tensor:
            if name not in state:
                raise KeyError(f"load_state_dict: no value for parameter {name!r}")
            new = _as_tensor(state[name])
            if new.dtype != old.dtype or list(new.shape) != list(old.shape):
                raise ValueError(
                    f"load_state_dict: {name}: the module expects {old.dtype.name}{[int(d) for d in old.shape]}, "
                    f"got {new.dtype.name}{[int(d) for d in new.shape]}"
                )
            return new.to(old.device)

        # every value checked (and moved) before any parameter changes: a load that fails
        # leaves the module as it was
        loaded = {name: load(name, old) for name, old in params.items()}
        self.apply_to_parameters(lambda name, _: loaded[name])

    def to(self, device: Any) -> Module:
        """Moves every parameter to `device`; returns the module."""
        self.apply_to_parameters(lambda _, t: t.to(device))
        return self

    def compile(self, *input_types: Any, weights: Mapping[str, Any] | None = None) -> Callable[..., Any]:
        """Traces ``forward`` on symbolic inputs of `input_types` into a graph whose weights
        are the parameters (values from `weights`, else the parameters), compiles it, and
        returns a function of Tensors with ``forward``'s signature."""
        from max.nn._compile import compile_module

        return compile_module(self, input_types, weights)

    def __repr__(self) -> str:
        fields = []
        for name, value in self._attrs():
            if isinstance(value, Tensor):
                fields.append(f"{name}=Tensor({value.dtype.name}{[int(d) for d in value.shape]})")
            elif isinstance(value, _GraphModule):
                inner = repr(value).replace("\n", "\n    ")
                fields.append(f"{name}={inner}")
            elif isinstance(value, (int, float, str, bool)) or value is None:
                fields.append(f"{name}={value!r}")
        if not fields:
            return f"{type(self).__name__}()"
        if sum(len(f) for f in fields) < 70 and not any("\n" in f for f in fields):
            return f"{type(self).__name__}({', '.join(fields)})"
        return f"{type(self).__name__}(\n    " + ",\n    ".join(fields) + "\n)"


def _checked(f: Callable[[str, Tensor], Any], name: str, t: Tensor) -> Tensor:
    new = f(name, t)
    if not isinstance(new, Tensor):
        raise TypeError(
            f"apply_to_parameters: the function returned {type(new).__name__} for parameter {name!r}, not a "
            "Tensor (load_state takes any DLPack array)"
        )
    return new


def _as_tensor(value: Any) -> Tensor:
    if isinstance(value, Tensor):
        return value
    data = getattr(value, "data", None)  # WeightData
    if data is not None and not hasattr(value, "__dlpack__"):
        value = data
    return Tensor.from_dlpack(value)


def module_dataclass(cls: type | None = None, /, *, repr: bool = False, **kwargs: Any) -> Any:  # noqa: A002
    """Makes `cls` a dataclass Module: its fields (Tensors, sub-modules, settings) become the
    constructor's arguments. ``repr=True`` keeps the dataclass repr instead of Module's."""

    def wrap(c: type) -> type:
        out = dataclasses.dataclass(c, repr=repr, eq=kwargs.pop("eq", False), **kwargs)
        if not issubclass(out, Module):
            raise TypeError(f"module_dataclass: {c.__name__} must subclass max.nn.Module")
        return out

    return wrap if cls is None else wrap(cls)


__all__ = ["Module", "module_dataclass"]
