"""How a Tensor prints: its type, then its values as one flat list, as MAX's docs show:
``TensorType(dtype=float32, shape=[Dim(3)], device=cpu:0): [1.0, 2.0, 3.0]``."""

from __future__ import annotations

from typing import Any

import numpy as np

from max.dtype import DType

# Past this many elements only the first and last ones are shown.
EDGE = 500


def host_array(tensor: Any) -> np.ndarray:
    """The tensor's values on the host as numpy (bfloat16/float8 widened to float32)."""
    buf = tensor.storage
    if not buf.is_host:
        from max import driver

        buf = buf.to(driver.CPU())
    if buf.dtype in (DType.bfloat16,) or "float8" in buf.dtype.name:
        buf = buf._cast(DType.float32)
    return np.from_dlpack(buf) if buf.is_contiguous else buf.to_numpy()


def _scalar(v: Any) -> str:
    return repr(v.item() if isinstance(v, np.generic) else v)


def format_tensor(tensor: Any) -> str:
    header = repr(tensor.type)
    if tensor.storage is None:
        return f"{header}: <unrealized>"
    arr = host_array(tensor)
    if arr.ndim == 0:
        return f"{header}: {_scalar(arr[()])}"
    flat = arr.reshape(-1)
    if flat.size > 2 * EDGE:
        head = ", ".join(_scalar(v) for v in flat[:EDGE].tolist())
        tail = ", ".join(_scalar(v) for v in flat[-EDGE:].tolist())
        return f"{header}: [{head}, ..., {tail}]"
    return f"{header}: [{', '.join(_scalar(v) for v in flat.tolist())}]"
