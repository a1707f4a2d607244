"""Buffer._cast on each device (the host loops, the CUDA cast kernels) against numpy/ml_dtypes,
for every pair of cast dtypes.

The reference is numpy's own astype (ml_dtypes for bfloat16 and float8). Where numpy leaves the
result undefined (out-of-range or NaN float -> int) the engine's rule (saturate, NaN -> 0) is
checked on its own. On the GPU the kernels also match the host cast bit for bit for all 225
dtype pairs and every bit pattern class (NaN, inf, out-of-range, subnormal) random bits hit.
"""

import ml_dtypes
import numpy as np
import pytest

from helpers import CAST_DTYPES, VALUE_TYPES, random_bits, random_values
from max import driver
from max.dtype import DType


def on(device, a: np.ndarray) -> driver.Buffer:
    """`a` in a buffer on `device`."""
    return driver.Buffer.from_numpy(a).to(device)


def reference(src: np.ndarray, to: DType) -> np.ndarray:
    if src.dtype.kind == "V" or src.dtype in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.bfloat16):
        src = src.astype(np.float64)  # exact; ml_dtypes converts through float32 otherwise
    with np.errstate(over="ignore", invalid="ignore"):
        return src.astype(VALUE_TYPES[to])


def safe_values(rng, src: DType, to: DType, n: int) -> np.ndarray:
    """Values whose conversion numpy defines: floats within the integer target's range."""
    v = random_values(rng, src, (n,))
    if src.is_float() and (to.is_integral()):
        info = np.iinfo(VALUE_TYPES[to])
        v64 = v.astype(np.float64)
        ok = np.isfinite(v64) & (v64 > info.min - 1) & (v64 < float(info.max) * (1 - 2**-53))
        v = v[ok]
    if src.is_float() and to in (DType.float8_e4m3fn, DType.float8_e5m2, DType.bfloat16):
        v = v.astype(np.float32).astype(VALUE_TYPES[src]) if src is DType.float64 else v
    if src.is_integral() and to in (DType.bfloat16, DType.float8_e4m3fn, DType.float8_e5m2, DType.float16):
        v = v[np.abs(v.astype(np.float64)) < 2**24]
    return v


@pytest.mark.parametrize("src", CAST_DTYPES, ids=lambda d: d.name)
def test_cast_matches_numpy(rng, device, src):
    for to in CAST_DTYPES:
        v = safe_values(rng, src, to, 4000)
        got = on(device, v)._cast(to)
        assert got.dtype is to and got.device == device
        out = got.to_numpy()
        expected = reference(v, to)
        if to.is_float8():
            out = out.view(VALUE_TYPES[to])
        bits = np.uint8 if to.size_in_bytes == 1 else {2: np.uint16, 4: np.uint32, 8: np.uint64}[to.size_in_bytes]
        mismatch = out.view(bits) != expected.view(bits)
        # NaN payloads differ between libraries; the engine's NaN is canonical (checked below)
        if to.is_float():
            both_nan = np.isnan(out.astype(np.float64)) & np.isnan(expected.astype(np.float64))
            mismatch &= ~both_nan
        assert not mismatch.any(), f"{src.name}->{to.name}: {v[mismatch][:5]} -> {out[mismatch][:5]} vs {expected[mismatch][:5]}"


def test_float_to_int_saturates_and_nan_is_zero(device):
    v = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 127.9, -128.9, 300.0], np.float32)
    out = on(device, v)._cast(DType.int8).to_numpy()
    assert out.tolist() == [0, 127, -128, 127, -128, 127, -128, 127]
    out = on(device, v)._cast(DType.uint64).to_numpy()
    assert out.tolist() == [0, 2**64 - 1, 0, 2**64 - 1, 0, 127, 0, 300]
    out = on(device, v)._cast(DType.bool).to_numpy()
    assert out.tolist() == [True] * 8


def test_nan_is_canonical_with_sign(device):
    v = np.array([0x7FC12345, 0xFF812345], np.uint32).view(np.float32)
    b = on(device, v)
    assert b._cast(DType.float16).view(DType.uint16).to_numpy().tolist() == [0x7E00, 0xFE00]
    assert b._cast(DType.bfloat16).view(DType.uint16).to_numpy().tolist() == [0x7FC0, 0xFFC0]
    assert b._cast(DType.float8_e4m3fn).to_numpy().tolist() == [0x7F, 0xFF]
    assert b._cast(DType.float8_e5m2).to_numpy().tolist() == [0x7E, 0xFE]


def test_float64_to_narrow_types_round_once(device):
    # 1 + 2^-11 + 2^-40 is above the float16 halfway point: one correct rounding goes up,
    # rounding through float32 first would go down.
    v = np.array([1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-40, 1 + 2**-11], np.float64)
    b = on(device, v)
    assert b._cast(DType.float16).to_numpy().tolist() == [1 + 2**-10, 1 + 2**-8, 1.0]
    assert b._cast(DType.bfloat16).to_numpy().astype(np.float64).tolist()[1] == 1 + 2**-7


def _nearest_bf16(v: int) -> int:
    """The bfloat16 nearest the integer `v` (ties to even), exactly."""
    m = abs(v)
    shift = max(0, m.bit_length() - 8)
    q, r = m >> shift, m & ((1 << shift) - 1)
    if shift and (r > 1 << (shift - 1) or (r == 1 << (shift - 1) and q & 1)):
        q += 1
    return (q << shift) * (-1 if v < 0 else 1)


def test_64_bit_integers_to_bfloat16_round_once(rng, device):
    """Integers with more than 53 significant bits just above a bfloat16 halfway point round up:
    through float64 they would land on the halfway point first and round to even (down)."""
    from max.graph import DeviceRef, Graph, TensorType, ops
    from max import engine

    near = [(q << s) + (1 << (s - 1)) + d for q in (128, 129, 200, 255) for s in (47, 52, 55) for d in (-1, 1, 3)]
    cases = {
        np.int64: near + [-x for x in near] + rng.integers(-2**63, 2**63 - 1, 64, dtype=np.int64).tolist()
        + [2**62 + 2**54 + 1, -2**63, 2**63 - 1],
        np.uint64: [x * 2 for x in near] + rng.integers(0, 2**64 - 1, 64, dtype=np.uint64).tolist()
        + [2**63 + 2**55 + 1, 2**64 - 1],
    }
    for np_type, values in cases.items():
        a = np.array(values, np_type)
        want = [_nearest_bf16(int(v)) for v in values]
        got = on(device, a)._cast(DType.bfloat16).to(driver.CPU()).to_numpy().astype(np.float64)
        assert [int(x) for x in got] == want, np_type
        ref = DeviceRef.from_device(device)
        with Graph("cast", input_types=[TensorType(DType.from_numpy(a.dtype), [len(a)], ref)]) as g:
            g.output(ops.cast(g.inputs[0].tensor, DType.bfloat16))
        model = engine.InferenceSession(devices=[driver.CPU(), device]).load(g)
        out = model.execute(on(device, a))[0].to(driver.CPU()).to_numpy().astype(np.float64)
        assert [int(x) for x in out] == want, np_type


def test_unsupported_cast_is_a_value_error():
    with pytest.raises(ValueError, match="cast from float32 to float4_e2m1fn is not supported"):
        driver.Buffer(DType.float32, [3])._cast(DType.float4_e2m1fn)


@pytest.mark.parametrize("to", [DType.float64, DType.float16], ids=lambda d: d.name)
def test_cast_of_a_strided_view(rng, device, to):
    a = rng.standard_normal((40, 30)).astype(np.float32)
    out = on(device, a)[::-3, 2::2]._cast(to).to_numpy()
    assert np.array_equal(out, a[::-3, 2::2].astype(VALUE_TYPES[to]))


BITS = {1: DType.uint8, 2: DType.uint16, 4: DType.uint32, 8: DType.uint64}


@pytest.mark.gpu
@pytest.mark.parametrize("src", CAST_DTYPES, ids=lambda d: d.name)
def test_gpu_cast_matches_host_cast_bit_exact(rng, gpu, src):
    n = 100_003
    bits = random_bits(rng, src, (n,))
    host = driver.Buffer.from_numpy(bits).view(src, [n])
    dev = host.to(gpu)
    for to in CAST_DTYPES:
        want = host._cast(to).view(BITS[to.size_in_bytes], [n]).to_numpy()
        got_buf = dev._cast(to)
        assert got_buf.device == gpu and got_buf.dtype is to
        got = got_buf.view(BITS[to.size_in_bytes], [n]).to_numpy()
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, f"{src.name}->{to.name}: inputs {bits[bad[:4]]} gave {got[bad[:4]]}, host {want[bad[:4]]}"
