"""The stubs of the compiled extension (python/max/_core/*.pyi) match it: every class, function,
method and property of each ``max._core`` submodule is declared in its stub, and every name a
stub declares exists, so editors and mypy see the extension as it is."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

STUBS = Path(__file__).resolve().parent.parent / "python" / "max" / "_core"
SUBMODULES = sorted(p.stem for p in STUBS.glob("*.pyi") if p.stem != "__init__")


def declared(stub: Path) -> dict[str, set[str]]:
    """Top-level names of a stub -> the member names its classes declare (empty for functions)."""
    out: dict[str, set[str]] = {}
    for node in ast.parse(stub.read_text()).body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = set()
    return out


def runtime(module: object) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for name, obj in vars(module).items():
        if name.startswith("__"):
            continue
        if inspect.isclass(obj):
            out[name] = {m for m in vars(obj) if not m.startswith("_") or m in ("__array__", "__dlpack__")}
        elif callable(obj):
            out[name] = set()
    return out


def test_every_submodule_has_a_stub():
    core = importlib.import_module("max._core")
    modules = {n for n, m in vars(core).items() if inspect.ismodule(m)}
    assert modules == set(SUBMODULES)


@pytest.mark.parametrize("name", SUBMODULES)
def test_stub_matches_the_extension(name):
    have = runtime(importlib.import_module(f"max._core.{name}"))
    stub = declared(STUBS / f"{name}.pyi")
    assert set(have) == set(stub), f"max._core.{name}: missing from the stub {sorted(set(have) - set(stub))}, " \
                                   f"not in the extension {sorted(set(stub) - set(have))}"
    for cls, members in have.items():
        missing = members - stub[cls]
        assert not missing, f"max._core.{name}.{cls}: {sorted(missing)} missing from the stub"
        real = getattr(importlib.import_module(f"max._core.{name}"), cls)
        unknown = {m for m in stub[cls] if not m.startswith("__") and not hasattr(real, m)}
        assert not unknown, f"max._core.{name}.{cls}: the stub declares {sorted(unknown)}, which it lacks"
