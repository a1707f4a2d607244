"""``KVCacheParams``: the shape of a model's paged KV cache (dtype, kv heads, head dim, layers,
page size, devices), its memory arithmetic, and the graph inputs through which a model reads
and writes it (``get_symbolic_inputs`` -> ``PagedCacheInputSymbols`` -> ``PagedCacheValues``).

The cache of one device is one buffer ``[pages, 2, layers, page_size, kv_heads, head_dim]``."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from max.dtype import DType
from max.graph import BufferType, BufferValue, DeviceRef, TensorType, TensorValue
from max.graph.sharding import even_ranges


class KVCacheStrategy(str, enum.Enum):
    """How the cache is laid out; every architecture here uses paged."""

    MODEL_DEFAULT = "model_default"
    PAGED = "paged"

    def kernel_substring(self) -> str:
        """The string representation of the strategy's value (``"paged"``, ``"model_default"``)."""
        return str(self.value)

    def uses_opaque(self) -> bool:
        """Whether the cache is passed to kernels as an opaque value (never, here)."""
        return False


@dataclass
class KVCacheQuantizationConfig:
    """Quantized cache settings (FP8 in MAX); not supported here."""

    scale_dtype: DType = DType.float32
    quantization_granularity: int = 128


@dataclass
class PagedCacheInputSymbols:
    """The graph input types of one device's cache: the blocks buffer and the per-step index
    tensors (uint32): cache lengths ``[batch]``, page table ``[batch, max_pages]``, the
    position ``[tokens]`` of each new token and its cache slot ``[tokens]``."""

    kv_blocks: BufferType
    cache_lengths: TensorType
    lookup_table: TensorType
    positions: TensorType
    slots: TensorType

    def __iter__(self):
        return iter([self.kv_blocks, self.cache_lengths, self.lookup_table, self.positions, self.slots])

    def flatten(self) -> list[Any]:
        """The symbolic inputs as a flat list, in graph-input order."""
        return list(self)


@dataclass
class PagedCacheValues:
    """The cache inputs of a graph, as values: what attention layers read and write."""

    kv_blocks: BufferValue
    cache_lengths: TensorValue
    lookup_table: TensorValue
    max_lengths: TensorValue | None = None
    positions: TensorValue | None = None
    slots: TensorValue | None = None

    @classmethod
    def from_values(cls, values: Sequence[Any]) -> PagedCacheValues:
        """From the graph input values in ``PagedCacheInputSymbols`` order."""
        blocks, lengths, table, positions, slots = values
        return cls(blocks.buffer, lengths.tensor, table.tensor, None, positions.tensor, slots.tensor)


def kv_head_ranges(n_kv_heads: int, n_devices: int) -> list[tuple[int, int]]:
    """The KV heads ``[start, stop)`` each of `n_devices` tensor-parallel devices holds: an
    even split of whole heads when there are at least as many heads as devices; otherwise each
    device holds the one head of the query heads it computes (``max.nn.attention.head_plan``),
    so neighbouring devices share heads."""
    if n_devices <= n_kv_heads:
        return even_ranges(n_kv_heads, n_devices)
    # Each head serves an even share of the devices (the first heads one more).
    out: list[tuple[int, int]] = []
    for h, (a, b) in enumerate(even_ranges(n_devices, n_kv_heads)):
        out.extend([(h, h + 1)] * (b - a))
    return out


@dataclass
class KVCacheParams:
    """The paged cache of a model. `page_size` is in tokens."""

    dtype: DType
    n_kv_heads: int
    head_dim: int
    num_layers: int
    devices: Sequence[DeviceRef] = field(default_factory=lambda: [DeviceRef.CPU()])
    enable_prefix_caching: bool = False
    enable_kvcache_swapping_to_host: bool = False
    host_kvcache_swap_space_gb: float | None = None
    cache_strategy: KVCacheStrategy = KVCacheStrategy.PAGED
    page_size: int = 128
    is_mla: bool = False
    data_parallel_degree: int = 1
    n_kv_heads_per_device: int = 0
    kvcache_quant_config: KVCacheQuantizationConfig | None = None

    def __post_init__(self) -> None:
        if self.page_size < 1:
            raise ValueError(f"KVCacheParams: page_size must be positive, got {self.page_size}")
        if self.n_kv_heads < 1 or self.head_dim < 1 or self.num_layers < 1:
            raise ValueError("KVCacheParams: n_kv_heads, head_dim and num_layers must be positive")
        if self.kvcache_quant_config is not None:
            raise NotImplementedError("KVCacheParams: quantized KV caches are not supported")
        if self.enable_kvcache_swapping_to_host:
            raise NotImplementedError("KVCacheParams: swapping cache pages to host memory is not supported")
        if not self.devices:
            self.devices = [DeviceRef.CPU()]
        if self.n_kv_heads_per_device == 0:
            self.n_kv_heads_per_device = self._planned_heads(0)

    @property
    def n_devices(self) -> int:
        """The number of devices the cache is spread over."""
        return len(self.devices)

    @property
    def tensor_parallel_degree(self) -> int:
        """Devices per data-parallel replica (each holds a share of the KV heads)."""
        return max(1, self.n_devices // max(1, self.data_parallel_degree))

    @property
    def dtype_shorthand(self) -> str:
        """The cache dtype in short form (``"bf16"`` or ``"f32"``)."""
        return "bf16" if self.dtype == DType.bfloat16 else "f32"

    @property
    def quantized_kv_cache(self) -> bool:
        """Whether the cache stores quantized values (never, here)."""
        return False

    def kv_heads_on(self, device_index: int) -> int:
        """The KV heads device `device_index` of a tensor-parallel group holds (its range is
        ``kv_head_ranges(n_kv_heads, tp)[device_index]``)."""
        if self.n_kv_heads_per_device != self._planned_heads(0):
            return self.n_kv_heads_per_device  # set by the caller: every device holds as many
        return self._planned_heads(device_index)

    def _planned_heads(self, device_index: int) -> int:
        tp = self.tensor_parallel_degree
        start, stop = kv_head_ranges(self.n_kv_heads, tp)[device_index % tp]
        return stop - start

    @property
    def shape_per_block(self) -> list[int]:
        """One page of the first device: ``[2, layers, page_size, kv_heads_per_device, head_dim]``."""
        return self.shape_per_block_on(0)

    def shape_per_block_on(self, device_index: int) -> list[int]:
        """One page of device `device_index` (devices may hold different numbers of heads)."""
        return [2, self.num_layers, self.page_size, self.kv_heads_on(device_index), self.head_dim]

    @property
    def bytes_per_block(self) -> int:
        """Bytes of one page over every device of the tensor-parallel group."""
        heads = sum(self.kv_heads_on(i) for i in range(self.tensor_parallel_degree))
        return 2 * self.num_layers * self.page_size * heads * self.head_dim * self.dtype.size_in_bytes

    def blocks_shape(self, num_pages: int, device_index: int = 0) -> list[int]:
        """The shape of device `device_index`'s cache of `num_pages` pages."""
        return [num_pages, *self.shape_per_block_on(device_index)]

    def get_symbolic_inputs(self) -> list[PagedCacheInputSymbols]:
        """The cache's graph input types, one set per device: symbolic page count, batch and
        token dims."""
        out = []
        for i, device in enumerate(self.devices):
            suffix = f"_{i}" if i else ""
            out.append(
                PagedCacheInputSymbols(
                    kv_blocks=BufferType(self.dtype, [f"total_num_pages{suffix}", *self.shape_per_block_on(i)], device),
                    cache_lengths=TensorType(DType.uint32, ["batch_size"], device),
                    lookup_table=TensorType(DType.uint32, ["batch_size", "max_num_pages"], device),
                    positions=TensorType(DType.uint32, ["total_seq_len"], device),
                    slots=TensorType(DType.uint32, ["total_seq_len"], device),
                )
            )
        return out

    def estimated_memory_size(self, max_batch_size: int, max_seq_len: int) -> int:
        """Bytes of the pages that `max_batch_size` sequences of `max_seq_len` tokens fill."""
        pages = -(-max_seq_len // self.page_size) * max_batch_size
        return pages * self.bytes_per_block

    def compute_num_device_blocks(self, available_cache_memory: int, max_batch_size: int | None = None,
                                  max_seq_len: int | None = None) -> int:
        """Pages that fit in `available_cache_memory` bytes (no more than the batch can use)."""
        pages = available_cache_memory // self.bytes_per_block
        if max_batch_size is not None and max_seq_len is not None:
            pages = min(pages, -(-max_seq_len // self.page_size) * max_batch_size)
        return int(pages)

    def compute_max_seq_len_fitting_in_cache(self, available_cache_memory: int) -> int:
        """Tokens that fit in `available_cache_memory` bytes, in whole pages."""
        return int(available_cache_memory // self.bytes_per_block) * self.page_size

    def copy_as_dp_1(self) -> KVCacheParams:
        """A copy for one data-parallel replica (its share of the devices, degree 1)."""
        if self.n_devices % self.data_parallel_degree:
            raise ValueError("KVCacheParams: the devices are not divisible by data_parallel_degree")
        import dataclasses

        return dataclasses.replace(
            self, devices=list(self.devices)[: self.n_devices // self.data_parallel_degree], data_parallel_degree=1,
            n_kv_heads_per_device=0,
        )


__all__ = [
    "KVCacheParams", "kv_head_ranges", "KVCacheQuantizationConfig", "KVCacheStrategy", "PagedCacheInputSymbols", "PagedCacheValues",
]
