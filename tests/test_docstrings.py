"""Every public op, class, function, method and property of the documented modules has a
docstring: the names each module exports (``__all__``), and the methods and properties each
exported class defines (inherited ones are checked where they are defined)."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

MODULES = [
    "max.driver",
    "max.dtype",
    "max.engine",
    "max.graph",
    "max.graph.ops",
    "max.graph.quantization",
    "max.graph.weights",
    "max.tensor",
    "max.functional",
    "max.random",
    "max.nn",
    "max.pipelines",
    "max.entrypoints.llm",
    "max.interfaces",
]


def _documentable(obj: Any) -> bool:
    """Classes and functions of ours (not typing aliases or constants)."""
    if not (inspect.isclass(obj) or inspect.isroutine(obj)):
        return False
    return (getattr(obj, "__module__", None) or "").startswith("max")


def _members(cls: type) -> list[tuple[str, Any]]:
    out = []
    for name, attr in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(attr, (staticmethod, classmethod)):
            attr = attr.__func__
        if isinstance(attr, property) or inspect.isroutine(attr) or inspect.isdatadescriptor(attr):
            out.append((name, attr))
    return out


def _doc(owner: type, name: str, attr: Any) -> str:
    """The docstring, as help() finds it: an override may inherit its base's, a ``__slots__``
    member has the one its class's ``__slots__`` dict gives."""
    doc = inspect.getdoc(attr)
    if not doc:
        for base in owner.__mro__:
            slots = vars(base).get("__slots__")
            if isinstance(slots, dict) and slots.get(name):
                return str(slots[name])
            inherited = vars(base).get(name)
            if base is not owner and inherited is not None and inspect.getdoc(inherited):
                return inspect.getdoc(inherited) or ""
    return (doc or "").strip()


def missing_docstrings() -> list[str]:
    missing: list[str] = []
    seen: set[int] = set()
    for mod_name in MODULES:
        mod = importlib.import_module(mod_name)
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if not _documentable(obj) or id(obj) in seen:
                continue
            seen.add(id(obj))
            if not (obj.__doc__ or "").strip() or (inspect.isclass(obj) and obj.__doc__ == type.__doc__):
                missing.append(f"{mod_name}.{name}")
            if inspect.isclass(obj) and not issubclass(obj, BaseException):
                for attr_name, attr in _members(obj):
                    if not _doc(obj, attr_name, attr):
                        missing.append(f"{mod_name}.{name}.{attr_name}")
    return missing


def test_every_public_name_has_a_docstring():
    missing = missing_docstrings()
    assert not missing, f"{len(missing)} public names have no docstring:\n  " + "\n  ".join(missing)


def test_the_check_sees_a_missing_docstring(monkeypatch):
    from max.graph import ops

    monkeypatch.setattr(ops.relu, "__doc__", None)
    assert "max.graph.ops.relu" in missing_docstrings()
