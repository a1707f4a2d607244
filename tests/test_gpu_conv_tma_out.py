"""The Hopper conv2d (kernels/conv_sm90.cu) writing the lean epilogue's results over the
residual's ring slots and storing them from there (`ring_out` in kernels/conv_sm90.cuh; as
16-byte vectors, or by TMA in clusters; test_gpu_conv_packed.py checks both): the launcher's
default where the lean entry runs with the residual in the ring; MAX_CONV_SM90_TMA_OUT=0 keeps
the stores staged through shared memory; `_conv_sm90_tma_out_launches()` counts it.

Checked: the same results as the staged stores on every lean form (cooperative 64, 128 and 256
wide, 192 rows, 192 rows in clusters of two) with persistent grids of one block or one cluster
(the ring wrapping across tiles: slots written by the epilogue are refilled by the next tile's
loads) and of one per SM, M and K off the tile sizes (rows past M and columns past K in a box);
exact against float64; that launches without a residual in the ring or outside the lean entry
never take it; and that the ResNet-50 3x3 block at batch 32 takes it by default.

Skips without an sm_90a GPU."""

import numpy as np
import pytest

import test_gpu_conv_sm90 as base
from max._core import driver as core
from max.dtype import DType
from test_gpu_conv_cluster import SHAPES as CLUSTER_SHAPES
from test_gpu_conv_lean import LEAN_FORMS, bias_act, setenv
from test_gpu_conv_pingpong import Count
from test_gpu_conv_res_ring import SHAPES
from test_gpu_conv_sm90_more import assert_same_but_contraction, fused_bits, sm90  # noqa: F401

pytestmark = pytest.mark.gpu
DTYPES = base.DTYPES
FORMS = dict(LEAN_FORMS, trio_c2={"MAX_CONV_SM90_BM": "192", "MAX_CONV_SM90_CLUSTER": "2"})


def shapes_of(form):
    return CLUSTER_SHAPES if form == "trio_c2" else SHAPES


def form_env(form, grid):
    """The knobs of `form`, unsplit, on a grid of one block (one cluster for trio_c2) where
    grid is "small", else the default grid."""
    env = dict(FORMS[form], MAX_CONV_SM90_SPLITK="1")
    if grid is not None:
        env["MAX_CONV_SM90_GRID"] = "2" if form == "trio_c2" else "1"
    return env


def TmaOuts():  # noqa: N802
    return Count(core._conv_sm90_tma_out_launches)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("grid", [None, "small"])
@pytest.mark.parametrize("form", list(FORMS))
def test_same_results_as_staged_stores(sm90, rng, monkeypatch, form, grid, dtype):
    env = form_env(form, grid)
    for i, cv in enumerate(shapes_of(form)):
        seed = int(rng.integers(1 << 31))
        act = ("relu", "none")[i % 2]
        with TmaOuts() as outs:
            got = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", act, MAX_CONV_SM90_TMA_OUT="1", **env)
        assert outs.n == 1, f"{cv} {form}: {outs.n} TMA-store launches, of 1"
        with TmaOuts() as outs:
            want = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", act, MAX_CONV_SM90_TMA_OUT="0", **env)
        assert outs.n == 0
        assert_same_but_contraction(got, want, dtype, f"{cv} {form} {act} grid={grid} TMA stores")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("form", list(FORMS))
def test_exact(sm90, rng, monkeypatch, form, dtype):
    setenv(monkeypatch, dict(FORMS[form], MAX_CONV_SM90_SPLITK="1"))
    runs = 0
    with TmaOuts() as outs:
        for i, cv in enumerate(shapes_of(form)):
            base.run_epilogue(sm90, rng, cv, dtype, ("relu", "none")[i % 2], conv_bias=i % 2 == 0,
                              beta=(0.5, 1)[i % 2], exact=True)
            runs += 1
    assert outs.n == runs


@pytest.mark.parametrize("case", ["no_residual", "global_residual", "full_entry", "pingpong", "split"])
def test_not_taken(sm90, rng, monkeypatch, case):
    env = dict(LEAN_FORMS["coop128"], MAX_CONV_SM90_SPLITK="1")
    if case == "global_residual":
        env["MAX_CONV_SM90_RES_RING"] = "0"
    elif case == "full_entry":
        env["MAX_CONV_SM90_LEAN"] = "0"
    elif case == "pingpong":
        env.update(MAX_CONV_SM90_BN="64", MAX_CONV_SM90_PINGPONG="1")
    elif case == "split":
        env["MAX_CONV_SM90_SPLITK"] = "3"
    setenv(monkeypatch, env)
    shapes = SHAPES[:1] if case == "split" else SHAPES[:3]
    with TmaOuts() as outs:
        for cv in shapes:
            if case == "no_residual":
                g, want = bias_act(sm90, rng, cv, DType.bfloat16, conv_bias=True, fused_bias=True, relu=True)
                base.check_exact(g, want, f"{cv} bias relu")
            else:
                base.run_epilogue(sm90, rng, cv, DType.float16, "relu", conv_bias=True, beta=0.5, exact=True)
    assert outs.n == 0


def test_default_on_the_resnet50_3x3_block(sm90, rng):
    with TmaOuts() as outs:
        base.run_resnet50_3x3_block(sm90, rng)
    assert outs.n == 1
