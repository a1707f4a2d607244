"""``Linear`` (``y = x @ W.T + b``, W stored ``[out_dim, in_dim]`` as checkpoints hold it, or as
GGUF quantized blocks multiplied by ``ops.qmatmul``) and ``MLP`` (the gated feed-forward
``down(act(gate(x)) * up(x))`` of Llama-style decoders). Their math is also exposed as
functions of graph values (``dense``, ``gated_mlp``) that the eager layers stage with the
same ops, so both give the same bits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from max.dtype import DType
from max.graph import DeviceRef, TensorValue, Weight, ops
from max.graph.quantization import QuantizationEncoding
from max.graph.sharding import ShardingStrategy, even_ranges
from max.nn._util import activation, as_dtype, device_ref
from max.nn.layer import Module, Shardable


def _weight_shape(in_dim: int, out_dim: int, encoding: QuantizationEncoding | None) -> tuple[DType | None, tuple[int, int]]:
    if encoding is None:
        return None, (out_dim, in_dim)
    if not encoding.is_gguf:
        raise NotImplementedError(f"Linear: quantization_encoding {encoding.value} is not supported by this layer")
    epb, size = encoding.elements_per_block, encoding.block_size
    if in_dim % epb:
        raise ValueError(f"Linear: in_dim {in_dim} is not a whole number of {encoding.value} blocks of {epb}")
    return DType.uint8, (out_dim, in_dim // epb * size)


def dense(x: TensorValue, weight: Any, bias: Any = None, clip: float | None = None) -> TensorValue:
    """``x @ weight.T + bias`` for ``weight [out_dim, in_dim]`` (optionally clipped to
    ``+-clip``), in x's dtype: the math of the graph ``Linear`` and of the eager layers built on
    it, staged into a model's graph or into an eager op's."""
    w = weight.T
    if clip is not None:
        w = ops.min(ops.max(w, -clip), clip)
    y = x @ as_dtype(w, x.dtype)
    if bias is not None:
        y = y + as_dtype(bias, y.dtype)
    return y


def gated_mlp(
    x: TensorValue,
    gate: Callable[[TensorValue], TensorValue],
    up: Callable[[TensorValue], TensorValue],
    down: Callable[[TensorValue], TensorValue],
    act: Callable[[TensorValue], TensorValue],
) -> TensorValue:
    """``down(act(gate(x)) * up(x))``: the feed-forward of Llama-style decoders, over any
    projections (dense or quantized)."""
    return down(act(gate(x)) * up(x))


class Linear(Module, Shardable):
    """A fully connected layer. With a GGUF `quantization_encoding` the weight is uint8
    ``[out_dim, bytes_per_row]`` and the product runs on the quantized blocks."""

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        dtype: DType,
        device: Any,
        has_bias: bool = False,
        quantization_encoding: QuantizationEncoding | None = None,
        float8_config: Any = None,
        name: str | None = None,
        clip_weight: float | None = None,
        is_sharding: bool = False,
    ) -> None:
        super().__init__()
        if float8_config is not None:
            raise NotImplementedError("Linear: float8_config (FP8 weights) is not supported")
        self.in_dim, self.out_dim = int(in_dim), int(out_dim)
        self.dtype = dtype
        self.device = device_ref(device)
        self.quantization_encoding = quantization_encoding
        self.clip_weight = clip_weight
        qdtype, shape = _weight_shape(self.in_dim, self.out_dim, quantization_encoding)
        self.weight = Weight(
            f"{name}.weight" if name else "weight",
            qdtype or dtype,
            shape,
            self.device,
            quantization_encoding=quantization_encoding,
        )
        self.bias = Weight(f"{name}.bias" if name else "bias", dtype, (self.out_dim,), self.device) if has_bias else None

    @property
    def sharding_strategy(self) -> ShardingStrategy | None:
        """How ``shard`` cuts the layer: rowwise (output features), columnwise (input
        features; the bias goes to the first piece only, as the pieces' sum adds it once),
        replicate, or explicit row/column ranges."""
        return self.__dict__.get("_sharding_strategy")

    @sharding_strategy.setter
    def sharding_strategy(self, strategy: ShardingStrategy) -> None:
        object.__setattr__(self, "_sharding_strategy", strategy)

    def _weight_strategy(self, s: ShardingStrategy) -> ShardingStrategy:
        """`s` in the weight's own units: a quantized weight's columns are bytes of whole blocks."""
        enc = self.quantization_encoding
        if enc is None or s.axis != 1:
            return s
        epb, size = enc.elements_per_block, enc.block_size
        ranges = list(s.ranges_for(self.in_dim))
        for a, b in ranges:
            if a % epb or b % epb:
                raise ValueError(f"Linear.shard: columns {a}:{b} do not fall on {enc.value} blocks of {epb}")
        return ShardingStrategy.ranges(1, [(a // epb * size, b // epb * size) for a, b in ranges])

    def shard(self, devices: Any) -> Sequence[Linear]:
        """One Linear per device of `devices`, holding that device's piece of the weight (and
        bias), cut by ``sharding_strategy``."""
        s = self.sharding_strategy
        if s is None:
            raise ValueError("Linear.shard: set sharding_strategy first")
        refs = [device_ref(d) for d in devices]
        self.weight.sharding_strategy = self._weight_strategy(s)
        weights = self.weight.shard(refs)
        biases: list[Any] = [None] * len(refs)
        if self.bias is not None:
            if s.axis == 1:
                self.bias.sharding_strategy = ShardingStrategy.replicate(len(refs))
                biases[0] = self.bias.shard(refs)[0]
            else:
                self.bias.sharding_strategy = s
                biases = self.bias.shard(refs)
        out = []
        for i, ref in enumerate(refs):
            rows = s.piece([self.out_dim, self.in_dim], i)
            out_dim = rows[1] - rows[0] if rows and s.axis == 0 else self.out_dim
            in_dim = rows[1] - rows[0] if rows and s.axis == 1 else self.in_dim
            piece = Linear(in_dim, out_dim, self.dtype, ref, quantization_encoding=self.quantization_encoding,
                           clip_weight=self.clip_weight)
            piece.weight = weights[i]
            piece.bias = biases[i]
            out.append(piece)
        return out

    def __call__(self, x: TensorValue) -> TensorValue:
        enc = self.quantization_encoding
        if enc is not None:
            # A GPU multiplies 16-bit activations as they are (f32 accumulation, the result in
            # their dtype); the CPU's block products are float32.
            native = x.device.is_gpu() and x.dtype in (DType.bfloat16, DType.float16)
            y = ops.qmatmul(enc, None, x if native else as_dtype(x, DType.float32), self.weight)
            y = as_dtype(y, x.dtype)
            if self.bias is not None:
                y = y + as_dtype(self.bias._value(), y.dtype)
            return y
        return dense(x, self.weight, self.bias._value() if self.bias is not None else None, self.clip_weight)

    def __repr__(self) -> str:
        enc = f", {self.quantization_encoding.value}" if self.quantization_encoding else ""
        return f"Linear({self.in_dim} -> {self.out_dim}, {self.dtype}{enc}, bias={self.bias is not None})"


class MLP(Module):
    """``down_proj(act(gate_proj(x)) * up_proj(x))``."""

    def __init__(
        self,
        dtype: DType,
        quantization_encoding: QuantizationEncoding | None,
        hidden_dim: int,
        feed_forward_length: int,
        devices: Sequence[DeviceRef],
        linear_cls: type = Linear,
        has_bias: bool = False,
        activation_function: str = "silu",
        float8_config: Any = None,
        dist_gemm_config: Any = None,
        is_sharding: bool = False,
    ) -> None:
        super().__init__()
        device = devices[0] if devices else DeviceRef.CPU()
        self.activation_function = activation_function
        self._act = activation(activation_function)

        def linear(i: int, o: int) -> Module:
            return linear_cls(i, o, dtype, device, has_bias=has_bias, quantization_encoding=quantization_encoding,
                              float8_config=float8_config)

        self.gate_proj = linear(hidden_dim, feed_forward_length)
        self.down_proj = linear(feed_forward_length, hidden_dim)
        self.up_proj = linear(hidden_dim, feed_forward_length)

    def __call__(self, x: TensorValue) -> TensorValue:
        return gated_mlp(x, self.gate_proj, self.up_proj, self.down_proj, self._act)

    @property
    def sharding_strategy(self) -> ShardingStrategy | None:
        """Tensor parallel (set by ``shard``): gate and up rowwise, down columnwise."""
        return self.__dict__.get("_sharding_strategy")

    def shard(self, devices: Any) -> list[MLP]:
        """One MLP per device: a share of the hidden features each, so the devices' outputs
        summed (an allreduce) give the whole MLP's."""
        refs = [device_ref(d) for d in devices]
        n = len(refs)
        object.__setattr__(self, "_sharding_strategy", ShardingStrategy.rowwise(n))
        features = even_ranges(self.gate_proj.out_dim, n)
        for proj in (self.gate_proj, self.up_proj):
            proj.sharding_strategy = ShardingStrategy.ranges(0, features)
        self.down_proj.sharding_strategy = ShardingStrategy.ranges(1, features)
        gates, ups, downs = (p.shard(refs) for p in (self.gate_proj, self.up_proj, self.down_proj))
        out = []
        for ref, g, u, d in zip(refs, gates, ups, downs):
            m = object.__new__(MLP)
            Module.__init__(m)
            m.activation_function = self.activation_function
            m._act = self._act
            m.gate_proj, m.up_proj, m.down_proj = g, u, d
            out.append(m)
        return out


@dataclass
class DistributedGemmConfig:
    """How a tensor-parallel block runs its output projections: with `enable_matmul_allreduce`
    MAX fuses the matmul and the allreduce in one kernel. Here both settings run the matmul
    then the allreduce (same values)."""

    enable_matmul_allreduce: bool = False

    @staticmethod
    def generate() -> DistributedGemmConfig | None:
        """The default configuration (the matmul, then the allreduce)."""
        return DistributedGemmConfig(False)


class ColumnParallelLinear(Linear):
    """A Linear split by output features over `devices`: device ``i`` computes its share
    ``x_i @ W_i.T + b_i`` and an allgather gives every device the whole ``y``. The weight is
    the whole ``[out_dim, in_dim]`` matrix (or `tied_weight`, an embedding's); each device
    holds only its rows."""

    def __init__(self, in_dim: int, out_dim: int, dtype: DType, devices: Sequence[Any],
                 tied_weight: Weight | None = None, **kwargs: Any) -> None:
        refs = [device_ref(d) for d in devices]
        if not refs:
            raise ValueError("ColumnParallelLinear: expected at least one device")
        super().__init__(in_dim, out_dim, dtype, kwargs.pop("device", DeviceRef.CPU()), **kwargs)
        self.devices = refs
        if tied_weight is not None:
            self.set_shared_weight("weight", tied_weight)
        self.sharding_strategy = ShardingStrategy.rowwise(len(refs))

    def _pieces(self) -> list[Linear]:
        pieces = self.__dict__.get("_shards")
        if pieces is None:
            pieces = self.shard(self.devices)
            object.__setattr__(self, "_shards", pieces)
        return pieces

    def __call__(self, x: Any, signal_buffers: Sequence[Any] | None = None) -> Any:  # type: ignore[override]
        """`x`: one value per device (the same activations); the whole output on each."""
        xs = list(x) if isinstance(x, (list, tuple)) else [x]
        if len(xs) != len(self.devices):
            raise ValueError(f"ColumnParallelLinear: expected {len(self.devices)} inputs, got {len(xs)}")
        ys = [piece(v) for piece, v in zip(self._pieces(), xs)]
        if len(ys) == 1:
            return ys
        if signal_buffers is None:
            raise ValueError("ColumnParallelLinear: the allgather needs signal_buffers")
        widths = {y.shape[-1] for y in ys}
        if len(widths) != 1 or ys[0].rank != 2:
            return ops.allgather(ys, signal_buffers, axis=-1)
        # Equal pieces: gathered whole along the rows (one copy per piece, straight into place,
        # which a CUDA graph holds), then each device interleaves them into [rows, n * width].
        (width,) = widths
        rows, n = ys[0].shape[0], len(ys)
        return [ops.reshape(ops.permute(ops.reshape(g, [n, rows, width]), [1, 0, 2]), [rows, n * width])
                for g in ops.allgather(ys, signal_buffers, axis=0)]


__all__ = ["MLP", "ColumnParallelLinear", "DistributedGemmConfig", "Linear", "dense", "gated_mlp"]
