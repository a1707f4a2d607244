"""Linear layers on the GPU reading their weight as stored: `x @ transpose(W)` with W [n, k]
becomes one product that takes W itself (engine/passes/fuse_weight_transpose.rs): a warp per
row of W up to 4 rows of x (gemv_nt.cu's skinny_nt kernels), the Hopper GEMM with W as its
K-major operand above. Checked against numpy float64 for bf16/f16 over decode and prefill row
counts, odd K (element loads), batched x, the fused epilogues (bias, activation, residual),
weights as constants, and a weight that is also read transposed elsewhere. Every test skips
without a GPU."""

import ml_dtypes
import numpy as np
import pytest

from engine_util import session
from max import driver, tuning
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops

pytestmark = pytest.mark.gpu
GPU = DeviceRef.GPU()

DTYPES = [DType.bfloat16, DType.float16]
MS = [1, 2, 3, 4, 5, 8, 9, 64, 200]
EPS_OUT = {DType.bfloat16: 2.0**-8, DType.float16: 2.0**-10}
EPS_ACC = 3e-5


def as_np(d):
    return ml_dtypes.bfloat16 if d is DType.bfloat16 else d.to_numpy()


def rand(rng, shape, dtype):
    return (rng.standard_normal(shape) / 4).astype(as_np(dtype))


def execute(model, gpu, *arrays):
    args = [driver.Buffer.from_numpy(np.ascontiguousarray(x)).to(gpu) for x in arrays]
    return [o.to_numpy() for o in model.execute(*args)]


def check(got, ref, mag, dtype, what):
    got = np.asarray(got).astype(np.float64)
    assert got.shape == ref.shape, what
    tol = EPS_OUT[dtype] * np.abs(ref) + EPS_ACC * mag + 1e-6
    bad = ~(np.abs(got - ref) <= tol)
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, np.abs(got - ref) - tol, -np.inf)), ref.shape)
        pytest.fail(f"{what}: {bad.sum()} of {bad.size} wrong, e.g. at {i}: {got[i]} vs {ref[i]} (tol {tol[i]})")


def product(a, w):
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    return a64 @ w64.T, np.abs(a64) @ np.abs(w64).T


@pytest.mark.parametrize("k,n", [(2048, 512), (4104, 7), (1000, 300), (13, 33), (64, 4096)])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_rows_of_every_path(rng, gpu, dtype, k, n):
    """One model with a symbolic row count: the NT GEMV up to 4 rows, the GEMM above."""
    with Graph("wt", input_types=[TensorType(dtype, ("m", k), GPU), TensorType(dtype, (n, k), GPU)]) as g:
        x, w = g.inputs
        g.output(ops.matmul(x, ops.transpose(w, 0, 1)))
    model = session(gpu).load(g)
    w = rand(rng, (n, k), dtype)
    for m in MS:
        a = rand(rng, (m, k), dtype)
        (out,) = execute(model, gpu, a, w)
        check(out, *product(a, w), dtype, f"{dtype.name} m={m} k={k} n={n}")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_batched_x_and_the_epilogue(rng, gpu, dtype):
    """[b, s, k] @ W.T + bias -> silu -> + residual, the weight and bias as constants."""
    k, n = 520, 264
    w, bias = rand(rng, (n, k), dtype), rand(rng, (n,), dtype)
    with Graph("lin", input_types=[TensorType(dtype, ("b", "s", k), GPU), TensorType(dtype, ("b", "s", n), GPU)]) as g:
        x, res = g.inputs
        wc = ops.constant(w, dtype, GPU)
        y = ops.matmul(x, wc.T) + ops.constant(bias, dtype, GPU)
        g.output(ops.silu(y) + res)
    model = session(gpu).load(g)
    for b, s in [(1, 1), (2, 3), (1, 8), (4, 40)]:
        a, r = rand(rng, (b, s, k), dtype), rand(rng, (b, s, n), dtype)
        (out,) = execute(model, gpu, a, r)
        p, mag = product(a, w)
        # The epilogue works on the f32 sum: bias, silu and the residual add, rounded once.
        z = p + bias.astype(np.float64)
        ref = z / (1 + np.exp(-z)) + r.astype(np.float64)
        check(out, ref, mag + np.abs(r.astype(np.float64)), dtype, f"{dtype.name} b={b} s={s}")


def test_a_weight_also_read_transposed_elsewhere(rng, gpu):
    """W.T is also a result: it stays materialised, and the product still agrees."""
    dtype, k, n = DType.bfloat16, 128, 96
    with Graph("both", input_types=[TensorType(dtype, (2, k), GPU), TensorType(dtype, (n, k), GPU)]) as g:
        x, w = g.inputs
        wt = ops.transpose(w, 1, 0)
        g.output(ops.matmul(x, wt), wt)
    model = session(gpu).load(g)
    a, w = rand(rng, (2, k), dtype), rand(rng, (n, k), dtype)
    out, wt = execute(model, gpu, a, w)
    np.testing.assert_array_equal(np.asarray(wt).astype(np.float32), w.T.astype(np.float32))
    check(out, *product(a, w), dtype, "bf16 shared transpose")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_sibling_projections_share_a_launch(rng, gpu, dtype):
    """q, k, v, and a fourth and fifth projection of one x by constant weights: the first four
    run as one launch at decode's row counts, the fifth on its own; each output agrees."""
    k, sizes = 264, [256, 64, 64, 40, 24]
    weights = [rand(rng, (n, k), dtype) for n in sizes]
    with Graph("qkv", input_types=[TensorType(dtype, ("m", k), GPU)]) as g:
        (x,) = g.inputs
        g.output(*[ops.matmul(x, ops.constant(w, dtype, GPU).T) for w in weights])
    model = session(gpu).load(g)
    for m in [1, 3, 8, 9, 130]:
        a = rand(rng, (m, k), dtype)
        outs = execute(model, gpu, a)
        for i, (out, w) in enumerate(zip(outs, weights)):
            check(out, *product(a, w), dtype, f"{dtype.name} m={m} projection {i}")


def test_a_product_of_constants_folds_at_load(rng, gpu):
    """x and W both constants: the W^T step is folded on the host at load (which applies the
    transpose itself), siblings included; the values match numpy."""
    dtype, k = DType.bfloat16, 72
    a = rand(rng, (3, k), dtype)
    weights = [rand(rng, (n, k), dtype) for n in (40, 8)]
    with Graph("folded", input_types=[]) as g:
        x = ops.constant(a, dtype, GPU)
        g.output(*[ops.matmul(x, ops.constant(w, dtype, GPU).T) for w in weights])
    outs = [o.to_numpy() for o in session(gpu).load(g).execute()]
    for out, w in zip(outs, weights):
        check(out, *product(a, w), dtype, "bf16 folded")


def test_a_strided_view_as_the_activation(rng, gpu):
    """x passed as a column slice of a wider buffer (rows 2k apart): every path (gemv_nt at one
    row, gemv_mma at 3 and 8, the GEMM at 20) reads dense rows, so the step packs it first."""
    dtype, k, n = DType.bfloat16, 256, 64
    with Graph("wt", input_types=[TensorType(dtype, ("m", k), GPU), TensorType(dtype, (n, k), GPU)]) as g:
        x, w = g.inputs
        g.output(ops.matmul(x, ops.transpose(w, 0, 1)))
    model = session(gpu).load(g)
    w = rand(rng, (n, k), dtype)
    wb = driver.Buffer.from_numpy(w).to(gpu)
    for m in (1, 3, 8, 20):
        wide = rand(rng, (m, 2 * k), dtype)
        view = driver.Buffer.from_numpy(wide).to(gpu)[:, k:]
        (out,) = model.execute(view, wb)
        check(out.to_numpy(), *product(wide[:, k:], w), dtype, f"m={m}")


def test_one_row_past_a_wave_takes_two_rows_per_warp(rng, hopper):
    """At one row, a product whose blocks of one weight row per warp would spill a little past
    one wave of resident blocks (6,144 rows, a layer's q, k and v of the Llama-3-8B shape: 1,536
    blocks where an H200 holds 1,320) runs two weight rows per warp (the m2 kernel, one wave);
    4,096 rows fit as they are. Each against float64."""
    from max import tuning

    dtype, k = DType.bfloat16, 4096
    for n, kernel in [(6144, "skinny_nt_bf16_m2_vec"), (4096, "skinny_nt_bf16_m1_vec")]:
        with Graph("wt", input_types=[TensorType(dtype, (1, k), GPU), TensorType(dtype, (n, k), GPU)]) as g:
            x, w = g.inputs
            g.output(ops.matmul(x, ops.transpose(w, 0, 1)))
        model = session(hopper).load(g)
        a, wv = rand(rng, (1, k), dtype), rand(rng, (n, k), dtype)
        with tuning.record_launches() as log:
            (out,) = execute(model, hopper, a, wv)
        assert [r["kernel"] for r in log.records("gemv_nt")] == [kernel]
        check(out, *product(a, wv), dtype, f"n={n}")


@pytest.mark.parametrize(
    "dtype,m,n,k,kernel",
    [
        # Llama-3.2-1B's down and output projections at one row: 512 blocks of a warp per row
        (DType.bfloat16, 1, 2048, 8192, "skinny_nt_bf16_m1_vec_ks2"),
        (DType.bfloat16, 1, 2048, 2048, "skinny_nt_bf16_m1_vec_ks2"),
        # the last block's second row group past N (its warps add zeros and meet the barrier)
        (DType.bfloat16, 1, 2047, 8192, "skinny_nt_bf16_m1_vec_ks2"),
        # few rows: four warps a row, the last part shorter (20 steps of 256 columns: 5 each,
        # the last with a partial step)
        (DType.float16, 1, 300, 5000, "skinny_nt_f16_m1_vec_ks4"),
        (DType.bfloat16, 1, 77, 4096, "skinny_nt_bf16_m1_vec_ks4"),
        (DType.float16, 1, 1500, 4096, "skinny_nt_f16_m1_vec_ks2"),
        # too short a K for parts of one group of steps each; too many rows for one wave
        (DType.bfloat16, 1, 2048, 768, "skinny_nt_bf16_m1_vec"),
        (DType.bfloat16, 1, 4096, 4096, "skinny_nt_bf16_m1_vec"),
    ],
)
def test_few_rows_of_long_k_split_over_warps(rng, hopper, dtype, m, n, k, kernel):
    """Plain products whose blocks of a warp per row fill at most half a wave take K split over
    two or four warps (`_ks`), each summing a run of whole steps, added in order; a bias and a
    residual added after the product (the graph's epilogue fusion decides where). Against
    float64."""
    with Graph("ks", input_types=[TensorType(dtype, (m, k), GPU), TensorType(dtype, (m, n), GPU)]) as g:
        x, res = g.inputs
        w, bias = rand(rng, (n, k), dtype), rand(rng, (n,), dtype)
        g.output(ops.matmul(x, ops.constant(w, dtype, GPU).T) + ops.constant(bias, dtype, GPU) + res)
    model = session(hopper).load(g)
    a, r = rand(rng, (m, k), dtype), rand(rng, (m, n), dtype)
    with tuning.record_launches() as log:
        (out,) = execute(model, hopper, a, r)
    assert [rec["kernel"] for rec in log.records("gemv_nt")] == [kernel]
    ref, mag = product(a, w)
    ref = ref + bias.astype(np.float64) + r.astype(np.float64)
    check(out, ref, mag + np.abs(bias.astype(np.float64)) + np.abs(r.astype(np.float64)), dtype, f"m={m} n={n} k={k}")


def test_split_k_stays_off_under_batch_invariance(rng, hopper):
    """`numerics.batch_invariant`: one warp per row whatever the row count (the split changes the
    order of a row's sums)."""
    dtype, n, k = DType.bfloat16, 2048, 8192
    with Graph("ks", input_types=[TensorType(dtype, ("m", k), GPU), TensorType(dtype, (n, k), GPU)]) as g:
        x, w = g.inputs
        g.output(ops.matmul(x, ops.transpose(w, 0, 1)))
    wv = rand(rng, (n, k), dtype)
    with tuning.override("numerics.batch_invariant=1"):
        model = session(hopper).load(g)
        a = rand(rng, (3, k), dtype)
        with tuning.record_launches() as log:
            (one,) = execute(model, hopper, a[:1], wv)
            (three,) = execute(model, hopper, a, wv)
    assert [rec["kernel"] for rec in log.records("gemv_nt")] == ["skinny_nt_bf16_m1_vec", "skinny_nt_bf16_m4_vec"]
    np.testing.assert_array_equal(one[0], three[0])
