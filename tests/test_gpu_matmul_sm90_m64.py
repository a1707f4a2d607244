"""The Hopper GEMM's 64-row tile (kernels/gemm_sm90p.cu with BM = 64, the `_m64` kernels: both
consumer warpgroups on the tile's 64 rows, each on half of its columns), which the planner
picks for at most 64 rows per batch (decode batches), against numpy float64: bf16 and f16, 9 to
64 rows, the decode shapes' N and K (an odd tail of N = 1000, K = 576), B as a linear layer's
weight [N, K] (K-major) and as given [K, N] (N-major) or transposed into a scratch copy, the
fused epilogues (bias, activation, residual), batches, and forced variants: 64- and 128-column
tiles, split-K, stream-K on a small persistent grid, one CTA per unit, clusters along M and N.
The launch record says that each product ran on the 64-row tile. Skips unless the GPU is
sm_90a."""

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
# Output rounding (relative to the value) and f32 accumulation (relative to sum |a| |b|).
EPS_OUT = {DType.bfloat16: 2.0**-8, DType.float16: 2.0**-10}
EPS_ACC = 3e-5

# (M, K, N): each M in {9, 16, 33, 64}, N in {1024, 4096, 14336, 1000}, K in {576, 4096, 14336}.
CASES = [
    (9, 4096, 14336),
    (16, 4096, 4096),
    (33, 576, 1000),
    (64, 14336, 4096),
    (64, 4096, 14336),
    (16, 576, 1024),
    (33, 4096, 1000),
    (9, 14336, 1024),
    (64, 576, 4096),
]
# Mid-sized shapes for the forced variants: K past the last whole k-tile, N past the tiles.
SMALL = [(9, 4096, 1000), (33, 576, 4096), (64, 1032, 520)]
VARIANTS = {
    "default": "",
    "n64": "gemm.bm=64,gemm.bn=64",
    "n128_unsplit": "gemm.bm=64,gemm.bn=128,gemm.splitk=1",
    "n64_split3": "gemm.bm=64,gemm.bn=64,gemm.splitk=3",
    "n128_split5_grid4": "gemm.bm=64,gemm.bn=128,gemm.splitk=5,gemm.grid=4",
    # 5 persistent CTAs: the tiles of the last, partial wave become stream-K ranges
    "stream_k_grid5": "gemm.bm=64,gemm.bn=64,gemm.splitk=1,gemm.tail=1,gemm.grid=5",
    "one_cta_per_unit": "gemm.bm=64,gemm.persistent=0",
    # a cluster pair along M (the second CTA's row tile past M: computed on zeros, not stored)
    "cluster_m2": "gemm.bm=64,gemm.cluster=2,gemm.splitk=1",
    # a cluster pair along N sharing the A tile (each CTA loads 32 of its rows)
    "cluster_n2": "gemm.bm=64,gemm.cluster_n=2,gemm.splitk=2",
}


def as_np(d):
    return ml_dtypes.bfloat16 if d is DType.bfloat16 else d.to_numpy()


def rand(rng, shape, dtype, scale=0.25):
    return (rng.standard_normal(shape) * scale).astype(as_np(dtype))


def execute(model, gpu, *arrays):
    args = [driver.Buffer.from_numpy(np.ascontiguousarray(x)).to(gpu) for x in arrays]
    return [o.to_numpy() for o in model.execute(*args)]


def check(got, ref, mag, dtype, what):
    got = np.asarray(got).astype(np.float64)
    assert got.shape == ref.shape, what
    tiny = 1e-7 if dtype is DType.float16 else 1e-30
    tol = EPS_OUT[dtype] * np.abs(ref) + EPS_ACC * mag + tiny
    bad = ~(np.abs(got - ref) <= tol)
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, np.abs(got - ref) - tol, -np.inf)), ref.shape)
        pytest.fail(f"{what}: {bad.sum()} of {bad.size} wrong, e.g. at {i}: {got[i]} vs {ref[i]} (tol {tol[i]})")


def on_the_64_row_tile(log, spec, what):
    """Every Hopper GEMM launch of the block ran a 64-row kernel, in the form `spec` forces."""
    launches = log.records("gemm_sm90p")
    assert launches, f"{what}: the Hopper GEMM never ran"
    knobs = dict(item.split("=") for item in spec.split(",") if item)
    for r in launches:
        assert r["bm"] == 64 and "_m64_" in r["kernel"] and not r["staged"], f"{what}: {r}"
        if "gemm.bn" in knobs:
            assert r["bn"] == int(knobs["gemm.bn"]), f"{what}: {r}"
        if knobs.get("gemm.persistent") == "0":
            assert r["persistent"] == 0, f"{what}: {r}"
    return launches


@pytest.fixture
def sm90(hopper):
    """The Hopper GPU with every product of 16-bit operands on the Hopper kernel (not the
    tensor-core GEMV, which takes W^T products of 2-16 rows by default)."""
    with tuning.override(**{"gemm.min_m": 1, "gemv_mma.min_rows": 17}):
        yield hopper


def linear_model(gpu, dtype, k, n, bias=False, residual=False):
    """y = x @ W^T (+ bias) (-> silu) (+ residual), W [n, k] as a linear layer stores it."""
    types = [TensorType(dtype, ("m", k), GPU), TensorType(dtype, (n, k), GPU)]
    if bias:
        types.append(TensorType(dtype, (n,), GPU))
    if residual:
        types.append(TensorType(dtype, ("m", n), GPU))
    with Graph("linear", input_types=types) as g:
        x, w, *rest = g.inputs
        y = ops.matmul(x, ops.transpose(w, 0, 1))
        if bias:
            y = ops.silu(y + rest.pop(0))
        if residual:
            y = rest.pop(0) + y
        g.output(y)
    return session(gpu).load(g)


def linear_reference(inputs, bias, residual):
    """float64 (x @ W^T (+ bias -> silu) (+ residual), sum of |terms|) of linear_model's inputs."""
    x64, w64 = inputs[0].astype(np.float64), inputs[1].astype(np.float64)
    ref, mag = x64 @ w64.T, np.abs(x64) @ np.abs(w64).T
    if bias:
        z = ref + inputs[2].astype(np.float64)
        ref = z / (1 + np.exp(-z))
    if residual:
        r = inputs[-1].astype(np.float64)
        ref, mag = ref + r, mag + np.abs(r)
    return ref, mag


def linear_case(sm90, rng, dtype, m, k, n, spec, bias=False, residual=False):
    x, w = rand(rng, (m, k), dtype), rand(rng, (n, k), dtype, 1 / np.sqrt(k))
    inputs = [x, w]
    if bias:
        inputs.append(rand(rng, (n,), dtype))
    if residual:
        inputs.append(rand(rng, (m, n), dtype, 1.0))
    what = f"{dtype.name} {m}x{k}x{n} W^T [{spec}]"
    with tuning.override(spec), tuning.record_launches() as log:
        (got,) = execute(linear_model(sm90, dtype, k, n, bias, residual), sm90, *inputs)
    launches = on_the_64_row_tile(log, spec, what)
    ref, mag = linear_reference(inputs, bias, residual)
    check(got, ref, mag, dtype, what)
    return launches


@pytest.mark.parametrize("case", CASES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_linear_layer_decode_shapes(sm90, rng, dtype, case):
    # the planner's choice for each decode shape, W [N, K] read as stored (the `_t_m64` kernels)
    m, k, n = case
    for r in linear_case(sm90, rng, dtype, m, k, n, ""):
        assert "_t_m64_" in r["kernel"], r


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_linear_layer_variants(sm90, rng, dtype, variant):
    for m, k, n in SMALL:
        linear_case(sm90, rng, dtype, m, k, n, VARIANTS[variant])


def test_stream_k_runs_on_the_64_row_tile(sm90, rng):
    # 16 tiles of 64 columns on 5 CTAs: the last tile's 64 k-tiles as ranges over all five
    launches = linear_case(sm90, rng, DType.bfloat16, 33, 4096, 1000, VARIANTS["stream_k_grid5"])
    assert all(r["sk_len"] > 0 for r in launches), launches


@pytest.mark.parametrize("m", [9, 64])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_linear_layer_epilogue(sm90, rng, dtype, m):
    # bias and silu in registers, the residual added at the stores; split-K's reducing CTA too
    for spec in ["", "gemm.bm=64,gemm.bn=64,gemm.splitk=3", "gemm.bm=64,gemm.bn=128,gemm.splitk=1"]:
        linear_case(sm90, rng, dtype, m, 1032, 1000, spec, bias=True, residual=True)
        linear_case(sm90, rng, dtype, m, 4096, 4096, spec, bias=True, residual=True)


def matmul_model(gpu, dtype, xshape, wshape, residual=False):
    """y = x @ w (+ bias) (+ residual): B as given [.., K, N]."""
    n = wshape[-1]
    oshape = tuple(np.broadcast_shapes(xshape[:-2], wshape[:-2])) + (xshape[-2], n)
    types = [TensorType(dtype, xshape, GPU), TensorType(dtype, wshape, GPU), TensorType(dtype, (n,), GPU)]
    if residual:
        types.append(TensorType(dtype, oshape, GPU))
    with Graph("matmul", input_types=types) as g:
        x, w, b, *rest = g.inputs
        y = ops.matmul(x, w) + b
        g.output(rest[0] + y if residual else y)
    return session(gpu).load(g), oshape


def matmul_case(sm90, rng, dtype, xshape, wshape, spec, residual=False):
    k, n = wshape[-2:]
    model, oshape = matmul_model(sm90, dtype, xshape, wshape, residual)
    x, w, b = rand(rng, xshape, dtype), rand(rng, wshape, dtype, 1 / np.sqrt(k)), rand(rng, (n,), dtype)
    inputs = [x, w, b] + ([rand(rng, oshape, dtype, 1.0)] if residual else [])
    what = f"{dtype.name} {xshape} @ {wshape} [{spec}]"
    with tuning.override(spec), tuning.record_launches() as log:
        (got,) = execute(model, sm90, *inputs)
    launches = on_the_64_row_tile(log, spec, what)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    ref, mag = np.matmul(x64, w64) + b.astype(np.float64), np.matmul(np.abs(x64), np.abs(w64)) + np.abs(b)
    if residual:
        r = inputs[-1].astype(np.float64)
        ref, mag = ref + r, mag + np.abs(r)
    check(got, ref, mag, dtype, what)
    return launches


@pytest.mark.parametrize("case", [(9, 4096, 14336), (33, 576, 1000), (64, 4096, 4096), (16, 136, 77)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_b_as_given(sm90, rng, dtype, case):
    # B [K, N] read through 64-column boxes (the `_b_m64` kernels) where N % 8 == 0, else
    # transposed into a scratch Bt first; with the bias and residual epilogue
    m, k, n = case
    for spec in ["", "gemm.bm=64,gemm.splitk=2", "gemm.bm=64,gemm.transpose=1"]:
        launches = matmul_case(sm90, rng, dtype, (m, k), (k, n), spec, residual=True)
        n_major = n % 8 == 0 and "transpose" not in spec
        assert all(("_b_m64_" in r["kernel"]) == n_major for r in launches), launches


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_batches(sm90, rng, dtype):
    # batched A and B (the maps' batch dimension: 33 rows per batch, one 64-row tile each), and
    # batches of A sharing B folded into the rows of one product (2 x 20 = 40 rows)
    for spec in ["", "gemm.bm=64,gemm.bn=64,gemm.transpose=1,gemm.splitk=2", "gemm.bm=64,gemm.splitk=3,gemm.grid=5"]:
        matmul_case(sm90, rng, dtype, (3, 33, 520), (3, 520, 1000), spec)
        matmul_case(sm90, rng, dtype, (2, 20, 1032), (1032, 264), spec, residual=True)


def test_split_k_is_deterministic(sm90, rng):
    # the partials of a split tile are added in part order: the same bits every run
    spec = "gemm.bm=64,gemm.bn=128,gemm.splitk=7"
    model = linear_model(sm90, DType.bfloat16, 4096, 4096)
    x, w = rand(rng, (64, 4096), DType.bfloat16), rand(rng, (4096, 4096), DType.bfloat16, 1 / 64)
    with tuning.override(spec):
        outs = [execute(model, sm90, x, w)[0] for _ in range(3)]
    assert all(np.array_equal(o.view(np.uint16), outs[0].view(np.uint16)) for o in outs)


def test_split_k_leaves_the_streams_counters_at_zero(sm90, rng):
    # A split tile's counter is the stream's (launch/tickets.rs: zeroed once, no memset per
    # launch) and its last part puts it back to zero: a counter left behind would make the next
    # split product on the stream miss its last part. Split products back to back, each checked.
    for spec in ["gemm.bm=64,gemm.splitk=7", "gemm.bm=64,gemm.splitk=3", "gemm.bm=64,gemm.splitk=3,gemm.grid=5",
                 "gemm.bm=64,gemm.splitk=7", "gemm.bm=64,gemm.splitk=2"]:
        for _ in range(2):
            matmul_case(sm90, rng, DType.bfloat16, (40, 1032), (1032, 264), spec)


def test_the_128_row_tile_when_forced_or_past_64_rows(sm90, rng):
    dtype, k, n = DType.bfloat16, 576, 1000
    model = linear_model(sm90, dtype, k, n)
    w = rand(rng, (n, k), dtype, 1 / 24)
    for m, spec, bm in [(64, "gemm.bm=128", 128), (65, "", 128), (64, "", 64), (200, "gemm.bm=64", 64)]:
        x = rand(rng, (m, k), dtype)
        with tuning.override(spec), tuning.record_launches() as log:
            (got,) = execute(model, sm90, x, w)
        launches = log.records("gemm_sm90p")
        assert launches and all(r["bm"] == bm for r in launches), (m, spec, launches)
        x64, w64 = x.astype(np.float64), w.astype(np.float64)
        check(got, x64 @ w64.T, np.abs(x64) @ np.abs(w64).T, dtype, f"m={m} [{spec}]")


# The per-device linear layers of the two-GPU tensor-parallel tiny model (hidden 64, 12 prompt
# rows): q 64 -> 32, k/v 64 -> 16, o-proj K = 32 -> 64, gate/up 64 -> 64, down 64 -> 64.
TP_SHAPES = [(12, 64, 32), (12, 64, 16), (12, 32, 64), (12, 64, 64), (12, 32, 32)]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_tensor_parallel_tiny_shapes(sm90, rng, dtype):
    # K or N under one 64-element box keeps the 128-row tile by default (plan.rs SKINNY_MIN_K,
    # SKINNY_MIN_N); K = N = 64 takes the 64-row tile
    for m, k, n in TP_SHAPES:
        x, w = rand(rng, (m, k), dtype), rand(rng, (n, k), dtype, 1 / np.sqrt(k))
        with tuning.record_launches() as log:
            (got,) = execute(linear_model(sm90, dtype, k, n), sm90, x, w)
        launches = log.records("gemm_sm90p")
        want = 64 if k >= 64 and n >= 64 else 128
        assert launches and all(r["bm"] == want for r in launches), ((m, k, n), launches)
        x64, w64 = x.astype(np.float64), w.astype(np.float64)
        check(got, x64 @ w64.T, np.abs(x64) @ np.abs(w64).T, dtype, f"{m}x{k}x{n}")


def _repeat_linear(sm90, rng, dtype, m, k, n, bias, residual, times=3):
    """linear_case's product on the 64-row tile executed `times` times on one loaded model (the
    second execution may be captured into a CUDA graph, the third replays it), each checked."""
    x, w = rand(rng, (m, k), dtype), rand(rng, (n, k), dtype, 1 / np.sqrt(k))
    inputs = [x, w] + ([rand(rng, (n,), dtype)] if bias else []) + ([rand(rng, (m, n), dtype, 1.0)] if residual else [])
    ref, mag = linear_reference(inputs, bias, residual)
    what = f"{dtype.name} {m}x{k}x{n} W^T bias={bias} residual={residual}"
    with tuning.override("gemm.bm=64"), tuning.record_launches() as log:
        model = linear_model(sm90, dtype, k, n, bias, residual)
        for i in range(times):
            (got,) = execute(model, sm90, *inputs)
            check(got, ref, mag, dtype, f"{what} (execution {i})")
    on_the_64_row_tile(log, "gemm.bm=64", what)


def test_tensor_parallel_tiny_shapes_forced_64(sm90, rng):
    # The same shapes forced onto the 64-row tile, in a child process with a time limit (a hang
    # there is the 64-row kernel's own, on one GPU), with residual and bias epilogues too, B as
    # a weight [N, K] and as given [K, N], 1 to 64 rows, each model executed three times (CUDA
    # graph capture and replay). Every such plan is one unsplit unit per column tile (plan.rs:
    # tiny_tensor_parallel_shapes_plan_one_unit_per_tile), whose only waits are mbarrier waits
    # that trap after 20 s: a failure here is an error naming the shape, not a silent hang.
    import os
    import subprocess
    import sys

    if os.environ.get("MAX_M64_TINY_CHILD") != "1":
        # Compile both types' GEMM families here (the 128-row tile: the same modules), so that
        # the child's time limit measures its kernels rather than NVRTC on a cold kernel cache.
        for dtype in DTYPES:
            x, w = rand(rng, (12, 64), dtype), rand(rng, (16, 64), dtype)
            with tuning.override("gemm.bm=128"):
                execute(linear_model(sm90, dtype, 64, 16), sm90, x, w)
        env = dict(os.environ, MAX_M64_TINY_CHILD="1")
        args = [sys.executable, "-m", "pytest", "-q", "-x", "-s", "-p", "no:cacheprovider",
                f"{__file__}::test_tensor_parallel_tiny_shapes_forced_64"]
        try:
            r = subprocess.run(args, env=env, timeout=240, capture_output=True, text=True)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            last = [line for line in out.splitlines() if line.startswith("m64-tiny:")][-1:]
            pytest.fail(f"the 64-row tile hung on one GPU at the tensor-parallel tiny shapes; last started: {last}")
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
        return

    def started(what):
        print(f"m64-tiny: {what}", flush=True)

    for dtype in DTYPES:
        for m, k, n in TP_SHAPES:
            for rows in [m, 64]:
                for bias, residual in [(False, False), (True, True), (False, True)]:
                    started(f"{dtype.name} {rows}x{k}x{n} W^T bias={bias} residual={residual}")
                    _repeat_linear(sm90, rng, dtype, rows, k, n, bias, residual)
            for rows in [1, m]:
                # B [K, N] read as given (N-major 64-column boxes: with N <= 64 the second
                # warpgroup's box lies wholly past N), bias and residual.
                started(f"{dtype.name} {rows}x{k}x{n} B as given")
                matmul_case(sm90, rng, dtype, (rows, k), (k, n), "gemm.bm=64", residual=True)


@pytest.mark.parametrize("m, k, n", [(64, 14336, 4096), (33, 4096, 1000), (2048, 4096, 4096)])
def test_pdl_changes_only_the_launch(sm90, rng, m, k, n):
    """The GEMM under programmatic dependent launch (gemm.pdl, the default for 16-bit results),
    with a residual and split-K where the plan splits, gives the same bits as without."""
    dtype = DType.bfloat16
    inputs = [rand(rng, (m, k), dtype), rand(rng, (n, k), dtype, 1 / np.sqrt(k)), rand(rng, (m, n), dtype, 1.0)]
    outs = []
    for spec, pdl in [("", 1), ("gemm.pdl=0", 0)]:
        with tuning.override(spec), tuning.record_launches() as log:
            (got,) = execute(linear_model(sm90, dtype, k, n, residual=True), sm90, *inputs)
        launches = log.records("gemm_sm90p")
        assert launches and all(r["pdl"] == pdl for r in launches), launches
        outs.append(np.asarray(got).view(np.uint16))
    assert np.array_equal(outs[0], outs[1])
