"""Quantized ops: dequantize and qmatmul, for the encodings of ``max.graph.quantization``."""

from __future__ import annotations

from typing import Any

from max.graph.ops._stage import as_tensor, graph_of, stage1
from max.graph.quantization import QuantizationConfig, QuantizationEncoding
from max.graph.value import TensorValue


def _encoding(op: str, encoding: Any) -> QuantizationEncoding:
    if not isinstance(encoding, QuantizationEncoding):
        raise ValueError(f"{op}: encoding: unsupported quantization encoding {encoding!r} (expected a QuantizationEncoding)")
    return encoding


def dequantize(encoding: QuantizationEncoding, quantized: TensorValue) -> TensorValue:
    """The float32 values of `quantized` (uint8, a whole number of `encoding` blocks per row)."""
    enc = _encoding("dequantize", encoding)
    x = as_tensor(quantized, op="dequantize", arg="quantized")
    return stage1("dequantize", [x], {"encoding": enc.value})


def qmatmul(encoding: QuantizationEncoding, config: QuantizationConfig | None, lhs: TensorValue, *rhs: TensorValue) -> TensorValue:
    """``lhs @ dequantize(rhs).T``: `rhs` is quantized and transposed, ``[N, K_bytes]``, so
    the result is ``[..., N]``. GPTQ takes ``[K_bytes, N]`` and needs `config`, and with
    ``config.desc_act`` a second `rhs`, the int32 permutation of K."""
    enc = _encoding("qmatmul", encoding)
    if config is not None and not isinstance(config, QuantizationConfig):
        raise TypeError(f"qmatmul: config: expected a QuantizationConfig or None, got {type(config).__name__}")
    g = graph_of(lhs, *rhs)
    a = as_tensor(lhs, graph=g, op="qmatmul", arg="lhs")
    bs = [as_tensor(r, graph=g, op="qmatmul", arg=f"rhs[{i}]") for i, r in enumerate(rhs)]
    attrs: dict[str, Any] = {"encoding": enc.value}
    if config is not None:
        attrs.update(
            quant_method=config.quant_method,
            bits=config.bits,
            group_size=config.group_size,
            desc_act=bool(config.desc_act),
            sym=bool(config.sym),
        )
    return stage1("qmatmul", [a, *bs], attrs)


__all__ = ["dequantize", "qmatmul"]
