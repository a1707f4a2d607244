"""Matrix products: matmul (with numpy's 1-D and batch broadcasting rules) and outer. Operands
of different dtypes are cast to the one the promotion rule picks, as for elementwise ops; shapes
are inferred and checked in Rust (crates/graph/src/ops/linalg.rs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from max.graph.ops._stage import as_tensor, stage1
from max.graph.value import TensorValue


def _promoted(op: str, values: Sequence[TensorValue], names: Sequence[str]) -> list[TensorValue]:
    """`values` cast to the dtype the promotion rule picks for all of them (always one of
    theirs), or the rule's error naming the operand that cannot join."""
    ir = values[0]._graph._ir
    widest = values[0]
    for i, v in enumerate(values[1:], start=1):
        try:
            code = ir.promote(op, widest._id, v._id)
        except ValueError:
            if i == 1:
                raise
            # The rule's own message would call this operand by the second argument's name.
            raise ValueError(
                f"{op}: {names[i]}: cannot combine {widest.dtype.name} and {v.dtype.name}: neither converts to "
                "the other without losing values; insert an explicit cast"
            ) from None
        if code == v.dtype.value:
            widest = v
    target = widest.dtype
    return [v if v.dtype == target else stage1("cast", [v], {"dtype": ("dtype", target.value)}) for v in values]


def _operands(op: str, lhs: Any, rhs: Any) -> list[TensorValue]:
    """Both sides as tensors of one graph and dtype; numbers and arrays take the other side's
    dtype and device."""
    if isinstance(lhs, TensorValue):
        rhs = as_tensor(rhs, like=lhs, op=op, arg="rhs")
    elif isinstance(rhs, TensorValue):
        lhs = as_tensor(lhs, like=rhs, op=op, arg="lhs")
    else:
        lhs = as_tensor(lhs, op=op, arg="lhs")
        rhs = as_tensor(rhs, like=lhs, op=op, arg="rhs")
    return _promoted(op, [lhs, rhs], ["lhs", "rhs"])


def matmul(lhs: Any, rhs: Any) -> TensorValue:
    """Matrix product over the last two dimensions; leading dimensions broadcast. A 1-D `lhs` is
    a row vector and a 1-D `rhs` a column vector, whose extra dimension is dropped from the
    result (two vectors give a scalar)."""
    return stage1("matmul", _operands("matmul", lhs, rhs))


def outer(lhs: Any, rhs: Any) -> TensorValue:
    """Outer product of `lhs` and `rhs`, each flattened: shape [numel(lhs), numel(rhs)]."""
    return stage1("outer", _operands("outer", lhs, rhs))


__all__ = ["matmul", "outer"]
