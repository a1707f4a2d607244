"""Tensor dimensions (``max.graph.dim``): static sizes, named symbols, and algebraic
expressions over them. The algebra and its canonical form live in Rust (``crates/graph``);
these classes wrap a canonical expression and pick the subclass that describes it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Union

import numpy as np

from max._core.graph import Dim as _CoreDim

DimLike = Union[int, str, "Dim", np.integer]


def _core(value: Any) -> _CoreDim:
    if isinstance(value, Dim):
        return value._d
    if isinstance(value, bool):
        raise TypeError(f"Unsupported dimension type {value!r} ({type(value)})")
    if isinstance(value, (int, np.integer)):
        n = int(value)
        if not -(2**63) <= n < 2**63:
            raise ValueError(f"dimension {n} is outside the int64 range")
        return _CoreDim.static(n)
    if isinstance(value, str):
        return _CoreDim.symbol(value)
    raise TypeError(f"Unsupported dimension type {value!r} ({type(value)})")


class DimDivisionByZero(ZeroDivisionError, ValueError):
    """A dim divided by zero: a ZeroDivisionError, as Python's ints raise (and a ValueError, as
    the other errors of dim arithmetic are)."""


def _floordiv(a: _CoreDim, b: _CoreDim) -> Dim:
    if b.value == 0:
        raise DimDivisionByZero(f"dimension division by zero: {a} // 0")
    return _wrap(a.floordiv(b))


def _wrap(d: _CoreDim) -> Dim:
    cls = (StaticDim, SymbolicDim, AlgebraicDim)[d.kind]
    obj = object.__new__(cls)
    obj._d = d
    return obj


class Dim:
    """A tensor dimension: ``Dim(4)`` is static, ``Dim("batch")`` symbolic, and arithmetic on
    symbolic dims gives algebraic ones (``Dim("batch") * 5``)."""

    __slots__ = ("_d",)
    _d: _CoreDim

    def __new__(cls, value: DimLike) -> Dim:
        return _wrap(_core(value))

    @property
    def parameters(self) -> Iterable[SymbolicDim]:
        """The symbolic dims this dim depends on."""
        return [SymbolicDim(p) for p in self._d.parameters]

    def substitute(self, env: dict[str, DimLike]) -> Dim:
        """This dim with symbols replaced by the dims `env` maps them to."""
        return _wrap(self._d.substitute({k: _core(v) for k, v in env.items()}))

    def _other(self, other: Any) -> _CoreDim | None:
        try:
            return _core(other)
        except TypeError:
            return None

    def __add__(self, other: DimLike) -> Dim:
        o = self._other(other)
        return NotImplemented if o is None else _wrap(self._d.add(o))

    def __radd__(self, other: DimLike) -> Dim:
        o = self._other(other)
        return NotImplemented if o is None else _wrap(o.add(self._d))

    def __sub__(self, other: DimLike) -> Dim:
        o = self._other(other)
        return NotImplemented if o is None else _wrap(self._d.sub(o))

    def __rsub__(self, other: DimLike) -> Dim:
        o = self._other(other)
        return NotImplemented if o is None else _wrap(o.sub(self._d))

    def __mul__(self, other: DimLike) -> Dim:
        o = self._other(other)
        return NotImplemented if o is None else _wrap(self._d.mul(o))

    def __rmul__(self, other: DimLike) -> Dim:
        o = self._other(other)
        return NotImplemented if o is None else _wrap(o.mul(self._d))

    def __floordiv__(self, other: DimLike) -> Dim:
        o = self._other(other)
        return NotImplemented if o is None else _floordiv(self._d, o)

    def __rfloordiv__(self, other: DimLike) -> Dim:
        o = self._other(other)
        return NotImplemented if o is None else _floordiv(o, self._d)

    def __neg__(self) -> Dim:
        return _wrap(self._d.neg())

    def __eq__(self, other: object) -> bool:
        o = self._other(other)
        return o is not None and self._d == o

    def __ne__(self, other: object) -> bool:
        return not self == other

    def _order(self, other: Any, op: str) -> tuple[int, int]:
        """Both values, for ordering two static dims (or a static dim and an int)."""
        a, b = self._d.value, self._other(other)
        if a is None or b is None or b.value is None:
            raise TypeError(f"only static dims can be ordered: {self!r} {op} {other!r}")
        return a, b.value

    def __lt__(self, other: DimLike) -> bool:
        a, b = self._order(other, "<")
        return a < b

    def __le__(self, other: DimLike) -> bool:
        a, b = self._order(other, "<=")
        return a <= b

    def __gt__(self, other: DimLike) -> bool:
        a, b = self._order(other, ">")
        return a > b

    def __ge__(self, other: DimLike) -> bool:
        a, b = self._order(other, ">=")
        return a >= b

    def __hash__(self) -> int:
        # Equal to what it compares equal to: a static dim hashes as its int, a symbolic one as
        # its name.
        if self._d.value is not None:
            return hash(self._d.value)
        if self._d.name is not None:
            return hash(self._d.name)
        return hash(self._d)

    def __int__(self) -> int:
        value = self._d.value
        if value is None:
            raise TypeError(f"int({self!r}): Int conversions only supported for static dims")
        return value

    def __index__(self) -> int:
        return int(self)

    def __str__(self) -> str:
        return str(self._d)

    def __repr__(self) -> str:
        return repr(self._d)

    def __bool__(self) -> bool:
        return True

    def __reduce__(self):
        if self._d.value is not None:
            return (_rebuild, (self._d.value,))
        if self._d.name is not None:
            return (_rebuild, (self._d.name,))
        return (_from_terms, (self._d.terms(),))


def _rebuild(value: Any) -> Dim:
    return Dim(value)


def _from_terms(terms: list) -> Dim:
    """The dim whose canonical terms are `terms` (``_CoreDim.terms``): rebuilt by the same
    arithmetic, which gives the same canonical form."""
    out = Dim(0)
    for coeff, atoms in terms:
        term = Dim(coeff)
        for atom, power in atoms:
            base = Dim(atom) if isinstance(atom, str) else _from_terms(atom[0]) // _from_terms(atom[1])
            for _ in range(power):
                term = term * base
        out = out + term
    return out


class StaticDim(Dim):
    """A dimension of known size."""

    __slots__ = ()

    def __new__(cls, value: int | StaticDim) -> StaticDim:
        d = _core(value)
        if d.kind != 0:
            raise TypeError(f"StaticDim needs an int, got {value!r}")
        return _wrap(d)  # type: ignore[return-value]

    @property
    def dim(self) -> int:
        """The size of the dimension."""
        return self._d.value


class SymbolicDim(Dim):
    """A named dimension whose size is known only at run time."""

    __slots__ = ()

    def __new__(cls, value: str | SymbolicDim) -> SymbolicDim:
        d = _core(value)
        if d.kind != 1:
            raise TypeError(f"SymbolicDim needs a name, got {value!r}")
        return _wrap(d)  # type: ignore[return-value]

    @property
    def name(self) -> str:
        """The name of the dimension."""
        return self._d.name


class AlgebraicDim(Dim):
    """An expression over symbolic dimensions, kept in canonical form."""

    __slots__ = ()

    def __new__(cls, value: DimLike) -> Dim:
        return _wrap(_core(value))

    @classmethod
    def apply(cls, op: str, *operands: DimLike) -> Dim:
        """Applies ``op`` ("add", "mul", "floordiv", "sub", "neg") to the operands."""
        dims = [Dim(o) for o in operands]
        if op == "neg":
            (x,) = dims
            return -x
        fn = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "sub": lambda a, b: a - b,
              "floordiv": lambda a, b: a // b}[op]
        out = dims[0]
        for d in dims[1:]:
            out = fn(out, d)
        return out

    @property
    def attr(self) -> str:
        """The canonical expression, as text."""
        return str(self)
