"""qmatmul on the GPU against a float64 product of weights decoded in numpy from the raw blocks
(tests/gguf_blocks.py), with fresh random inputs: many lhs rows on Hopper (bf16 weights and
activations into the wgmma GEMM, f32 accumulation and result: qmatmul_sm90.rs), its fused
residual, sibling products and weight chunks; and 1 to 8 rows (the GEMV kernels). The decoder
itself is checked against the host's dequantize, bit for bit, on any machine."""

import numpy as np
import pytest

from gguf_blocks import decode
from test_quant import ENCODINGS, execute, load, random_blocks, sibling_products
from max import driver, tuning
from max.dtype import DType
from max.graph import ops
from max.graph.quantization import QuantizationEncoding as Q

# These tests reach each quantized GEMV at small shapes (conftest.py).
pytestmark = pytest.mark.usefixtures("qgemv_kernels_of_any_size")

encodings = pytest.mark.parametrize("enc", ENCODINGS, ids=lambda e: e.value)


def k_of(enc, blocks):
    return blocks * enc.elements_per_block


def weights(rng, enc, n, k):
    return random_blocks(rng, enc, n, k // enc.elements_per_block)


def bf16_bound(lhs64, w64, k):
    """The error bound of bf16 operands with f32 accumulation: rounding each operand to bf16
    (8 significant bits) moves a product by at most 2 * 2^-8 of |a w| (plus 2^-16), and a K-term
    f32 sum adds at most K * 2^-24 of sum |a w|: (2^-7 + 2^-16 + K * 2^-24) * |lhs| @ |w|^T. A
    wrong element, row or block would miss it by orders of magnitude."""
    return (2.0**-7 + 2.0**-16 + k * 2.0**-24) * (np.abs(lhs64) @ np.abs(w64).T)


def f32_bound(lhs64, w64, k):
    """f32 operands (the GEMV kernels): the K-term f32 dot product, 2 K 2^-24 sum |a w|."""
    return 2 * k * 2.0**-24 * (np.abs(lhs64) @ np.abs(w64).T)


def check(got, lhs, w, bound, plus=None):
    lhs64, w64 = lhs.astype(np.float64), w.astype(np.float64)
    ref = lhs64 @ w64.T
    tol = bound(lhs64, w64, lhs.shape[-1])
    if plus is not None:  # the residual: one more f32 rounding of the sum
        ref = ref + plus.astype(np.float64)
        tol = tol + 2.0**-23 * np.abs(ref)
    assert got.shape == ref.shape and got.dtype == np.float32, (got.shape, ref.shape, got.dtype)
    err = np.abs(got.astype(np.float64) - ref)
    bad = err > tol + 1e-30
    assert not bad.any(), f"{bad.sum()} of {bad.size} wrong; worst {err.max()} (bound there {tol.flat[err.argmax()]})"


@encodings
def test_numpy_decoder_matches_the_host_dequantize(rng, enc):
    q = random_blocks(rng, enc, 7, 3)
    (host,) = execute(load(lambda x: ops.dequantize(enc, x), [(DType.uint8, q.shape)], driver.CPU()), [q], driver.CPU())
    got = decode(enc, q)
    assert got.dtype == np.float32 and got.shape == host.shape
    assert (got.view(np.uint32) == host.view(np.uint32)).all()


# -- many rows on Hopper: bf16 weights, the wgmma GEMM ----------------------------------------


def product_model(device, enc, m, k, n, residual=False):
    kb = k // enc.elements_per_block * enc.block_size
    types = [(DType.float32, (m, k)), (DType.uint8, (n, kb))] + ([(DType.float32, (m, n))] if residual else [])
    if residual:
        return load(lambda a, b, h: h + ops.qmatmul(enc, None, a, b), types, device)
    return load(lambda a, b: ops.qmatmul(enc, None, a, b), types, device)


@pytest.mark.gpu
@encodings
@pytest.mark.parametrize("m", [9, 64, 512])
def test_gpu_qmatmul_many_rows_on_tensor_cores(hopper, rng, enc, m):
    """More than 8 rows: every encoding through the bf16 dequantize and the f32-result wgmma
    GEMM. K of an odd number of blocks (a partial 64-wide K tile for the 32-element encodings),
    N not a multiple of the 128 or 256-column tiles, M not a multiple of 128."""
    k = k_of(enc, 37 if enc.elements_per_block == 32 else 5)
    n = 300
    w = weights(rng, enc, n, k)
    lhs = (rng.standard_normal((m, k)) * rng.choice([1e-3, 1.0, 50.0], size=(m, 1))).astype(np.float32)
    # (qmatmul.qgemm=0: up to 64 rows of whole 16-byte rows would take qgemm_sm90.cu)
    with tuning.override(**{"qmatmul.qgemm": False}), tuning.record_launches() as log:
        (out,) = execute(product_model(hopper, enc, m, k, n), [lhs, w], hopper)
    # (up to 64 rows the 64-row tile's _f32 kernels)
    assert log.count("gemm_sm90p", f32=1, bm=64 if m <= 64 else 128) == 1, log.records()
    check(out, lhs, decode(enc, w), bf16_bound)


@pytest.mark.gpu
@pytest.mark.parametrize("enc", [Q.Q4_0, Q.Q6_K], ids=lambda e: e.value)
@pytest.mark.parametrize("m", [9, 512])
def test_gpu_qmatmul_many_rows_with_residual(hopper, rng, enc, m):
    """`h + qmatmul(x, W)` on many rows: the residual is added by the GEMM's f32 epilogue (no
    separate add kernel), to the bf16 product's bound plus the f32 rounding of the sum."""
    k, n = 512, 384
    w = weights(rng, enc, n, k)
    lhs = rng.standard_normal((m, k)).astype(np.float32)
    res = (rng.standard_normal((m, n)) * 10).astype(np.float32)
    with tuning.record_launches() as log:
        (out,) = execute(product_model(hopper, enc, m, k, n, residual=True), [lhs, w, res], hopper)
    kernel = "qgemm" if enc == Q.Q4_0 and m <= 64 else "gemm_sm90p"
    assert log.count(kernel) == 1 and log.count("fused") == 0, log.records()
    check(out, lhs, decode(enc, w), bf16_bound, plus=res)


@pytest.mark.gpu
def test_gpu_qmatmul_many_rows_siblings(hopper, rng):
    """A layer's q/k/v of one activation on 64 rows: one launch of the GEMM decoding Q4_0 in its
    mainloop for the three (segments of its blocks), each product right."""
    enc, k, ns, m = Q.Q4_0, 1024, (1024, 256, 256), 64
    ws = [weights(rng, enc, n, k) for n in ns]
    lhs = rng.standard_normal((m, k)).astype(np.float32)
    with tuning.override(**{"qmatmul.qgemm": True}):  # (weights this small take it up to 32 rows)
        outs, log = sibling_products(hopper, enc, ws, lhs)
    (rec,) = log.records("qgemm")
    assert rec["segments"] == len(ns), log.records()
    for out, w in zip(outs, ws):
        check(out, lhs, decode(enc, w), bf16_bound)


@pytest.mark.gpu
def test_gpu_qmatmul_weight_chunks_on_tensor_cores(hopper, rng):
    """More weight rows than one bf16 scratch chunk holds (32768 rows of K = 4096, 256 MB) on the
    dequantize + GEMM path (`qmatmul.qgemm=0`; 16 rows would take qgemm_sm90.cu): the
    GEMM of each chunk writes its column range of the result (rows N apart) and adds that range
    of the residual."""
    enc, k, n, m = Q.Q4_0, 4096, 32768 + 300, 16
    w = weights(rng, enc, n, k)
    lhs = rng.standard_normal((m, k)).astype(np.float32)
    res = rng.standard_normal((m, n)).astype(np.float32)
    with tuning.override(**{"qmatmul.qgemm": False}), tuning.record_launches() as log:
        (out,) = execute(product_model(hopper, enc, m, k, n, residual=True), [lhs, w, res], hopper)
    assert log.count("gemm_sm90p", f32=1) == 2, log.records()
    check(out, lhs, decode(enc, w), bf16_bound, plus=res)


@pytest.mark.gpu
def test_gpu_qmatmul_many_rows_simt_fallback(hopper, rng):
    """qmatmul.wgmma=0: the f32 dequantize + SIMT GEMM (the path of other GPUs), to the f32 bound."""
    enc, k, n, m = Q.Q4_K, 512, 200, 40
    w = weights(rng, enc, n, k)
    lhs = rng.standard_normal((m, k)).astype(np.float32)
    with tuning.override(**{"qmatmul.wgmma": False}), tuning.record_launches() as log:
        (out,) = execute(product_model(hopper, enc, m, k, n), [lhs, w], hopper)
    assert log.count("gemm_sm90p") == 0, log.records()
    check(out, lhs, decode(enc, w), f32_bound)


# -- 9 to 64 rows on Hopper: the quants decoded in the GEMM's mainloop -----------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("enc", [Q.Q4_0, Q.Q4_1, Q.Q8_0], ids=lambda e: e.value)
@pytest.mark.parametrize("m", [9, 17, 40, 64])
@pytest.mark.parametrize("n, blocks", [(300, 36), (4096, 128), (1024, 448), (17000, 16)])
def test_gpu_qgemm_decodes_quants_in_the_mainloop(hopper, rng, enc, m, n, blocks):
    """qgemm_sm90.cu against the float64 product: N not a multiple of its 128-row blocks, K of a
    partial 256-element chunk (Q4_1's 36 blocks; Q4_0's and Q8_0's rows are whole 16 bytes only
    at whole chunks), split-K plans (3 blocks over 4-5 chunks, 32 over 16, 8 over 56) and none (133
    blocks, as many as the SMs hold), M below and at the 64-row tile, and lhs rows of very
    different scales."""
    if enc != Q.Q4_1 and blocks % 8:
        blocks = blocks // 8 * 8
    qgemm_against_float64(hopper, rng, enc, m, n, k_of(enc, blocks))


def qgemm_against_float64(hopper, rng, enc, m, n, k):
    """One qgemm launch of m rows over random n x k weights of `enc` (forced: past 32 rows
    weights below 1536 x 1536 keep the dequantize path by default), its blocks and split-K plan
    (split unless n = 17000 fills the SMs) and its product against float64."""
    w = weights(rng, enc, n, k)
    lhs = (rng.standard_normal((m, k)) * rng.choice([1e-3, 1.0, 50.0], size=(m, 1))).astype(np.float32)
    with tuning.override(**{"qmatmul.qgemm": True}), tuning.record_launches() as log:
        (out,) = execute(product_model(hopper, enc, m, k, n), [lhs, w], hopper)
    (rec,) = log.records("qgemm")
    assert rec["blocks"] == -(-n // 128) * rec["splits"] and log.count("gemm_sm90p") == 0, log.records()
    assert (rec["splits"] == 1) == (n == 17000), rec
    check(out, lhs, decode(enc, w), bf16_bound)


@pytest.mark.gpu
@pytest.mark.parametrize("enc", [Q.Q4_K, Q.Q5_K, Q.Q6_K], ids=lambda e: e.value)
@pytest.mark.parametrize("m", [9, 17, 40, 64])
@pytest.mark.parametrize("n, blocks", [(300, 8), (4096, 16), (1024, 56), (17000, 16)])
def test_gpu_qgemm_decodes_super_blocks_in_the_mainloop(hopper, rng, enc, m, n, blocks):
    """The super-block encodings in qgemm_sm90.cu (one 256-element super-block a stage): Q4_K's
    packed 6-bit scales and mins (Q5_K's also its fifth bits), Q6_K's split 6-bit quants and
    16-element scales, its 210-byte super-blocks read from boxes at every offset into their 16
    bytes (8 and more super-blocks: rows of whole 16 bytes), against the float64 product; the
    same split-K plans and M as above."""
    qgemm_against_float64(hopper, rng, enc, m, n, k_of(enc, blocks))


@pytest.mark.gpu
@pytest.mark.parametrize("enc", [Q.Q8_0, Q.Q4_K, Q.Q5_K, Q.Q6_K], ids=lambda e: e.value)
@pytest.mark.parametrize("m", [16, 32, 64])
def test_gpu_qgemm_matches_the_dequantize_path(hopper, rng, enc, m):
    """Q8_0, Q4_K, Q5_K and Q6_K decoded in the mainloop against the dequantize + GEMM path, which
    rounds the same f32 weights to bf16: within the f32 rounding of K terms (the two sum in
    different orders; the one-hot test checks each weight exactly)."""
    k, n = 4096, 640
    w = weights(rng, enc, n, k)
    lhs = rng.standard_normal((m, k)).astype(np.float32)
    outs = []
    for on in (True, False):
        with tuning.override(**{"qmatmul.qgemm": on}), tuning.record_launches() as log:
            (out,) = execute(product_model(hopper, enc, m, k, n), [lhs, w], hopper)
        assert log.count("qgemm") == on and log.count("gemm_sm90p", f32=1) == (not on), log.records()
        outs.append(out.astype(np.float64))
    scale = np.abs(lhs.astype(np.float64)) @ np.abs(decode(enc, w).astype(np.float64)).T
    assert (np.abs(outs[0] - outs[1]) <= 4 * k * 2.0**-24 * scale + 1e-30).all()


def bf16_round(x):
    """float32 rounded to bfloat16 (to nearest, ties to even) and back, for finite x."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)


@pytest.mark.gpu
@encodings
@pytest.mark.parametrize("path", ["qgemm", "dequantize"])
@pytest.mark.parametrize("m", [16, 64])
def test_gpu_many_rows_decode_each_weight_as_the_host(hopper, rng, enc, path, m):
    """One-hot lhs rows read single weights back, so both many-row paths (the quants decoded in
    qgemm_sm90.cu's mainloop; the bf16 dequantize before the GEMM) must give every weight
    exactly: the host's dequantized value rounded to bf16. Every column of the matrix, m at a
    time in a shuffled order (K = 2048: rows of whole 16 bytes in every encoding)."""
    k, n = 2048, 300
    w = weights(rng, enc, n, k)
    want = bf16_round(decode(enc, w))
    model = product_model(hopper, enc, m, k, n)
    with tuning.override(**{"qmatmul.qgemm": path == "qgemm"}):
        for i, cols in enumerate(rng.permutation(k).reshape(-1, m)):
            lhs = np.zeros((m, k), np.float32)
            lhs[np.arange(m), cols] = 1.0
            with tuning.record_launches() as log:
                (out,) = execute(model, [lhs, w], hopper)
            if i == 0:
                kernels = (log.count("qgemm"), log.count("gemm_sm90p"))
                assert kernels == ((1, 0) if path == "qgemm" else (0, 1)), log.records()
            bad = out != want[:, cols].T  # (values: a -0.0 weight comes back as the sum's +0.0)
            assert not bad.any(), f"columns {cols[bad.any(axis=1)]}: {bad.sum()} of {bad.size} differ"


@pytest.mark.gpu
@pytest.mark.parametrize("m", [16, 64])
def test_gpu_qgemm_with_residual_matches_the_dequantize_path(hopper, rng, m):
    """The residual in qgemm's store, and its products against the dequantize + GEMM path's (the
    same bf16 weights and lhs, f32 sums in another order): within the f32 rounding of K terms."""
    enc, k, n = Q.Q4_0, 2048, 640
    w = weights(rng, enc, n, k)
    lhs = rng.standard_normal((m, k)).astype(np.float32)
    res = (rng.standard_normal((m, n)) * 10).astype(np.float32)
    model = product_model(hopper, enc, m, k, n, residual=True)
    with tuning.override(**{"qmatmul.qgemm": True}), tuning.record_launches() as log:
        (got,) = execute(model, [lhs, w, res], hopper)
    assert log.count("qgemm") == 1 and log.count("fused") == 0, log.records()
    check(got, lhs, decode(enc, w), bf16_bound, plus=res)
    with tuning.override(**{"qmatmul.qgemm": False}), tuning.record_launches() as log:
        (old,) = execute(product_model(hopper, enc, m, k, n, residual=True), [lhs, w, res], hopper)
    assert log.count("qgemm") == 0 and log.count("gemm_sm90p", f32=1) == 1, log.records()
    lhs16 = lhs.astype(np.float64)
    scale = np.abs(lhs16) @ np.abs(decode(enc, w).astype(np.float64)).T + np.abs(res)
    assert (np.abs(got.astype(np.float64) - old) <= 4 * k * 2.0**-24 * scale + 1e-30).all()


@pytest.mark.gpu
@encodings
@pytest.mark.parametrize("m", [1, 2, 5, 8])
def test_gpu_qgemm_on_few_rows(hopper, rng, enc, m):
    """1-8 rows on qgemm_sm90.cu where `qmatmul.qgemm_min_rows` sends them there (its 16-row
    tile, the rows past m reading zeros): one launch, against the float64 product, and its
    siblings as one launch."""
    k, n = 4096, 1000
    w = weights(rng, enc, n, k)
    lhs = (rng.standard_normal((m, k)) * rng.choice([1e-3, 1.0, 50.0], size=(m, 1))).astype(np.float32)
    with tuning.override(**{"qmatmul.qgemm_min_rows": 1}), tuning.record_launches() as log:
        (out,) = execute(product_model(hopper, enc, m, k, n), [lhs, w], hopper)
    (rec,) = log.records("qgemm")
    assert rec["rows"] == 16 and log.count("qgemv") == 0, log.records()
    check(out, lhs, decode(enc, w), bf16_bound)
    ws = [weights(rng, enc, rows, k) for rows in (512, 128, 128)]
    # (forced: below 9 rows weights under 1536 x 1536 keep the GEMVs by default)
    with tuning.override(**{"qmatmul.qgemm_min_rows": 1, "qmatmul.qgemm": True}):
        outs, log = sibling_products(hopper, enc, ws, lhs)
    (rec,) = log.records("qgemm")
    assert rec["segments"] == 3 and log.count("qgemv") == 0, log.records()
    for out, w in zip(outs, ws):
        check(out, lhs, decode(enc, w), bf16_bound)


@pytest.mark.gpu
@pytest.mark.parametrize("enc", [Q.Q4_0, Q.Q5_K, Q.Q6_K], ids=lambda e: e.value)
@pytest.mark.parametrize("m", [4, 9, 24, 40])
@pytest.mark.parametrize("n", [600, 17000])
def test_gpu_qgemm_gated_pair(hopper, rng, enc, m, n):
    """silu(x W_gate^T) * (x W_up^T) of a quantized MLP on many rows (the folded gated step):
    one qgemm launch storing the product of the two, each block 64 rows of both weights (N not
    a multiple of them; split over K or, at N = 17000, not; 4 rows by `qmatmul.qgemm_min_rows`),
    to the bf16 bounds of the two products carried through silu and the product."""
    from test_gpu_qmatmul_norm import normed_products

    k = 2048  # (Q6_K: rows of whole 16 bytes)
    ws = [weights(rng, enc, n, k) for _ in range(2)]
    # (the K-quants' random blocks decode to weights ~500 times Q4_0's: products in silu's bend alike)
    x = (rng.standard_normal((m, k)) / (8 if enc == Q.Q4_0 else 4096)).astype(np.float32)
    knobs = {"fusion.quantized": True, "fusion.gated_gemv": True, "qmatmul.qgemm": True, "qmatmul.qgemm_min_rows": 1}
    with tuning.override(**knobs):
        model = normed_products(hopper, enc, DType.float32, None, ws, m, gated=True)
        with tuning.record_launches() as log:
            (out,) = execute(model, [x], hopper)
    (rec,) = log.records("qgemm")
    assert rec["gated"] == 1 and log.count("fused") == 0, log.records()
    assert (rec["splits"] == 1) == (n == 17000), rec
    x64 = x.astype(np.float64)
    w64 = [decode(enc, w).astype(np.float64) for w in ws]
    (g, u), (eg, eu) = zip(*[(x64 @ w.T, bf16_bound(x64, w, k)) for w in w64])
    silu = g / (1 + np.exp(-g))
    ref = silu * u
    tol = 1.1 * eg * np.abs(u) + np.abs(silu) * eu + eg * eu + 2.0**-21 * np.abs(ref)
    err = np.abs(out.astype(np.float64) - ref)
    bad = err > tol + 1e-30
    assert not bad.any(), f"{bad.sum()} of {bad.size} wrong; worst {err.max()}"


# -- 1 to 8 rows: the GEMV kernels -------------------------------------------------------------


@pytest.mark.gpu
@encodings
@pytest.mark.parametrize("m", [1, 2, 3, 4, 8])
def test_gpu_qmatmul_few_rows(gpu, rng, enc, m):
    """Decode rows through whichever GEMV kernel the shape takes (tensor-core for 1-8 rows of
    4-bit weights, streaming, general), to the f32 bound: 16-byte aligned rows of 4096 elements
    (the 8B model's K), and an odd number of blocks (rows not 16-byte aligned)."""
    for blocks in (4096 // enc.elements_per_block, 37 if enc.elements_per_block == 32 else 3):
        k, n = k_of(enc, blocks), 333
        w = weights(rng, enc, n, k)
        lhs = rng.standard_normal((m, k)).astype(np.float32)
        (out,) = execute(product_model(gpu, enc, m, k, n), [lhs, w], gpu)
        check(out, lhs, decode(enc, w), f32_bound)


@pytest.mark.gpu
@pytest.mark.parametrize("n,k", [(333, 14336), (2000, 2048), (48, 4096)])
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_gpu_q6k_one_row_on_tensor_cores(hopper, rng, n, k, residual):
    """One row of Q6_K over 16-byte rows (K a multiple of 2048: a Q4_K_M model's output and
    down projections): the tensor-core GEMV (scales per 16 elements, 210-byte super-blocks read
    as 224-byte boxes), to the f32 bound, with and without a residual added; two rows take the
    general kernel."""
    w = weights(rng, Q.Q6_K, n, k)
    for m in (1, 2):
        lhs = rng.standard_normal((m, k)).astype(np.float32)
        res = rng.standard_normal((m, n)).astype(np.float32) * 10 if residual else None
        with tuning.record_launches() as log:
            (out,) = execute(product_model(hopper, Q.Q6_K, m, k, n, residual), [lhs, w] + ([res] if residual else []), hopper)
        (rec,) = log.records("qgemv")
        assert rec["mma"] == (m == 1), rec
        check(out, lhs, decode(Q.Q6_K, w), f32_bound, plus=res)


@pytest.mark.gpu
@pytest.mark.parametrize("enc", [Q.Q4_0, Q.Q4_1, Q.Q4_K], ids=lambda e: e.value)
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("ns", [(4096, 1024, 1024), (1000, 333)], ids=["qkv", "odd"])
def test_gpu_mma_siblings_share_one_launch(hopper, rng, enc, m, ns):
    """A layer's q/k/v (or gate/up) of one activation at 1-8 rows: one launch of the
    tensor-core GEMV serves them all (a segment per weight), every output to the f32 bound;
    row counts not a multiple of the 16-row tiles."""
    k = 1024
    ws = [weights(rng, enc, n, k) for n in ns]
    lhs = rng.standard_normal((m, k)).astype(np.float32)
    outs, log = sibling_products(hopper, enc, ws, lhs)
    assert log.count("qgemv", mma=1, segments=len(ns)) == 1 and log.count("qgemv") == 1, log.records()
    for out, w in zip(outs, ws):
        check(out, lhs, decode(enc, w), f32_bound)


@pytest.mark.gpu
@pytest.mark.parametrize("enc", [Q.Q4_0, Q.Q4_K], ids=lambda e: e.value)
@pytest.mark.parametrize("m,k", [(1, 14336), (1, 1280), (8, 4096), (3, 2048)])
def test_gpu_mma_weight_stages_change_no_bits(hopper, rng, enc, m, k):
    """The tensor-core GEMV's ring of weight stages per warp (2 to 4, `qgemv.stages`; unset: 2,
    3 at one row, or more where they cost no block per SM on an H200: the 2-block 3-4-row and
    1-block 5-8-row kernels) moves no sum: every count gives the same bits, within
    the f32 bound."""
    n = 333
    w = weights(rng, enc, n, k)
    lhs = rng.standard_normal((m, k)).astype(np.float32)
    model = product_model(hopper, enc, m, k, n)
    outs = {}
    for st in (None, 2, 3, 4):
        with tuning.override(**({"qgemv.stages": st} if st else {})), tuning.record_launches() as log:
            (outs[st],) = execute(model, [lhs, w], hopper)
        (rec,) = log.records("qgemv")
        assert rec["mma"] == 1 and rec["stages"] == (st or rec["stages"]), rec
        if st is None:
            auto = rec["stages"]
    assert auto == {(1, 14336): 3, (1, 1280): 3, (8, 4096): 4, (3, 2048): 4}.get((m, k), 2), auto
    check(outs[None], lhs, decode(enc, w), f32_bound)
    for st in (2, 3, 4):
        np.testing.assert_array_equal(outs[st], outs[None])


@pytest.mark.gpu
@pytest.mark.parametrize("enc", [Q.Q4_0, Q.Q4_1, Q.Q4_K], ids=lambda e: e.value)
@pytest.mark.parametrize("m,k", [(1, 4096), (1, 14336), (2, 1280), (3, 640), (8, 2048)])
def test_gpu_mma_clusters_change_no_bits(hopper, rng, enc, m, k):
    """The two CTAs of a thread block cluster share the tensor-core GEMV's lhs preparation
    (`qgemv.cluster=2`; unset: where K times the kernel's rows is at least 12288): each turns a
    run of whole 32-element units into fragments and copies it into the other's shared memory
    (20 to 448 units: runs of 10 to 224). Both sizes give the same bits, within the
    f32 bound, and a grid of one block takes no cluster, nor Q4_K's kernels for 2 rows (built
    without)."""
    if k == 640 and enc != Q.Q4_1:
        # (Q4_0 rows are 16-byte aligned at multiples of 8 units only, Q4_K's are super-blocks)
        k = 1024 if enc == Q.Q4_0 else 768
    n = 2000
    w = weights(rng, enc, n, k)
    lhs = rng.standard_normal((m, k)).astype(np.float32)
    model = product_model(hopper, enc, m, k, n)
    outs = {}
    rows = {1: 1, 2: 2, 3: 4, 4: 4}.get(m, 8)  # the kernel's lhs rows
    for c in (None, 1, 2):
        with tuning.override(**({"qgemv.cluster": c} if c else {})), tuning.record_launches() as log:
            (outs[c],) = execute(model, [lhs, w], hopper)
        (rec,) = log.records("qgemv")
        # (Q4_K's 2-row kernels are built without clusters)
        want = 1 if enc == Q.Q4_K and m == 2 else c or (2 if k * rows >= 12288 else 1)
        assert rec["mma"] == 1 and rec["cluster"] == want and rec["blocks"] % want == 0, rec
    check(outs[None], lhs, decode(enc, w), f32_bound)
    for c in (1, 2):
        np.testing.assert_array_equal(outs[c], outs[None])
    # one tile of 16 rows at one K part: a grid of one block, no cluster
    small = weights(rng, enc, 16, k)
    with tuning.override(**{"qgemv.cluster": 2, "qgemv.split": 1}), tuning.record_launches() as log:
        (out,) = execute(product_model(hopper, enc, m, k, 16), [lhs, small], hopper)
    (rec,) = log.records("qgemv")
    assert rec["blocks"] == 1 and rec["cluster"] == 1, rec
    check(out, lhs, decode(enc, small), f32_bound)
