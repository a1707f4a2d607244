"""1x1 stride-1 unpadded conv2d as the GEMM it is (crates/kernels-cuda/src/launch/conv_sm90/gemm.rs):
the Hopper conv2d path runs such convs on the persistent GEMM kernel with MAX_CONV_SM90_GEMM=1,
and on the conv kernel by default (it measured faster) or with 0.
`_conv_sm90_gemm_launches()` counts them (they count as Hopper conv2d launches too). Each case
against float64 (bit for bit on small-integer data) and against the conv kernel on the same
inputs. Skips without an sm_90a GPU."""

import numpy as np
import pytest

import test_gpu_conv_sm90 as base
from test_gpu_conv_sm90_more import sm90  # noqa: F401 (a fixture: MAX_CONV_SM90=1, knobs unset)
from max._core import driver as core
from max.dtype import DType
from max.graph import Graph, TensorType, ops
from max.graph.type import ConvInputLayout, FilterLayout

pytestmark = pytest.mark.gpu
Conv = base.Conv

# The conv kernel runs each by default; MAX_CONV_SM90_GEMM=1 routes each to the GEMM.
CASES = [
    Conv("1x1_64_256", 2, 14, 15, 64, 256, 1, 1),
    Conv("1x1_512_2048_m49", 1, 7, 7, 512, 2048, 1, 1),
    Conv("1x1_136_328_ragged", 1, 7, 6, 136, 328, 1, 1),
    Conv("1x1_256_128", 1, 9, 10, 256, 128, 1, 1),
    Conv("1x1_512_128", 1, 9, 10, 512, 128, 1, 1),
    Conv("1x1_1024_256", 2, 7, 9, 1024, 256, 1, 1),
    Conv("1x1_256_64", 2, 9, 9, 256, 64, 1, 1),
    Conv("1x1_2048_512", 1, 7, 7, 2048, 512, 1, 1),
    Conv("1x1_2048_64", 2, 5, 6, 2048, 64, 1, 1),
]


def counts():
    return core._conv_sm90_launches(), core._conv_sm90_gemm_launches()


def fused_graph(cv, dtype, conv_bias, residual):
    """relu(conv(x, w) + b) (+ 0.5 * r), the bias either the conv's own or a fused add."""
    t = lambda *s: TensorType(dtype, s, base.GPU)  # noqa: E731
    types = [t(cv.n, cv.h, cv.w, cv.c), t(1, 1, cv.c, cv.k), t(cv.k), t(cv.n, cv.h, cv.w, cv.k)]

    def fn(x, w, b, r):
        kw = dict(input_layout=ConvInputLayout.NHWC, filter_layout=FilterLayout.RSCF)
        y = ops.relu(ops.conv2d(x, w, bias=b, **kw) if conv_bias else ops.conv2d(x, w, **kw) + b)
        return y + r * 0.5 if residual else y

    return Graph(f"cg_{cv.name}", fn, input_types=types)


def run(sm90, g, inputs):
    model = base.session(sm90).load(g)
    before = counts()
    (out,) = base.execute(model, inputs, sm90)
    after = counts()
    return out, after[0] - before[0], after[1] - before[1]


@pytest.mark.parametrize("cv", CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", base.DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("conv_bias", [True, False], ids=["conv_bias", "fused_bias"])
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_route_and_results(sm90, rng, monkeypatch, cv, dtype, conv_bias, residual):
    vt = base.VALUE_TYPES[dtype]
    small = lambda *s: rng.integers(-1, 2, size=s).astype(vt)  # noqa: E731
    x, w, b, r = small(cv.n, cv.h, cv.w, cv.c), small(1, 1, cv.c, cv.k), small(cv.k), small(cv.n, cv.h, cv.w, cv.k)
    g = fused_graph(cv, dtype, conv_bias, residual)
    got, launched, as_gemm = run(sm90, g, [x, w, b, r])
    assert (launched, as_gemm) == (1, 0), f"{cv}: {launched} conv launches, {as_gemm} as a GEMM"
    f = [a.astype(np.float64) for a in (x, w, b, r)]
    ref = np.maximum(f[0] @ f[1][0, 0] + f[2], 0) + (0.5 * f[3] if residual else 0)
    base.check_exact(got, ref.astype(np.float32).astype(vt), f"{cv} {dtype.name} vs float64")
    # as the GEMM: the same bits
    monkeypatch.setenv("MAX_CONV_SM90_GEMM", "1")
    other, launched, as_gemm = run(sm90, g, [x, w, b, r])
    assert (launched, as_gemm) == (1, 1)
    base.check_exact(other, got, f"{cv} {dtype.name}: the conv kernel against the GEMM")


@pytest.mark.parametrize("dtype", base.DTYPES, ids=lambda d: d.name)
def test_random_data_against_float64(sm90, rng, monkeypatch, dtype):
    cv = Conv("1x1_64_256_b3", 3, 13, 11, 64, 256, 1, 1)
    monkeypatch.setenv("MAX_CONV_SM90_GEMM", "1")
    before = core._conv_sm90_gemm_launches()
    base.run_case(sm90, rng, cv, dtype, exact=False)
    assert core._conv_sm90_gemm_launches() == before + 1


def test_never_for_other_windows_and_strides(sm90, rng, monkeypatch):
    # forced on: still only 1x1, stride 1, no padding
    monkeypatch.setenv("MAX_CONV_SM90_GEMM", "1")
    for cv in (Conv("3x3", 2, 9, 9, 64, 256, 3, 3, 1, 1), Conv("1x1_s2", 2, 15, 13, 64, 256, 1, 1, 2, 0),
               Conv("1x1_pad1", 2, 9, 9, 64, 256, 1, 1, 1, 1)):
        before = core._conv_sm90_gemm_launches()
        base.run_case(sm90, rng, cv, DType.bfloat16, exact=True, with_cpu=False)
        assert core._conv_sm90_gemm_launches() == before, cv
