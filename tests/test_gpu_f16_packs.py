"""f16 elementwise on the GPU, where the fused kernels' vector loops decode NaN-free packs of f16
with one conversion per element and encode NaN-free results a pair per conversion (src/fused.rs,
kernels/fused_helpers.cuh), against the CPU backend: every finite or infinite result bit for bit,
NaNs in the same places, and f16 NaNs in canonical form. (NaN signs and f32 NaN payloads are not
compared: the GPU's arithmetic returns its own positive NaN, relu and neg included, where the
CPU keeps the input's sign.)
Inputs mix packs with and without NaNs (either sign), infinities, subnormals and a scalar tail
past the last pack. Skips without a GPU."""

import numpy as np
import pytest

from engine_util import run
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops

pytestmark = pytest.mark.gpu
GPU, CPU = DeviceRef.GPU(), DeviceRef.CPU()
N = 4096 + 5  # 512 packs of 8 and a tail of 5


def f16_inputs(rng, count):
    out = []
    for _ in range(count):
        x = (rng.standard_normal(N) * 4).astype(np.float16)
        bits = x.view(np.uint16)
        # about one pack in eight holds a NaN (payload and sign random), a few infinities and
        # subnormals
        where = rng.choice(N, size=N // 64, replace=False)
        bits[where] = (0x7C01 + rng.integers(0, 0x3FF, size=where.size)).astype(np.uint16) | (
            rng.integers(0, 2, size=where.size).astype(np.uint16) << 15
        )
        inf = rng.choice(N, size=8, replace=False)
        bits[inf] = np.where(rng.integers(0, 2, size=8) == 1, 0xFC00, 0x7C00).astype(np.uint16)
        sub = rng.choice(N, size=8, replace=False)
        bits[sub] = rng.integers(1, 0x3FF, size=8).astype(np.uint16)
        out.append(bits.view(np.float16))
    return out


def both(gpu, fn, inputs, in_dtypes):
    types = lambda dev: [TensorType(d, (N,), dev) for d in in_dtypes]  # noqa: E731
    (c,) = run(Graph("cpu", fn, input_types=types(CPU)), *inputs)
    (g,) = run(Graph("gpu", fn, input_types=types(GPU)), *inputs, device=gpu)
    return c, g


def check(c, g, what):
    assert c.dtype == g.dtype and c.shape == g.shape, what
    cn, gn = np.isnan(c), np.isnan(g)
    assert np.array_equal(cn, gn), f"{what}: NaNs in different places"
    width = np.uint16 if c.dtype == np.float16 else np.uint32
    cb, gb = c.view(width), g.view(width)
    assert np.array_equal(cb[~cn], gb[~gn]), f"{what}: {np.count_nonzero(cb[~cn] != gb[~gn])} results differ"
    if c.dtype == np.float16:
        # f16 results leave as the canonical quiet NaN (0x7E00, either sign)
        assert np.all((gb[gn] & np.uint16(0x7FFF)) == np.uint16(0x7E00)), f"{what}: non-canonical NaNs"


CASES = {
    "relu": (lambda x: ops.relu(x), 1),
    "neg": (lambda x: -x, 1),
    "abs_mul": (lambda x, y: ops.abs(x) * y, 2),
    "fma": (lambda x, y, z: x * y + z, 3),
}


@pytest.mark.parametrize("case", list(CASES))
def test_f16_ops_match_cpu(rng, gpu, case):
    fn, arity = CASES[case]
    inputs = f16_inputs(rng, arity)
    c, g = both(gpu, fn, inputs, [DType.float16] * arity)
    check(c, g, case)


def test_f16_gelu_add_within_rounding(rng, gpu):
    # erf differs in the last bits between the backends: NaNs in the same places, the rest close
    x, y = f16_inputs(rng, 2)
    c, g = both(gpu, lambda x, y: ops.gelu(x) + y, [x, y], [DType.float16] * 2)
    assert np.array_equal(np.isnan(c), np.isnan(g))
    ok = ~np.isnan(c)
    np.testing.assert_allclose(g[ok].astype(np.float64), c[ok].astype(np.float64), rtol=2e-3, atol=2e-3)


def test_f16_to_f32_and_back(rng, gpu):
    (x,) = f16_inputs(rng, 1)
    c, g = both(gpu, lambda x: ops.cast(x, DType.float32) * 2, [x], [DType.float16])
    check(c, g, "f16 -> f32")
    y = (rng.standard_normal(N) * 40000).astype(np.float32)  # past f16's range too: infinities
    y.view(np.uint32)[:: 97] = 0xFFC01234  # negative NaNs with a payload
    c, g = both(gpu, lambda y: ops.cast(y, DType.float16), [y], [DType.float32])
    check(c, g, "f32 -> f16")
