"""The streaming GEMV (kernels/qgemv_stream.cu) over weight rows off 16 bytes (whole 4-byte
words: each row's head and tail copied word by word beside the bulk copy of its aligned middle)
and over K of one chunk, whose lhs it stages once, normalised where the RMSNorm before the
product folds into it: a vocabulary projection's shape (SmolLM2's tied Q8_0 embeddings, 49152
x 576, rows of 612 bytes). Checked on a GPU with fresh random inputs against numpy float64 for
Q8_0, Q4_0 and Q4_1 (every start of a row modulo 16 that whole words allow), 1-8 rows, f32 /
bf16 / f16, with a residual, a capped grid (several row groups per block) and row counts that
leave a partial group (qgemv.mma off: one row of Q8_0 would take the tile kernel); the folded
norm equal bit for bit to the unfused graph (the rms_norm kernel, then the product)."""

import ml_dtypes
import numpy as np
import pytest

from engine_util import session
from test_quant import check_product, dequantized, execute, on, quantized
from max import tuning
from max.dtype import DType
from max.graph import DeviceRef, Graph, Weight, ops
from max.graph.quantization import QuantizationEncoding as Q
from max.nn import kernels

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _no_tile_kernel():
    """One row of Q8_0 of K <= 960 takes the tensor-core tile kernel by default
    (test_gpu_qgemv_mma_tile.py); here it streams as with that kernel off."""
    with tuning.override(**{"qgemv.mma": False}):
        yield

NP = {DType.float32: np.float32, DType.bfloat16: ml_dtypes.bfloat16, DType.float16: np.float16}
ROUND = {DType.float32: 0.0, DType.bfloat16: 2.0**-8, DType.float16: 2.0**-10}
EPS = 1e-5
# (encoding, K): Q8_0 rows of 612 (K = 576) and 1020 bytes (K = 960: one chunk) and 1700 (two
# chunks); Q4_0 324 and 900; Q4_1 360 (rows 8 bytes off 16) and 1000
CASES = [(Q.Q8_0, 576), (Q.Q8_0, 960), (Q.Q8_0, 1600), (Q.Q4_0, 576), (Q.Q4_0, 1600), (Q.Q4_1, 576), (Q.Q4_1, 1600)]
# rows enough to count as large weights (select_path's SMALL_WEIGHTS) and a last partial group
N = 12289


def product(device, enc, k, n, m, dtype, residual=False, gamma=None):
    """`x @ W^T` (+ `h`) for W [n, k] of `enc`, with rms_norm(x, gamma) first when given."""
    where = DeviceRef.from_device(device)
    weight = Weight("w", DType.uint8, (n, k // enc.elements_per_block * enc.block_size), where,
                    quantization_encoding=enc)
    types = [(dtype, (m, k))] + ([(dtype, (m, n))] if residual else [])
    with Graph("head", input_types=on(device, types)) as g:
        x = g.inputs[0].tensor
        if gamma is not None:
            x = kernels.rms_norm(x, ops.constant(gamma, dtype, where), EPS)
        y = ops.qmatmul(enc, None, x, weight)
        g.output(g.inputs[1].tensor + y if residual else y)
    return g


def run(device, g, w, inputs):
    model = session(device).load(g, weights_registry={"w": w})
    with tuning.record_launches() as log:
        outs = execute(model, inputs, device)
    return outs[0], log.records("qgemv")


def within(got, lhs, w, dtype, plus=None):
    """check_product's f32 bound plus one rounding to dtype of the result (and of the residual's
    sum)."""
    lhs64, w64 = lhs.astype(np.float64), w.astype(np.float64)
    ref = lhs64 @ w64.T + (0 if plus is None else plus.astype(np.float64))
    bound = 2 * lhs.shape[-1] * 2.0**-24 * (np.abs(lhs64) @ np.abs(w64).T) + 2 * ROUND[dtype] * np.abs(ref)
    err = np.abs(got.astype(np.float64) - ref)
    assert (err <= bound + 1e-30).all(), f"{(err > bound).sum()} wrong; worst {err.max()}"


@pytest.mark.parametrize("enc,k", CASES, ids=lambda c: getattr(c, "value", str(c)))
def test_rows_off_16_bytes_match_float64(hopper, rng, enc, k):
    w = quantized(rng, enc, N, k)
    assert w.shape[1] % 16 != 0 and w.shape[1] % 4 == 0
    deq = dequantized(enc, w)
    for m in (1, 2, 3, 8):
        lhs = rng.standard_normal((m, k)).astype(np.float32)
        out, recs = run(hopper, product(hopper, enc, k, N, m, DType.float32), w, [lhs])
        assert [r["streaming"] for r in recs] == [1], recs
        # the first stages of constant weights copied before the PDL wait where K is one chunk
        assert [r["early"] for r in recs] == [int(k <= 1024)], recs
        check_product(out, lhs, deq, enc, hopper, bf16=False)


@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float16], ids=lambda d: d.name)
@pytest.mark.parametrize("enc,k", [(Q.Q8_0, 576), (Q.Q4_1, 1600)], ids=lambda c: getattr(c, "value", str(c)))
def test_16_bit_activations_and_a_residual(hopper, rng, dtype, enc, k):
    w = quantized(rng, enc, N, k)
    deq = dequantized(enc, w)
    for m in (1, 2):
        lhs = (rng.standard_normal((m, k)) / 8).astype(NP[dtype])
        h = rng.standard_normal((m, N)).astype(NP[dtype])
        out, recs = run(hopper, product(hopper, enc, k, N, m, dtype, residual=True), w, [lhs, h])
        assert [r["streaming"] for r in recs] == [1], recs
        assert out.dtype == NP[dtype]
        within(out, lhs, deq, dtype, plus=h)


def test_a_capped_grid_gives_the_same_bits(hopper, rng):
    """Three blocks take every row group of 12289 rows in turn (qgemv.grid=3): the ring runs on
    across groups; the bits equal the full grid's, with the first stages copied before the PDL
    wait (the default) and after it (qgemv.early_weights=0)."""
    enc, k = Q.Q8_0, 576
    w = quantized(rng, enc, N, k)
    lhs = rng.standard_normal((2, k)).astype(np.float32)
    full, recs = run(hopper, product(hopper, enc, k, N, 2, DType.float32), w, [lhs])
    assert recs[0]["early"] == 1, recs
    for spec in ({"qgemv.grid": 3}, {"qgemv.grid": 3, "qgemv.early_weights": False}, {"qgemv.early_weights": False}):
        with tuning.override(**spec):
            got, recs = run(hopper, product(hopper, enc, k, N, 2, DType.float32), w, [lhs])
        assert (recs[0]["blocks"] == 3) == ("qgemv.grid" in spec), recs
        assert recs[0]["early"] == int("qgemv.early_weights" not in spec), recs
        np.testing.assert_array_equal(got, full)


@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16, DType.float16], ids=lambda d: d.name)
@pytest.mark.parametrize("enc,k", [(Q.Q8_0, 576), (Q.Q8_0, 960), (Q.Q4_0, 576)], ids=lambda c: getattr(c, "value", str(c)))
def test_the_final_norm_folds_into_one_chunk(hopper, rng, dtype, enc, k):
    """rms_norm -> the vocabulary projection at 1-2 rows: one streaming launch with the norm
    folded, equal bit for bit to the rms_norm kernel followed by the product
    (fusion.norm_gemv=0), and within float64's bound of the normalised product."""
    w = quantized(rng, enc, N, k)
    deq = dequantized(enc, w)
    for m in (1, 2):
        x = (rng.standard_normal((m, k)) * 3).astype(NP[dtype])
        gamma = (1 + rng.standard_normal(k) / 4).astype(NP[dtype])
        g = product(hopper, enc, k, N, m, dtype, gamma=gamma)
        out, recs = run(hopper, g, w, [x])
        assert len(recs) == 1 and recs[0]["streaming"] == 1 and recs[0]["norm"] == 1, recs
        with tuning.override(**{"fusion.norm_gemv": False}):
            plain, recs = run(hopper, product(hopper, enc, k, N, m, dtype, gamma=gamma), w, [x])
        assert [r.get("norm", 0) for r in recs] == [0], recs
        np.testing.assert_array_equal(out.view(np.uint8), plain.view(np.uint8))
        x64 = x.astype(np.float64)
        n = x64 / np.sqrt(np.mean(x64 * x64, -1, keepdims=True) + EPS) * gamma.astype(np.float64)
        ref = n @ deq.astype(np.float64).T
        bound = ((ROUND[dtype] + 2 * k * 2.0**-24) * (np.abs(n) @ np.abs(deq.astype(np.float64)).T)
                 + 2 * ROUND[dtype] * np.abs(ref) + 1e-30)
        err = np.abs(out.astype(np.float64) - ref)
        assert (err <= bound).all(), f"m={m}: {(err > bound).sum()} wrong; worst {err.max()}"
