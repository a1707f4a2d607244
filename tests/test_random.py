"""The random op family (``ops.random``, ``max.random``) against an independent numpy
reimplementation of its recipe (crates/runtime/src/cpu/random/values.rs):

* Philox4x32-10 written from the Random123 paper, checked against its known-answer vectors
  (numpy's own ``Philox`` is the 4x64 variant, so it cannot stand in);
* uniform values bit for bit (float32, float64, float16, bfloat16, float8), normal values
  against a float64 Box-Muller within a few ulps;
* seeds as graph inputs (new values, one compiled model), symbolic shapes, two draws per graph,
  statistics of large draws, the errors, and the eager API's seeding;
* per device: the GPU's values against the CPU's (uniform: the same bits; skipped without a GPU).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from max import driver, random
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops

from engine_util import session

U64 = np.uint64
MASK32 = U64(0xFFFFFFFF)
NP_TYPE = {
    DType.float32: np.float32,
    DType.float64: np.float64,
    DType.float16: np.float16,
    DType.bfloat16: ml_dtypes.bfloat16,
    DType.float8_e4m3fn: ml_dtypes.float8_e4m3fn,
    DType.float8_e5m2: ml_dtypes.float8_e5m2,
}
NARROW = [DType.float32, DType.float16, DType.bfloat16, DType.float8_e4m3fn, DType.float8_e5m2]
ALL = NARROW + [DType.float64]


def ids(v):
    return v.name if isinstance(v, DType) else str(v)


# ---- the reference -----------------------------------------------------------------------------


def philox4x32_10(ctr: np.ndarray, key: tuple[int, int]) -> np.ndarray:
    """Philox4x32-10 of counters `ctr` ([..., 4] uint32) under `key` (two 32-bit words)."""
    c = [ctr[..., i].astype(U64) for i in range(4)]
    k0, k1 = key
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & 0xFFFFFFFF, (k1 + 0xBB67AE85) & 0xFFFFFFFF
        p0, p1 = U64(0xD2511F53) * c[0], U64(0xCD9E8D57) * c[2]
        c = [(p1 >> U64(32)) ^ c[1] ^ U64(k0), p1 & MASK32, (p0 >> U64(32)) ^ c[3] ^ U64(k1), p0 & MASK32]
    return np.stack(c, axis=-1).astype(np.uint32)


def test_philox_reference_matches_random123_known_answers():
    kat = [
        ([0, 0, 0, 0], (0, 0), [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
        ([0xFFFFFFFF] * 4, (0xFFFFFFFF, 0xFFFFFFFF), [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
        (
            [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
            (0xA4093822, 0x299F31D0),
            [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1],
        ),
    ]
    for ctr, key, want in kat:
        assert philox4x32_10(np.array([ctr], np.uint32), key)[0].tolist() == want


def blocks(seed: int, stream: int, n: int) -> np.ndarray:
    """Words of blocks 0..n-1: counter (j, j >> 32, stream, stream >> 32), key (seed, seed >> 32)."""
    j = np.arange(n, dtype=U64)
    seed, stream = seed % 2**64, stream % 2**64
    ctr = np.stack([j & MASK32, j >> U64(32), np.full(n, stream & 0xFFFFFFFF, U64), np.full(n, stream >> 32, U64)], -1)
    return philox4x32_10(ctr.astype(np.uint32), (seed & 0xFFFFFFFF, seed >> 32))


def _step(x, t, up: bool):
    """The neighbour of the value `x` of numpy type `t` towards +inf (up) or -inf."""
    bits = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(t).itemsize]
    b = int(np.array(x, t).view(bits))
    sign = 1 << (8 * np.dtype(t).itemsize - 1)
    if float(x) == 0:
        return np.array(1 if up else sign | 1, bits).view(t)
    away = (float(x) > 0) == up
    return np.array(b + 1 if away else b - 1, bits).view(t)


def bounds(dtype: DType, lo: float, hi: float) -> tuple[float, float]:
    """The smallest value of `dtype` at or above lo and the largest below hi."""
    t = NP_TYPE[dtype]
    a = np.array(lo, np.float64).astype(t)
    if float(a) < lo:
        a = _step(a, t, up=True)
    b = np.array(hi, np.float64).astype(t)
    if float(b) >= hi:
        b = _step(b, t, up=False)
    return float(a), float(b)


def uniform_ref(dtype: DType, seed: int, n: int, lo=0.0, hi=1.0, stream=0) -> np.ndarray:
    """The exact values of random_uniform."""
    mn, mx = bounds(dtype, lo, hi)
    if dtype is DType.float64:
        w = blocks(seed, stream, (n + 1) // 2).astype(U64)
        m = np.stack([(w[:, 0] << U64(21)) | (w[:, 1] >> U64(11)), (w[:, 2] << U64(21)) | (w[:, 3] >> U64(11))], -1)
        u = m.reshape(-1)[:n].astype(np.float64) * 2.0**-53
        return np.clip(np.float64(lo) + np.float64(hi - lo) * u, mn, mx)
    w = blocks(seed, stream, (n + 3) // 4).reshape(-1)[:n]
    u = (w >> np.uint32(8)).astype(np.float32) * np.float32(2.0**-24)
    v = np.float32(lo) + np.float32(hi - lo) * u  # two float32 roundings, as the kernels
    return np.clip(v, np.float32(mn), np.float32(mx)).astype(NP_TYPE[dtype])


def normal_ref(dtype: DType, seed: int, n: int, mean=0.0, std=1.0, stream=0) -> tuple[np.ndarray, np.ndarray]:
    """Box-Muller in float64 from the recipe's uniforms: (mean + std * z, the radii r)."""
    if dtype is DType.float64:
        w = blocks(seed, stream, (n + 1) // 2).astype(U64)
        m0 = (w[:, 0] << U64(21)) | (w[:, 1] >> U64(11))
        m1 = (w[:, 2] << U64(21)) | (w[:, 3] >> U64(11))
        u1, u2 = (m0 + U64(1)).astype(np.float64) * 2.0**-53, m1.astype(np.float64) * 2.0**-53
    else:
        w = blocks(seed, stream, (n + 3) // 4).reshape(-1, 2)
        u1 = ((w[:, 0] >> np.uint32(8)) + 1).astype(np.float64) * 2.0**-24
        u2 = (w[:, 1] >> np.uint32(8)).astype(np.float64) * 2.0**-24
    r = np.sqrt(-2.0 * np.log(u1))
    z = np.stack([r * np.cos(2 * np.pi * u2), r * np.sin(2 * np.pi * u2)], -1).reshape(-1)[:n]
    return mean + std * z, np.repeat(r, 2)[:n]


# ---- running the ops ---------------------------------------------------------------------------


def host(buf: driver.Buffer, dtype: DType) -> np.ndarray:
    """A result as numpy values of `dtype` (float8 comes back as its bits)."""
    a = buf.to(driver.CPU()).to_numpy()
    return a if a.dtype == NP_TYPE[dtype] else a.view(NP_TYPE[dtype])


def model(kind: str, dtype: DType, shape, device, **params):
    """A graph with the seed as input drawing one tensor on `device`, compiled; returns
    `run(seed) -> numpy values`."""
    like = TensorType(dtype, shape, DeviceRef.from_device(device))
    with Graph(f"random_{kind}", input_types=[ops.random.SeedType]) as g:
        ops.random.set_seed(g.inputs[0].tensor)
        g.output(getattr(ops.random, kind)(like, **params))
    m = session(device).load(g)
    return lambda seed: host(m.execute(driver.Buffer.from_numpy(np.array(seed, np.int64)))[0], dtype)


def run(m, seed: int) -> np.ndarray:
    return m(seed)


def bits(a: np.ndarray) -> np.ndarray:
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


SEEDS = [0, 1, 123456789, -(2**63), 2**63 - 1]


@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_uniform_is_the_reference_bit_for_bit(dtype):
    n = 10_007
    for lo, hi in [(0.0, 1.0), (-2.5, 3.0), (-1.0, -0.25)]:
        m = model("uniform", dtype, [n], driver.CPU(), range=(lo, hi))
        for seed in SEEDS[:3]:
            got = run(m, seed)
            want = uniform_ref(dtype, seed, n, lo, hi)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(bits(got), bits(want), err_msg=f"{dtype} [{lo}, {hi}) seed {seed}")
            assert float(got.astype(np.float64).min()) >= lo and float(got.astype(np.float64).max()) < hi


def test_seed_bits_include_negative_and_extreme_seeds():
    m = model("uniform", DType.float32, [13], driver.CPU())
    outs = [run(m, s) for s in SEEDS]
    for s, got in zip(SEEDS, outs):
        np.testing.assert_array_equal(got, uniform_ref(DType.float32, s, 13))
    assert len({o.tobytes() for o in outs}) == len(SEEDS)


def _normal_tol(dtype: DType, v: np.ndarray, mean: float, std: float, r: np.ndarray) -> np.ndarray:
    eps = {DType.float32: 2.0**-23, DType.float64: 2.0**-52, DType.float16: 2.0**-10, DType.bfloat16: 2.0**-7,
           DType.float8_e4m3fn: 2.0**-3, DType.float8_e5m2: 2.0**-2}[dtype]
    # A few ulps of the result and of the terms; std * r bounds |std * z|. numpy rounds 2 pi u2
    # before its cos and sin (up to half an ulp of 2 pi, absolute), the kernels' sincospi does
    # not: the reference's own error is most of the float64 allowance.
    tiny = {DType.float16: 2.0**-24, DType.bfloat16: 2.0**-133, DType.float8_e4m3fn: 2.0**-9,
            DType.float8_e5m2: 2.0**-16}.get(dtype, 0.0)
    return 8 * eps * (np.abs(v) + abs(mean) + std * r) + tiny


@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_normal_follows_box_muller(dtype):
    n = 10_001
    for mean, std in [(0.0, 1.0), (3.0, 0.25)]:
        m = model("gaussian", dtype, [n], driver.CPU(), mean=mean, std=std)
        got = run(m, 42).astype(np.float64)
        want, r = normal_ref(dtype, 42, n, mean, std)
        err = np.abs(got - want)
        tol = _normal_tol(dtype, want, mean, std, r)
        assert (err <= tol).all(), f"{dtype}: worst {err.max()} at {err.argmax()}"


def test_narrow_normals_are_the_float32_values_rounded():
    f = run(model("normal", DType.float32, [4099], driver.CPU(), mean=1.0, std=2.0), 7)
    for dtype in NARROW[1:]:
        got = run(model("normal", dtype, [4099], driver.CPU(), mean=1.0, std=2.0), 7)
        np.testing.assert_array_equal(bits(got), bits(f.astype(NP_TYPE[dtype])), err_msg=str(dtype))


def test_a_new_seed_input_runs_the_same_model():
    m = model("uniform", DType.float32, [64], driver.CPU())
    a, b, a2 = run(m, 1), run(m, 2), run(m, 1)
    np.testing.assert_array_equal(a, a2)
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(b, uniform_ref(DType.float32, 2, 64))


def test_symbolic_shapes_take_their_size_at_run_time():
    like = TensorType(DType.float32, ["batch", 3], DeviceRef.CPU())
    types = [TensorType(DType.float32, ["batch", 3], DeviceRef.CPU()), ops.random.SeedType]
    with Graph("sym", input_types=types) as g:
        ops.random.set_seed(g.inputs[1].tensor)
        u = ops.random.uniform(like, range=(-1, 1))
        g.output(u + g.inputs[0].tensor)
    assert list(u.shape) == ["batch", 3]
    m = session().load(g)
    for batch in (1, 5, 17):
        x = np.zeros((batch, 3), np.float32)
        out = m.execute(driver.Buffer.from_numpy(x), driver.Buffer.from_numpy(np.array(9, np.int64)))[0].to_numpy()
        assert out.shape == (batch, 3)
        np.testing.assert_array_equal(out.reshape(-1), uniform_ref(DType.float32, 9, batch * 3, -1.0, 1.0))


def test_draws_in_one_graph_differ_and_repeat_with_the_seed():
    like = TensorType(DType.float64, [7], DeviceRef.CPU())
    with Graph("two", input_types=[]) as g:
        ops.random.set_seed(5)
        a, b = ops.random.uniform(like), ops.random.normal(like)
        ops.random.set_seed(5)
        c = ops.random.uniform(like)
        g.output(a, b, c)
    ra, rb, rc = [o.to_numpy() for o in session().load(g).execute()]
    np.testing.assert_array_equal(ra, uniform_ref(DType.float64, 5, 7, stream=0))
    np.testing.assert_allclose(rb, normal_ref(DType.float64, 5, 7, stream=1)[0], rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(ra, rc)
    assert ops.random.SeedType == TensorType(DType.int64, [], DeviceRef.CPU())


@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_large_draws_have_the_distributions_moments(dtype):
    n = 200_000
    u = run(model("uniform", dtype, [n], driver.CPU(), range=(-3, 5)), 11).astype(np.float64)
    g = run(model("normal", dtype, [n], driver.CPU(), mean=1.5, std=2.0), 12).astype(np.float64)
    coarse = dtype in (DType.float8_e4m3fn, DType.float8_e5m2)
    tol = 0.1 if coarse else 0.02
    assert u.min() >= -3 and u.max() < 5
    assert abs(u.mean() - 1.0) < tol * 2 and abs(u.std() - 8 / np.sqrt(12)) < tol * 2
    assert abs(g.mean() - 1.5) < tol * 2 and abs(g.std() - 2.0) < tol * 2
    if dtype in (DType.float32, DType.float64, DType.float16):
        # Every one of 40 equal bins of the range is hit about equally (bfloat16 and float8 put
        # unequal numbers of their values in the bins), and the normal mass within one std.
        hist = np.histogram(u, bins=40, range=(-3, 5))[0]
        assert np.abs(hist / (n / 40) - 1).max() < 0.1, hist
        assert abs(np.mean(np.abs(g - 1.5) < 2.0) - 0.6827) < 0.01


def test_bad_parameters_are_errors_naming_the_op_and_argument():
    like = TensorType(DType.float32, [4], DeviceRef.CPU())
    with Graph("errors", input_types=[]):
        with pytest.raises(RuntimeError, match="No seed set"):
            ops.random.uniform(like)
        ops.random.set_seed(1)
        with pytest.raises(ValueError, match="random_normal: std: must be positive"):
            ops.random.gaussian(like, std=0.0)
        with pytest.raises(ValueError, match="random_normal: std: must be positive"):
            ops.random.normal(like, std=-1)
        with pytest.raises(ValueError, match=r"random_uniform: range: min must be less than max, got \(1, 1\)"):
            ops.random.uniform(like, range=(1, 1))
        with pytest.raises(ValueError, match="random_uniform: range: .* holds no bfloat16 value"):
            ops.random.uniform(TensorType(DType.bfloat16, [4], DeviceRef.CPU()), range=(1.001, 1.002))
        with pytest.raises(ValueError, match="uniform: range must be"):
            ops.random.uniform(like, range=(0, 1, 2))
        with pytest.raises(TypeError, match="random_uniform: dtype: must be a floating-point dtype, got int32"):
            ops.random.uniform(TensorType(DType.int32, [4], DeviceRef.CPU()))
        with pytest.raises(TypeError, match="gaussian: mean must be a number"):
            ops.random.gaussian(like, mean="0")
        with pytest.raises(TypeError, match="like must be a TensorType"):
            ops.random.uniform([4])
        with pytest.raises(TypeError, match="set_seed: seed must be an int"):
            ops.random.set_seed(1.5)
        with pytest.raises(ValueError, match="does not fit in int64"):
            ops.random.set_seed(2**63)
    with Graph("bad_seed", input_types=[TensorType(DType.float32, [], DeviceRef.CPU()),
                                        TensorType(DType.int64, [2], DeviceRef.CPU())]) as g:
        with pytest.raises(TypeError, match="int64"):
            ops.random.set_seed(g.inputs[0].tensor)
        with pytest.raises(ValueError, match="scalar"):
            ops.random.set_seed(g.inputs[1].tensor)


def test_seed_returns_the_graphs_seed_value():
    with Graph("seeded", input_types=[ops.random.SeedType]) as g:
        with pytest.raises(RuntimeError):
            ops.random.seed()
        ops.random.set_seed(g.inputs[0].tensor)
        assert ops.random.seed() is g.inputs[0].tensor


# ---- the eager API -----------------------------------------------------------------------------


def splitmix64(state: int, k: int) -> int:
    z = (state + (k + 1) * 0x9E3779B97F4A7C15) % 2**64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
    return z ^ (z >> 31)


def test_eager_tensors_take_their_keys_from_the_seed_and_creation_order():
    random.set_seed(77)
    a = random.uniform((3, 5), range=(-1, 2), dtype=DType.float32, device=driver.CPU()).to_numpy()
    b = random.gaussian((6,), dtype=DType.float64, device=driver.CPU()).to_numpy()
    np.testing.assert_array_equal(a.reshape(-1), uniform_ref(DType.float32, splitmix64(77, 0), 15, -1.0, 2.0))
    np.testing.assert_allclose(b, normal_ref(DType.float64, splitmix64(77, 1), 6)[0], rtol=1e-13, atol=1e-13)
    assert random.seed().item() == 77


def test_eager_values_are_the_same_under_lazy():
    from max import functional as F

    random.set_seed(3)
    eager = [random.uniform((4,), device=driver.CPU()).to_numpy(), random.normal((5,), device=driver.CPU()).to_numpy()]
    random.set_seed(3)
    with F.lazy():
        x = random.uniform((4,), device=driver.CPU())
        unused = random.normal((1000,), device=driver.CPU())  # never realized
        y = random.normal((5,), device=driver.CPU())
    del unused
    np.testing.assert_array_equal(x.to_numpy(), eager[0])
    # y is the third tensor after set_seed here, the second in the eager run.
    random.set_seed(3)
    random.uniform((4,), device=driver.CPU())
    random.normal((1000,), device=driver.CPU())
    np.testing.assert_array_equal(y.to_numpy(), random.normal((5,), device=driver.CPU()).to_numpy())


def test_eager_errors_and_every_float_dtype():
    random.set_seed(0)
    for dtype in ALL:
        t = random.uniform((9,), range=(0, 1), dtype=dtype, device=driver.CPU())
        assert t.dtype == dtype and (host(t._realize().storage, dtype).astype(np.float64) < 1).all()
    with pytest.raises(TypeError, match="floating-point"):
        random.uniform((2,), dtype=DType.int32, device=driver.CPU())
    with pytest.raises(ValueError, match="std must be positive"):
        random.gaussian((2,), std=-1.0)
    with pytest.raises(ValueError, match="int64"):
        random.set_seed(2**64)


# ---- per device --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_device_uniform_is_the_cpus_bits(device, dtype):
    n = 3 * 4096 + 7  # a partial block at the end
    cpu = run(model("uniform", dtype, [n], driver.CPU(), range=(-2, 3)), 31)
    dev = run(model("uniform", dtype, [n], device, range=(-2, 3)), 31)
    np.testing.assert_array_equal(bits(dev), bits(cpu))
    np.testing.assert_array_equal(bits(dev), bits(uniform_ref(dtype, 31, n, -2.0, 3.0)))


@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_device_normal_is_within_a_few_ulps_of_the_cpus(device, dtype):
    n = 3 * 4096 + 5
    cpu = run(model("normal", dtype, [n], driver.CPU(), mean=0.5, std=3.0), 8).astype(np.float64)
    dev = run(model("normal", dtype, [n], device, mean=0.5, std=3.0), 8).astype(np.float64)
    want, r = normal_ref(dtype, 8, n, 0.5, 3.0)
    tol = _normal_tol(dtype, want, 0.5, 3.0, r)
    assert (np.abs(dev - want) <= tol).all()
    # The devices' own difference: a few ulps of float32 (float64) of the value, or one step
    # of the narrow dtype where the two round a float32 value on either side of a tie.
    assert (np.abs(dev - cpu) <= tol).all()


def test_device_eager_tensors_equal_the_cpus(device):
    random.set_seed(2024)
    cpu = [host(random.uniform((1000,), dtype=DType.bfloat16, device=driver.CPU())._realize().storage, DType.bfloat16),
           random.normal((999,), dtype=DType.float32, device=driver.CPU()).to_numpy()]
    random.set_seed(2024)
    dev = [random.uniform((1000,), dtype=DType.bfloat16, device=device),
           random.normal((999,), dtype=DType.float32, device=device)]
    assert all(t.device == device for t in dev)
    np.testing.assert_array_equal(bits(host(dev[0]._realize().storage, DType.bfloat16)), bits(cpu[0]))
    np.testing.assert_allclose(dev[1].to(driver.CPU()).to_numpy(), cpu[1], rtol=1e-6, atol=1e-6)


def test_arguments_of_the_wrong_kind_are_named():
    from max import random

    with pytest.raises(TypeError, match="random.uniform: shape must be a sequence of dims, got 3"):
        random.uniform(3)
    with pytest.raises(ValueError, match=r"random.uniform: range must be \(min, max\), got 1"):
        random.uniform((2,), range=1)
    with pytest.raises(TypeError, match="random.uniform: range's min must be a number, got 'a'"):
        random.uniform((2,), range=("a", 1))
    with pytest.raises(TypeError, match="random.gaussian: mean must be a number, got 'a'"):
        random.gaussian((2,), mean="a")
    with pytest.raises(TypeError, match="random.gaussian: std must be a number, got None"):
        random.gaussian((2,), std=None)
