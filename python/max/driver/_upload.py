"""Moving a step's small host arrays to the device in one copy: the arrays are packed into one
byte buffer (each at a 16-byte boundary), copied once, and handed out as typed views of the
device copy. A decode step has half a dozen inputs of a few bytes each; one copy instead of one
per array is most of the host time of a step on a GPU."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from max import driver
from max.dtype import DType


def upload(arrays: Sequence[np.ndarray], device: driver.Device) -> list[driver.Buffer]:
    """Buffers on `device` holding `arrays` (host buffers as they are on the host)."""
    arrays = [np.ascontiguousarray(a) for a in arrays]
    if device.is_host:
        return [driver.Buffer.from_numpy(a) for a in arrays]
    offsets, end = [], 0
    for a in arrays:
        offsets.append(end)
        end += -(-a.nbytes // 16) * 16
    packed = np.zeros(max(end, 16), np.uint8)
    for a, at in zip(arrays, offsets):
        packed[at : at + a.nbytes] = a.reshape(-1).view(np.uint8)
    dev = driver.Buffer.from_numpy(packed).to(device)
    return [dev[at : at + a.nbytes].view(DType.from_numpy(a.dtype), a.shape) for a, at in zip(arrays, offsets)]


__all__ = ["upload"]
