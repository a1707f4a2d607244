"""max.graph.quantization (encodings, block parameters, configs) and staging the quantized
ops dequantize and qmatmul: result types and the documented errors."""

import dataclasses

import pytest

from max.dtype import DType
from max.graph import DeviceRef, Dim, Graph, TensorType, Weight, ops
from max.graph.quantization import BlockParameters, QuantizationConfig, QuantizationEncoding as Q

CPU = DeviceRef.CPU()
GGUF = {  # elements per block, bytes per block (GGUF's layouts)
    Q.Q4_0: (32, 18),
    Q.Q4_1: (32, 20),
    Q.Q8_0: (32, 34),
    Q.Q4_K: (256, 144),
    Q.Q5_K: (256, 176),
    Q.Q6_K: (256, 210),
}
GPTQ_CONFIG = QuantizationConfig("gptq", 4, 128, desc_act=False, sym=True)


def T(dtype, shape, device=CPU):
    return TensorType(dtype, shape, device)


def staged(fn, *types):
    with Graph("q", input_types=types) as g:
        return fn(*g.inputs)


# max.graph.quantization


def test_encoding_members_and_values():
    assert [e.value for e in Q] == ["Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K", "Q8_0", "GPTQ"]
    assert Q("Q4_K") is Q.Q4_K and Q["Q6_K"] is Q.Q6_K


@pytest.mark.parametrize("encoding", list(GGUF))
def test_block_parameters(encoding):
    elems, size = GGUF[encoding]
    assert encoding.block_parameters == BlockParameters(elements_per_block=elems, block_size=size)
    assert encoding.block_size == size and encoding.elements_per_block == elems
    assert encoding.is_gguf is True
    assert encoding.name == encoding.value.lower()


def test_gptq_has_no_blocks():
    assert Q.GPTQ.is_gguf is False
    assert Q.GPTQ.name == "gptq"
    with pytest.raises(ValueError, match="GPTQ is not a block encoding"):
        Q.GPTQ.block_size


def test_quantization_config_fields_and_defaults():
    cfg = QuantizationConfig("gptq", 4, 128)
    assert (cfg.quant_method, cfg.bits, cfg.group_size, cfg.desc_act, cfg.sym) == ("gptq", 4, 128, False, False)
    assert [f.name for f in dataclasses.fields(QuantizationConfig)] == ["quant_method", "bits", "group_size", "desc_act", "sym"]
    assert cfg == QuantizationConfig("gptq", 4, 128, False, False)


# dequantize


@pytest.mark.parametrize("encoding", list(GGUF))
def test_dequantize_expands_blocks(encoding):
    elems, size = GGUF[encoding]
    out = staged(lambda x: ops.dequantize(encoding, x), T(DType.uint8, ["n", 3, 2 * size]))
    assert out.dtype == DType.float32
    assert list(out.shape) == [Dim("n"), Dim(3), Dim(2 * elems)]


def test_dequantize_rank_one_and_algebraic_leading_dims():
    out = staged(lambda x: ops.dequantize(Q.Q4_0, x), T(DType.uint8, [36]))
    assert list(out.shape) == [Dim(64)]
    out = staged(lambda x: ops.dequantize(Q.Q6_K, x), T(DType.uint8, [Dim("a") * Dim("b"), 210]))
    assert list(out.shape) == [Dim("a") * Dim("b"), Dim(256)]


def test_dequantize_errors():
    with pytest.raises(ValueError, match="dequantize: quantized"):
        staged(lambda x: ops.dequantize(Q.Q4_0, x), T(DType.uint8, [10, 35]))
    # MAX raises TypeError for a symbolic byte dimension and for non-uint8 data.
    with pytest.raises(TypeError, match="dequantize: quantized"):
        staged(lambda x: ops.dequantize(Q.Q4_0, x), T(DType.uint8, [4, "k"]))
    with pytest.raises(TypeError, match="dequantize: quantized"):
        staged(lambda x: ops.dequantize(Q.Q4_0, x), T(DType.float32, [4, 36]))
    with pytest.raises(ValueError, match="dequantize: encoding"):
        staged(lambda x: ops.dequantize(Q.GPTQ, x), T(DType.uint8, [4, 36]))
    with pytest.raises(ValueError, match="dequantize: encoding"):
        staged(lambda x: ops.dequantize("Q4_0", x), T(DType.uint8, [4, 36]))
    with pytest.raises(ValueError, match="dequantize: quantized"):
        staged(lambda x: ops.dequantize(Q.Q4_0, x), T(DType.uint8, []))


# qmatmul


@pytest.mark.parametrize("encoding", list(GGUF))
def test_qmatmul_gives_lhs_rows_by_rhs_rows(encoding):
    elems, size = GGUF[encoding]
    out = staged(lambda a, b: ops.qmatmul(encoding, None, a, b), T(DType.float32, ["batch", "m", 2 * elems]), T(DType.uint8, ["n", 2 * size]))
    assert out.dtype == DType.float32
    assert list(out.shape) == [Dim("batch"), Dim("m"), Dim("n")]


def test_qmatmul_documented_shape_and_rank_one_lhs():
    # Q4_0 rows of 64 elements take 2 blocks, 36 bytes.
    out = staged(lambda a, b: ops.qmatmul(Q.Q4_0, None, a, b), T(DType.float32, [32, 64]), T(DType.uint8, [32, 36]))
    assert list(out.shape) == [Dim(32), Dim(32)]
    out = staged(lambda a, b: ops.qmatmul(Q.Q4_0, None, a, b), T(DType.float32, [64]), T(DType.uint8, [32, 36]))
    assert list(out.shape) == [Dim(32)]


def test_qmatmul_with_a_quantized_weight():
    with Graph("q", input_types=[T(DType.float32, ["m", 256])]) as g:
        w = Weight("linear.weight", DType.uint8, [64, 144], CPU, quantization_encoding=Q.Q4_K)
        out = ops.qmatmul(w.quantization_encoding, None, g.inputs[0], w)
        assert out.type == T(DType.float32, ["m", 64])


@pytest.mark.parametrize(
    "lhs, rhs, exc, arg",
    [
        (T(DType.float32, ["m", 32]), T(DType.uint8, [32, 36]), ValueError, "lhs"),  # K = 64 in rhs
        (T(DType.float32, ["m", "k"]), T(DType.uint8, [32, 36]), ValueError, "lhs"),
        (T(DType.float32, ["m", 64]), T(DType.uint8, [32, 35]), ValueError, "rhs"),
        (T(DType.bfloat16, ["m", 64]), T(DType.uint8, [32, 36]), TypeError, "lhs"),
        (T(DType.float32, ["m", 64]), T(DType.float32, [32, 36]), TypeError, "rhs"),
        (T(DType.float32, ["m", 64]), T(DType.uint8, [2, 32, 36]), TypeError, "rhs"),
        (T(DType.float32, ["m", 64]), T(DType.uint8, [32, 36], DeviceRef.GPU()), ValueError, "rhs"),
        (T(DType.float32, []), T(DType.uint8, [32, 36]), ValueError, "lhs"),
    ],
)
def test_qmatmul_errors(lhs, rhs, exc, arg):
    with pytest.raises(exc) as info:
        staged(lambda a, b: ops.qmatmul(Q.Q4_0, None, a, b), lhs, rhs)
    assert f"qmatmul: {arg}" in str(info.value)


def test_qmatmul_rhs_count():
    with pytest.raises(ValueError, match="qmatmul: rhs"):
        staged(lambda a: ops.qmatmul(Q.Q4_0, None, a), T(DType.float32, ["m", 64]))
    with pytest.raises(ValueError, match="qmatmul: rhs"):
        staged(lambda a, b: ops.qmatmul(Q.Q4_0, None, a, b, b), T(DType.float32, ["m", 64]), T(DType.uint8, [32, 36]))


def test_qmatmul_gptq():
    out = staged(lambda a, b: ops.qmatmul(Q.GPTQ, GPTQ_CONFIG, a, b), T(DType.bfloat16, ["m", 256]), T(DType.uint8, [132, 64]))
    assert out.type == T(DType.bfloat16, ["m", 64])
    act = dataclasses.replace(GPTQ_CONFIG, desc_act=True)
    out = staged(lambda a, b, p: ops.qmatmul(Q.GPTQ, act, a, b, p), T(DType.bfloat16, ["m", 256]), T(DType.uint8, [132, 64]), T(DType.int32, [256]))
    assert out.type == T(DType.bfloat16, ["m", 64])


@pytest.mark.parametrize(
    "config, lhs, extra, exc, arg",
    [
        (None, T(DType.bfloat16, ["m", 256]), [], ValueError, "config"),
        (QuantizationConfig("gptq", 8, 128, sym=True), T(DType.bfloat16, ["m", 256]), [], ValueError, "config"),
        (QuantizationConfig("awq", 4, 128, sym=True), T(DType.bfloat16, ["m", 256]), [], ValueError, "config"),
        (GPTQ_CONFIG, T(DType.float32, ["m", 256]), [], TypeError, "lhs"),
        (GPTQ_CONFIG, T(DType.bfloat16, ["m", 200]), [], ValueError, "lhs"),
        (QuantizationConfig("gptq", 4, 128, desc_act=True), T(DType.bfloat16, ["m", 256]), [], ValueError, "rhs"),
        (QuantizationConfig("gptq", 4, 128, desc_act=True), T(DType.bfloat16, ["m", 256]), [T(DType.int64, [256])], TypeError, "rhs[1]"),
        (QuantizationConfig("gptq", 4, 128, desc_act=True), T(DType.bfloat16, ["m", 256]), [T(DType.int32, [128])], ValueError, "rhs[1]"),
    ],
)
def test_qmatmul_gptq_errors(config, lhs, extra, exc, arg):
    with pytest.raises(exc) as info:
        staged(lambda a, b, *p: ops.qmatmul(Q.GPTQ, config, a, b, *p), lhs, T(DType.uint8, [132, 64]), *extra)
    assert f"qmatmul: {arg}" in str(info.value)


def test_qmatmul_config_must_be_a_config():
    with pytest.raises(TypeError, match="qmatmul: config"):
        staged(lambda a, b: ops.qmatmul(Q.Q4_0, {"bits": 4}, a, b), T(DType.float32, ["m", 64]), T(DType.uint8, [32, 36]))


def test_config_and_block_parameters_are_frozen_and_hashable():
    cfg = QuantizationConfig("gptq", 4, 128)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.bits = 8
    assert hash(cfg) == hash(QuantizationConfig("gptq", 4, 128))
    assert {Q.Q4_0.block_parameters, BlockParameters(32, 18)} == {BlockParameters(32, 18)}
