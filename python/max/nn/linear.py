"""``Linear`` (``y = x @ W.T + b``, W stored ``[out_dim, in_dim]`` as checkpoints hold it, or as
GGUF quantized blocks multiplied by ``ops.qmatmul``) and ``MLP`` (the gated feed-forward
``down(act(gate(x)) * up(x))`` of Llama-style decoders). Their math is also exposed as
functions of graph values (``dense``, ``gated_mlp``) that the eager layers stage with the
same ops, so both give the same bits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from max.dtype import DType
from max.graph import DeviceRef, TensorValue, Weight, ops
from max.graph.quantization import QuantizationEncoding
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
    def sharding_strategy(self) -> Any:
        return None

    def shard(self, devices: Any) -> Sequence[Linear]:
        raise NotImplementedError("Linear.shard: tensor-parallel sharding is not supported yet")

    def __call__(self, x: TensorValue) -> TensorValue:
        enc = self.quantization_encoding
        if enc is not None:
            y = ops.qmatmul(enc, None, as_dtype(x, DType.float32), self.weight)
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


__all__ = ["MLP", "Linear", "dense", "gated_mlp"]
