"""The collective ops (allreduce.sum, allgather, reducescatter.sum, distributed_broadcast) on
simulated devices (a list of CPU values standing for 2, 3 or 4 devices) against numpy, their
staging errors, and the same graphs on GPUs where there are some: one GPU runs NCCL's
single-rank collectives (a copy), two run the real thing. MAX_REQUIRE_GPU=1 turns the GPU
tests' skips into failures."""

from __future__ import annotations

import os

import numpy as np
import pytest

from max import driver, engine, tuning
from max.dtype import DType
from max.graph import BufferType, DeviceRef, Graph, TensorType, ops
from max.nn.comm import Allreduce, Signals
from helpers import VALUE_TYPES

DTYPES = [DType.float32, DType.bfloat16, DType.float16, DType.float64, DType.int32, DType.int64]


def _values(rng, dtype, shape):
    """Values whose sums over a few devices stay in range (ints: exact; floats: no overflow)."""
    t = VALUE_TYPES[dtype]
    if dtype.is_integral():
        return rng.integers(-1000, 1000, size=shape).astype(t)
    return (rng.standard_normal(shape) * 3).astype(t)


def _bufs(arrays, devices):
    out = []
    for a, dev in zip(arrays, devices):
        b = driver.Buffer.from_numpy(np.ascontiguousarray(a))
        out.append(b if dev.is_host else b.to(dev))
    return out


def _host(b: driver.Buffer) -> np.ndarray:
    return (b if b.device.is_host else b.to(driver.CPU())).to_numpy()


def _run(build, shapes, dtype, refs, devices, arrays):
    """Stages `build(xs, signals)` over inputs of `shapes` on `refs`; runs it on `arrays`."""
    signals = Signals(refs)
    types = [TensorType(dtype, s, r) for s, r in zip(shapes, refs)] + signals.input_types()
    with Graph("collective", input_types=types) as g:
        xs = [v.tensor for v in g.inputs[: len(shapes)]]
        sig = [v.buffer for v in g.inputs[len(shapes):]]
        g.output(*build(xs, sig))
    session = engine.InferenceSession(devices=[driver.CPU(), *[d for d in devices if not d.is_host]])
    model = session.load(g)
    inputs = _bufs(arrays, devices[: len(arrays)]) + signals.buffers()
    return [_host(o) for o in model.execute(*inputs)]


def _sim(n):
    return [DeviceRef.CPU(i) for i in range(n)], [driver.CPU()] * n


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("dtype", DTYPES)
def test_allreduce_sums_on_simulated_devices(rng, n, dtype):
    refs, devices = _sim(n)
    shape = [int(rng.integers(1, 9)), int(rng.integers(1, 40))]
    arrays = [_values(rng, dtype, shape) for _ in range(n)]
    outs = _run(lambda xs, s: ops.allreduce.sum(xs, s), [shape] * n, dtype, refs, devices, arrays)
    want = np.sum([np.asarray(a, np.float64) for a in arrays], axis=0)
    for o in outs[1:]:
        np.testing.assert_array_equal(o.view(np.uint8), outs[0].view(np.uint8))  # identical bits everywhere
    if dtype.is_float():
        tol = {DType.float32: 1e-6, DType.float64: 1e-12}.get(dtype, 1e-2)
        np.testing.assert_allclose(outs[0].astype(np.float64), want, rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(outs[0], want.astype(VALUE_TYPES[dtype]))


def _allreduce_then_norm(rng, dtype, shape, refs, devices, mbc=False):
    """allreduce.sum of one tensor per device, each sum then normalised (rms_norm, a weight per
    device: the layer after a tensor-parallel attention or MLP); the sums, the normalised sums
    and numpy's float64 norm of each (rounded) sum."""
    from max.nn.kernels import rms_norm

    n = len(refs)
    arrays = [_values(rng, dtype, shape) for _ in range(n)]
    gammas = [(rng.uniform(0.5, 1.5, shape[-1])).astype(VALUE_TYPES[dtype]) for _ in range(n)]
    signals = Signals(refs)
    types = ([TensorType(dtype, shape, r) for r in refs] + [TensorType(dtype, [shape[-1]], r) for r in refs]
             + signals.input_types())
    with Graph("allreduce_norm", input_types=types) as g:
        xs = [v.tensor for v in g.inputs[:n]]
        gs = [v.tensor for v in g.inputs[n:2 * n]]
        sums = ops.allreduce.sum(xs, [v.buffer for v in g.inputs[2 * n:]])
        g.output(*sums, *[rms_norm(x, w, 1e-5, multiply_before_cast=mbc) for x, w in zip(sums, gs)])
    from max import _core

    steps = [s for s in _core.engine._lowered_steps(g._ir) if s != "constant"]
    assert steps == (["allreduce_sum"] if tuning.get("fusion.allreduce_norm") == "1" else
                     ["allreduce_sum", "rms_norm", "rms_norm"]), steps  # the norms joined the allreduce
    session = engine.InferenceSession(devices=[driver.CPU(), *[d for d in devices if not d.is_host]])
    with tuning.record_launches() as log:
        outs = [_host(o) for o in session.load(g).execute(*_bufs(arrays + gammas, devices * 2), *signals.buffers())]
    want = []
    for i in range(n):
        x = outs[i].astype(np.float64)
        inv = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5)
        want.append(x * inv * gammas[i].astype(np.float64))
    return outs[:n], outs[n:], want, log


def _allreduce_add(rng, dtype, shape, refs, devices, norm=False, spec="", seed=0):
    """h_i = r_i + allreduce.sum(x..)[i] on every device (a tensor-parallel layer's residual
    stream), then rms_norm(h_i) with `norm`, under tuning `spec`; (the lowered steps, h, the
    norms, the records of the launches, numpy's h: the sum rounded to the dtype, then the add
    rounded again). Inputs from `seed`."""
    from max import _core
    from max.nn.kernels import rms_norm

    n, t = len(refs), VALUE_TYPES[dtype]
    g_rng = np.random.default_rng(seed)
    xs_, rs_ = [_values(g_rng, dtype, shape) for _ in range(n)], [_values(g_rng, dtype, shape) for _ in range(n)]
    gammas = [g_rng.uniform(0.5, 1.5, shape[-1]).astype(t) for _ in range(n)]
    signals = Signals(refs)
    types = ([TensorType(dtype, shape, r) for r in refs] * 2 + [TensorType(dtype, [shape[-1]], r) for r in refs]
             + signals.input_types())
    with tuning.override(spec):
        with Graph("allreduce_add", input_types=types) as g:
            xs, rs = [v.tensor for v in g.inputs[:n]], [v.tensor for v in g.inputs[n:2 * n]]
            gs = [v.tensor for v in g.inputs[2 * n:3 * n]]
            hs = [r + s for r, s in zip(rs, ops.allreduce.sum(xs, [v.buffer for v in g.inputs[3 * n:]]))]
            g.output(*hs, *([rms_norm(h, w, 1e-5) for h, w in zip(hs, gs)] if norm else []))
        steps = [s for s in _core.engine._lowered_steps(g._ir) if s != "constant"]
        session = engine.InferenceSession(devices=[driver.CPU(), *[d for d in devices if not d.is_host]])
        with tuning.record_launches() as log:
            outs = [_host(o) for o in session.load(g).execute(*_bufs(xs_ + rs_ + gammas, devices * 3),
                                                               *signals.buffers())]
    total = np.sum([a.astype(np.float32) for a in xs_], axis=0).astype(t)
    want = [(r.astype(np.float32) + total.astype(np.float32)).astype(t) for r in rs_]
    return steps, outs[:n], outs[n:], log, want


@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16])
def test_residual_adds_join_an_allreduce_on_simulated_devices(dtype):
    refs, devices = _sim(2)
    for norm in (False, True):
        steps, hs, normed, _, want = _allreduce_add(None, dtype, [3, 64], refs, devices, norm=norm, seed=3)
        assert steps == ["allreduce_sum"], steps  # the adds (and norms) joined the allreduce
        for h, w in zip(hs, want):
            np.testing.assert_array_equal(h.view(np.uint8), w.view(np.uint8))
        apart = _allreduce_add(None, dtype, [3, 64], refs, devices, norm=norm, spec="fusion.allreduce_norm=0", seed=3)
        assert len(apart[0]) > 1, apart[0]
        for a, b in zip(hs + normed, apart[1] + apart[2]):
            np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16])
def test_norms_after_an_allreduce_on_simulated_devices(rng, dtype):
    # the norms join the allreduce (one step); the host runs them after the sum
    refs, devices = _sim(2)
    for shape in ([3, 64], [1, 576]):
        sums, normed, want, _ = _allreduce_then_norm(rng, dtype, shape, refs, devices)
        np.testing.assert_array_equal(sums[0].view(np.uint8), sums[1].view(np.uint8))
        tol = 1e-5 if dtype == DType.float32 else 2e-2
        for got, w in zip(normed, want):
            np.testing.assert_allclose(got.astype(np.float64), w, rtol=tol, atol=tol)


def test_allreduce_on_one_device_is_a_copy(rng):
    a = rng.standard_normal((3, 5)).astype(np.float32)
    (out,) = _run(lambda xs, s: ops.allreduce.sum(xs, s), [[3, 5]], DType.float32, [DeviceRef.CPU()],
                  [driver.CPU()], [a])
    np.testing.assert_array_equal(out, a)


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_allgather_concatenates(rng, n, axis):
    refs, devices = _sim(n)
    sizes = [int(rng.integers(1, 6)) for _ in range(n)]
    shapes = [[s, 3, 4] if axis == 0 else [2, s, 4] if axis == 1 else [2, 3, s] for s in sizes]
    arrays = [_values(rng, DType.float32, s) for s in shapes]
    outs = _run(lambda xs, s: ops.allgather(xs, s, axis=axis), shapes, DType.float32, refs, devices, arrays)
    want = np.concatenate(arrays, axis=axis)
    assert len(outs) == n
    for o in outs:
        np.testing.assert_array_equal(o, want)


@pytest.mark.parametrize("n", [2, 4])
def test_reducescatter_gives_each_device_its_piece(rng, n):
    refs, devices = _sim(n)
    arrays = [_values(rng, DType.float64, [4 * n, 3]) for _ in range(n)]
    outs = _run(lambda xs, s: ops.reducescatter.sum(xs, s), [[4 * n, 3]] * n, DType.float64, refs, devices, arrays)
    total = np.sum(arrays, axis=0)
    for i, o in enumerate(outs):
        np.testing.assert_allclose(o, total[4 * i : 4 * i + 4], rtol=1e-12)


def test_broadcast_copies_to_every_device(rng):
    refs, devices = _sim(3)
    a = _values(rng, DType.int32, [7])
    outs = _run(lambda xs, s: ops.distributed_broadcast(xs[0], s), [[7]], DType.int32, refs, devices, [a])
    assert len(outs) == 3
    for o in outs:
        np.testing.assert_array_equal(o, a)


def test_allreduce_layer(rng):
    refs, devices = _sim(2)
    arrays = [_values(rng, DType.float32, [4]) for _ in range(2)]
    layer = Allreduce(num_accelerators=2)
    outs = _run(lambda xs, s: layer(xs, s), [[4]] * 2, DType.float32, refs, devices, arrays)
    np.testing.assert_allclose(outs[1], arrays[0] + arrays[1], rtol=1e-6)


def _stage(types, build):
    with Graph("bad", input_types=types) as g:
        build([v for v in g.inputs])


def _sig(ref):
    return BufferType(DType.uint8, [Signals.NUM_BYTES], ref)


def test_staging_errors_name_the_problem():
    gpu = [DeviceRef.GPU(0), DeviceRef.GPU(1)]
    t = lambda shape, ref, dtype=DType.float32: TensorType(dtype, shape, ref)  # noqa: E731
    with pytest.raises(ValueError, match="inputs\\[1\\] is \\[5\\]"):
        _stage([t([4], gpu[0]), t([5], gpu[1]), _sig(gpu[0]), _sig(gpu[1])],
               lambda v: ops.allreduce.sum(v[:2], v[2:]))
    with pytest.raises(TypeError, match="one dtype"):
        _stage([t([4], gpu[0]), t([4], gpu[1], DType.float16), _sig(gpu[0]), _sig(gpu[1])],
               lambda v: ops.allreduce.sum(v[:2], v[2:]))
    with pytest.raises(ValueError, match="gpu:0 appears twice"):
        _stage([t([4], gpu[0]), t([4], gpu[0]), _sig(gpu[0]), _sig(gpu[0])],
               lambda v: ops.allreduce.sum(v[:2], v[2:]))
    with pytest.raises(ValueError, match="expected one per input"):
        _stage([t([4], gpu[0]), t([4], gpu[1]), _sig(gpu[0])], lambda v: ops.allreduce.sum(v[:2], v[2:]))
    with pytest.raises(ValueError, match="signal_buffers\\[0\\].*input 0's device|buffer i must be on input i's"):
        _stage([t([4], gpu[0]), t([4], gpu[1]), _sig(gpu[1]), _sig(gpu[0])],
               lambda v: ops.allreduce.sum(v[:2], v[2:]))
    with pytest.raises(TypeError, match="uint8 buffer"):
        _stage([t([4], gpu[0]), t([4], gpu[1]), BufferType(DType.float32, [4], gpu[0]), _sig(gpu[1])],
               lambda v: ops.allreduce.sum(v[:2], v[2:]))
    with pytest.raises(ValueError, match="all GPUs or all the CPU"):
        _stage([t([4], DeviceRef.CPU()), t([4], gpu[1]), _sig(DeviceRef.CPU()), _sig(gpu[1])],
               lambda v: ops.allreduce.sum(v[:2], v[2:]))
    with pytest.raises(ValueError, match="does not split into 2"):
        _stage([t([3], gpu[0]), t([3], gpu[1]), _sig(gpu[0]), _sig(gpu[1])],
               lambda v: ops.reducescatter.sum(v[:2], v[2:]))
    with pytest.raises(ValueError, match="at least 2"):
        _stage([t([3], gpu[0]), _sig(gpu[0])], lambda v: ops.distributed_broadcast(v[0], v[1:]))
    with pytest.raises(ValueError, match="not among the signal buffers"):
        _stage([t([3], DeviceRef.GPU(2)), _sig(gpu[0]), _sig(gpu[1])],
               lambda v: ops.distributed_broadcast(v[0], v[1:]))


def test_functional_collectives_need_a_graph():
    from max import functional as F

    with pytest.raises(NotImplementedError, match="inside a Graph"):
        F.allreduce_sum([], [])


# ---- GPUs -------------------------------------------------------------------------------------


def _gpus(n: int) -> list[driver.Device]:
    if driver.accelerator_count() < n:
        # a machine with fewer GPUs skips the tests that need more
        if os.environ.get("MAX_REQUIRE_GPU") == "1" and driver.accelerator_count() == 0:
            pytest.fail(f"MAX_REQUIRE_GPU=1 but this machine has no GPU, {n} needed")
        pytest.skip(f"needs {n} GPU(s)")
    return [driver.Accelerator(i) for i in range(n)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16])
def test_single_rank_nccl_allreduce_is_a_copy(rng, dtype):
    devices = _gpus(1)
    a = _values(rng, dtype, [257, 33])
    (out,) = _run(lambda xs, s: ops.allreduce.sum(xs, s), [[257, 33]], dtype, [DeviceRef.GPU(0)], devices, [a])
    np.testing.assert_array_equal(out.view(np.uint8), a.view(np.uint8))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [DType.float32, DType.bfloat16, DType.int32])
def test_two_gpu_collectives_match_numpy(rng, dtype):
    devices = _gpus(2)
    refs = [DeviceRef.GPU(0), DeviceRef.GPU(1)]
    arrays = [_values(rng, dtype, [64, 130]) for _ in range(2)]
    outs = _run(lambda xs, s: ops.allreduce.sum(xs, s), [[64, 130]] * 2, dtype, refs, devices, arrays)
    want = np.sum([np.asarray(a, np.float64) for a in arrays], axis=0)
    for o in outs:
        np.testing.assert_allclose(o.astype(np.float64), want, rtol=1e-2 if dtype == DType.bfloat16 else 1e-6)
    for axis, shapes in ((0, [[3, 4], [5, 4]]), (1, [[3, 5, 2], [3, 7, 2]])):  # unequal pieces
        arrays = [_values(rng, dtype, s) for s in shapes]
        outs = _run(lambda xs, s: ops.allgather(xs, s, axis=axis), shapes, dtype, refs, devices, arrays)
        for o in outs:
            np.testing.assert_array_equal(o, np.concatenate([np.asarray(a, o.dtype) for a in arrays], axis=axis))
    eq = [_values(rng, dtype, [4, 6]) for _ in range(2)]
    outs = _run(lambda xs, s: ops.allgather(xs, s), [[4, 6]] * 2, dtype, refs, devices, eq)
    for o in outs:
        np.testing.assert_array_equal(o, np.concatenate([np.asarray(a, o.dtype) for a in eq]))
    outs = _run(lambda xs, s: ops.distributed_broadcast(xs[0], s), [[4, 6]], dtype, refs, devices, eq[:1])
    for o in outs:
        np.testing.assert_array_equal(o, np.asarray(eq[0], o.dtype))


def _p2p_gpus() -> list[driver.Device]:
    devices = _gpus(2)
    if not (devices[0].can_access(devices[1]) and devices[1].can_access(devices[0])):
        pytest.skip("the two GPUs have no peer access: collective.p2p falls back to NCCL")
    return devices


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float16, DType.float32])
def test_two_gpu_p2p_allreduce(rng, dtype):
    """collective.p2p: an allreduce in whole 16-byte vectors runs as kernels/allreduce_p2p.cu,
    pushed through the signal buffers up to 1 MiB and read from the peer past it (a prefill's
    16 MiB), each rank summing in f32 and rounding once, as NCCL's two-rank sum does: both
    ranks get exactly those bits, call after call (the epochs cycle through both sets of
    receive slots, the later calls replayed from a CUDA graph); other sizes go to NCCL."""
    devices = _p2p_gpus()
    refs = [DeviceRef.GPU(0), DeviceRef.GPU(1)]
    size = {DType.bfloat16: 2, DType.float16: 2, DType.float32: 4}[dtype]
    cases = [([4096], True), ([64, 4096], True), ([16 // size], True), ([(1 << 20) // size], True),
             ([(1 << 18) // size], True), ([(1 << 18) // size + 16 // size], True),
             ([(1 << 20) // size + 16 // size], True), ([2048, (1 << 23) // size // 1024], True),
             ([4096 + 1], False)]
    for shape, fits in cases:
        signals = Signals(refs)
        types = [TensorType(dtype, shape, r) for r in refs] + signals.input_types()
        with Graph("p2p", input_types=types) as g:
            g.output(*ops.allreduce.sum([v.tensor for v in g.inputs[:2]], [v.buffer for v in g.inputs[2:]]))
        with tuning.override("collective.p2p=1"):
            model = engine.InferenceSession(devices=[driver.CPU(), *devices]).load(g)
            sig = signals.buffers()
            for call in range(6):
                arrays = [_values(rng, dtype, shape) for _ in range(2)]
                with tuning.record_launches() as log:
                    outs = [_host(o) for o in model.execute(*_bufs(arrays, devices), *sig)]
                if call == 0:  # later calls may replay a CUDA graph, which records nothing
                    recs = log.records("allreduce_p2p")
                    assert bool(recs) == fits, (shape, recs)
                    # flagged lines up to 256 KiB, plain data and flags up to 1 MiB, reads beyond
                    nbytes = np.prod(shape) * size
                    assert all(r["ll"] == (nbytes <= 1 << 18) for r in recs), (shape, recs)
                    assert all(("_read_" in r["kernel"]) == (nbytes > 1 << 20) for r in recs), (shape, recs)
                t = VALUE_TYPES[dtype]
                want = (arrays[0].astype(np.float32) + arrays[1].astype(np.float32)).astype(t)
                for o in outs:
                    if fits:
                        np.testing.assert_array_equal(o.view(np.uint8), want.view(np.uint8), err_msg=f"{shape} call {call}")
                    else:
                        np.testing.assert_allclose(o.astype(np.float64), want.astype(np.float64), rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float32])
def test_two_gpu_p2p_allreduce_with_the_norm_after_it(rng, dtype):
    """The RMSNorm after a peer-to-peer allreduce runs in the same launch where a block holds
    whole rows: up to 1 MiB (allreduce_p2p_norm_*) 8B's 4096 and 1B's 2048 bf16 rows, several
    rows a block, several blocks; past it (allreduce_p2p_read_norm_*, a prefill's rows) rows of
    whole vectors up to 1,024 of them, SmolLM2's 576 included; and as the allreduce then the
    rms_norm kernel otherwise (SmolLM2's 576 in a small call; a row of 16 KiB): the sums are
    the plain allreduce's bits, the norms numpy's float64 norm of them within the dtype's
    rounding, with and without the weight multiplied before the cast."""
    devices = _p2p_gpus()
    refs = [DeviceRef.GPU(0), DeviceRef.GPU(1)]
    cases = [([1, 4096], True), ([8, 2048], True), ([64, 1024], True), ([2, 576], False), ([1, 8192], False),
             ([2048, 4096], True), ([1000, 576], True), ([130, 8192], True), ([64, 16384], False)]
    if dtype == DType.float32:
        cases = [([1, 2048], True), ([5, 1024], True), ([3, 3000], False), ([300, 4096], True), ([100, 6000], False)]
    for shape, joined in cases:
        for mbc in (False, True):
            sums, normed, want, log = _allreduce_then_norm(rng, dtype, shape, refs, devices, mbc=mbc)
            kernels = [r["kernel"] for r in log.records("allreduce_p2p")]
            assert kernels and all(("_norm_" in k) == joined for k in kernels), (shape, kernels)
            big = np.prod(shape) * (4 if dtype == DType.float32 else 2) > 1 << 20
            assert all(("_read_" in k) == big for k in kernels), (shape, kernels)
            np.testing.assert_array_equal(sums[0].view(np.uint8), sums[1].view(np.uint8))
            tol = 1e-5 if dtype == DType.float32 else 2e-2
            for got, w in zip(normed, want):
                np.testing.assert_allclose(got.astype(np.float64), w, rtol=tol, atol=tol, err_msg=f"{shape} mbc={mbc}")
    # the allreduce and the rms_norm kernel apart: the same arithmetic but for the order of the
    # sum of squares: bf16 at most one unit in the last place, and rarely; f32 (whose rows the
    # rms_norm kernel groups differently, in 256-thread blocks) within a few units
    shape = [16, 4096] if dtype == DType.bfloat16 else [16, 2048]
    seed = int(rng.integers(1 << 30))
    _, joined, _, _ = _allreduce_then_norm(np.random.default_rng(seed), dtype, shape, refs, devices)
    with tuning.override("fusion.allreduce_norm=0"):
        _, apart, _, _ = _allreduce_then_norm(np.random.default_rng(seed), dtype, shape, refs, devices)
    for a, b in zip(joined, apart):
        if dtype == DType.float32:
            np.testing.assert_allclose(a, b, rtol=2e-6, atol=0)
            continue
        ia, ib = a.view(np.uint16).astype(np.int32), b.view(np.uint16).astype(np.int32)
        assert np.abs(ia - ib).max() <= 1 and np.mean(ia != ib) < 0.02


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float32])
def test_two_gpu_p2p_allreduce_with_the_residual_after_it(dtype):
    """The residual add after a peer-to-peer allreduce (a layer's residual stream, each GPU its
    own copy) runs inside its launch, pushed (one block, 64 blocks) or read (a prefill's 16
    MiB), with and without the norm after it: the results are the allreduce then the add, bit
    for bit (numpy's, the steps apart on the GPU, and the joined step through NCCL and the add
    kernel), the norms within a unit in the last place of the norm kernel's apart."""
    devices = _p2p_gpus()
    refs = [DeviceRef.GPU(0), DeviceRef.GPU(1)]
    shapes = [[1, 4096], [64, 4096], [2048, 4096]] if dtype == DType.bfloat16 else [[1, 2048], [1024, 2048]]
    for shape in shapes:
        for norm in (False, True):
            seed = shape[0] * 2 + norm
            steps, hs, normed, log, want = _allreduce_add(None, dtype, shape, refs, devices, norm=norm, seed=seed)
            assert steps == ["allreduce_sum"], steps
            kernels = [r["kernel"] for r in log.records("allreduce_p2p")]
            assert len(kernels) == 1 and ("_norm_" in kernels[0]) == norm, kernels
            for h, w in zip(hs, want):
                np.testing.assert_array_equal(h.view(np.uint8), w.view(np.uint8), err_msg=f"{shape} norm={norm}")
            # the steps apart, and the joined step through NCCL (then the add and the norm kernels)
            _, hs2, normed2, _, _ = _allreduce_add(None, dtype, shape, refs, devices, norm=norm,
                                                   spec="fusion.allreduce_norm=0", seed=seed)
            _, hs3, normed3, log3, _ = _allreduce_add(None, dtype, shape, refs, devices, norm=norm,
                                                      spec="collective.p2p=0", seed=seed)
            assert not log3.records("allreduce_p2p")
            for a, b in zip(hs + hs, hs2 + hs3):
                np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
            for a, b in zip(normed2, normed3):
                np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
            for a, b in zip(normed, normed2):
                if dtype == DType.float32:
                    np.testing.assert_allclose(a, b, rtol=2e-6, atol=0)
                    continue
                ia, ib = a.view(np.uint16).astype(np.int32), b.view(np.uint16).astype(np.int32)
                assert np.abs(ia - ib).max() <= 1 and np.mean(ia != ib) < 0.02, shape


@pytest.mark.gpu
def test_two_gpu_p2p_allreduces_back_to_back(rng):
    """One set of signal buffers serving allreduces of 1 and 128 blocks, one that goes to NCCL
    and one read from the peer (2 MiB and a vector), with elementwise work between them, 20
    executions queued before any result is read (replays of a CUDA graph, each rank's epochs
    running ahead of the host): f32, exact sums."""
    devices = _p2p_gpus()
    refs = [DeviceRef.GPU(0), DeviceRef.GPU(1)]
    # 4 KiB, 1 MiB, 4100 bytes (NCCL), 4 KiB, 2 MiB + 16 bytes (read)
    shapes = [[1024], [1 << 18], [1025], [1024], [(1 << 19) + 4]]
    signals = Signals(refs)
    types = [TensorType(DType.float32, s, r) for s in shapes for r in refs] + signals.input_types()
    with Graph("p2p_chain", input_types=types) as g:
        x = [v.tensor for v in g.inputs[:10]]
        sig = [v.buffer for v in g.inputs[10:]]
        ra = ops.allreduce.sum(x[0:2], sig)
        rb = ops.allreduce.sum([t * 0.5 for t in x[2:4]], sig)
        rc = ops.allreduce.sum(x[4:6], sig)
        rd = ops.allreduce.sum([a * 0.25 + t for a, t in zip(ra, x[6:8])], sig)
        re = ops.allreduce.sum([t * 2.0 for t in x[8:10]], sig)
        g.output(*ra, *rb, *rc, *rd, *re)
    arrays = [_values(rng, DType.float32, s) for s in shapes for _ in refs]
    f = [np.asarray(a, np.float32) for a in arrays]
    ra = f[0] + f[1]
    want = [ra, f[2] * np.float32(0.5) + f[3] * np.float32(0.5), f[4] + f[5],
            (ra * np.float32(0.25) + f[6]) + (ra * np.float32(0.25) + f[7]), f[8] * np.float32(2) + f[9] * np.float32(2)]
    with tuning.override("collective.p2p=1"):
        model = engine.InferenceSession(devices=[driver.CPU(), *devices]).load(g)
        inputs = _bufs(arrays, devices * 5) + signals.buffers()
        with tuning.record_launches() as log:
            model.execute(*inputs)
        # one record a call; the 4100-byte one: NCCL; flagged lines, plain data, lines again, reads
        recs = log.records("allreduce_p2p")
        assert [(r["ll"], "_read_" in r["kernel"]) for r in recs] == [(1, False), (0, False), (1, False), (0, True)]
        runs = [model.execute(*inputs) for _ in range(20)]
        for outs in runs:
            got = [_host(o) for o in outs]
            for k, w in enumerate(want):
                for r in range(2):
                    np.testing.assert_array_equal(got[2 * k + r], w, err_msg=f"allreduce {k}, rank {r}")


def test_a_missing_gpu_is_named():
    from max.driver import DeviceSpec
    from max.pipelines.lib.pipeline import pick_devices

    n = driver.accelerator_count()
    with pytest.raises(ValueError, match=f"gpu:{n + 1} not found"):
        pick_devices([*[DeviceSpec.accelerator(i) for i in range(n)], DeviceSpec.accelerator(n + 1)])
