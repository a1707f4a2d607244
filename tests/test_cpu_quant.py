"""The quantized ops on the CPU through InferenceSession: dequantize against the `gguf`
package's reference decoders (bit for bit), qmatmul against numpy in float64 (within the bound
of its 8-bit activations), and GPTQ
against a numpy unpacking of GPTQ's qweight/scales layout."""

import ml_dtypes
import numpy as np
import pytest

gguf_quants = pytest.importorskip("gguf.quants")
from gguf import GGMLQuantizationType as GT  # noqa: E402

from engine_util import build, cpu_type, run, session  # noqa: E402
from max.dtype import DType  # noqa: E402
from max.graph import DeviceRef, Graph, Weight, ops  # noqa: E402
from max.graph.quantization import QuantizationConfig, QuantizationEncoding as Q  # noqa: E402

ENCODINGS = {Q.Q4_0: GT.Q4_0, Q.Q4_1: GT.Q4_1, Q.Q8_0: GT.Q8_0, Q.Q4_K: GT.Q4_K, Q.Q5_K: GT.Q5_K, Q.Q6_K: GT.Q6_K}
# Byte offsets of the f16 scale fields in each block (kept finite in random blocks).
F16_FIELDS = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q8_0: [0], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208]}
CAN_QUANTIZE = [Q.Q4_0, Q.Q4_1, Q.Q8_0]  # gguf 0.17.1 quantizes these; the K-types only decode


def random_blocks(rng, enc: Q, rows: int, blocks: int) -> np.ndarray:
    """uint8 [rows, blocks * block_size]: random bytes with finite random f16 scales."""
    size = enc.block_size
    raw = rng.integers(0, 256, size=(rows, blocks, size), dtype=np.uint8)
    for off in F16_FIELDS[enc]:
        scale = (rng.standard_normal((rows, blocks)) * rng.choice([1e-3, 0.05, 2.0], size=(rows, blocks))).astype(np.float16)
        raw[:, :, off : off + 2] = scale.view(np.uint8).reshape(rows, blocks, 2)
    return raw.reshape(rows, blocks * size)


def quantized(rng, enc: Q, rows: int, k: int) -> np.ndarray:
    """Quantized rows of k elements: gguf's quantizer on random data where it has one, else
    random blocks."""
    if enc in CAN_QUANTIZE:
        data = (rng.standard_normal((rows, k)) * rng.choice([1e-2, 1.0, 30.0], size=(rows, 1))).astype(np.float32)
        return gguf_quants.quantize(data, ENCODINGS[enc])
    return random_blocks(rng, enc, rows, k // enc.elements_per_block)


def reference(q: np.ndarray, enc: Q) -> np.ndarray:
    out = gguf_quants.dequantize(q, ENCODINGS[enc])
    assert out.dtype == np.float32
    return out


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype == np.float32
    mismatch = got.view(np.uint32) != want.view(np.uint32)
    assert not mismatch.any(), f"{mismatch.sum()} of {got.size} differ; first at {np.argwhere(mismatch)[0]}"


# dequantize


@pytest.mark.parametrize("enc", list(ENCODINGS), ids=lambda e: e.value)
def test_dequantize_matches_gguf_bit_for_bit(rng, enc):
    blocks = 3
    g = build(lambda x: ops.dequantize(enc, x), cpu_type(DType.uint8, ("rows", blocks * enc.block_size)))
    model = session().load(g)
    for rows in [1, 37]:
        q = quantized(rng, enc, rows, blocks * enc.elements_per_block)
        (out,) = model.execute(q)
        same_bits(out.to_numpy(), reference(q, enc))
        # random bytes cover every quant value and scale bit pattern
        q = random_blocks(rng, enc, rows, blocks)
        (out,) = model.execute(q)
        same_bits(out.to_numpy(), reference(q, enc))


@pytest.mark.parametrize("enc", [Q.Q4_0, Q.Q6_K], ids=lambda e: e.value)
def test_dequantize_leading_dims_and_large_input(rng, enc):
    q = random_blocks(rng, enc, 2 * 3 * 40, 8).reshape(2, 3, 40, 8 * enc.block_size)  # parallel path
    (out,) = run(build(lambda x: ops.dequantize(enc, x), cpu_type(DType.uint8, q.shape)), q)
    same_bits(out, reference(q.reshape(-1, q.shape[-1]), enc).reshape(2, 3, 40, -1))


# qmatmul


def check_qmatmul(got: np.ndarray, lhs: np.ndarray, w: np.ndarray, enc: Q) -> None:
    """`got` is lhs @ w.T as the CPU computes it: lhs in two 8-bit planes per block of 32 values
    (256 for the K-quants), the values and their residual, then integer dot products scaled in
    float32 (the dequantize + gemm fallback is within this too). So within half a step of the
    residual plane per value of the float64 result, max|lhs_b| / 254**2 * sum|w_b| over the
    blocks b, plus the float32 rounding bound of a K-term dot product."""
    lhs64, w64 = lhs.astype(np.float64), w.astype(np.float64)
    ref = lhs64 @ w64.T
    k = lhs.shape[-1]
    block = 256 if enc in (Q.Q4_K, Q.Q5_K, Q.Q6_K) else 32
    amax = np.abs(lhs64).reshape(*lhs.shape[:-1], k // block, block).max(-1)
    wsum = np.abs(w64).reshape(w.shape[0], k // block, block).sum(-1)
    bound = amax / 254**2 @ wsum.T + 2 * k * 2.0**-24 * (np.abs(lhs64) @ np.abs(w64).T)
    assert got.shape == ref.shape and got.dtype == np.float32
    err = np.abs(got.astype(np.float64) - ref)
    assert (err <= bound + 1e-30).all(), f"max error {err.max()} vs bound {bound[err > bound].min()}"


@pytest.mark.parametrize("enc", list(ENCODINGS), ids=lambda e: e.value)
def test_qmatmul_matches_numpy(rng, enc):
    k = 2 * max(256, enc.elements_per_block)
    n = 300  # several tiles of rows
    g = build(
        lambda a, b: ops.qmatmul(enc, None, a, b),
        cpu_type(DType.float32, ("batch", "m", k)),
        cpu_type(DType.uint8, (n, k // enc.elements_per_block * enc.block_size)),
    )
    model = session().load(g)
    w = quantized(rng, enc, n, k)
    deq = reference(w, enc)
    for batch, m in [(1, 1), (2, 7)]:
        lhs = rng.standard_normal((batch, m, k)).astype(np.float32)
        (out,) = model.execute(lhs, w)
        check_qmatmul(out.to_numpy(), lhs, deq, enc)


def test_qmatmul_rank_one_lhs_and_weight(rng):
    enc, k, n = Q.Q4_K, 512, 40
    w = quantized(rng, enc, n, k)
    weight = Weight("w", DType.uint8, w.shape, DeviceRef.CPU(), quantization_encoding=enc)
    with Graph("qlinear", input_types=[cpu_type(DType.float32, (k,))]) as g:
        g.output(ops.qmatmul(enc, None, g.inputs[0], weight))
    lhs = rng.standard_normal(k).astype(np.float32)
    (out,) = run(g, lhs, weights={"w": w})
    check_qmatmul(out[None], lhs[None], reference(w, enc), enc)


def test_qmatmul_large_n_single_row(rng):
    """The decode shape: one row against many weight rows, tiled and parallel."""
    enc, k, n = Q.Q8_0, 1024, 2048
    w = quantized(rng, enc, n, k)
    lhs = rng.standard_normal((1, k)).astype(np.float32)
    g = build(lambda a, b: ops.qmatmul(enc, None, a, b), cpu_type(DType.float32, (1, k)), cpu_type(DType.uint8, w.shape))
    (out,) = run(g, lhs, w)
    check_qmatmul(out, lhs, reference(w, enc), enc)


# GPTQ


def gptq_weights(rng, k: int, n: int, group: int):
    """GPTQ's qweight (int32 [K/8, N], nibble k % 8 of word k // 8) and scales (f16
    [K/group, N]), and MAX's uint8 [K/2 + 2*K/group, N] packing of the two."""
    qweight = rng.integers(0, 2**32, size=(k // 8, n), dtype=np.uint64).astype(np.uint32)
    scales = (rng.uniform(0.005, 0.05, size=(k // group, n)) * rng.choice([-1, 1], size=(k // group, n))).astype(np.float16)
    packed = np.concatenate([qweight.view(np.uint8).reshape(-1), scales.view(np.uint8).reshape(-1)])
    packed = packed.reshape(k // 2 + 2 * (k // group), n)
    nibbles = (qweight[np.arange(k) // 8] >> (4 * (np.arange(k) % 8))[:, None].astype(np.uint32)) & 0xF
    return packed, nibbles.astype(np.float64) - 8, scales.astype(np.float64)


def as_bf16(a: np.ndarray) -> np.ndarray:
    return a.view(ml_dtypes.bfloat16) if a.dtype == np.uint16 else a


def check_bf16(got: np.ndarray, lhs64: np.ndarray, w64: np.ndarray) -> None:
    ref = lhs64 @ w64
    got = as_bf16(got).astype(np.float64)
    bound = 2.0**-8 * np.abs(ref) + 2 * lhs64.shape[-1] * 2.0**-24 * (np.abs(lhs64) @ np.abs(w64))
    err = np.abs(got - ref)
    assert (err <= bound + 1e-30).all(), f"max error {err.max()}"


@pytest.mark.parametrize("desc_act", [False, True])
def test_gptq_qmatmul(rng, desc_act):
    k, n, group = 384, 96, 128
    config = QuantizationConfig("gptq", 4, group, desc_act=desc_act, sym=True)
    packed, q, scales = gptq_weights(rng, k, n, group)
    perm = rng.permutation(k).astype(np.int32) if desc_act else np.arange(k, dtype=np.int32)
    types = [cpu_type(DType.bfloat16, ("m", k)), cpu_type(DType.uint8, packed.shape)]
    if desc_act:
        types.append(cpu_type(DType.int32, (k,)))
    g = build(lambda a, b, *p: ops.qmatmul(Q.GPTQ, config, a, b, *p), *types)
    model = session().load(g)
    # The packed weight row c holds source row perm[c] with the scales of group c // group.
    w64 = q[perm] * scales[np.arange(k) // group]
    for m in [1, 5]:
        lhs = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
        args = [lhs, packed] + ([perm] if desc_act else [])
        (out,) = model.execute(*args)
        check_bf16(out.to_numpy(), lhs.astype(np.float64), w64)


def test_gptq_desc_act_linear_layer(rng):
    """MAX's GPTQ linear layer with desc_act: gather x's columns by the permutation, then
    qmatmul with it; equals x @ W for the weights in their original row order, where row k's
    group is the one its position in the permutation falls in."""
    k, n, group = 256, 64, 128
    config = QuantizationConfig("gptq", 4, group, desc_act=True, sym=True)
    packed, q, scales = gptq_weights(rng, k, n, group)
    perm = rng.permutation(k).astype(np.int32)
    g_idx = np.empty(k, np.int64)
    g_idx[perm] = np.arange(k) // group

    def layer(x, b, p):
        return ops.qmatmul(Q.GPTQ, config, ops.gather(x, p, axis=-1), b, p)

    g = build(layer, cpu_type(DType.bfloat16, (3, k)), cpu_type(DType.uint8, packed.shape), cpu_type(DType.int32, (k,)))
    x = rng.standard_normal((3, k)).astype(ml_dtypes.bfloat16)
    (out,) = run(g, x, packed, perm)
    check_bf16(out, x.astype(np.float64), q * scales[g_idx])


def test_gptq_run_time_errors(rng):
    k, n = 256, 64
    config = QuantizationConfig("gptq", 4, 128, desc_act=True, sym=True)
    packed, _, _ = gptq_weights(rng, k, n, 128)
    g = build(
        lambda a, b, p: ops.qmatmul(Q.GPTQ, config, a, b, p),
        cpu_type(DType.bfloat16, (1, k)),
        cpu_type(DType.uint8, packed.shape),
        cpu_type(DType.int32, (k,)),
    )
    perm = np.arange(k, dtype=np.int32)
    perm[7] = k
    lhs = np.zeros((1, k), ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match=r"qmatmul: index 256 is out of range for the GPTQ permutation"):
        run(g, lhs, packed, perm)
    g = build(lambda a, b: ops.qmatmul(Q.GPTQ, QuantizationConfig("gptq", 4, 128, sym=True), a, b), cpu_type(DType.bfloat16, (1, k)), cpu_type(DType.uint8, (100, n)))
    with pytest.raises(ValueError, match=r"qmatmul: GPTQ weights for K = 256 \(groups of 128\) have K/2 \+ 2\*K/128 = 132 rows of bytes, got 100"):
        run(g, lhs, np.zeros((100, n), np.uint8))
