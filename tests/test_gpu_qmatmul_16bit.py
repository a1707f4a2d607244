"""qmatmul with 16-bit activations on the GPU (a GGUF model computing in bfloat16): bf16 and f16
lhs through every kernel path (the tensor-core GEMV at 1-4 rows of 4-bit weights, the streaming
and general GEMVs, the bf16 wgmma GEMM above 8 rows), the result in lhs's dtype, against a
float64 product of the weights decoded in numpy (tests/gguf_blocks.py), with fresh random inputs.
The CPU keeps float32 block products and says so for a 16-bit lhs."""

import ml_dtypes
import numpy as np
import pytest

from gguf_blocks import decode
from test_gpu_qmatmul_rows import bf16_bound, f32_bound
from test_quant import ENCODINGS, execute, load, random_blocks, sibling_products
from max import driver, tuning
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops
from max.graph.quantization import QuantizationEncoding as Q

# These tests reach each quantized GEMV at small shapes (conftest.py).
pytestmark = pytest.mark.usefixtures("qgemv_kernels_of_any_size")

NP = {DType.bfloat16: ml_dtypes.bfloat16, DType.float16: np.float16}
# The result's rounding to its dtype: half an ulp, relative (2^-9 for bf16, 2^-11 for f16), doubled.
ROUND = {DType.bfloat16: 2.0**-8, DType.float16: 2.0**-10}
dtypes = pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float16], ids=lambda d: d.name)
encodings = pytest.mark.parametrize("enc", ENCODINGS, ids=lambda e: e.value)


def weights(rng, enc, n, k):
    return random_blocks(rng, enc, n, k // enc.elements_per_block)


def model(device, enc, dtype, m, k, n, residual=False):
    kb = k // enc.elements_per_block * enc.block_size
    types = [(dtype, (m, k)), (DType.uint8, (n, kb))] + ([(dtype, (m, n))] if residual else [])
    if residual:
        return load(lambda a, b, h: h + ops.qmatmul(enc, None, a, b), types, device)
    return load(lambda a, b: ops.qmatmul(enc, None, a, b), types, device)


def check(got, lhs, w, dtype, bound, plus=None):
    """`got` (of dtype) is lhs @ w^T (+ plus) within `bound` of the f32-accumulated product plus
    the one rounding of the result to dtype."""
    assert got.dtype == NP[dtype], got.dtype
    lhs64, w64 = lhs.astype(np.float64), w.astype(np.float64)
    ref = lhs64 @ w64.T
    tol = bound(lhs64, w64, lhs.shape[-1])
    if plus is not None:
        ref = ref + plus.astype(np.float64)
    tol = tol + ROUND[dtype] * np.abs(ref)
    err = np.abs(got.astype(np.float64) - ref)
    bad = err > tol + 1e-30
    assert not bad.any(), f"{bad.sum()} of {bad.size} wrong; worst {err.max()} (bound there {tol.flat[err.argmax()]})"


K_QUANTS = (Q.Q4_K, Q.Q5_K, Q.Q6_K)


def activations(rng, dtype, m, k, scale=1.0, enc=None):
    # Products within f16's range (65504): the random K-quant blocks decode to weights of up to
    # ~2.5e4, and 4096 standard-normal terms by them sum to ~4e5, which f16 rounds to inf.
    if dtype == DType.float16 and enc in K_QUANTS:
        scale *= 2.0**-6
    return (rng.standard_normal((m, k)) * scale).astype(NP[dtype])


@pytest.mark.gpu
@encodings
@dtypes
@pytest.mark.parametrize("m", [1, 2, 4, 8, 16, 24, 64])
def test_gpu_qmatmul_16_bit_lhs(hopper, rng, enc, dtype, m):
    """Every encoding at 1, 2, 4, 8, 16, 24 and 64 rows (qgemm's 16-, 32- and 64-row tiles past 8
    rows): 16-byte aligned rows of K = 4096 (the 8B model's) and an odd number of blocks (rows
    not 16-byte aligned: the general GEMV, or the dequantize path past 8 rows)."""
    for blocks in (4096 // enc.elements_per_block, 37 if enc.elements_per_block == 32 else 3):
        k, n = blocks * enc.elements_per_block, 333
        w = weights(rng, enc, n, k)
        lhs = activations(rng, dtype, m, k, enc=enc)
        # (qmatmul.qgemm forced: past 32 rows these weights keep the dequantize path by default)
        with tuning.override(**{"qmatmul.qgemm": True}), tuning.record_launches() as log:
            (out,) = execute(model(hopper, enc, dtype, m, k, n), [lhs, w], hopper)
        mma = m <= 8 and enc in (Q.Q4_0, Q.Q4_1, Q.Q4_K) or m == 1 and enc == Q.Q6_K
        if mma and blocks * enc.block_size % 16 == 0:
            assert log.count("qgemv", mma=1) == 1, log.records()
        if m > 8:
            # (rows of whole 16 bytes: the GEMM decoding the quants in its mainloop)
            qgemm = blocks * enc.block_size % 16 == 0
            assert log.count("qgemm" if qgemm else "gemm_sm90p") == 1, log.records()
        check(out, lhs, decode(enc, w), dtype, bf16_bound if m > 8 else f32_bound)


@pytest.mark.gpu
@pytest.mark.parametrize("enc", [Q.Q4_0, Q.Q8_0, Q.Q6_K], ids=lambda e: e.value)
@dtypes
@pytest.mark.parametrize("m", [1, 4, 64])
def test_gpu_qmatmul_16_bit_with_residual(hopper, rng, enc, dtype, m):
    """`h + qmatmul(x, W)` in 16 bits: the residual (of the result's dtype) is added in the
    product's store before its one rounding."""
    k, n = 1024, 384
    w = weights(rng, enc, n, k)
    lhs = activations(rng, dtype, m, k, enc=enc)
    res = activations(rng, dtype, m, n, scale=10.0)
    with tuning.record_launches() as log:
        (out,) = execute(model(hopper, enc, dtype, m, k, n, residual=True), [lhs, w, res], hopper)
    assert log.count("fused") == 0, log.records()
    check(out, lhs, decode(enc, w), dtype, bf16_bound if m > 8 else f32_bound, plus=res)


@pytest.mark.gpu
@dtypes
def test_gpu_qmatmul_16_bit_many_rows_simt_and_weight_chunks(hopper, rng, dtype):
    """qmatmul.wgmma=0 (the f32 SIMT GEMM of other GPUs, lhs converted, result stored in
    16 bits), and more weight rows than one bf16 scratch chunk on the wgmma path."""
    enc, k, n, m = Q.Q4_K, 512, 200, 40
    w = weights(rng, enc, n, k)
    lhs = activations(rng, dtype, m, k, enc=enc)
    with tuning.override(**{"qmatmul.wgmma": False}):
        (out,) = execute(model(hopper, enc, dtype, m, k, n), [lhs, w], hopper)
    check(out, lhs, decode(enc, w), dtype, f32_bound)
    enc, k, n, m = Q.Q4_0, 4096, 32768 + 300, 16
    w = weights(rng, enc, n, k)
    lhs = activations(rng, dtype, m, k)
    res = activations(rng, dtype, m, n)
    # (qmatmul.qgemm=0: 16 rows of these weights would take qgemm_sm90.cu)
    with tuning.override(**{"qmatmul.qgemm": False}), tuning.record_launches() as log:
        (out,) = execute(model(hopper, enc, dtype, m, k, n, residual=True), [lhs, w, res], hopper)
    assert log.count("gemm_sm90p", f32=1) == 2 and log.count("qgemm") == 0, log.records()
    check(out, lhs, decode(enc, w), dtype, bf16_bound, plus=res)


@pytest.mark.gpu
@pytest.mark.parametrize("enc", [Q.Q4_0, Q.Q8_0], ids=lambda e: e.value)
@pytest.mark.parametrize("m", [1, 3])
def test_gpu_16_bit_siblings_share_one_launch(hopper, rng, enc, m):
    """A layer's q/k/v of one bf16 activation: one launch, of the tensor-core GEMV (1 and 3 rows
    of 4-bit weights in 16-byte aligned rows, K = 1024) or of the general GEMV (rows not 16-byte
    aligned, K = 1056: 33 blocks)."""
    k = 1024 if enc == Q.Q4_0 else 1056
    ns = (1024, 256, 256)
    ws = [weights(rng, enc, n, k) for n in ns]
    lhs = activations(rng, DType.bfloat16, m, k)
    outs, log = sibling_products(hopper, enc, ws, lhs, dtype=DType.bfloat16)
    assert log.count("qgemv", segments=len(ns)) == 1, log.records()
    for out, w in zip(outs, ws):
        check(out, lhs, decode(enc, w), DType.bfloat16, f32_bound)


def test_cpu_qmatmul_wants_float32_lhs():
    """The CPU's block products are float32: a 16-bit lhs there is a clear graph error."""
    q = TensorType(DType.uint8, (8, 18), DeviceRef.CPU())
    with pytest.raises(Exception, match="float32 on the CPU"):
        with Graph("q", input_types=[TensorType(DType.bfloat16, (1, 32), DeviceRef.CPU()), q]) as g:
            g.output(ops.qmatmul(Q.Q4_0, None, g.inputs[0], g.inputs[1]))


@pytest.mark.gpu
@pytest.mark.parametrize("enc", [Q.Q4_0, Q.Q8_0], ids=lambda e: e.value)
@dtypes
@pytest.mark.parametrize("m", [1, 2, 5])
def test_gpu_16_bit_general_gemv_at_48_kib(hopper, rng, enc, dtype, m):
    """A GGUF model of hidden 64 in 16 bits: Q4_0 rows of 36 bytes (not 16-byte aligned: the
    general GEMV), whose one-row kernel asks for exactly 48 KiB of dynamic shared memory (4
    stages of a 2560-byte 16-bit lhs chunk and 16 slots of 608 bytes) next to 16 bytes of static
    shared memory: the launch must raise the kernel's allowance (else CUDA_ERROR_INVALID_VALUE).
    One product (the o-proj, lm_head) and the q/k/v siblings of one activation. (One row of
    Q8_0, whose 68-byte rows the tensor-core tile kernel takes under qgemv.mma, is sent to the
    general kernel with qgemv.mma off.)"""
    k = 64
    for n in (64, 400):
        w = weights(rng, enc, n, k)
        lhs = activations(rng, dtype, m, k, enc=enc)
        with tuning.override(**{"qgemv.mma": False}), tuning.record_launches() as log:
            (out,) = execute(model(hopper, enc, dtype, m, k, n), [lhs, w], hopper)
        assert log.count("qgemv", mma=0, streaming=0) == 1, log.records()
        check(out, lhs, decode(enc, w), dtype, f32_bound)
    ws = [weights(rng, enc, n, k) for n in (32, 16, 16)]
    lhs = activations(rng, dtype, m, k)
    outs, log = sibling_products(hopper, enc, ws, lhs, dtype=dtype)
    assert log.count("qgemv", segments=3) == 1, log.records()
    for out, w in zip(outs, ws):
        check(out, lhs, decode(enc, w), dtype, f32_bound)
