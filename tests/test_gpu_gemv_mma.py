"""The tensor-core GEMV of 2-16 rows (gemv_mma.cu): linear layers reading W [n, k] as stored, the
weights streamed into mma.sync with K walked in the order the 16-byte loads bring it. Checked
against numpy float64 for bf16/f16 at every row count it takes (gemv_mma.min_rows=1 sends one
row there too), N not a multiple of the 16-row tile, K a multiple of 8 but not of the 64-column
chunk, every split of K between warps, sibling projections in one launch, the fused epilogue
(bias, activation, residual) and the gated MLP's act(gate) * up; a row's bits not depending on
the other rows of its batch; and that the kernel ran. Every test skips without a GPU."""

import ml_dtypes
import numpy as np
import pytest

from engine_util import session
from max import tuning
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops

from test_gpu_matmul_wt import DTYPES, EPS_ACC, EPS_OUT, check, execute, product, rand

pytestmark = pytest.mark.gpu
GPU = DeviceRef.GPU()


def wt_model(gpu, dtype, n, k):
    with Graph("wt", input_types=[TensorType(dtype, ("m", k), GPU), TensorType(dtype, (n, k), GPU)]) as g:
        x, w = g.inputs
        g.output(ops.matmul(x, ops.transpose(w, 0, 1)))
    return session(gpu).load(g)


def kernels_run(log):
    return [r["kernel"] for r in log.records("gemv_mma")]


@pytest.mark.parametrize("k,n", [(4096, 1024), (136, 7), (1032, 33), (8, 300), (2056, 16)])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_every_row_count_against_float64(rng, gpu, dtype, k, n):
    with tuning.override(**{"gemv_mma.min_rows": 1}):
        model = wt_model(gpu, dtype, n, k)
        w = rand(rng, (n, k), dtype)
        for m in range(1, 17):
            a = rand(rng, (m, k), dtype)
            with tuning.record_launches() as log:
                (out,) = execute(model, gpu, a, w)
            assert kernels_run(log) == [f"gemv_mma_{'bf16' if dtype is DType.bfloat16 else 'f16'}_n{1 if m <= 8 else 2}"]
            check(out, *product(a, w), dtype, f"{dtype.name} m={m} k={k} n={n}")


@pytest.mark.parametrize("k", [1096, 136])  # 18 chunks: unequal shares; 3: idle parts
@pytest.mark.parametrize("parts", [1, 2, 4, 8])
def test_every_split_of_k(rng, gpu, parts, k):
    dtype, n = DType.bfloat16, 72
    with tuning.override(**{"gemv_mma.parts": parts}):
        model = wt_model(gpu, dtype, n, k)
        w = rand(rng, (n, k), dtype)
        for m in (5, 16):
            a = rand(rng, (m, k), dtype)
            with tuning.record_launches() as log:
                (out,) = execute(model, gpu, a, w)
            assert [r["parts"] for r in log.records("gemv_mma")] == [parts]
            check(out, *product(a, w), dtype, f"parts={parts} m={m}")


def test_default_rows_and_the_other_paths(rng, gpu):
    """By default 2-16 rows take the kernel; one row stays with gemv_nt, 17 and up with the
    GEMMs, and min_rows=17 turns it off."""
    dtype, k, n = DType.bfloat16, 512, 256
    model = wt_model(gpu, dtype, n, k)
    w = rand(rng, (n, k), dtype)
    for m, ran in [(1, False), (2, True), (4, True), (16, True), (17, False)]:
        a = rand(rng, (m, k), dtype)
        with tuning.record_launches() as log:
            (out,) = execute(model, gpu, a, w)
        assert bool(kernels_run(log)) == ran, m
        check(out, *product(a, w), dtype, f"m={m}")
    with tuning.override(**{"gemv_mma.min_rows": 17}):
        off = wt_model(gpu, dtype, n, k)
        with tuning.record_launches() as log:
            execute(off, gpu, rand(rng, (8, k), dtype), w)
        assert kernels_run(log) == []


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_a_row_gets_the_same_bits_in_any_batch(rng, gpu, dtype):
    k, n = 2048, 96
    w = rand(rng, (n, k), dtype)
    a = rand(rng, (16, k), dtype)
    with tuning.override(**{"gemv_mma.min_rows": 1}):
        model = wt_model(gpu, dtype, n, k)
        with tuning.record_launches() as log:
            (whole,) = execute(model, gpu, a, w)
        assert kernels_run(log) == [f"gemv_mma_{'bf16' if dtype is DType.bfloat16 else 'f16'}_n2"]
        for m in (1, 3, 8, 9, 13):
            (part,) = execute(model, gpu, a[:m], w)
            assert np.array_equal(part.view(np.uint16), whole[:m].view(np.uint16)), m


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_siblings_and_the_epilogue(rng, gpu, dtype):
    """q, k, v and a fourth projection of one x (constant weights: under PDL) in one launch, the
    first two ending in partial tiles; a product with bias, silu and a residual in another."""
    k, sizes = 264, [200, 72, 64, 40]
    weights = [rand(rng, (n, k), dtype) for n in sizes]
    wb, bias = rand(rng, (200, k), dtype), rand(rng, (200,), dtype)
    types = [TensorType(dtype, ("m", k), GPU), TensorType(dtype, ("m", 200), GPU)]
    with Graph("qkv", input_types=types) as g:
        x, res = g.inputs
        outs = [ops.matmul(x, ops.constant(w, dtype, GPU).T) for w in weights]
        y = ops.matmul(x, ops.constant(wb, dtype, GPU).T) + ops.constant(bias, dtype, GPU)
        g.output(*outs, ops.silu(y) + res)
    model = session(gpu).load(g)
    for m in (5, 8, 12, 16):
        a, r = rand(rng, (m, k), dtype), rand(rng, (m, 200), dtype)
        with tuning.record_launches() as log:
            got = execute(model, gpu, a, r)
        assert len(kernels_run(log)) == 2, kernels_run(log)
        assert [rec["pdl"] for rec in log.records("gemv_mma")] == [1, 1]
        for i, (out, w) in enumerate(zip(got, weights)):
            check(out, *product(a, w), dtype, f"{dtype.name} m={m} projection {i}")
        p, mag = product(a, wb)
        z = p + bias.astype(np.float64)
        ref = z / (1 + np.exp(-z)) + r.astype(np.float64)
        check(got[-1], ref, mag + np.abs(r.astype(np.float64)), dtype, f"{dtype.name} m={m} epilogue")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_the_gated_mlp(rng, gpu, dtype):
    """silu(x @ Wg^T) * (x @ Wu^T) as one launch, 8 rows of each weight per tile."""
    k, ffn = 520, 300
    wg, wu = rand(rng, (ffn, k), dtype), rand(rng, (ffn, k), dtype)
    with Graph("mlp", input_types=[TensorType(dtype, ("m", k), GPU)]) as g:
        (x,) = g.inputs
        gate = ops.matmul(x, ops.constant(wg, dtype, GPU).T)
        up = ops.matmul(x, ops.constant(wu, dtype, GPU).T)
        g.output(ops.silu(gate) * up)
    model = session(gpu).load(g)
    for m in (5, 8, 11, 16):
        a = rand(rng, (m, k), dtype)
        with tuning.record_launches() as log:
            (out,) = execute(model, gpu, a)
        assert [n.endswith("_gated") for n in kernels_run(log)] == [True], kernels_run(log)
        gp, gmag = product(a, wg)
        up, umag = product(a, wu)
        s = gp / (1 + np.exp(-gp))
        # act(gate) and up each rounded once before their product, which rounds again
        bound = 1.1 * gmag * np.abs(up) + np.abs(s) * umag
        ref = s * up
        tol = 3 * EPS_OUT[dtype] * np.abs(ref) + EPS_ACC * bound + 1e-6
        got = np.asarray(out).astype(np.float64)
        assert (np.abs(got - ref) <= tol).all(), f"{dtype.name} m={m}: {np.max(np.abs(got - ref) - tol)}"


@pytest.mark.parametrize("k", [576, 2056])
@pytest.mark.parametrize("post", [True, False], ids=["postnorm", "norm"])
def test_a_decoder_layer_with_its_norms(rng, gpu, k, post):
    """test_gpu_norm_gemv.py's layer (rms_norm -> q, k, v; rms_norm -> silu(gate) * up; down +
    residual) at 2-16 rows, its norms folded either way (fusion.norm_gemv_max_k): at 2-4 rows
    the folds stay gemv_nt.cu's and only the down projection takes the kernel; at more the
    rms_norm kernel runs first and q, k and v (one launch), the gated pair and the down
    projection take it. Against float64."""
    from test_gpu_norm_gemv import check as layer_check
    from test_gpu_norm_gemv import layer, reference, run, weights

    dtype = DType.bfloat16
    ws = weights(rng, dtype, k, 72, 24, 200)
    with tuning.override(**{"fusion.norm_gemv_max_k": 8 if post else 4096}):
        model = session(gpu).load(layer(dtype, k, ws))
    for m in (2, 4, 5, 8, 9, 16):
        x = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
        h = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
        with tuning.record_launches() as log:
            got = run(model, gpu, x, h)
        nt = 1 if m <= 8 else 2
        suffixes = [""] if m <= 4 else ["", "_gated", ""]
        assert kernels_run(log) == [f"gemv_mma_bf16_n{nt}{s}" for s in suffixes], kernels_run(log)
        refs, bounds = reference(x, h, ws)
        for i, (o, r, b) in enumerate(zip(got, refs, bounds)):
            layer_check(o, r, b, dtype, f"k={k} m={m} output {i}")


@pytest.mark.parametrize("m", [1, 3, 8, 16])
def test_a_weight_computed_just_before_is_read_after_it(rng, gpu, m):
    """x @ transpose(y @ z^T): the second product's "weight" is the first one's result, which
    the first kernel writes after it lets the next launch start (PDL). The GEMVs read weights
    before their griddepcontrol.wait, so a product whose weight is computed at run time must
    launch without PDL (GemmEpilogue::const_weights, whose flag the runtime's unit tests
    check); the values here show that it reads the weight as written, call after call."""
    dtype, j, n, k = DType.bfloat16, 264, 16, 512
    types = [TensorType(dtype, (m, k), GPU), TensorType(dtype, (n, j), GPU), TensorType(dtype, (k, j), GPU)]
    with Graph("chain", input_types=types) as g:
        x, y, z = g.inputs
        w = ops.matmul(y, ops.transpose(z, 0, 1))  # [n, k], 16 rows: a GEMV launch
        g.output(ops.matmul(x, ops.transpose(w, 0, 1)))
    model = session(gpu).load(g)
    for _ in range(3):
        x, y, z = rand(rng, (m, k), dtype), rand(rng, (n, j), dtype), rand(rng, (k, j), dtype)
        (out,) = execute(model, gpu, x, y, z)
        ref, mag = product(x, y.astype(np.float64) @ z.astype(np.float64).T)
        # w is rounded to bf16 on the GPU: up to 2^-8 of each |w| more
        check(out, ref, mag * (1 + 2.0**-8 / EPS_ACC), dtype, f"m={m}")
