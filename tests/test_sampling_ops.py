"""sample_tokens and apply_penalties per device, on fresh random inputs.

Three references for sample_tokens:
  * an independent float64 computation of each row's keep set (top-k, min-p, top-p): the token
    must lie in it (taken with a slack of 1e-5 at the min-p and top-p boundaries, where the
    kernels' float32 arithmetic may keep one value more or less than float64 would);
  * a numpy reimplementation of the kernels' exact arithmetic (crates/runtime/src/cpu/sampling/
    math.rs: the order-preserving keys, the fixed-point weights, our own ln and exp, the
    splitmix64 Gumbel noise): the token must equal it exactly, on every device;
  * the distribution: one row drawn with 20000 seeds must follow softmax(z) renormalised on its
    keep set (chi-square and total variation bounds; the seeds and the row are fixed, so the
    test is deterministic).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType
from max.nn import sampling_ops

F32 = np.float32


def _session(device):
    return engine.InferenceSession(devices=[driver.CPU()] if device.is_host else [driver.CPU(), device])


def _buf(x: np.ndarray, device) -> driver.Buffer:
    return driver.Buffer.from_numpy(np.ascontiguousarray(x)).to(device)


# ---- the exact arithmetic, as math.rs and sampling_math.cuh do it -----------------------------------


def _f(bits: int) -> np.float32:
    return np.array(bits, np.uint32).view(np.float32)[()]


SQRT2, LN2_HI, LN2_LO, INV_LN2 = _f(0x3FB504F3), _f(0x3F317200), _f(0x35BFBE8E), _f(0x3FB8AA3B)
LN_C = [_f(b) for b in (0x3F2AAAAB, 0x3ECCCCCD, 0x3E924925, 0x3E638E39, 0x3E3A2E8C)]
EXP_C = [_f(b) for b in (0x3F000000, 0x3E2AAAAB, 0x3D2AAAAB, 0x3C088889, 0x3AB60B61, 0x39500D01)]
BELOW_ONE = _f(0x3F7FFFFF)
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
U64 = np.uint64


def _ln(x: np.ndarray) -> np.ndarray:
    """math.rs's ln for positive finite float32 values, one float32 operation at a time."""
    x = np.asarray(x, F32)
    sub = x < _f(0x00800000)
    x = x * np.where(sub, F32(2.0**24), F32(1))  # subnormals become normal, exactly
    bits = x.view(np.uint32)
    e = np.where(sub, -24, 0) + (bits >> 23).astype(np.int64) - 127
    m = ((bits & 0x7FFFFF) | 0x3F800000).astype(np.uint32).view(F32)
    big = m > SQRT2
    m = np.where(big, m * F32(0.5), m)
    e = e + big
    s = (m - F32(1)) / (m + F32(1))
    s2 = s * s
    p = s2 * (LN_C[0] + s2 * (LN_C[1] + s2 * (LN_C[2] + s2 * (LN_C[3] + s2 * LN_C[4]))))
    ln_m = (s + s) + s * p
    ef = e.astype(F32)
    return ef * LN2_HI + (ef * LN2_LO + ln_m)


def _weight(d: np.ndarray) -> np.ndarray:
    """exp(d) (d <= 0) in units of 2^-40, truncated, as uint64."""
    d = np.asarray(d, F32)
    ok = d >= F32(-32)
    d = np.where(ok, d, F32(0))
    k = np.floor(d * INV_LN2 + F32(0.5))
    r = (d - k * LN2_HI) - k * LN2_LO
    c = EXP_C
    p = F32(1) + r * (F32(1) + r * (c[0] + r * (c[1] + r * (c[2] + r * (c[3] + r * (c[4] + r * c[5]))))))
    scale = ((k.astype(np.int64) + 127).astype(np.uint32) << 23).view(F32)
    e = np.where(ok, p * scale, F32(0))
    return (e * F32(2.0**40)).astype(np.uint64)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    z = x + GOLDEN
    z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
    return z ^ (z >> U64(31))


def _gumbel(seed: int, n: int) -> np.ndarray:
    i = np.arange(n, dtype=np.uint64)
    h = _splitmix64(U64(seed) ^ ((i + U64(1)) * GOLDEN))
    j = (h >> U64(40)).astype(F32)
    u = np.minimum((j + F32(0.5)) * F32(2.0**-24), BELOW_ONE)
    return -_ln(-_ln(u))


def _canon(v: np.ndarray) -> np.ndarray:
    v = np.where(np.isnan(v), F32(-np.inf), v).astype(F32)
    return np.where(v == 0, F32(0), v).astype(F32)


def _key(v: np.ndarray) -> np.ndarray:
    b = np.asarray(v, F32).view(np.uint32)
    return np.where(b >> 31 != 0, ~b, b | np.uint32(0x80000000)).astype(np.int64)


def _greedy(x: np.ndarray) -> int:
    return int(np.argmax(np.where(np.isnan(x), -np.inf, x)))


def _exact(x, t, k, p, mp, seed) -> int:
    """The token of one row, by the kernels' arithmetic (the keep set by sorting)."""
    x = np.asarray(x, F32)
    if not t > 0 or k == 1:
        return _greedy(x)
    with np.errstate(over="ignore"):
        z = _canon(x / F32(t))
    first = int(np.argmax(z))
    m = z[first]
    if not np.isfinite(m):  # quotients that overflow, or nothing above -inf: greedy over the logits
        return _greedy(x)
    keys, top, n = _key(z), int(_key(m)), len(z)
    thr = 0
    if 1 < k < n:
        thr = int(np.sort(keys)[::-1][k - 1])
    if mp > 0:
        thr = max(thr, int(_key(_canon(F32(m) + _ln(F32(mp))))))
    thr = min(thr, top)
    if p < 1:
        kept = keys >= thr
        kk, w = keys[kept], _weight(z[kept] - m)
        target = float(F32(p)) * float(w.sum(dtype=np.uint64))
        order = np.argsort(-kk, kind="stable")
        acc = np.cumsum(w[order], dtype=np.uint64).astype(np.float64)
        thr = min(max(thr, int(kk[order][np.argmax(acc >= target)])), top)
    s = np.where(keys >= thr, z + _gumbel(seed, n), F32(-np.inf))
    return int(np.argmax(s))


# ---- the independent float64 reference of the keep set ---------------------------------------


def _keep(x, t, k, p, mp, slack=0.0) -> np.ndarray:
    """Row x's keep set in float64 (z is the float32 quotient the op defines); slack > 0
    widens it at the min-p and top-p boundaries, slack < 0 narrows it."""
    z = (np.asarray(x, F32) / F32(t)).astype(np.float64)
    z[np.isnan(z)] = -np.inf
    m, n = z.max(), len(z)
    thr = -np.inf
    if 1 < k < n:
        thr = np.sort(z)[::-1][k - 1]
    if mp > 0:
        thr = max(thr, m + math.log(mp) - slack * (1 + abs(m)))
    thr = min(thr, m)
    if p < 1:
        zs = np.sort(z[z >= thr])[::-1]
        cs = np.cumsum(np.exp(zs - m))
        i = int(np.argmax(cs >= min(p + slack, 1.0) * cs[-1] * (1 - 1e-12)))
        thr = min(max(thr, zs[i]), m)
    return (z >= thr) & np.isfinite(z)


# ---- running the ops --------------------------------------------------------------------------


def _sample_graph(device, vocab):
    ref = DeviceRef.from_device(device)
    types = [
        TensorType(DType.float32, ["b", vocab], ref),
        TensorType(DType.float32, ["b"], ref),
        TensorType(DType.int64, ["b"], ref),
        TensorType(DType.float32, ["b"], ref),
        TensorType(DType.float32, ["b"], ref),
        TensorType(DType.uint64, ["b"], ref),
    ]
    return Graph("sample", sampling_ops.sample_tokens, input_types=types)


def _sample(device, x, t, k, p, mp, seed, model=None):
    x = np.asarray(x, F32)
    model = model or _session(device).load(_sample_graph(device, x.shape[1]))
    args = [
        x,
        np.asarray(t, F32),
        np.asarray(k, np.int64),
        np.asarray(p, F32),
        np.asarray(mp, F32),
        np.asarray(seed, np.uint64),
    ]
    return model.execute(*[_buf(a, device) for a in args])[0].to_numpy()


def _params(rng, b, vocab):
    t = rng.choice([0.3, 0.7, 1.0, 1.3], b)
    k = rng.choice([0, -1, 2, 5, 40, vocab - 1, vocab, vocab + 3], b)
    p = rng.choice([1.0, 0.95, 0.8, 0.5, 0.1, 0.0], b)
    mp = rng.choice([0.0, 0.0, 0.05, 0.2], b)
    seed = rng.integers(0, 2**63, b, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, b, dtype=np.uint64)
    return t, k, p, mp, seed


def test_greedy_rows_are_the_argmax(device, rng):
    b, vocab = 12, 3000
    x = (rng.standard_normal((b, vocab)) * 3).astype(F32)
    x[1, 100] = x[1, 2000] = x[1].max() + 1  # a tie: the lower index wins
    x[2, ::7] = np.nan
    x[3] = -np.inf
    x[4, :] = np.nan
    x[5, 17] = np.inf
    t = np.where(np.arange(b) % 2 == 0, 0.0, 0.8)
    k = np.where(np.arange(b) % 2 == 0, 0, 1)
    t[6], k[6] = -1.0, 7
    t[7], k[7] = np.nan, 0
    out = _sample(device, x, t, k, np.full(b, 0.9), np.full(b, 0.1), np.arange(b))
    want = [_greedy(r) for r in x]
    assert list(out) == want
    assert out[1] == 100 and out[3] == 0 and out[4] == 0 and out[5] == 17


@pytest.mark.parametrize("vocab", [1000, 32000])
def test_tokens_are_kept_and_bit_exact(device, rng, vocab):
    """Rows with different parameters in one batch: each token is in its row's float64 keep
    set and equals the exact reimplementation, and the same batch gives the same tokens again."""
    b = 48
    scale = rng.choice([1.0, 3.0, 8.0], (b, 1))
    x = (rng.standard_normal((b, vocab)) * scale).astype(F32)
    x[0, :5] = x[0].max() + 2  # ties at the top
    x[1, rng.integers(0, vocab, 50)] = -np.inf
    t, k, p, mp, seed = _params(rng, b, vocab)
    model = _session(device).load(_sample_graph(device, vocab))
    out = _sample(device, x, t, k, p, mp, seed, model)
    for r in range(b):
        args = (x[r], t[r], k[r], p[r], mp[r])
        may = _keep(*args, slack=1e-5)
        must = _keep(*args, slack=-1e-5)
        assert may[out[r]], f"row {r} {args[1:]}: token {out[r]} outside the keep set of {may.sum()}"
        assert must.sum() >= 1
        assert out[r] == _exact(*args, int(seed[r])), f"row {r} {args[1:]}"
    again = _sample(device, x, t, k, p, mp, seed, model)
    np.testing.assert_array_equal(out, again)


def test_a_long_vocabulary(device, rng):
    """Rows of 151936 logits (Qwen2's vocabulary), with every filter."""
    b, vocab = 4, 151936
    x = (rng.standard_normal((b, vocab)) * 2.5).astype(F32)
    t = [0.7, 1.0, 1.2, 0.9]
    k = [50, 0, 1000, 20]
    p = [0.9, 0.95, 1.0, 0.5]
    mp = [0.0, 0.02, 0.0, 0.1]
    seed = rng.integers(0, 2**63, b, dtype=np.uint64)
    out = _sample(device, x, t, k, p, mp, seed)
    for r in range(b):
        assert _keep(x[r], t[r], k[r], p[r], mp[r], slack=1e-5)[out[r]]
        assert out[r] == _exact(x[r], t[r], k[r], p[r], mp[r], int(seed[r]))


@pytest.mark.parametrize("vocab", [10, 600_001])
def test_rows_shorter_than_a_cluster_and_rows_streamed(device, rng, vocab):
    """On the GPU a row is shared by up to 8 CTAs: a row of 10 values leaves some of them no
    value at all, and one of 600,001 is too long for the CTAs to keep its keys in shared memory
    (each pass reads the logits again). Both give the exact tokens, greedy rows too."""
    b = 3
    x = (rng.standard_normal((b, vocab)) * 3).astype(F32)
    x[2, vocab - 1] = x[2].max() + 1  # the largest value in the last CTA's slice
    t = [0.8, 1.1, 0.0]
    k = [0, min(vocab - 1, 40), 0]
    p = [0.9, 1.0, 1.0]
    mp = [0.0, 0.05, 0.0]
    seed = rng.integers(0, 2**63, b, dtype=np.uint64)
    out = _sample(device, x, t, k, p, mp, seed)
    for r in range(2):
        assert out[r] == _exact(x[r], t[r], k[r], p[r], mp[r], int(seed[r])), f"row {r}"
    assert out[2] == _greedy(x[2]) == vocab - 1


@pytest.mark.parametrize("vocab", [32000, 128256])
def test_top_p_after_top_k_and_min_p_ties_and_all(device, rng, vocab):
    """top_p over the values top-k or min-p keep: few, tied at the threshold in large numbers
    (half or a third of the row), and none cut (no threshold): the exact tokens in every case."""
    b = 8
    x = (rng.standard_normal((b, vocab)) * 2).astype(F32)
    x[1, : vocab // 2] = 3.0  # half the row tied at the top: top-k 10 keeps all of them
    x[2, rng.permutation(vocab)[: vocab // 3]] = 2.5
    x[2, :5] = 4.0  # five above a third of the row, tied
    t = [0.8, 1.0, 1.0, 0.6, 1.3, 0.9, 1.0, 0.7]
    k = [50, 10, 20, 1000, 0, 2, vocab // 2, 40]
    p = [0.9, 0.5, 0.95, 0.8, 0.9, 0.7, 0.99, 0.0]
    mp = [0.0, 0.0, 0.0, 0.0, 0.05, 0.0, 0.0, 0.1]
    seed = rng.integers(0, 2**63, b, dtype=np.uint64)
    model = _session(device).load(_sample_graph(device, vocab))
    for _ in range(2):  # new draws: the same tokens as the reference each time
        seed = seed + np.uint64(1)
        out = _sample(device, x, t, k, p, mp, seed, model)
        for r in range(b):
            assert out[r] == _exact(x[r], t[r], k[r], p[r], mp[r], int(seed[r])), f"row {r}"


@pytest.mark.parametrize("b", [32, 64])
def test_top_p_after_top_k_at_larger_batches(device, rng, b):
    """At 32 and 64 rows of 128,256 logits a GPU CTA's slice has no room for its exps (64: nor
    its keys, read from the logits at every pass): top-p after top-k or min-p walks the list of
    kept values, or (more kept values than the list holds) the slice; the exact tokens."""
    vocab = 128256
    x = (rng.standard_normal((b, vocab)) * 2).astype(F32)
    cfg = [(0.8, 50, 0.9, 0.0), (1.0, 20000, 0.9, 0.0), (1.0, 0, 0.95, 1e-4), (0.7, 400, 0.5, 0.0),
           (1.3, 2, 0.7, 0.0), (1.0, 0, 0.9, 0.0), (0.9, 1000, 0.99, 0.02), (1.0, 60000, 0.3, 0.0)]
    t, k, p, mp = (np.array([c[i] for c in cfg] * (b // len(cfg))) for i in range(4))
    seed = rng.integers(0, 2**63, b, dtype=np.uint64)
    out = _sample(device, x, t, k, p, mp, seed)
    for r in range(b):
        assert out[r] == _exact(x[r], t[r], int(k[r]), p[r], mp[r], int(seed[r])), f"row {r}"


def test_no_top_k_for_k_at_most_0_or_at_least_vocab(device, rng):
    b, vocab = 64, 500
    x = (rng.standard_normal((1, vocab)) * 2).astype(F32).repeat(b, 0)
    seeds = rng.integers(0, 2**63, b, dtype=np.uint64)
    runs = [
        _sample(device, x, np.ones(b), np.full(b, k), np.full(b, 0.9), np.zeros(b), seeds)
        for k in (0, -3, vocab, vocab + 9)
    ]
    for r in runs[1:]:
        np.testing.assert_array_equal(r, runs[0])
    assert len(set(runs[0])) > 5


def test_temperature_scales_the_logits(device, rng):
    """Temperature t gives the tokens of logits / t at temperature 1 (z is that float32
    quotient), and doubling logits and temperature together changes nothing."""
    b, vocab = 32, 800
    x = (rng.standard_normal((b, vocab)) * 2).astype(F32)
    t = rng.choice([0.25, 0.6, 1.7, 3.0], b).astype(F32)
    seeds = rng.integers(0, 2**63, b, dtype=np.uint64)
    p, mp, k = np.full(b, 0.9), np.full(b, 0.01), np.full(b, 100)
    hot = _sample(device, x, t, k, p, mp, seeds)
    scaled = _sample(device, x / t[:, None], np.ones(b), k, p, mp, seeds)
    doubled = _sample(device, x * F32(2), t * F32(2), k, p, mp, seeds)
    np.testing.assert_array_equal(hot, scaled)
    np.testing.assert_array_equal(hot, doubled)


def test_a_temperature_that_overflows_the_logits_is_greedy(device, rng):
    """A temperature so small that logits / temperature overflow float32 (1e-40 is a valid,
    denormal one) samples as its limit does, the greedy pick of the logits, whatever top_k,
    top_p and min_p say; not the first index whose quotient overflowed (the lowest positive
    logit's), nor token 0 where every quotient went to -inf."""
    b, vocab = 8, 2000
    x = (rng.standard_normal((b, vocab)) * 3).astype(F32)
    x[:, 1] = 0.5  # an early positive logit, below each row's largest
    x[3, 1500] = np.inf
    x[4, 7] = x[4, 1800] = x[4].max() + 1  # a tie: the lower index
    x[5] = -np.abs(x[5]) - 1  # every logit negative: every quotient overflows to -inf
    t = np.array([1e-40, 1e-38, 1e-44, 1e-40, 1e-40, 1e-40, 1e-39, 1e-41], F32)
    k = np.array([0, 5, 0, 0, 50, 0, 2, 0])
    p = np.array([1.0, 0.9, 0.5, 1.0, 1.0, 0.8, 1.0, 0.0])
    mp = np.array([0.0, 0.0, 0.1, 0.0, 0.0, 0.0, 0.5, 0.0])
    out = _sample(device, x, t, k, p, mp, rng.integers(0, 2**63, b, dtype=np.uint64))
    assert list(out) == [_greedy(r) for r in x]
    assert out[3] == 1500 and out[4] == 7 and out[5] == int(np.argmax(x[5])) != 0 and all(o != 1 for o in out)


def _wilson_hilferty(df: int, z: float = 4.753) -> float:
    """The chi-square quantile with df degrees of freedom at the normal quantile z (4.753:
    one in a million above it)."""
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + z * math.sqrt(h)) ** 3


@pytest.mark.parametrize(
    "t,k,p,mp",
    [(1.0, 0, 1.0, 0.0), (0.7, 6, 1.0, 0.0), (1.3, 0, 0.8, 0.0), (1.0, 0, 1.0, 0.08), (0.9, 10, 0.9, 0.02)],
)
def test_the_draws_follow_the_renormalised_softmax(device, t, k, p, mp):
    """20000 draws of one fixed row with seeds 0..19999: the counts over the kept tokens match
    softmax(z) renormalised on the keep set (chi-square below its one-in-a-million quantile,
    total variation below 0.02; the seeds are fixed, so this cannot flake), and no token
    outside the keep set is drawn."""
    n, vocab = 20000, 16
    x = np.array([2.0, 1.5, 1.4, 0.3, -0.2, 1.0, 0.9, -1.0, 0.5, 1.8, -2.5, 0.0, 1.1, -0.6, 0.7, 0.2], F32)
    keep = _keep(x, t, k, p, mp)
    assert (keep == _keep(x, t, k, p, mp, slack=1e-3)).all() and (keep == _keep(x, t, k, p, mp, slack=-1e-3)).all()
    rows = np.tile(x, (n, 1))
    out = _sample(device, rows, np.full(n, t), np.full(n, k), np.full(n, p), np.full(n, mp), np.arange(n))
    counts = np.bincount(out, minlength=vocab)
    assert counts[~keep].sum() == 0
    z = x.astype(np.float64) / np.float32(t)
    prob = np.where(keep, np.exp(z - z.max()), 0.0)
    prob /= prob.sum()
    kept = np.flatnonzero(keep)
    expected = prob[kept] * n
    chi2 = float((((counts[kept] - expected) ** 2) / expected).sum())
    tv = 0.5 * float(np.abs(counts / n - prob).sum())
    assert chi2 < _wilson_hilferty(max(len(kept) - 1, 1)), (chi2, counts, expected)
    assert tv < 0.02, tv
    for r in range(0, n, 997):
        assert out[r] == _exact(x, t, k, p, mp, r)


def test_one_kept_value_is_always_drawn(device, rng):
    """top_p = 0, min_p >= 1 or a dominant logit keep only the largest z."""
    b, vocab = 30, 300
    x = rng.standard_normal((b, vocab)).astype(F32)
    top = np.argmax(x, 1)
    p = np.where(np.arange(b) < 10, 0.0, 1.0)
    mp = np.where(np.arange(b) >= 10, 1.0, 0.0)
    mp[20:] = 3.0
    out = _sample(device, x, np.ones(b), np.zeros(b), p, mp, rng.integers(0, 2**63, b, dtype=np.uint64))
    np.testing.assert_array_equal(out, top)


# ---- apply_penalties --------------------------------------------------------------------------


def _penalty_graph(device, vocab):
    ref = DeviceRef.from_device(device)
    types = [
        TensorType(DType.float32, ["b", vocab], ref),
        TensorType(DType.int64, ["n"], ref),
        TensorType(DType.uint32, ["b1"], ref),
        TensorType(DType.uint32, ["b"], ref),
        TensorType(DType.float32, ["b"], ref),
        TensorType(DType.float32, ["b"], ref),
        TensorType(DType.float32, ["b"], ref),
    ]
    return Graph("penalties", sampling_ops.apply_penalties, input_types=types)


def _penalize(device, x, tokens, offsets, prompt, f, p, r):
    model = _session(device).load(_penalty_graph(device, x.shape[1]))
    args = [
        np.asarray(x, F32),
        np.asarray(tokens, np.int64),
        np.asarray(offsets, np.uint32),
        np.asarray(prompt, np.uint32),
        np.asarray(f, F32),
        np.asarray(p, F32),
        np.asarray(r, F32),
    ]
    return model.execute(*[_buf(a, device) for a in args])[0].to_numpy()


def _penalties_ref(x, tokens, offsets, prompt, f, p, r):
    """Loops over each row's distinct ids, in float32 in the kernels' order of operations."""
    out = np.array(x, F32)
    vocab = x.shape[1]
    for b in range(x.shape[0]):
        hist = [int(t) for t in tokens[offsets[b] : offsets[b + 1]]]
        gen = hist[prompt[b] :]
        for t in set(hist):
            if not 0 <= t < vocab:
                continue
            v = out[b, t]
            v = v / F32(r[b]) if v > 0 else v * F32(r[b])
            c = gen.count(t)
            if c:
                v = v - (F32(f[b]) * F32(c) + F32(p[b]))
            out[b, t] = v
    return out


def test_penalties_match_the_reference(device, rng):
    b, vocab = 6, 2000
    x = (rng.standard_normal((b, vocab)) * 3).astype(F32)
    lens = [0, 1, 40, 300, 17, 1200]
    prompt = [0, 1, 25, 100, 0, 1000]
    # Few distinct ids, so that many repeat, in the prompt and among the generated tokens.
    hist = [rng.integers(0, 60 if i % 2 else vocab, n) for i, n in enumerate(lens)]
    tokens = np.concatenate([[3, 3]] + hist + [[7]]).astype(np.int64)  # tokens outside every row too
    offsets = np.concatenate([[2], 2 + np.cumsum(lens)]).astype(np.uint32)
    f = rng.uniform(0, 1, b).astype(F32)
    p = rng.uniform(0, 1.5, b).astype(F32)
    r = rng.choice([1.0, 1.1, 1.3, 0.8], b).astype(F32)
    out = _penalize(device, x, tokens, offsets, prompt, f, p, r)
    want = _penalties_ref(x, tokens, offsets, prompt, f, p, r)
    np.testing.assert_array_equal(out, want)
    # And close to a float64 computation.
    np.testing.assert_allclose(out, want.astype(np.float64), rtol=1e-6, atol=1e-6)
    touched = np.zeros_like(x, bool)
    for row in range(b):
        touched[row, tokens[offsets[row] : offsets[row + 1]]] = True
    np.testing.assert_array_equal(out[~touched], x[~touched])


def test_penalties_with_out_of_range_ids(device, rng):
    """The CPU rejects ids outside the vocabulary; the GPU skips them."""
    x = rng.standard_normal((2, 50)).astype(F32)
    tokens = np.array([1, 50, 2, -1, 2, 7], np.int64)
    offsets, prompt = [0, 3, 6], [1, 0]
    f, p, r = [0.5, 0.5], [0.2, 0.2], [1.2, 1.2]
    if device.is_host:
        with pytest.raises(ValueError, match="apply_penalties: tokens: row 0 holds the token id 50"):
            _penalize(device, x, tokens, offsets, prompt, f, p, r)
    else:
        out = _penalize(device, x, tokens, offsets, prompt, f, p, r)
        np.testing.assert_array_equal(out, _penalties_ref(x, tokens, offsets, prompt, f, p, r))


def test_sampling_after_penalties(device, rng):
    """The two ops in one graph, as a decode step uses them: greedy rows pick the argmax of
    the penalized logits."""
    b, vocab = 3, 400
    ref = DeviceRef.from_device(device)
    x = rng.standard_normal((b, vocab)).astype(F32)
    hot = np.argmax(x, 1)
    tokens = np.concatenate([[h] * 3 for h in hot]).astype(np.int64)
    offsets = np.arange(0, 3 * b + 1, 3).astype(np.uint32)

    def body(logits, toks, offs, plen, fr, pr, rep, t, k, p, mp, seed):
        penalized = sampling_ops.apply_penalties(logits, toks, offs, plen, fr, pr, rep)
        return sampling_ops.sample_tokens(penalized, t, k, p, mp, seed)

    types = [
        TensorType(DType.float32, [b, vocab], ref),
        TensorType(DType.int64, [3 * b], ref),
        TensorType(DType.uint32, [b + 1], ref),
        TensorType(DType.uint32, [b], ref),
        *[TensorType(DType.float32, [b], ref)] * 3,
        TensorType(DType.float32, [b], ref),
        TensorType(DType.int64, [b], ref),
        TensorType(DType.float32, [b], ref),
        TensorType(DType.float32, [b], ref),
        TensorType(DType.uint64, [b], ref),
    ]
    model = _session(device).load(Graph("step", body, input_types=types))
    args = [
        x, tokens, offsets, np.zeros(b, np.uint32), np.full(b, 10.0, F32), np.zeros(b, F32), np.ones(b, F32),
        np.zeros(b, F32), np.zeros(b, np.int64), np.ones(b, F32), np.zeros(b, F32), np.zeros(b, np.uint64),
    ]
    out = model.execute(*[_buf(a, device) for a in args])[0].to_numpy()
    penalized = _penalties_ref(x, tokens, offsets, np.zeros(b, np.uint32), np.full(b, 10.0), np.zeros(b), np.ones(b))
    want = np.argmax(penalized, 1)
    np.testing.assert_array_equal(out, want)
    assert (out != hot).all()


# ---- staging errors ---------------------------------------------------------------------------


def _types(b="b", vocab=100, **dtypes):
    ref = DeviceRef.CPU()
    names = ["logits", "temperature", "top_k", "top_p", "min_p", "seed"]
    default = [DType.float32, DType.float32, DType.int64, DType.float32, DType.float32, DType.uint64]
    out = []
    for name, d in zip(names, default):
        d = dtypes.get(name, d)
        shape = dtypes.get(name + "_shape", [b, vocab] if name == "logits" else [b])
        out.append(TensorType(d, shape, ref))
    return out


def test_staging_errors_name_the_argument():
    stage = sampling_ops.sample_tokens
    with pytest.raises(TypeError, match="sample_tokens: top_k: must be int64, got int32"):
        Graph("bad", stage, input_types=_types(top_k=DType.int32))
    with pytest.raises(TypeError, match="sample_tokens: logits: must be float32, got bfloat16"):
        Graph("bad", stage, input_types=_types(logits=DType.bfloat16))
    with pytest.raises(TypeError, match="sample_tokens: seed: must be uint64"):
        Graph("bad", stage, input_types=_types(seed=DType.int64))
    with pytest.raises(ValueError, match="sample_tokens: temperature: one value per row of logits: 3 differs from 4"):
        Graph("bad", stage, input_types=_types(b=4, temperature_shape=[3]))
    with pytest.raises(ValueError, match=r"sample_tokens: logits: must be \[batch, vocab\]"):
        Graph("bad", stage, input_types=_types(logits_shape=[8]))
    ref = DeviceRef.CPU()
    pen = [
        TensorType(DType.float32, [4, 100], ref),
        TensorType(DType.int64, ["n"], ref),
        TensorType(DType.uint32, [4], ref),
        TensorType(DType.uint32, [4], ref),
        TensorType(DType.float32, [4], ref),
        TensorType(DType.float32, [4], ref),
        TensorType(DType.float32, [4], ref),
    ]
    msg = r"apply_penalties: offsets: batch \+ 1 offsets for the rows of logits: 3 differs from 4"
    with pytest.raises(ValueError, match=msg):
        Graph("bad", sampling_ops.apply_penalties, input_types=pen)
    pen[2] = TensorType(DType.uint32, [5], ref)
    pen[1] = TensorType(DType.int32, ["n"], ref)
    with pytest.raises(TypeError, match="apply_penalties: tokens: must be int64, got int32"):
        Graph("bad", sampling_ops.apply_penalties, input_types=pen)
    pen[1] = TensorType(DType.int64, ["n"], ref)
    pen[5] = TensorType(DType.float32, [3], ref)
    with pytest.raises(ValueError, match="apply_penalties: presence: one value per row of logits: 3 differs from 4"):
        Graph("bad", sampling_ops.apply_penalties, input_types=pen)


def test_run_time_batch_mismatch_is_an_error(device):
    """Different symbolic batch dims pass staging; the kernels check the values they get."""
    ref = DeviceRef.from_device(device)
    dtypes = [DType.float32, DType.float32, DType.int64, DType.float32, DType.float32, DType.uint64]
    types = [TensorType(DType.float32, ["b", 10], ref)]
    types += [TensorType(d, [f"b{i}"], ref) for i, d in enumerate(dtypes[1:])]
    model = _session(device).load(Graph("loose", sampling_ops.sample_tokens, input_types=types))
    x = np.zeros((3, 10), F32)
    with pytest.raises(ValueError, match="sample_tokens: top_p: holds 2 values for 3 rows of logits"):
        _sample(device, x, np.ones(3), np.zeros(3), np.ones(2), np.zeros(3), np.zeros(3), model)
