"""The quantized ops on the GPU: dequantize (bit for bit against the CPU backend, and against the
`gguf` package's decoders where it is installed), qmatmul over every GGUF block encoding (the
in-register decode for up to 8 lhs rows, dequantize + GEMM above) against the CPU backend and a
float64 product with the CPU's dequantized weights, and GPTQ against a numpy unpacking of its
layout. Every test skips without a GPU.

The block generators are written here rather than imported from tests/test_cpu_quant.py: that
module skips itself at import when `gguf` is missing, which it is on the GPU machines."""

import ml_dtypes
import numpy as np
import pytest

from engine_util import session
from max import driver, tuning
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops
from max.graph.quantization import QuantizationConfig, QuantizationEncoding as Q

pytestmark = pytest.mark.gpu
GPU, CPU = DeviceRef.GPU(), DeviceRef.CPU()

ENCODINGS = [Q.Q4_0, Q.Q4_1, Q.Q8_0, Q.Q4_K, Q.Q5_K, Q.Q6_K]
# Byte offsets of the f16 scale fields in each block (kept finite in random blocks).
F16_FIELDS = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q8_0: [0], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208]}


def random_blocks(rng, enc, rows, blocks):
    """uint8 [rows, blocks * block_size]: random bytes with finite random f16 scales."""
    raw = rng.integers(0, 256, size=(rows, blocks, enc.block_size), dtype=np.uint8)
    for off in F16_FIELDS[enc]:
        scale = (rng.standard_normal((rows, blocks)) * rng.choice([1e-3, 0.05, 2.0], size=(rows, blocks))).astype(np.float16)
        raw[:, :, off : off + 2] = scale.view(np.uint8).reshape(rows, blocks, 2)
    return raw.reshape(rows, blocks * enc.block_size)


def gguf_reference(q, enc):
    """gguf's decoding of `q`, or None when the package is not installed."""
    try:
        from gguf import GGMLQuantizationType as GT
        from gguf import quants
    except ImportError:
        return None
    return quants.dequantize(q, getattr(GT, enc.value))


def models(fn, types, gpu):
    cpu = session().load(Graph("cpu", fn, input_types=[TensorType(d, s, CPU) for d, s in types]))
    dev = session(gpu).load(Graph("gpu", fn, input_types=[TensorType(d, s, GPU) for d, s in types]))
    return cpu, dev


def execute(model, inputs, gpu=None):
    args = [driver.Buffer.from_numpy(np.ascontiguousarray(x)).to(gpu) if gpu is not None else x for x in inputs]
    return [o.to_numpy() for o in model.execute(*args)]


def same_bits(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype
    bad = got.view(np.uint8) != want.view(np.uint8)
    assert not bad.any(), f"{bad.sum()} bytes of {got.nbytes} differ"


def cpu_dequantize(enc, q):
    g = Graph("deq", lambda x: ops.dequantize(enc, x), input_types=[TensorType(DType.uint8, q.shape, CPU)])
    (out,) = execute(session().load(g), [q])
    return out


def check_f32_product(got, lhs, w):
    """`got` is lhs @ w.T computed in float32: within the rounding bound of a K-term f32 dot
    product of the float64 result."""
    lhs64, w64 = lhs.astype(np.float64), w.astype(np.float64)
    ref = lhs64 @ w64.T
    bound = 2 * lhs.shape[-1] * 2.0**-24 * (np.abs(lhs64) @ np.abs(w64).T)
    assert got.shape == ref.shape and got.dtype == np.float32
    err = np.abs(got.astype(np.float64) - ref)
    assert (err <= bound + 1e-30).all(), f"max error {err.max()}"


def check_q8_product(got, lhs, w, enc):
    """`got` is lhs @ w.T as the CPU computes it, through lhs in two 8-bit planes (values and
    residual) per block of 32 values (256 for the K-quants): within half a step of the residual
    plane per value, max|lhs_b| / 254**2 * sum|w_b| over the blocks b, of the float64 result, plus
    the f32 bound."""
    lhs64, w64 = lhs.astype(np.float64), w.astype(np.float64)
    ref = lhs64 @ w64.T
    k = lhs.shape[-1]
    block = 256 if enc in (Q.Q4_K, Q.Q5_K, Q.Q6_K) else 32
    amax = np.abs(lhs64).reshape(-1, k // block, block).max(-1)
    wsum = np.abs(w64).reshape(-1, k // block, block).sum(-1)
    bound = amax / 254**2 @ wsum.T + 2 * k * 2.0**-24 * (np.abs(lhs64) @ np.abs(w64).T)
    assert got.shape == ref.shape and got.dtype == np.float32
    err = np.abs(got.astype(np.float64) - ref)
    assert (err <= bound + 1e-30).all(), f"max error {err.max()}"


# -- dequantize -------------------------------------------------------------------------------


@pytest.mark.parametrize("enc", ENCODINGS, ids=lambda e: e.value)
def test_dequantize_bit_for_bit(gpu, rng, enc):
    blocks = 3
    cpu, dev = models(lambda x: ops.dequantize(enc, x), [(DType.uint8, ("rows", blocks * enc.block_size))], gpu)
    for rows in [1, 37]:
        q = random_blocks(rng, enc, rows, blocks)
        (c,) = execute(cpu, [q])
        (g,) = execute(dev, [q], gpu)
        same_bits(g, c)
        ref = gguf_reference(q, enc)
        if ref is not None:
            same_bits(g, ref)


@pytest.mark.parametrize("enc", ENCODINGS, ids=lambda e: e.value)
def test_dequantize_leading_dims_and_large_input(gpu, rng, enc):
    # 240 rows of 5120 elements: more than 2^20 in all
    q = random_blocks(rng, enc, 2 * 3 * 40, 5120 // enc.elements_per_block).reshape(2, 3, 40, -1)
    cpu, dev = models(lambda x: ops.dequantize(enc, x), [(DType.uint8, q.shape)], gpu)
    (c,) = execute(cpu, [q])
    (g,) = execute(dev, [q], gpu)
    same_bits(g, c)


# -- qmatmul ----------------------------------------------------------------------------------


def run_qmatmul(gpu, rng, enc, k, n, shapes):
    """qmatmul of lhs [batch, m, k] (symbolic batch and m) by n weight rows, for each (batch, m)."""
    kb = k // enc.elements_per_block * enc.block_size
    cpu, dev = models(
        lambda a, b: ops.qmatmul(enc, None, a, b), [(DType.float32, ("batch", "m", k)), (DType.uint8, (n, kb))], gpu
    )
    w = random_blocks(rng, enc, n, k // enc.elements_per_block)
    deq = cpu_dequantize(enc, w)
    for batch, m in shapes:
        lhs = rng.standard_normal((batch, m, k)).astype(np.float32)
        (c,) = execute(cpu, [lhs, w])
        (g,) = execute(dev, [lhs, w], gpu)
        check_f32_product(g.reshape(-1, n), lhs.reshape(-1, k), deq)
        # The CPU multiplies two 8-bit planes of the activations, the GPU f32 ones.
        check_q8_product(c.reshape(-1, n), lhs.reshape(-1, k), deq, enc)


@pytest.mark.parametrize("enc", ENCODINGS, ids=lambda e: e.value)
@pytest.mark.parametrize("k_blocks", [1, 3, 8, 9], ids=lambda b: f"{b}blocks")
def test_qmatmul_small_m(gpu, rng, enc, k_blocks):
    """1 to 8 lhs rows (every row variant of the in-register kernel), K of 1 to 9 blocks (whole
    and partial 1024-element chunks), weight rows not a multiple of the 16 per block."""
    e = enc.elements_per_block
    k = k_blocks * e * (4 if e == 32 else 1)
    run_qmatmul(gpu, rng, enc, k, 37, [(1, 1), (1, 2), (1, 3), (2, 2), (1, 5), (2, 4), (1, 8)])


@pytest.mark.parametrize("enc", ENCODINGS, ids=lambda e: e.value)
def test_qmatmul_many_rows(gpu, rng, enc):
    """More than 8 lhs rows: dequantize to scratch and an f32 GEMM."""
    run_qmatmul(gpu, rng, enc, 512, 300, [(1, 9), (2, 7), (3, 100)])


@pytest.mark.parametrize("enc", [Q.Q4_0, Q.Q8_0, Q.Q4_K, Q.Q6_K], ids=lambda e: e.value)
def test_qmatmul_decode_shape(gpu, rng, enc):
    """The decode shape: one row against 4096 x 4096 weights."""
    run_qmatmul(gpu, rng, enc, 4096, 4096, [(1, 1)])


def test_qmatmul_weight_chunks(gpu, rng):
    """More weight columns than one f32 scratch chunk holds (K * N * 4 > 128 MB): the GEMM writes
    a temporary that is stored into column ranges of the result."""
    run_qmatmul(gpu, rng, Q.Q4_0, 4096, 10000, [(1, 16)])


def test_qmatmul_unaligned_rows(gpu, rng):
    """Rows of 54 bytes (3 Q4_0 blocks): no row but the first starts on 16 bytes."""
    run_qmatmul(gpu, rng, Q.Q4_0, 96, 45, [(1, 1), (1, 3), (1, 12)])


def test_qmatmul_rank_one_lhs(gpu, rng):
    enc, k, n = Q.Q4_K, 512, 40
    w = random_blocks(rng, enc, n, k // 256)
    cpu, dev = models(lambda a, b: ops.qmatmul(enc, None, a, b), [(DType.float32, (k,)), (DType.uint8, w.shape)], gpu)
    lhs = rng.standard_normal(k).astype(np.float32)
    (g,) = execute(dev, [lhs, w], gpu)
    assert g.shape == (n,)
    check_f32_product(g[None], lhs[None], cpu_dequantize(enc, w))


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
    ref = lhs64 @ w64
    got = got.astype(np.float64)
    bound = 2.0**-8 * np.abs(ref) + 2 * lhs64.shape[-1] * 2.0**-24 * (np.abs(lhs64) @ np.abs(w64))
    err = np.abs(got - ref)
    assert (err <= bound + 1e-30).all(), f"max error {err.max()}"


@pytest.mark.parametrize("desc_act", [False, True])
@pytest.mark.parametrize(("k", "n"), [(384, 96), (256, 37), (1024, 300)])
def test_gptq_qmatmul(gpu, rng, desc_act, k, n):
    group = 128
    config = QuantizationConfig("gptq", 4, group, desc_act=desc_act, sym=True)
    packed, q, scales = gptq_weights(rng, k, n, group)
    perm = rng.permutation(k).astype(np.int32)
    types = [(DType.bfloat16, ("m", k)), (DType.uint8, packed.shape)] + ([(DType.int32, (k,))] if desc_act else [])
    cpu, dev = models(lambda a, b, *p: ops.qmatmul(Q.GPTQ, config, a, b, *p), types, gpu)
    w64 = (q[perm] if desc_act else q) * scales[np.arange(k) // group]
    for m in [1, 2, 5, 8, 9, 40]:
        lhs = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
        args = [lhs, packed] + ([perm] if desc_act else [])
        (c,) = execute(cpu, args)
        (g,) = execute(dev, args, gpu)
        check_bf16(g, lhs.astype(np.float64), w64)
        np.testing.assert_allclose(g.astype(np.float64), c.astype(np.float64), rtol=2**-7, atol=1e-3)


def test_gptq_negative_permutation_entries(gpu, rng):
    """Negative permutation entries count from the end, as on the CPU."""
    k, n, group = 256, 64, 128
    config = QuantizationConfig("gptq", 4, group, desc_act=True, sym=True)
    packed, q, scales = gptq_weights(rng, k, n, group)
    perm = rng.permutation(k).astype(np.int32)
    neg = perm - k  # same rows
    types = [(DType.bfloat16, (3, k)), (DType.uint8, packed.shape), (DType.int32, (k,))]
    cpu, dev = models(lambda a, b, p: ops.qmatmul(Q.GPTQ, config, a, b, p), types, gpu)
    lhs = rng.standard_normal((3, k)).astype(ml_dtypes.bfloat16)
    (want,) = execute(dev, [lhs, packed, perm], gpu)
    (got,) = execute(dev, [lhs, packed, neg], gpu)
    same_bits(got, want)


def test_gptq_run_time_errors(gpu, rng):
    k, n = 256, 64
    config = QuantizationConfig("gptq", 4, 128, desc_act=True, sym=True)
    packed, _, _ = gptq_weights(rng, k, n, 128)
    types = [(DType.bfloat16, (1, k)), (DType.uint8, packed.shape), (DType.int32, (k,))]
    _, dev = models(lambda a, b, p: ops.qmatmul(Q.GPTQ, config, a, b, p), types, gpu)
    perm = np.arange(k, dtype=np.int32)
    perm[7] = k
    lhs = np.zeros((1, k), ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match=r"qmatmul: index 256 is out of range for the GPTQ permutation"):
        execute(dev, [lhs, packed, perm], gpu)
    types = [(DType.bfloat16, (1, k)), (DType.uint8, (100, n))]
    _, dev = models(lambda a, b: ops.qmatmul(Q.GPTQ, QuantizationConfig("gptq", 4, 128, sym=True), a, b), types, gpu)
    with pytest.raises(ValueError, match=r"qmatmul: GPTQ weights for K = 256 \(groups of 128\) have K/2 \+ 2\*K/128 = 132 rows of bytes, got 100"):
        execute(dev, [lhs, np.zeros((100, n), np.uint8)], gpu)


FOUR_BIT = [Q.Q4_0, Q.Q4_1, Q.Q4_K]


@pytest.mark.parametrize("enc", FOUR_BIT, ids=lambda e: e.value)
@pytest.mark.parametrize("k", [256, 1280, 4096])
@pytest.mark.parametrize("kernel", ["mma", "mma_no_pdl", "stream"])
def test_qmatmul_4bit_one_or_two_rows(gpu, rng, enc, k, kernel):
    """One or two lhs rows over 4-bit weights whose rows start on 16 bytes: the integer
    tensor-core kernel (qgemv_mma.cu, the default; also launched without programmatic stream
    serialization, qgemv.pdl=0) and the CUDA-core one (qgemv.mma=0); K of one to 16
    256-element chunks, weight rows not a multiple of 16."""
    mma, pdl = kernel != "stream", kernel != "mma_no_pdl"
    with tuning.override(**{"qgemv.mma": mma, "qgemv.pdl": pdl}), tuning.record_launches() as log:
        run_qmatmul(gpu, rng, enc, k, 45, [(1, 1), (1, 2), (2, 1)])
    launches = log.records("qgemv")
    assert launches and all(r["mma"] == mma for r in launches), launches
    if mma:
        assert all(r["pdl"] == pdl for r in launches), launches


@pytest.mark.parametrize("enc", FOUR_BIT, ids=lambda e: e.value)
@pytest.mark.parametrize("scale", [1e-30, 1e-3, 1e25])
def test_qmatmul_4bit_lhs_magnitudes(gpu, rng, enc, scale):
    """The fixed-point lhs of qgemv_mma.cu keeps to the f32 bound over the f32 range (tiny,
    ordinary and huge values, mixed signs, units whose values span 10^8), for one and two rows."""
    k, n = 512, 64
    kb = k // enc.elements_per_block * enc.block_size
    w = random_blocks(rng, enc, n, k // enc.elements_per_block)
    deq = cpu_dequantize(enc, w)
    for m in (1, 2):
        _, dev = models(lambda a, b: ops.qmatmul(enc, None, a, b), [(DType.float32, (m, k)), (DType.uint8, (n, kb))], gpu)
        lhs = (rng.standard_normal((m, k)) * scale * rng.choice([1.0, 1e-4, 1e4], size=(m, k))).astype(np.float32)
        lhs[:, 32:64] = 0.0  # an all-zero unit
        with tuning.record_launches() as log:
            (g,) = execute(dev, [lhs, w], gpu)
        assert log.count("qgemv", mma=1) == 1, log.records()
        check_f32_product(g, lhs, deq)


def test_qmatmul_4bit_nonfinite_lhs(gpu, rng):
    """An inf or NaN in the lhs makes every output of that lhs row NaN; other rows are exact."""
    enc, k, n = Q.Q4_0, 256, 40
    kb = k // 32 * 18
    _, dev = models(lambda a, b: ops.qmatmul(enc, None, a, b), [(DType.float32, (2, k)), (DType.uint8, (n, kb))], gpu)
    w = random_blocks(rng, enc, n, k // 32)
    lhs = rng.standard_normal((2, k)).astype(np.float32)
    lhs[1, 77] = np.inf
    (g,) = execute(dev, [lhs, w], gpu)
    assert np.isnan(g[1]).all()
    check_f32_product(g[:1], lhs[:1], cpu_dequantize(enc, w))


@pytest.mark.parametrize("enc", FOUR_BIT, ids=lambda e: e.value)
def test_qmatmul_4bit_reads_what_kernels_just_wrote(gpu, rng, enc):
    """qgemv_mma.cu may start while the previous kernel of the stream drains (programmatic stream
    serialization) and must not read before it is done: an lhs and weights written by the
    kernels just before it, and a second qmatmul on its output, match the CPU backend, call
    after call (launched, then replayed from a CUDA graph)."""
    k, n1, n2 = 512, 512, 96
    kb = k // enc.elements_per_block * enc.block_size

    def fn(x, wa, wb, w2):
        y = ops.qmatmul(enc, None, x * 2.0 + 1.0, ops.concat([wa, wb], axis=0))
        return ops.qmatmul(enc, None, y, w2)

    types = [(DType.float32, (1, k)), (DType.uint8, (200, kb)), (DType.uint8, (n1 - 200, kb)), (DType.uint8, (n2, kb))]
    cpu, dev = models(fn, types, gpu)
    ws = [random_blocks(rng, enc, rows, k // enc.elements_per_block) for rows in (200, n1 - 200, n2)]
    for i in range(5):
        # The first call launches both (later ones may replay a CUDA graph of them).
        lhs = rng.standard_normal((1, k)).astype(np.float32)
        with tuning.record_launches() as log:
            (g,) = execute(dev, [lhs, *ws], gpu)
        if i == 0:
            assert log.count("qgemv", mma=1) == 2, log.records()
        (c,) = execute(cpu, [lhs, *ws])
        # The CPU multiplies 16-bit activations (two 8-bit planes), the GPU f32 ones: far
        # closer than a race would leave them.
        np.testing.assert_allclose(g, c, rtol=0, atol=1e-3 * np.abs(c).max())


@pytest.mark.parametrize("enc", FOUR_BIT, ids=lambda e: e.value)
@pytest.mark.parametrize("k", [1280, 4352])
@pytest.mark.parametrize("layout", ["grid1_split1", "grid3_split2", "split8", "auto"])
def test_qmatmul_mma_kernel_work_split(gpu, rng, enc, k, layout):
    """qgemv_mma.cu's work distribution: a grid of 1 or 3 blocks (warps walking several tiles,
    their rings of stages running on across tiles), K split over 2 or 8 warps of a block (the
    parts summed in order; 8 parts of 17 chunks, or 4 of 5 since a part is at least a chunk),
    the automatic choice; weight rows not a multiple of 16. Within f32 rounding of one warp per
    tile, and the same bits with one block and no split."""
    spec = {f"qgemv.{part[:4]}": part[4:] for part in layout.split("_") if part.startswith("grid")}
    spec |= {f"qgemv.{part[:5]}": part[5:] for part in layout.split("_") if part.startswith("split")}
    kb = k // enc.elements_per_block * enc.block_size
    with tuning.override(**spec), tuning.record_launches() as log:
        run_qmatmul(gpu, rng, enc, k, 333, [(1, 1), (1, 2)])
        _, dev = models(lambda a, b: ops.qmatmul(enc, None, a, b), [(DType.float32, (1, k)), (DType.uint8, (70, kb))], gpu)
        w = random_blocks(rng, enc, 70, k // enc.elements_per_block)
        lhs = rng.standard_normal((1, k)).astype(np.float32)
        (got,) = execute(dev, [lhs, w], gpu)
    launches = log.records("qgemv")
    assert launches and all(r["mma"] == 1 for r in launches), launches
    if "qgemv.grid" in spec:
        assert all(r["blocks"] <= int(spec["qgemv.grid"]) for r in launches), launches
    with tuning.override(**{"qgemv.split": 1}), tuning.record_launches() as log:
        (one,) = execute(dev, [lhs, w], gpu)
    splits = [r["split"] for r in log.records("qgemv")]
    assert splits and all(s == 1 for s in splits), log.records()
    # Sums over K parts are added in a different order than one warp's running sum.
    np.testing.assert_allclose(got, one, rtol=1e-5, atol=1e-5 * np.abs(one).max())
    if layout == "grid1_split1":
        np.testing.assert_array_equal(got, one)


@pytest.mark.parametrize("enc", [Q.Q4_0, Q.Q4_1, Q.Q8_0, Q.Q4_K], ids=lambda e: e.value)
@pytest.mark.parametrize("k", [1280, 4352])
@pytest.mark.parametrize("grid", ["1", "3", None], ids=["grid1", "grid3", "grid_auto"])
def test_qmatmul_streaming_kernel(gpu, rng, enc, k, grid):
    """The persistent streaming GEMV (qgemv_stream.cu: 16-byte aligned rows, up to 8 lhs rows):
    K with a partial last 1024-element chunk, weight rows not a multiple of 16, blocks walking
    several row groups (the grid capped at 1 and 3 blocks: the ring of stages runs on across
    groups). The general kernel (qgemv.stream=0) on the same inputs gives the same bits."""
    kb = k // enc.elements_per_block * enc.block_size
    assert kb % 16 == 0
    with tuning.override(**({"qgemv.grid": grid} if grid else {})):
        run_qmatmul(gpu, rng, enc, k, 333, [(1, 1), (1, 2), (1, 3), (1, 8)])
        _, dev = models(lambda a, b: ops.qmatmul(enc, None, a, b), [(DType.float32, (5, k)), (DType.uint8, (70, kb))], gpu)
        w = random_blocks(rng, enc, 70, k // enc.elements_per_block)
        lhs = rng.standard_normal((5, k)).astype(np.float32)
        with tuning.record_launches() as log:
            (streamed,) = execute(dev, [lhs, w], gpu)
        # (qgemv_stream.cu runs on sm_90 and later)
        hopper_or_later = int("".join(c for c in gpu.architecture_name if c.isdigit())) >= 90
        assert log.count("qgemv", streaming=1) == hopper_or_later, log.records()
        with tuning.override(**{"qgemv.stream": False}), tuning.record_launches() as log:
            (general,) = execute(dev, [lhs, w], gpu)
        assert log.count("qgemv", streaming=1) == 0, log.records()
    np.testing.assert_array_equal(streamed, general)

