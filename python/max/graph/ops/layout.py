"""Layout ops: reshapes and views, joins and splits, padding and repetition, slicing, and
device transfers. Each op is validated and typed in Rust (crates/graph/src/ops/layout.rs and
layout/); this module turns Python arguments into the attributes those ops read."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from max.graph.dim import Dim
from max.graph.ops._stage import as_tensor, stage, stage1
from max.graph.type import DeviceRef
from max.graph.value import TensorValue


def _int(op: str, arg: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{op}: {arg}: expected an int, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{op}: {arg}: expected an int, got {value!r}") from None


def _opt_int(op: str, arg: str, value: Any) -> int | None:
    return None if value is None else _int(op, arg, value)


def _ints(op: str, arg: str, values: Any) -> list[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{op}: {arg}: expected a sequence of ints, got {values!r}")
    return [_int(op, arg, v) for v in values]


def _dim(op: str, arg: str, value: Any) -> Dim:
    try:
        return Dim(value)
    except TypeError as e:
        raise TypeError(f"{op}: {arg}: {e}") from None


def _dims(op: str, arg: str, shape: Any) -> tuple:
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
        raise TypeError(f"{op}: {arg}: expected a sequence of dims, got {shape!r}")
    return ("dims", [_dim(op, arg, d)._d for d in shape])


def _values(op: str, arg: str, values: Any) -> list[TensorValue]:
    """A list of tensor-like values; numbers and arrays take the first tensor's dtype."""
    if isinstance(values, (str, bytes, TensorValue)) or not isinstance(values, Iterable):
        raise TypeError(f"{op}: {arg}: expected a sequence of tensor values, got {type(values).__name__}")
    vals = list(values)
    if not vals:
        raise ValueError(f"{op}: {arg}: must provide at least one value to {op}")
    like = next((v for v in vals if isinstance(v, TensorValue)), None)
    return [as_tensor(v, like=like, op=op, arg=f"{arg}[{i}]") for i, v in enumerate(vals)]


def reshape(x: Any, shape: Iterable[Any]) -> TensorValue:
    """`x` with the same elements in a new shape; one dim may be -1 (inferred)."""
    t = as_tensor(x, op="reshape", arg="x")
    return stage1("reshape", [t], {"shape": _dims("reshape", "shape", shape)})


def flatten(x: Any, start_dim: int = 0, end_dim: int = -1) -> TensorValue:
    """`x` with the dims from `start_dim` to `end_dim` (inclusive) merged into one."""
    t = as_tensor(x, op="flatten", arg="x")
    attrs = {"start_dim": _int("flatten", "start_dim", start_dim), "end_dim": _int("flatten", "end_dim", end_dim)}
    return stage1("flatten", [t], attrs)


def squeeze(x: Any, axis: int) -> TensorValue:
    """`x` without its size-1 dim `axis`."""
    t = as_tensor(x, op="squeeze", arg="x")
    return stage1("squeeze", [t], {"axis": _int("squeeze", "axis", axis)})


def unsqueeze(x: Any, axis: int) -> TensorValue:
    """`x` with a new size-1 dim at `axis` (negative counts from rank + 1)."""
    t = as_tensor(x, op="unsqueeze", arg="x")
    return stage1("unsqueeze", [t], {"axis": _int("unsqueeze", "axis", axis)})


def transpose(x: Any, axis_1: int, axis_2: int) -> TensorValue:
    """`x` with two axes swapped."""
    t = as_tensor(x, op="transpose", arg="x")
    attrs = {"axis_1": _int("transpose", "axis_1", axis_1), "axis_2": _int("transpose", "axis_2", axis_2)}
    return stage1("transpose", [t], attrs)


def permute(x: Any, dims: list[int]) -> TensorValue:
    """`x` with its axes reordered: output axis i is input axis dims[i]."""
    t = as_tensor(x, op="permute", arg="x")
    return stage1("permute", [t], {"dims": _ints("permute", "dims", dims)})


def broadcast_to(x: Any, shape: Any, out_dims: Iterable[Any] | None = None) -> TensorValue:
    """`x` broadcast to `shape` (a list of dims, or a rank-1 integer tensor read at run time,
    in which case `out_dims` gives the result's dims)."""
    t = as_tensor(x, op="broadcast_to", arg="x")
    if isinstance(shape, TensorValue):
        if out_dims is None:
            raise ValueError("broadcast_to: out_dims: out_dims must be given with a tensor-valued shape")
        return stage1("broadcast_to", [t, shape], {"out_dims": _dims("broadcast_to", "out_dims", out_dims)})
    return stage1("broadcast_to", [t], {"shape": _dims("broadcast_to", "shape", shape)})


def concat(original_vals: Iterable[Any], axis: int = 0) -> TensorValue:
    """The values joined along `axis` (same dtype, device, rank and other dims)."""
    vals = _values("concat", "original_vals", original_vals)
    return stage1("concat", vals, {"axis": _int("concat", "axis", axis)})


def stack(values: Iterable[Any], axis: int = 0) -> TensorValue:
    """The values (all of one shape) stacked along a new axis."""
    vals = _values("stack", "values", values)
    return stage1("stack", vals, {"axis": _int("stack", "axis", axis)})


def split(x: Any, split_sizes: Sequence[Any], axis: int = 0) -> list[TensorValue]:
    """`x` cut along `axis` into pieces of the given sizes (which must add up to the dim)."""
    t = as_tensor(x, op="split", arg="x")
    attrs = {"split_sizes": _dims("split", "split_sizes", split_sizes), "axis": _int("split", "axis", axis)}
    return stage("split", [t], attrs)  # type: ignore[return-value]


def chunk(x: Any, chunks: int, axis: int = 0) -> list[TensorValue]:
    """`x` cut along `axis` into `chunks` equal pieces; `chunks` must statically divide the dim
    (a symbolic dim qualifies when it is a known multiple, like `batch * 4` for 2 chunks)."""
    t = as_tensor(x, op="chunk", arg="x")
    n = _int("chunk", "chunks", chunks)
    if n <= 0:
        raise ValueError(f"chunk: chunks: must be positive, got {n}")
    a = _int("chunk", "axis", axis)
    rank = t.rank
    if not -rank <= a < rank:
        raise IndexError(f"chunk: axis: axis {a} is out of range for rank {rank} (expected -{rank}..={rank - 1})")
    dim = t.shape[a]
    size = dim // n
    if size * n != dim:
        raise ValueError(f"chunk: chunks: chunks={n} must statically divide x.shape[axis]={dim}")
    return split(t, [size] * n, a)


def tile(x: Any, repeats: Iterable[Any]) -> TensorValue:
    """`x` repeated repeats[i] times along each dim i."""
    t = as_tensor(x, op="tile", arg="x")
    return stage1("tile", [t], {"repeats": _dims("tile", "repeats", repeats)})


def pad(input: Any, paddings: Iterable[int], mode: str = "constant", value: Any = 0) -> TensorValue:  # noqa: A002
    """`input` padded with `value`: paddings holds (before, after) pairs, one per dim."""
    t = as_tensor(input, op="pad", arg="input")
    if not isinstance(mode, str):
        raise TypeError(f"pad: mode: expected a string, got {mode!r}")
    fill = as_tensor(value, like=t, op="pad", arg="value")
    if fill.dtype != t.dtype:
        from max.graph.ops.creation import cast

        fill = cast(fill, t.dtype)
    attrs = {"paddings": _ints("pad", "paddings", paddings), "mode": mode}
    return stage1("pad", [t, fill], attrs)


def repeat_interleave(x: Any, repeats: Any, axis: int | None = None, out_dim: Any = None) -> TensorValue:
    """Each element of `x` repeated `repeats` times along `axis` (None: of the flattened input).
    `repeats` may be a tensor of counts (one per element, or one for all); then `out_dim`
    names the result's size along the axis."""
    t = as_tensor(x, op="repeat_interleave", arg="x")
    attrs: dict[str, Any] = {
        "axis": _opt_int("repeat_interleave", "axis", axis),
        "out_dim": None if out_dim is None else ("dims", [_dim("repeat_interleave", "out_dim", out_dim)._d]),
    }
    if isinstance(repeats, (bool, np.bool_)):
        raise TypeError(f"repeat_interleave: repeats: expected an int or a tensor, got {repeats!r}")
    if isinstance(repeats, (int, np.integer)):
        attrs["repeats"] = int(repeats)
        return stage1("repeat_interleave", [t], attrs)
    counts = as_tensor(repeats, graph=t._graph, op="repeat_interleave", arg="repeats")
    return stage1("repeat_interleave", [t, counts], attrs)


_INDEX, _SLICE, _NEW_AXIS, _ELLIPSIS, _TENSOR_INDEX, _SIZED_SLICE = range(6)
_HAS_START, _HAS_STOP, _TENSOR_START, _TENSOR_STOP = 1, 2, 4, 8


def _index_dim(value: Any, what: str, op: str, arg: str) -> Dim:
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{op}: {arg}: boolean {_plural(what)} are not supported, got {value!r}")
    if isinstance(value, (int, np.integer, Dim)):
        return Dim(value)
    raise TypeError(f"{op}: {arg}: {_plural(what)} must be ints, Dims or scalar tensors, got {value!r} "
                    f"({type(value).__name__})")


def _plural(word: str) -> str:
    return word[:-2] + "ices" if word.endswith("ex") else word + "s"


def _slice_attrs(indices: Any, op: str = "slice_tensor", arg: str = "indices") -> tuple[dict[str, Any], list[TensorValue]]:
    """The attributes and index tensors that encode `indices` for the Rust slice inference
    (crates/graph/src/ops/layout/slice.rs, `sliced_shape`, documents the encoding)."""
    if not isinstance(indices, (list, tuple)):
        raise TypeError(f"{op}: {arg}: expected a sequence of indices, got {type(indices).__name__}")
    zero = Dim(0)
    kinds: list[int] = []
    starts: list[Dim] = []
    stops: list[Dim] = []
    steps: list[int] = []
    bounds: list[int] = []
    out_dims: list[Dim] = []
    tensors: list[TensorValue] = []

    def add(kind: int, start: Dim = zero, stop: Dim = zero, step: int = 1, flags: int = 0, out: Dim = zero) -> None:
        kinds.append(kind)
        starts.append(start)
        stops.append(stop)
        steps.append(step)
        bounds.append(flags)
        out_dims.append(out)

    def slice_parts(s: slice, sized: bool) -> tuple[Dim, Dim, int, int]:
        flags = 0
        ends = []
        for value, given, is_tensor in ((s.start, _HAS_START, _TENSOR_START), (s.stop, _HAS_STOP, _TENSOR_STOP)):
            if value is None:
                ends.append(zero)
            elif isinstance(value, TensorValue):
                if not sized:
                    raise TypeError(
                        f"{op}: {arg}: a slice with tensor bounds needs its result size: "
                        "write it as (slice(start, stop), out_dim)"
                    )
                tensors.append(value)
                flags |= is_tensor
                ends.append(zero)
            else:
                ends.append(_index_dim(value, "slice bound", op, arg))
                flags |= given
        if s.step is None:
            return ends[0], ends[1], 1, flags
        if isinstance(s.step, (bool, np.bool_)):
            raise TypeError(f"{op}: {arg}: a slice step must be an int, got {s.step!r}")
        try:
            step = operator.index(s.step)
        except TypeError:
            raise TypeError(f"{op}: {arg}: a slice step must be a static int, got {s.step!r}") from None
        return ends[0], ends[1], step, flags

    for idx in indices:
        if idx is Ellipsis:
            add(_ELLIPSIS)
        elif idx is None:
            add(_NEW_AXIS)
        elif isinstance(idx, TensorValue):
            tensors.append(idx)
            add(_TENSOR_INDEX)
        elif isinstance(idx, slice):
            start, stop, step, flags = slice_parts(idx, sized=False)
            add(_SLICE, start, stop, step, flags)
        elif isinstance(idx, tuple) and len(idx) == 2 and isinstance(idx[0], slice):
            out = _dim(op, arg, idx[1])
            start, stop, step, flags = slice_parts(idx[0], sized=True)
            add(_SIZED_SLICE, start, stop, step, flags, out)
        else:
            add(_INDEX, _index_dim(idx, "index", op, arg))
    attrs = {
        "kinds": kinds,
        "starts": ("dims", [d._d for d in starts]),
        "stops": ("dims", [d._d for d in stops]),
        "steps": steps,
        "bounds": bounds,
        "out_dims": ("dims", [d._d for d in out_dims]),
    }
    return attrs, tensors


def slice_tensor(x: Any, indices: Any) -> TensorValue:
    """A sub-tensor of `x`, with numpy's basic indexing: ints, slices (any non-zero step, bounds
    that are ints or Dims), `...`, None (a new axis), scalar integer tensors, and
    `(slice, out_dim)` for a slice with tensor bounds or a known result size."""
    t = as_tensor(x, op="slice_tensor", arg="x")
    attrs, tensors = _slice_attrs(indices)
    return stage1("slice_tensor", [t, *tensors], attrs)


def as_interleaved_complex(x: Any) -> TensorValue:
    """`x`'s last dim of (real, imag) pairs split into [last / 2, 2]."""
    t = as_tensor(x, op="as_interleaved_complex", arg="x")
    return stage1("as_interleaved_complex", [t])


def band_part(x: Any, num_lower: int | None = None, num_upper: int | None = None, exclude: bool = False) -> TensorValue:
    """`x` with everything outside (or, with `exclude`, inside) a diagonal band of its last two
    axes set to zero."""
    t = as_tensor(x, op="band_part", arg="x")
    if not isinstance(exclude, (bool, np.bool_)):
        raise TypeError(f"band_part: exclude: expected a bool, got {exclude!r}")
    attrs = {
        "num_lower": _opt_int("band_part", "num_lower", num_lower),
        "num_upper": _opt_int("band_part", "num_upper", num_upper),
        "exclude": bool(exclude),
    }
    return stage1("band_part", [t], attrs)


def transfer_to(x: Any, device: Any) -> TensorValue:
    """`x` moved to `device` (a driver Device or a DeviceRef)."""
    t = as_tensor(x, op="transfer_to", arg="x")
    try:
        ref = DeviceRef.from_device(device)
    except TypeError as e:
        raise TypeError(f"transfer_to: device: {e}") from None
    return stage1("transfer_to", [t], {"device": ("device", ref._core())})


__all__ = [
    "as_interleaved_complex",
    "band_part",
    "broadcast_to",
    "chunk",
    "concat",
    "flatten",
    "pad",
    "permute",
    "repeat_interleave",
    "reshape",
    "slice_tensor",
    "split",
    "squeeze",
    "stack",
    "tile",
    "transfer_to",
    "transpose",
    "unsqueeze",
]
