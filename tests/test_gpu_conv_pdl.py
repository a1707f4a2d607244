"""The Hopper conv2d launched under programmatic stream serialization (the default;
MAX_CONV_SM90_PDL=0 turns it off): a conv may then start while the stream's previous kernel
drains and must wait before touching memory. Two chained convs (the second reads what the first writes), executed four times
back to back without a sync between, give the bits of the ordinary launch, with CUDA graphs off
(plain stream launches) and captured. Skips without an sm_90a GPU."""

import numpy as np
import pytest

import test_gpu_conv_sm90 as base
from engine_util import session
from max import driver
from max._core import driver as core
from max.graph import DeviceRef, Graph, TensorType, ops
from max.graph.type import ConvInputLayout, FilterLayout

pytestmark = pytest.mark.gpu


@pytest.fixture
def sm90(gpu, monkeypatch):
    if gpu.architecture_name != "sm_90a":
        pytest.skip(f"the Hopper conv2d needs sm_90a, this GPU is {gpu.architecture_name}")
    monkeypatch.setenv("MAX_CONV_SM90", "1")
    return gpu


def chain(dtype, c):
    """x -> 3x3 conv (w1) -> 3x3 conv (w2), NHWC / RSCF, on the GPU."""
    gpu = DeviceRef.GPU()
    x_t = TensorType(dtype, ("batch", 14, 14, c), gpu)
    w_t = TensorType(dtype, (3, 3, c, c), gpu)

    def conv(x, w):
        return ops.conv2d(x, w, padding=(1, 1, 1, 1), input_layout=ConvInputLayout.NHWC,
                          filter_layout=FilterLayout.RSCF)

    return Graph("conv_chain", lambda x, w1, w2: conv(conv(x, w1), w2), input_types=[x_t, w_t, w_t])


@pytest.mark.parametrize("graphs", ["0", "always"])
@pytest.mark.parametrize("dtype", base.DTYPES, ids=lambda d: d.name)
def test_chained_convs_same_bits(sm90, rng, monkeypatch, dtype, graphs):
    monkeypatch.setenv("MAX_CUDA_GRAPHS", graphs)
    vt = base.VALUE_TYPES[dtype]
    c = 64
    inputs = [rng.standard_normal((8, 14, 14, c)).astype(vt)]
    inputs += [(rng.standard_normal((3, 3, c, c)) / 24).astype(vt) for _ in range(2)]
    got = {}
    for pdl in ("0", "1"):
        monkeypatch.setenv("MAX_CONV_SM90_PDL", pdl)
        model = session(sm90).load(chain(dtype, c))
        args = [driver.Buffer.from_numpy(a).to(sm90) for a in inputs]
        before = core._conv_sm90_launches()
        results = [model.execute(*args)[0] for _ in range(4)]
        runs = [base.bits(r.to_numpy()) for r in results]
        if graphs == "0":
            assert core._conv_sm90_launches() - before == 8
        for i, r in enumerate(runs[1:], 1):
            assert (r == runs[0]).all(), f"PDL={pdl}: execution {i} differs from the first"
        got[pdl] = runs[0]
    assert (got["1"] == got["0"]).all(), f"{(got['1'] != got['0']).sum()} elements differ under PDL"
    assert np.isfinite(got["0"].view(base.VALUE_TYPES[dtype]).astype(np.float64)).all()
