"""The tensor-core GEMV for one row of short Q8_0 rows (kernels/qgemv_mma_tile.cu): a tile of 16
rows (rows off 16 bytes allowed) is one bulk copy, the lhs goes through qgemv_mma.cu's fixed
point, the signed quants into integer mmas. Checked on a Hopper GPU with fresh random inputs
against numpy float64: K = 64 to 960 (rows 4, 8 or 12 bytes off 16, and on 16), last tiles of one
to sixteen rows (tail words copied beside the bulk copy, or none), f32 / bf16 / f16 activations
with a residual, a capped grid (several tiles per warp, the ring wrapping) equal bit for bit to the full
grid with and without the early copies, and the folded RMSNorm of a vocabulary projection equal
bit for bit to the rms_norm kernel followed by the product."""

import numpy as np
import pytest

from test_gpu_qgemv_stream_rows import EPS, NP, ROUND, product, run, within
from test_quant import check_product, dequantized, quantized
from max import tuning
from max.dtype import DType
from max.graph.quantization import QuantizationEncoding as Q

pytestmark = pytest.mark.gpu

# (K, rows): SmolLM2's output projection's K (612-byte rows, 4 bytes off 16), Qwen2.5-0.5B's
# (952, 8 off), one chunk of qgemv.cu (1020, 12 off), a row of 64 (68 bytes), rows on 16 bytes
# (K = 512: 544); last tiles of 1, 3, 15, 1 and 16 rows (tails of 1, 2, 1 and 1 words after the
# bulk copy, none), and of 3 and 4 rows of 612 bytes (a tail of 3 words; the bulk copy alone)
CASES = [(576, 12289), (896, 7683), (960, 8207), (64, 4096 * 24 + 1), (512, 12288), (576, 12291), (576, 12292)]


def test_one_row_matches_float64(hopper, rng):
    for k, n in CASES:
        w = quantized(rng, Q.Q8_0, n, k)
        deq = dequantized(Q.Q8_0, w)
        lhs = (rng.standard_normal((1, k)) * rng.choice([1e-3, 1.0, 50.0], size=(1, k))).astype(np.float32)
        with tuning.override(**{"qgemv.mma": True}):  # (K = 64: small weights)
            out, recs = run(hopper, product(hopper, Q.Q8_0, k, n, 1, DType.float32), w, [lhs])
        assert [(r["tile"], r["early"]) for r in recs] == [(1, 1)], recs
        assert recs[0]["stages"] == 1, recs
        check_product(out, lhs, deq, Q.Q8_0, hopper, bf16=False)


@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float16], ids=lambda d: d.name)
def test_16_bit_activations_and_a_residual(hopper, rng, dtype):
    k, n = 576, 12289
    w = quantized(rng, Q.Q8_0, n, k)
    deq = dequantized(Q.Q8_0, w)
    lhs = (rng.standard_normal((1, k)) / 8).astype(NP[dtype])
    h = rng.standard_normal((1, n)).astype(NP[dtype])
    out, recs = run(hopper, product(hopper, Q.Q8_0, k, n, 1, dtype, residual=True), w, [lhs, h])
    assert [r["tile"] for r in recs] == [1], recs
    assert out.dtype == NP[dtype]
    within(out, lhs, deq, dtype, plus=h)


def test_a_capped_grid_gives_the_same_bits(hopper, rng):
    """Three blocks take every tile in turn (qgemv.grid=3: 24 warps, 32 tiles each, the ring of
    one stage refilled 32 times, or of two wrapping 16 times); the bits equal the full grid's,
    with the first stages copied before the PDL wait (the default) and after it
    (qgemv.early_weights=0), with one stage a warp (the default) and two (qgemv.stages=2)."""
    k, n = 576, 12289
    w = quantized(rng, Q.Q8_0, n, k)
    lhs = rng.standard_normal((1, k)).astype(np.float32)
    full, recs = run(hopper, product(hopper, Q.Q8_0, k, n, 1, DType.float32), w, [lhs])
    assert recs[0]["tile"] == 1 and recs[0]["early"] == 1 and recs[0]["blocks"] > 3, recs
    specs = ({"qgemv.grid": 3}, {"qgemv.grid": 3, "qgemv.early_weights": False}, {"qgemv.early_weights": False},
             {"qgemv.stages": 2}, {"qgemv.grid": 3, "qgemv.stages": 2})
    for spec in specs:
        with tuning.override(**spec):
            got, recs = run(hopper, product(hopper, Q.Q8_0, k, n, 1, DType.float32), w, [lhs])
        assert (recs[0]["blocks"] == 3) == ("qgemv.grid" in spec), recs
        assert recs[0]["early"] == int("qgemv.early_weights" not in spec), recs
        assert recs[0]["stages"] == spec.get("qgemv.stages", 1), recs
        np.testing.assert_array_equal(got, full)


def test_the_streaming_kernel_agrees_within_rounding(hopper, rng):
    """The tile kernel (fixed-point lhs) and qgemv_stream.cu (f32 lhs) on the same product: both
    within a K-term f32 dot product's bound of float64, so within twice that of each other."""
    k, n = 576, 12289
    w = quantized(rng, Q.Q8_0, n, k)
    deq = dequantized(Q.Q8_0, w).astype(np.float64)
    lhs = rng.standard_normal((1, k)).astype(np.float32)
    tile, recs = run(hopper, product(hopper, Q.Q8_0, k, n, 1, DType.float32), w, [lhs])
    assert recs[0]["tile"] == 1, recs
    with tuning.override(**{"qgemv.mma": False}):
        stream, recs = run(hopper, product(hopper, Q.Q8_0, k, n, 1, DType.float32), w, [lhs])
    assert recs[0]["streaming"] == 1, recs
    bound = 4 * k * 2.0**-24 * (np.abs(lhs.astype(np.float64)) @ np.abs(deq).T)
    assert (np.abs(tile.astype(np.float64) - stream) <= bound + 1e-30).all()


@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16, DType.float16], ids=lambda d: d.name)
def test_the_final_norm_folds_in(hopper, rng, dtype):
    """rms_norm -> the vocabulary projection at one row: one tile launch with the norm folded,
    equal bit for bit to the rms_norm kernel followed by the product (fusion.norm_gemv=0), and
    within float64's bound of the normalised product."""
    k, n = 576, 12289
    w = quantized(rng, Q.Q8_0, n, k)
    deq = dequantized(Q.Q8_0, w).astype(np.float64)
    x = (rng.standard_normal((1, k)) * 3).astype(NP[dtype])
    gamma = (1 + rng.standard_normal(k) / 4).astype(NP[dtype])
    out, recs = run(hopper, product(hopper, Q.Q8_0, k, n, 1, dtype, gamma=gamma), w, [x])
    assert [(r["tile"], r["norm"]) for r in recs] == [(1, 1)], recs
    with tuning.override(**{"fusion.norm_gemv": False}):
        plain, recs = run(hopper, product(hopper, Q.Q8_0, k, n, 1, dtype, gamma=gamma), w, [x])
    assert [(r.get("tile", 0), r.get("norm", 0)) for r in recs] == [(1, 0)], recs
    np.testing.assert_array_equal(out.view(np.uint8), plain.view(np.uint8))
    x64 = x.astype(np.float64)
    nx = x64 / np.sqrt(np.mean(x64 * x64, -1, keepdims=True) + EPS) * gamma.astype(np.float64)
    ref = nx @ deq.T
    bound = (ROUND[dtype] + 2 * k * 2.0**-24) * (np.abs(nx) @ np.abs(deq).T) + 2 * ROUND[dtype] * np.abs(ref) + 1e-30
    assert (np.abs(out.astype(np.float64) - ref) <= bound).all()


def test_a_nan_in_the_lhs_gives_nan_rows(hopper, rng):
    k, n = 576, 12289
    w = quantized(rng, Q.Q8_0, n, k)
    lhs = rng.standard_normal((1, k)).astype(np.float32)
    lhs[0, 100] = np.nan
    out, recs = run(hopper, product(hopper, Q.Q8_0, k, n, 1, DType.float32), w, [lhs])
    assert recs[0]["tile"] == 1 and np.isnan(out).all(), recs

