"""``MutableBuffer``: a device buffer that eager ops update in place (a paged KV cache).

A ``Tensor`` is a value: an op never changes it. Some graph ops write into their input instead
(``kv_cache_store`` into the cache, then ``paged_attention`` reading it back); an eager op staged
over a ``MutableBuffer`` gets a ``BufferValue`` input, so the compiled graph writes into this
buffer's memory. The cache key is the buffer's dtype, shape and device, as for Tensors, so
every step over the same cache reuses one compiled graph."""

from __future__ import annotations

from typing import Any

import numpy as np

from max import driver
from max.dtype import DType
from max.graph.type import BufferType, DeviceRef


class MutableBuffer:
    """A driver Buffer passed by reference to eager ops (see the module doc)."""

    __slots__ = ("storage", "_k")

    state = None  # always real: eager dispatch reads ``storage`` directly

    def __init__(self, storage: driver.Buffer) -> None:
        if not isinstance(storage, driver.Buffer):
            raise TypeError(f"MutableBuffer: expected a driver.Buffer, got {type(storage).__name__}")
        self.storage = storage
        self._k = ("buffer", storage.dtype, tuple(storage.shape), DeviceRef.from_device(storage.device))

    @classmethod
    def zeros(cls, shape: list[int], dtype: DType, device: driver.Device) -> MutableBuffer:
        from max.tensor import Tensor

        return cls(Tensor.zeros(shape, dtype=dtype, device=device).storage)

    def _key(self) -> tuple:
        return self._k

    @property
    def type(self) -> BufferType:
        return BufferType(self.storage.dtype, list(self.storage.shape), self._k[3])

    @property
    def dtype(self) -> DType:
        return self.storage.dtype

    @property
    def shape(self) -> list[int]:
        return list(self.storage.shape)

    @property
    def device(self) -> driver.Device:
        return self.storage.device

    def to_numpy(self) -> np.ndarray:
        """A host copy of the current contents, in the buffer's own dtype (bfloat16 as
        ``ml_dtypes.bfloat16``)."""
        s = self.storage
        return (s if s.device.is_host else s.to(driver.CPU())).to_numpy().copy()

    def __repr__(self) -> str:
        return f"MutableBuffer({self.dtype.name}{self.shape}, {self.device})"


def check_eager_only(srcs: Any, where: str) -> None:
    """Buffers are only written by ops that run at once (not staged into another graph)."""
    for s in srcs:
        if type(s) is MutableBuffer:
            raise TypeError(
                f"{where}: a MutableBuffer (e.g. a KV cache) is written in place and can only be used by "
                "ops that run eagerly, not inside F.functional, F.lazy, Module.compile or a user's Graph"
            )


__all__ = ["MutableBuffer"]
