"""Moving a step's small host arrays to the device in one copy: the arrays are packed into one
byte buffer (each at a 16-byte boundary), copied once, and handed out as typed views of the
device copy. A decode step has half a dozen inputs of a few bytes each; one copy instead of one
per array is most of the host time of a step on a GPU."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from max import driver
from max.dtype import DType


#: The most bytes one copy packs: the runtime stages host-to-device copies up to this size in
#: pinned memory and queues them at once; a larger one goes through the driver, which first
#: waits for the work already queued on the stream (crates/runtime/src/staging.rs MAX_STAGED).
PIECE = 1 << 20


def pieces(sizes: Sequence[int], limit: int = PIECE) -> list[list[int]]:
    """The arrays of byte sizes `sizes`, in order, as groups of indices whose 16-byte aligned
    sizes sum to at most `limit` (an array larger than that alone)."""
    groups: list[list[int]] = []
    total = limit + 1
    for i, n in enumerate(sizes):
        padded = -(-n // 16) * 16
        if total + padded > limit:
            groups.append([])
            total = 0
        groups[-1].append(i)
        total += padded
    return groups


def upload(arrays: Sequence[np.ndarray], device: driver.Device) -> list[driver.Buffer]:
    """Buffers on `device` holding `arrays` (host buffers as they are on the host): one copy, or
    one per PIECE bytes of them."""
    arrays = [np.ascontiguousarray(a) for a in arrays]
    if device.is_host:
        return [driver.Buffer.from_numpy(a) for a in arrays]
    out: list[driver.Buffer] = []
    for group in pieces([a.nbytes for a in arrays]):
        out += _one_copy([arrays[i] for i in group], device)
    return out


def _one_copy(arrays: Sequence[np.ndarray], device: driver.Device) -> list[driver.Buffer]:
    offsets, end = [], 0
    for a in arrays:
        offsets.append(end)
        end += -(-a.nbytes // 16) * 16
    packed = np.zeros(max(end, 16), np.uint8)
    for a, at in zip(arrays, offsets):
        packed[at : at + a.nbytes] = a.reshape(-1).view(np.uint8)
    dev = driver.Buffer.from_numpy(packed).to(device)
    return [dev[at : at + a.nbytes].view(DType.from_numpy(a.dtype), a.shape) for a, at in zip(arrays, offsets)]


__all__ = ["PIECE", "pieces", "upload"]
