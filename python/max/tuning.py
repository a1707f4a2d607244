"""Settings and kernel tuning knobs, and what the kernel launchers chose.

Every setting and knob is declared once in the engine (name, type, default, doc); :func:`knobs`
lists them and ``docs/configuration.md`` documents them. User settings also have an environment
variable of their own (``MAX_CUDA_GRAPHS``, ...); tuning knobs are set for a whole process with
``MAX_TUNING="conv.bn=128,gemm.splitk=2"`` or for a block of code with :func:`override`::

    from max import tuning

    with tuning.override("conv.bn=128", cuda_graphs="off"):
        model.execute(x)

    with tuning.record_launches() as launches:
        model.execute(x)
    print(launches.last("conv_sm90"))   # {'kernel': 'conv_sm90_bf16_n128_lean', 'bm': 128, ...}

Flags take ``1/true/on/yes`` and ``0/false/off/no``.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from max._core import tuning as _t

__all__ = ["Knob", "knobs", "get", "current", "override", "record_launches", "LaunchLog"]


@dataclass(frozen=True)
class Knob:
    """One declared setting or tuning knob."""

    name: str
    env: Optional[str]
    kind: str
    default: str
    doc: str


def knobs() -> list[Knob]:
    """Every setting and tuning knob, in declaration order."""
    return [Knob(*k) for k in _t._tuning_knobs()]


def get(name: str) -> str:
    """The current value of ``name`` in its text form ('' where chosen per problem)."""
    return _t._tuning_get(name)


def current() -> str:
    """The explicitly set entries (environment, ``MAX_TUNING``, overrides) as a spec string."""
    return _t._tuning_describe()


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _spec(spec: Optional[str], values: dict[str, Any]) -> str:
    items = [spec] if spec else []
    items += [f"{name}={_text(value)}" for name, value in values.items()]
    return ",".join(items)


@contextmanager
def override(spec: Optional[str] = None, /, **values: Any) -> Iterator[None]:
    """Sets entries for the duration of the block: a spec string (``"conv.bn=128,conv.pdl=0"``),
    keyword arguments for names without dots (``cuda_graphs="off"``), or a dict passed as
    ``**{"gemm.splitk": 2}``. Raises ValueError naming a bad entry before anything changes."""
    scope = _t.TuningOverride(_spec(spec, values))
    with scope:
        yield


class LaunchLog:
    """The launches recorded inside a :func:`record_launches` block (read live inside it, kept
    as they were at its end after it)."""

    def __init__(self) -> None:
        self._kept: Optional[list[tuple[str, str, dict[str, int]]]] = None

    def _raw(self) -> list[tuple[str, str, dict[str, int]]]:
        return _t._launch_records() if self._kept is None else self._kept

    def records(self, family: Optional[str] = None) -> list[dict[str, Any]]:
        """Each launch of ``family`` (all families when None), oldest first, as a dict with the
        family, the kernel entry and the launcher's configuration fields."""
        return [
            {"family": fam, "kernel": kernel, **config}
            for fam, kernel, config in self._raw()
            if family is None or fam == family
        ]

    def last(self, family: str) -> Optional[dict[str, Any]]:
        """The last launch of ``family``, or None when there was none."""
        found = self.records(family)
        return found[-1] if found else None

    def count(self, family: str, **fields: int) -> int:
        """How many launches of ``family`` had every field equal to the given value."""
        return sum(all(r.get(k) == v for k, v in fields.items()) for r in self.records(family))


@contextmanager
def record_launches() -> Iterator[LaunchLog]:
    """Records the configuration of every kernel launch whose launcher selects one (conv2d and
    GEMM on Hopper, skinny GEMMs, quantized GEMVs, fused elementwise groups) inside the block.
    The log starts empty: a block nested in another clears what the outer one had recorded."""
    _t._launch_records_clear()
    log = LaunchLog()
    recording = _t.LaunchRecording()
    try:
        yield log
    finally:
        recording.stop()
        log._kept = _t._launch_records()
