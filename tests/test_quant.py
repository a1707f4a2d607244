"""The quantized ops on each device: dequantize against the `gguf` package's reference decoders
(bit for bit), qmatmul over every GGUF block encoding against a float64 product with the
dequantized weights (within the rounding bound of each device's arithmetic), and GPTQ against a
numpy unpacking of its qweight/scales layout. GPU only: the GPU's dequantize matches the host's
bit for bit (the check that still runs where `gguf` is missing, as on the GPU machines), and the
GEMV kernels' variants (tensor-core, streaming, work split, programmatic serialization)."""

import ml_dtypes
import numpy as np
import pytest

from engine_util import build, session
from max import driver, tuning
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, Weight, ops
from max.graph.quantization import QuantizationConfig, QuantizationEncoding as Q

# These tests reach each quantized GEMV at small shapes (conftest.py).
pytestmark = pytest.mark.usefixtures("qgemv_kernels_of_any_size")

ENCODINGS = [Q.Q4_0, Q.Q4_1, Q.Q8_0, Q.Q4_K, Q.Q5_K, Q.Q6_K]
K_QUANTS = (Q.Q4_K, Q.Q5_K, Q.Q6_K)
# Byte offsets of the f16 scale fields in each block (kept finite in random blocks).
F16_FIELDS = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q8_0: [0], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208]}
CAN_QUANTIZE = [Q.Q4_0, Q.Q4_1, Q.Q8_0]  # gguf 0.17.1 quantizes these; the K-types only decode
encodings = pytest.mark.parametrize("enc", ENCODINGS, ids=lambda e: e.value)


def gguf():
    """gguf's quants module and its type enum, or None where the package is not installed."""
    try:
        from gguf import GGMLQuantizationType, quants
    except ImportError:
        return None
    return quants, GGMLQuantizationType


def random_blocks(rng, enc: Q, rows: int, blocks: int) -> np.ndarray:
    """uint8 [rows, blocks * block_size]: random bytes with finite random f16 scales."""
    raw = rng.integers(0, 256, size=(rows, blocks, enc.block_size), dtype=np.uint8)
    for off in F16_FIELDS[enc]:
        scale = (rng.standard_normal((rows, blocks)) * rng.choice([1e-3, 0.05, 2.0], size=(rows, blocks))).astype(np.float16)
        raw[:, :, off : off + 2] = scale.view(np.uint8).reshape(rows, blocks, 2)
    return raw.reshape(rows, blocks * enc.block_size)


def quantized(rng, enc: Q, rows: int, k: int) -> np.ndarray:
    """Quantized rows of k elements: gguf's quantizer on random data where it has one, else
    random blocks."""
    g = gguf()
    if enc in CAN_QUANTIZE and g is not None:
        data = (rng.standard_normal((rows, k)) * rng.choice([1e-2, 1.0, 30.0], size=(rows, 1))).astype(np.float32)
        return g[0].quantize(data, getattr(g[1], enc.value))
    return random_blocks(rng, enc, rows, k // enc.elements_per_block)


def on(device, types):
    where = DeviceRef.from_device(device)
    return [TensorType(d, s, where) for d, s in types]


def load(fn, types, device):
    """`fn` compiled for `device`; `types` are (dtype, shape) per input, a str dim symbolic."""
    return session(device).load(build(fn, *on(device, types)))


def execute(model, inputs, device):
    args = [driver.Buffer.from_numpy(np.ascontiguousarray(x)).to(device) for x in inputs]
    return [o.to_numpy() for o in model.execute(*args)]


def same_bits(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
    bad = got.view(np.uint8) != want.view(np.uint8)
    assert not bad.any(), f"{bad.sum()} bytes of {got.nbytes} differ"


def host_dequantize(enc, q):
    (out,) = execute(load(lambda x: ops.dequantize(enc, x), [(DType.uint8, q.shape)], driver.CPU()), [q], driver.CPU())
    return out


def dequantized(enc, q):
    """The f32 weights `q` holds: gguf's decoding, or the host's where gguf is missing (checked
    against gguf bit for bit by test_dequantize_matches_gguf_bit_for_bit)."""
    g = gguf()
    return host_dequantize(enc, q) if g is None else g[0].dequantize(q, getattr(g[1], enc.value))


def bf16_products(device, rows):
    """Whether a qmatmul of `rows` lhs rows multiplies bf16-rounded operands on `device`: more
    than 8 rows on a Hopper GPU (launch/qmatmul_sm90.rs)."""
    return not device.is_host and rows > 8 and device.architecture_name == "sm_90a"


def check_product(got, lhs, w, enc, device, plus=None, bf16=None):
    """`got` is lhs @ w.T: within the rounding bound of a K-term f32 dot product of the float64
    result. The host multiplies the activations as two 8-bit planes (values and residual) per
    block of 32 values (256 for the K-quants), then integer dot products scaled in f32, which
    adds half a step of the residual plane per value, max|lhs_b| / 254**2 * sum|w_b| over the
    blocks b; the GPU multiplies f32 activations, or (`bf16`, by default when bf16_products says
    so) both operands rounded to bf16, 8 significant bits: each product within 2^-7 + 2^-16 of
    |a w|. `plus`: a residual the result also holds."""
    lhs64, w64 = lhs.astype(np.float64), w.astype(np.float64)
    ref = lhs64 @ w64.T
    k = lhs.shape[-1]
    bound = 2 * k * 2.0**-24 * (np.abs(lhs64) @ np.abs(w64).T)
    if bf16 if bf16 is not None else bf16_products(device, lhs64.reshape(-1, k).shape[0]):
        bound = bound + (2.0**-7 + 2.0**-16) * (np.abs(lhs64) @ np.abs(w64).T)
    if plus is not None:  # a residual added to the product: one more f32 rounding
        ref = ref + plus.astype(np.float64)
        bound = bound + 2.0**-23 * np.abs(ref)
    if device.is_host:
        block = 256 if enc in K_QUANTS else 32
        amax = np.abs(lhs64).reshape(-1, k // block, block).max(-1)
        wsum = np.abs(w64).reshape(-1, k // block, block).sum(-1)
        bound = bound + amax / 254**2 @ wsum.T
    assert got.shape == ref.shape and got.dtype == np.float32, (got.shape, ref.shape, got.dtype)
    err = np.abs(got.astype(np.float64) - ref)
    assert (err <= bound + 1e-30).all(), f"max error {err.max()} vs bound {bound[err > bound].min()}"


# -- dequantize -------------------------------------------------------------------------------


@encodings
def test_dequantize_matches_gguf_bit_for_bit(rng, device, enc):
    if gguf() is None:
        pytest.skip("the gguf package is not installed")
    blocks = 3
    model = load(lambda x: ops.dequantize(enc, x), [(DType.uint8, ("rows", blocks * enc.block_size))], device)
    for rows in [1, 37]:
        for q in [quantized(rng, enc, rows, blocks * enc.elements_per_block), random_blocks(rng, enc, rows, blocks)]:
            # (random bytes cover every quant value and scale bit pattern)
            (out,) = execute(model, [q], device)
            assert out.dtype == np.float32
            same_bits(out, dequantized(enc, q))


@encodings
def test_dequantize_leading_dims_and_large_input(rng, device, enc):
    if gguf() is None:
        pytest.skip("the gguf package is not installed")
    # 240 rows of 5120 elements: more than 2^20 in all (the parallel and multi-block paths)
    q = random_blocks(rng, enc, 2 * 3 * 40, 5120 // enc.elements_per_block).reshape(2, 3, 40, -1)
    (out,) = execute(load(lambda x: ops.dequantize(enc, x), [(DType.uint8, q.shape)], device), [q], device)
    same_bits(out, dequantized(enc, q.reshape(-1, q.shape[-1])).reshape(2, 3, 40, -1))


@pytest.mark.gpu
@encodings
@pytest.mark.parametrize("rows, blocks", [(1, 3), (37, 3), (240, 5120 // 32)], ids=["1row", "37rows", "large"])
def test_gpu_dequantize_matches_host_bit_for_bit(rng, gpu, enc, rows, blocks):
    blocks = min(blocks, 5120 // enc.elements_per_block)
    q = random_blocks(rng, enc, rows, blocks)
    (got,) = execute(load(lambda x: ops.dequantize(enc, x), [(DType.uint8, q.shape)], gpu), [q], gpu)
    same_bits(got, host_dequantize(enc, q))


# -- qmatmul ----------------------------------------------------------------------------------


def run_qmatmul(device, rng, enc, k, n, shapes, bf16=None):
    """qmatmul of lhs [batch, m, k] (symbolic batch and m) by n weight rows, for each (batch, m)."""
    kb = k // enc.elements_per_block * enc.block_size
    model = load(lambda a, b: ops.qmatmul(enc, None, a, b), [(DType.float32, ("batch", "m", k)), (DType.uint8, (n, kb))], device)
    w = quantized(rng, enc, n, k)
    deq = dequantized(enc, w)
    for batch, m in shapes:
        lhs = rng.standard_normal((batch, m, k)).astype(np.float32)
        (out,) = execute(model, [lhs, w], device)
        assert out.shape == (batch, m, n)
        check_product(out.reshape(-1, n), lhs.reshape(-1, k), deq, enc, device, bf16=bf16)


@encodings
@pytest.mark.parametrize("k_blocks", [1, 3, 8, 9], ids=lambda b: f"{b}blocks")
def test_qmatmul_small_m(device, rng, enc, k_blocks):
    """1 to 8 lhs rows (every row variant of the GPU's in-register kernel), K of 1 to 9 blocks
    (whole and partial 1024-element chunks), weight rows not a multiple of the 16 per block."""
    e = enc.elements_per_block
    k = k_blocks * e * (4 if e == 32 else 1)
    run_qmatmul(device, rng, enc, k, 37, [(1, 1), (1, 2), (1, 3), (2, 2), (1, 5), (2, 4), (1, 8)])


@encodings
def test_qmatmul_many_rows(device, rng, enc):
    """Several tiles of weight rows, and more than 8 lhs rows (on the GPU: dequantize to scratch
    and an f32 GEMM)."""
    run_qmatmul(device, rng, enc, 512, 300, [(1, 1), (2, 7), (1, 9), (3, 100)])


@pytest.mark.parametrize("enc", [Q.Q4_0, Q.Q8_0, Q.Q4_K, Q.Q6_K], ids=lambda e: e.value)
def test_qmatmul_decode_shape(device, rng, enc):
    """The decode shape: one row against 4096 x 4096 weights."""
    run_qmatmul(device, rng, enc, 4096, 4096, [(1, 1)])


def test_qmatmul_large_n_single_row(device, rng):
    """One row against many weight rows, tiled and parallel."""
    run_qmatmul(device, rng, Q.Q8_0, 1024, 2048, [(1, 1)])


def test_qmatmul_unaligned_rows(device, rng):
    """Rows of 54 bytes (3 Q4_0 blocks): no row but the first starts on 16 bytes."""
    run_qmatmul(device, rng, Q.Q4_0, 96, 45, [(1, 1), (1, 3), (1, 12)])


def test_qmatmul_rank_one_lhs(device, rng):
    enc, k, n = Q.Q4_K, 512, 40
    w = quantized(rng, enc, n, k)
    model = load(lambda a, b: ops.qmatmul(enc, None, a, b), [(DType.float32, (k,)), (DType.uint8, w.shape)], device)
    lhs = rng.standard_normal(k).astype(np.float32)
    (out,) = execute(model, [lhs, w], device)
    assert out.shape == (n,)
    check_product(out[None], lhs[None], dequantized(enc, w), enc, device)


def test_qmatmul_rank_one_lhs_and_weight(device, rng):
    enc, k, n = Q.Q4_K, 512, 40
    w = quantized(rng, enc, n, k)
    weight = Weight("w", DType.uint8, w.shape, DeviceRef.from_device(device), quantization_encoding=enc)
    with Graph("qlinear", input_types=on(device, [(DType.float32, (k,))])) as g:
        g.output(ops.qmatmul(enc, None, g.inputs[0], weight))
    lhs = rng.standard_normal(k).astype(np.float32)
    (out,) = execute(session(device).load(g, weights_registry={"w": w}), [lhs], device)
    check_product(out[None], lhs[None], dequantized(enc, w), enc, device)


def sibling_products(device, enc, ws, lhs, dtype=DType.float32):
    """lhs (of `dtype`) @ dequantize(w)^T for each raw weight of `ws` in one graph (the sibling
    products of one activation); (outputs as numpy, the launch log)."""
    where = DeviceRef.from_device(device)
    weights = [Weight(f"w{i}", DType.uint8, w.shape, where, quantization_encoding=enc) for i, w in enumerate(ws)]
    with Graph("siblings", input_types=on(device, [(dtype, lhs.shape)])) as g:
        g.output(*[ops.qmatmul(enc, None, g.inputs[0], w) for w in weights])
    model = session(device).load(g, weights_registry={f"w{i}": w for i, w in enumerate(ws)})
    with tuning.record_launches() as log:
        outs = execute(model, [lhs], device)
    return outs, log


@pytest.mark.parametrize(
    "enc,k,ns", [(Q.Q4_1, 576, (576, 192, 192)), (Q.Q4_0, 96, (45, 7)), (Q.Q4_1, 576, (1536, 1536, 100, 64, 30)),
                 (Q.Q4_1, 1536, (64, 96))],
)
@pytest.mark.parametrize("m", [1, 3, 6])
def test_sibling_qmatmuls_of_one_activation(device, rng, enc, k, ns, m):
    """Products of one activation by several quantized weights (a layer's q/k/v, its gate/up):
    on a GPU they are one step, one launch of up to four when each would take the general
    kernel (rows not 16-byte aligned) or of up to three when each would take the tensor-core
    one, separate launches otherwise; every product equals its own reference either way."""
    ws = [quantized(rng, enc, n, k) for n in ns]
    lhs = rng.standard_normal((m, k)).astype(np.float32)
    outs, log = sibling_products(device, enc, ws, lhs)
    for out, w in zip(outs, ws):
        check_product(out, lhs, dequantized(enc, w), enc, device)
    if not device.is_host:
        # Unaligned rows: the general kernel's segments; aligned 4-bit rows at 1-8 lhs rows on
        # Hopper: the tensor-core kernel's (up to 3); other aligned rows launch one by one.
        aligned = ws[0].shape[1] % 16 == 0
        group = min(4, len(ns))
        mma = m <= 8 and enc in (Q.Q4_0, Q.Q4_1, Q.Q4_K) and group <= 3 and device.architecture_name == "sm_90a"
        assert log.count("qgemv", segments=group) == (1 if mma or not aligned else 0)


@pytest.mark.parametrize("k,m", [(576, 1), (1536, 1), (1536, 3), (576, 12)])
def test_qmatmul_takes_its_residual_add(device, rng, k, m):
    """`h + qmatmul(x, W)` (a decoder layer's output and down projections): on a GPU the add
    runs inside the product's kernel, whichever kernel the shape takes (general, tensor-core,
    streaming GEMV, or dequantize + GEMM for many rows); the values are the product's plus the
    residual either way."""
    enc, n = Q.Q4_1, 96
    w = quantized(rng, enc, n, k)
    where = DeviceRef.from_device(device)
    weight = Weight("w", DType.uint8, w.shape, where, quantization_encoding=enc)
    with Graph("residual", input_types=on(device, [(DType.float32, (m, k)), (DType.float32, (m, n))])) as g:
        x, h = g.inputs
        g.output(h + ops.qmatmul(enc, None, x, weight))
    model = session(device).load(g, weights_registry={"w": w})
    lhs = rng.standard_normal((m, k)).astype(np.float32)
    res = rng.standard_normal((m, n)).astype(np.float32)
    with tuning.record_launches() as log:
        (out,) = execute(model, [lhs, res], device)
    check_product(out, lhs, dequantized(enc, w), enc, device, plus=res)
    if not device.is_host:
        assert log.count("fused") == 0  # no separate elementwise pass for the add


# -- GPTQ -------------------------------------------------------------------------------------


def gptq_weights(rng, k, n, group):
    """GPTQ's qweight (int32 [K/8, N], nibble k % 8 of word k // 8) and scales (f16
    [K/group, N]), MAX's uint8 [K/2 + 2*K/group, N] packing of the two, and the quants - 8 and
    the scales as float64."""
    qweight = rng.integers(0, 2**32, size=(k // 8, n), dtype=np.uint64).astype(np.uint32)
    scales = (rng.uniform(0.005, 0.05, size=(k // group, n)) * rng.choice([-1, 1], size=(k // group, n))).astype(np.float16)
    packed = np.concatenate([qweight.view(np.uint8).reshape(-1), scales.view(np.uint8).reshape(-1)])
    packed = packed.reshape(k // 2 + 2 * (k // group), n)
    nibbles = (qweight[np.arange(k) // 8] >> (4 * (np.arange(k) % 8))[:, None].astype(np.uint32)) & 0xF
    return packed, nibbles.astype(np.float64) - 8, scales.astype(np.float64)


def check_bf16(got, lhs64, w64):
    assert got.dtype == ml_dtypes.bfloat16
    ref = lhs64 @ w64
    bound = 2.0**-8 * np.abs(ref) + 2 * lhs64.shape[-1] * 2.0**-24 * (np.abs(lhs64) @ np.abs(w64))
    err = np.abs(got.astype(np.float64) - ref)
    assert (err <= bound + 1e-30).all(), f"max error {err.max()}"


@pytest.mark.parametrize("desc_act", [False, True])
@pytest.mark.parametrize(("k", "n"), [(384, 96), (256, 37), (1024, 300)])
def test_gptq_qmatmul(device, rng, desc_act, k, n):
    group = 128
    config = QuantizationConfig("gptq", 4, group, desc_act=desc_act, sym=True)
    packed, q, scales = gptq_weights(rng, k, n, group)
    perm = rng.permutation(k).astype(np.int32)
    types = [(DType.bfloat16, ("m", k)), (DType.uint8, packed.shape)] + ([(DType.int32, (k,))] if desc_act else [])
    model = load(lambda a, b, *p: ops.qmatmul(Q.GPTQ, config, a, b, *p), types, device)
    # The packed weight row c holds source row perm[c] with the scales of group c // group.
    w64 = (q[perm] if desc_act else q) * scales[np.arange(k) // group]
    for m in [1, 2, 5, 8, 9, 40]:
        lhs = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
        (out,) = execute(model, [lhs, packed] + ([perm] if desc_act else []), device)
        check_bf16(out, lhs.astype(np.float64), w64)


def test_gptq_desc_act_linear_layer(device, rng):
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

    model = load(layer, [(DType.bfloat16, (3, k)), (DType.uint8, packed.shape), (DType.int32, (k,))], device)
    x = rng.standard_normal((3, k)).astype(ml_dtypes.bfloat16)
    (out,) = execute(model, [x, packed, perm], device)
    check_bf16(out, x.astype(np.float64), q * scales[g_idx])


def test_gptq_negative_permutation_entries(device, rng):
    """Negative permutation entries count from the end."""
    k, n, group = 256, 64, 128
    config = QuantizationConfig("gptq", 4, group, desc_act=True, sym=True)
    packed, q, scales = gptq_weights(rng, k, n, group)
    perm = rng.permutation(k).astype(np.int32)
    types = [(DType.bfloat16, (3, k)), (DType.uint8, packed.shape), (DType.int32, (k,))]
    model = load(lambda a, b, p: ops.qmatmul(Q.GPTQ, config, a, b, p), types, device)
    lhs = rng.standard_normal((3, k)).astype(ml_dtypes.bfloat16)
    (want,) = execute(model, [lhs, packed, perm], device)
    (got,) = execute(model, [lhs, packed, perm - k], device)  # the same rows
    check_bf16(got, lhs.astype(np.float64), q[perm] * scales[np.arange(k) // group])
    same_bits(got, want)


def test_gptq_run_time_errors(device, rng):
    k, n = 256, 64
    config = QuantizationConfig("gptq", 4, 128, desc_act=True, sym=True)
    packed, _, _ = gptq_weights(rng, k, n, 128)
    model = load(lambda a, b, p: ops.qmatmul(Q.GPTQ, config, a, b, p), [(DType.bfloat16, (1, k)), (DType.uint8, packed.shape), (DType.int32, (k,))], device)
    perm = np.arange(k, dtype=np.int32)
    perm[7] = k
    lhs = np.zeros((1, k), ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match=r"qmatmul: index 256 is out of range for the GPTQ permutation"):
        execute(model, [lhs, packed, perm], device)
    plain = QuantizationConfig("gptq", 4, 128, sym=True)
    model = load(lambda a, b: ops.qmatmul(Q.GPTQ, plain, a, b), [(DType.bfloat16, (1, k)), (DType.uint8, (100, n))], device)
    with pytest.raises(ValueError, match=r"qmatmul: GPTQ weights for K = 256 \(groups of 128\) have K/2 \+ 2\*K/128 = 132 rows of bytes, got 100"):
        execute(model, [lhs, np.zeros((100, n), np.uint8)], device)


# -- GPU only: the GEMV kernels' variants -----------------------------------------------------

FOUR_BIT = [Q.Q4_0, Q.Q4_1, Q.Q4_K]


@pytest.mark.gpu
def test_gpu_qmatmul_weight_chunks(gpu, rng):
    """More weight columns than one f32 scratch chunk holds (K * N * 4 > 128 MB): the f32 GEMM
    (qmatmul.wgmma=0 on Hopper, the path of other GPUs) writes a temporary that is stored into
    column ranges of the result."""
    with tuning.override(**{"qmatmul.wgmma": False}):
        run_qmatmul(gpu, rng, Q.Q4_0, 4096, 10000, [(1, 16)], bf16=False)


@pytest.mark.gpu
@pytest.mark.parametrize("enc", FOUR_BIT, ids=lambda e: e.value)
@pytest.mark.parametrize("k", [256, 1280, 4096])
@pytest.mark.parametrize("kernel", ["mma", "mma_no_pdl", "stream"])
def test_gpu_qmatmul_4bit_one_to_eight_rows(gpu, rng, enc, k, kernel):
    """One to eight lhs rows over 4-bit weights whose rows start on 16 bytes: the integer
    tensor-core kernel (qgemv_mma.cu, the default; its m4 kernel for 3-4 rows, m8 for 5-8; also
    launched without programmatic stream serialization, qgemv.pdl=0) and the CUDA-core one
    (qgemv.mma=0); K of one to 16 256-element chunks, weight rows not a multiple of 16."""
    mma, pdl = kernel != "stream", kernel != "mma_no_pdl"
    with tuning.override(**{"qgemv.mma": mma, "qgemv.pdl": pdl}), tuning.record_launches() as log:
        run_qmatmul(gpu, rng, enc, k, 45, [(1, 1), (1, 2), (2, 1), (1, 3), (3, 1), (2, 2), (1, 4), (1, 5), (2, 4), (1, 8)])
    launches = log.records("qgemv")
    assert launches and all(r["mma"] == mma for r in launches), launches
    if mma:
        assert all(r["pdl"] == pdl for r in launches), launches


@pytest.mark.gpu
@pytest.mark.parametrize("k", [1152, 4224])
def test_gpu_qmatmul_q4_1_half_chunk(gpu, rng, k):
    """Q4_1 rows start on 16 bytes at any K of whole 128 elements, so qgemv_mma.cu's last
    256-element chunk may hold 4 units (two pairs at one lhs row); one to eight rows."""
    with tuning.override(**{"qgemv.mma": True}), tuning.record_launches() as log:
        run_qmatmul(gpu, rng, Q.Q4_1, k, 45, [(1, 1), (2, 1), (1, 2), (1, 4), (1, 8)])
    launches = log.records("qgemv")
    assert launches and all(r["mma"] == 1 for r in launches), launches
    assert any(r["kernel"] == "qgemv_mma_q4_1_m1" for r in launches), launches  # the pairs


@pytest.mark.gpu
@pytest.mark.parametrize("enc", FOUR_BIT, ids=lambda e: e.value)
@pytest.mark.parametrize("scale", [1e-30, 1e-3, 1e25])
def test_gpu_qmatmul_4bit_lhs_magnitudes(gpu, rng, enc, scale):
    """The fixed-point lhs of qgemv_mma.cu keeps to the f32 bound over the f32 range (tiny,
    ordinary and huge values, mixed signs, units whose values span 10^8), for one to eight rows."""
    k, n = 512, 64
    kb = k // enc.elements_per_block * enc.block_size
    w = random_blocks(rng, enc, n, k // enc.elements_per_block)
    deq = dequantized(enc, w)
    for m in (1, 2, 3, 4, 6, 8):
        model = load(lambda a, b: ops.qmatmul(enc, None, a, b), [(DType.float32, (m, k)), (DType.uint8, (n, kb))], gpu)
        lhs = (rng.standard_normal((m, k)) * scale * rng.choice([1.0, 1e-4, 1e4], size=(m, k))).astype(np.float32)
        lhs[:, 32:64] = 0.0  # an all-zero unit
        with tuning.record_launches() as log:
            (out,) = execute(model, [lhs, w], gpu)
        assert log.count("qgemv", mma=1) == 1, log.records()
        check_product(out, lhs, deq, enc, gpu)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [2, 4, 7])
def test_gpu_qmatmul_4bit_nonfinite_lhs(gpu, rng, m):
    """An inf or NaN in the lhs makes every output of that lhs row NaN; other rows are exact."""
    enc, k, n = Q.Q4_0, 256, 40
    kb = k // 32 * 18
    model = load(lambda a, b: ops.qmatmul(enc, None, a, b), [(DType.float32, (m, k)), (DType.uint8, (n, kb))], gpu)
    w = random_blocks(rng, enc, n, k // 32)
    lhs = rng.standard_normal((m, k)).astype(np.float32)
    lhs[1, 77] = np.inf
    (out,) = execute(model, [lhs, w], gpu)
    assert np.isnan(out[1]).all()
    keep = [r for r in range(m) if r != 1]
    check_product(out[keep], lhs[keep], dequantized(enc, w), enc, gpu)


@pytest.mark.gpu
@pytest.mark.parametrize("enc", FOUR_BIT, ids=lambda e: e.value)
def test_gpu_qmatmul_4bit_reads_what_kernels_just_wrote(gpu, rng, enc):
    """qgemv_mma.cu may start while the previous kernel of the stream drains (programmatic stream
    serialization) and must not read before it is done: an lhs and weights written by the
    kernels just before it, and a second qmatmul on its output, match a float64 product, call
    after call (launched, then replayed from a CUDA graph)."""
    k, n1, n2 = 512, 512, 96
    kb = k // enc.elements_per_block * enc.block_size

    def fn(x, wa, wb, w2):
        y = ops.qmatmul(enc, None, x * 2.0 + 1.0, ops.concat([wa, wb], axis=0))
        return ops.qmatmul(enc, None, y, w2)

    types = [(DType.float32, (1, k)), (DType.uint8, (200, kb)), (DType.uint8, (n1 - 200, kb)), (DType.uint8, (n2, kb))]
    model = load(fn, types, gpu)
    ws = [random_blocks(rng, enc, rows, k // enc.elements_per_block) for rows in (200, n1 - 200, n2)]
    w1 = dequantized(enc, np.concatenate(ws[:2])).astype(np.float64)
    w2 = dequantized(enc, ws[2]).astype(np.float64)
    for i in range(5):
        # The first call launches both (later ones may replay a CUDA graph of them).
        lhs = rng.standard_normal((1, k)).astype(np.float32)
        with tuning.record_launches() as log:
            (out,) = execute(model, [lhs, *ws], gpu)
        if i == 0:
            assert log.count("qgemv", mma=1) == 2, log.records()
        ref = ((lhs.astype(np.float64) * 2 + 1) @ w1.T) @ w2.T
        # f32 rounding stays far below what a race would leave.
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-3 * np.abs(ref).max())


@pytest.mark.gpu
@pytest.mark.parametrize("enc", FOUR_BIT, ids=lambda e: e.value)
@pytest.mark.parametrize("k", [1280, 4352])
@pytest.mark.parametrize("layout", ["grid1_split1", "grid3_split2", "split8", "auto"])
def test_gpu_qmatmul_mma_kernel_work_split(gpu, rng, enc, k, layout):
    """qgemv_mma.cu's work distribution: a grid of 1 or 3 blocks (warps walking several tiles,
    their rings of stages running on across tiles), K split over 2 or 8 warps of a block (the
    parts summed in order; 8 parts of 17 chunks, or 4 of 5 since a part is at least a chunk),
    the automatic choice; weight rows not a multiple of 16. Within f32 rounding of one warp per
    tile, and the same bits with one block and no split."""
    spec = {f"qgemv.{part[:4]}": part[4:] for part in layout.split("_") if part.startswith("grid")}
    spec |= {f"qgemv.{part[:5]}": part[5:] for part in layout.split("_") if part.startswith("split")}
    kb = k // enc.elements_per_block * enc.block_size
    with tuning.override(**spec), tuning.record_launches() as log:
        # (8 rows of K = 4352 exceed the kernel's lhs budget: the streaming kernel)
        run_qmatmul(gpu, rng, enc, k, 333, [(1, 1), (1, 2), (1, 3), (1, 4)] + [(1, 8)] * (k <= 4096))
        model = load(lambda a, b: ops.qmatmul(enc, None, a, b), [(DType.float32, (1, k)), (DType.uint8, (70, kb))], gpu)
        w = random_blocks(rng, enc, 70, k // enc.elements_per_block)
        lhs = rng.standard_normal((1, k)).astype(np.float32)
        (got,) = execute(model, [lhs, w], gpu)
    launches = log.records("qgemv")
    assert launches and all(r["mma"] == 1 for r in launches), launches
    if "qgemv.grid" in spec:
        assert all(r["blocks"] <= int(spec["qgemv.grid"]) for r in launches), launches
    with tuning.override(**{"qgemv.split": 1}), tuning.record_launches() as log:
        (one,) = execute(model, [lhs, w], gpu)
    splits = [r["split"] for r in log.records("qgemv")]
    assert splits and all(s == 1 for s in splits), log.records()
    # Sums over K parts are added in a different order than one warp's running sum.
    np.testing.assert_allclose(got, one, rtol=1e-5, atol=1e-5 * np.abs(one).max())
    if layout == "grid1_split1":
        np.testing.assert_array_equal(got, one)


@pytest.mark.gpu
@pytest.mark.parametrize("enc", [Q.Q4_0, Q.Q4_1, Q.Q8_0, Q.Q4_K], ids=lambda e: e.value)
@pytest.mark.parametrize("k", [1280, 4352])
@pytest.mark.parametrize("grid", ["1", "3", None], ids=["grid1", "grid3", "grid_auto"])
def test_gpu_qmatmul_streaming_kernel(gpu, rng, enc, k, grid):
    """The persistent streaming GEMV (qgemv_stream.cu: 16-byte aligned rows, up to 8 lhs rows):
    K with a partial last 1024-element chunk, weight rows not a multiple of 16, blocks walking
    several row groups (the grid capped at 1 and 3 blocks: the ring of stages runs on across
    groups). The general kernel (qgemv.stream=0) on the same inputs gives the same bits."""
    kb = k // enc.elements_per_block * enc.block_size
    assert kb % 16 == 0
    # (1-8 rows of 4-bit weights would take the tensor-core kernel)
    with tuning.override(**({"qgemv.grid": grid} if grid else {}), **{"qgemv.mma": False}):
        run_qmatmul(gpu, rng, enc, k, 333, [(1, 1), (1, 2), (1, 3), (1, 8)])
        model = load(lambda a, b: ops.qmatmul(enc, None, a, b), [(DType.float32, (5, k)), (DType.uint8, (70, kb))], gpu)
        w = random_blocks(rng, enc, 70, k // enc.elements_per_block)
        lhs = rng.standard_normal((5, k)).astype(np.float32)
        with tuning.record_launches() as log:
            (streamed,) = execute(model, [lhs, w], gpu)
        # (qgemv_stream.cu runs on sm_90 and later)
        hopper_or_later = int("".join(c for c in gpu.architecture_name if c.isdigit())) >= 90
        assert log.count("qgemv", streaming=1) == hopper_or_later, log.records()
        with tuning.override(**{"qgemv.stream": False}), tuning.record_launches() as log:
            (general,) = execute(model, [lhs, w], gpu)
        assert log.count("qgemv", streaming=1) == 0, log.records()
    np.testing.assert_array_equal(streamed, general)
