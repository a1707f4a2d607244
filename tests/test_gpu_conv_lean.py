"""The Hopper conv2d (kernels/conv_sm90.cu) with its lean epilogue: the entries compiled for the
ResNet pattern alone (the conv's bias and a fused bias, relu or no activation, the residual in
the ring or absent), which the launcher takes by default where the tile form has one
(cooperative tiles 64, 128 and 256 wide, 192-row tiles); MAX_CONV_SM90_LEAN=0 keeps the entry
with every option; `_conv_sm90_lean_launches()` counts them.

Checked: the same bits as the full entry on every form that has it (a persistent grid of one
block and of one per SM, M and K off the tile sizes); exact against float64 with and without
a residual, relu or none, either bias; that epilogues outside the pattern (gelu, clamp, a
residual read from global memory, split launches, ping-pong and 256-row tiles) keep the full
entry and stay right; and that the ResNet-50 3x3 block at batch 32 takes it by default.

Skips without an sm_90a GPU."""

import numpy as np
import pytest

import test_gpu_conv_sm90 as base
from max._core import driver as core
from max.dtype import DType
from max.graph import Graph, TensorType, ops
from max.graph.type import ConvInputLayout, FilterLayout
from test_gpu_conv_pingpong import Count
from test_gpu_conv_res_ring import FORMS, SHAPES
from test_gpu_conv_sm90_more import assert_same_but_contraction, fused_bits, sm90  # noqa: F401

pytestmark = pytest.mark.gpu
DTYPES = base.DTYPES
LEAN_FORMS = {k: FORMS[k] for k in ("coop64", "coop128", "coop256", "trio")}
FULL_FORMS = {
    "pp64": FORMS["pp64"],
    "wide64": FORMS["wide64"],
    "pp128": {"MAX_CONV_SM90_BN": "128", "MAX_CONV_SM90_BM": "128", "MAX_CONV_SM90_PINGPONG": "1"},
}


def Leans():  # noqa: N802
    return Count(core._conv_sm90_lean_launches)


def setenv(monkeypatch, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("grid", [None, "1"])
@pytest.mark.parametrize("act", ["relu", "none"])
@pytest.mark.parametrize("form", list(LEAN_FORMS))
def test_same_bits_as_full(sm90, rng, monkeypatch, form, act, grid, dtype):
    env = dict(LEAN_FORMS[form], MAX_CONV_SM90_SPLITK="1")
    if grid is not None:
        env["MAX_CONV_SM90_GRID"] = grid
    for cv in SHAPES:
        seed = int(rng.integers(1 << 31))
        with Leans() as leans:
            lean = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", act, MAX_CONV_SM90_LEAN="1", **env)
        assert leans.n == 1, f"{cv} {form}: {leans.n} lean launches, of 1"
        with Leans() as leans:
            full = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", act, MAX_CONV_SM90_LEAN="0", **env)
        assert leans.n == 0
        assert_same_but_contraction(lean, full, dtype, f"{cv} {form} {act} grid={grid} lean")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("form", ["coop64", "coop128", "trio"])
def test_biases_loaded_early_same_bits(sm90, rng, monkeypatch, form, dtype):
    """Tiles up to 128 wide load both biases when a warp starts a tile (the default) or after the
    mainloop (MAX_CONV_SM90_EARLY_BIAS=0): the same arithmetic, the same bits."""
    env = dict(LEAN_FORMS[form], MAX_CONV_SM90_SPLITK="1", MAX_CONV_SM90_GRID="1")
    for cv in SHAPES:
        seed = int(rng.integers(1 << 31))
        early = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", "relu", MAX_CONV_SM90_EARLY_BIAS="1", **env)
        late = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", "relu", MAX_CONV_SM90_EARLY_BIAS="0", **env)
        assert np.array_equal(early, late), f"{cv} {form}: early and late biases differ"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("form", list(LEAN_FORMS))
def test_exact_with_residual(sm90, rng, monkeypatch, form, dtype):
    setenv(monkeypatch, dict(LEAN_FORMS[form], MAX_CONV_SM90_SPLITK="1"))
    runs = 0
    with Leans() as leans:
        for i, cv in enumerate(SHAPES):
            for act in ("relu", "none"):
                base.run_epilogue(sm90, rng, cv, dtype, act, conv_bias=i % 2 == 0, beta=(0.5, 1)[i % 2], exact=True)
                runs += 1
    assert leans.n == runs


def bias_act(sm90, rng, cv, dtype, conv_bias, fused_bias, relu):
    """conv2d (+ its bias) (+ a fused bias) (relu) without a residual, for integer inputs: the
    GPU result and the float64 reference rounded once to the dtype."""
    vt = base.VALUE_TYPES[dtype]
    gen = lambda shape, lim=1: rng.integers(-lim, lim + 1, size=shape).astype(vt)  # noqa: E731
    x, w, cb, b = gen((cv.n, cv.h, cv.w, cv.c)), gen((cv.r, cv.s, cv.c, cv.k)), gen((cv.k,), 4), gen((cv.k,), 4)

    def fn(x, w, cb, b):
        y = ops.conv2d(x, w, stride=cv.stride, dilation=cv.dil, padding=cv.pad, bias=cb if conv_bias else None,
                       input_layout=ConvInputLayout.NHWC, filter_layout=FilterLayout.RSCF)
        if fused_bias:
            y = y + b
        return ops.relu(y) if relu else y

    inputs = [x, w, cb, b]
    types = [TensorType(dtype, a.shape, base.GPU) for a in inputs]
    model = base.session(sm90).load(Graph("conv_bias_act", fn, input_types=types))
    g = base.run_gpu(model, inputs, sm90, cv)
    ref = base.conv_ref(x.astype(np.float64), w.astype(np.float64), cv)
    if conv_bias:
        ref = ref + cb.astype(np.float64)
    if fused_bias:
        ref = ref + b.astype(np.float64)
    if relu:
        ref = np.maximum(ref, 0)
    return g, ref.astype(np.float32).astype(vt)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("form", list(LEAN_FORMS))
def test_exact_without_residual(sm90, rng, monkeypatch, form, dtype):
    setenv(monkeypatch, dict(LEAN_FORMS[form], MAX_CONV_SM90_SPLITK="1"))
    runs = 0
    with Leans() as leans:
        for cv in SHAPES:
            for conv_bias, fused_bias, relu in [(True, False, False), (False, True, True), (True, True, True)]:
                g, want = bias_act(sm90, rng, cv, dtype, conv_bias, fused_bias, relu)
                base.check_exact(g, want, f"{cv} {form} conv_bias={conv_bias} bias={fused_bias} relu={relu}")
                runs += 1
    assert leans.n == runs


@pytest.mark.parametrize("act", ["gelu", "clamp", "relu6"])
def test_other_epilogues_keep_the_full_entry(sm90, rng, monkeypatch, act):
    setenv(monkeypatch, dict(LEAN_FORMS["trio"], MAX_CONV_SM90_SPLITK="1"))
    with Leans() as leans:
        for cv in SHAPES[:3]:
            base.run_epilogue(sm90, rng, cv, DType.bfloat16, act, conv_bias=True, beta=0.5, exact=False)
    assert leans.n == 0


@pytest.mark.parametrize("case", ["global_residual", "split", *FULL_FORMS])
def test_outside_the_lean_forms(sm90, rng, monkeypatch, case):
    env = {"MAX_CONV_SM90_SPLITK": "1"}
    if case == "global_residual":
        env.update(LEAN_FORMS["coop128"], MAX_CONV_SM90_RES_RING="0")
    elif case == "split":
        env["MAX_CONV_SM90_SPLITK"] = "3"
    else:
        env.update(FULL_FORMS[case])
    setenv(monkeypatch, env)
    # Split launches: a shape with enough k-steps for three splits.
    shapes = SHAPES[:1] if case == "split" else SHAPES[:3]
    with Leans() as leans:
        for cv in shapes:
            base.run_epilogue(sm90, rng, cv, DType.float16, "relu", conv_bias=True, beta=0.5, exact=True)
    assert leans.n == 0


def test_default_on_the_resnet50_3x3_block(sm90, rng):
    with Leans() as leans:
        base.run_resnet50_3x3_block(sm90, rng)
    assert leans.n == 1
