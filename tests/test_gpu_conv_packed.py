"""The Hopper conv2d's lean epilogue adding the residual on pairs of the element type (`ring_out`
in kernels/conv_sm90.cuh): where the results are written over the residual's slots, the
activation is relu and beta is exact in the element type, relu's output is rounded to it and
beta * r + y is computed on pairs with one rounding, as a graph that stores relu's output before
the add does (the launcher's default; MAX_CONV_SM90_PACKED=0 adds in f32 and rounds once);
`_conv_sm90_packed_launches()` counts it. The results leave from the slots as 16-byte vectors
(`_conv_sm90_vector_out_launches()`), or by TMA (MAX_CONV_SM90_STORE_TMA=1, and always in clusters).

Checked: within the extra rounding of the f32 arithmetic's results on every lean form
(cooperative 64, 128 and 256 wide, 192 rows, 192 rows in clusters of two), on grids of one block
and of one per SM, M and K off the tile sizes; exact against float64 on integer data; the same
bits stored as vectors and by TMA, with either arithmetic; that no activation, staged stores or
the full entry keep the f32 arithmetic; and that the ResNet-50 3x3 block at batch 32 takes it by
default. (A graph's beta is a constant of the residual's type, so always exact in it; the
launcher's check for an inexact one is a unit test of launch/epilogue.rs.)

Skips without an sm_90a GPU."""

import numpy as np
import pytest

import test_gpu_conv_sm90 as base
from max._core import driver as core
from max.dtype import DType
from test_gpu_conv_lean import LEAN_FORMS, setenv
from test_gpu_conv_pingpong import Count
from test_gpu_conv_sm90_more import fused_bits, fused_run, sm90  # noqa: F401
from test_gpu_conv_tma_out import FORMS, form_env, shapes_of

pytestmark = pytest.mark.gpu
DTYPES = base.DTYPES


def Packeds():  # noqa: N802
    return Count(core._conv_sm90_packed_launches)


def Vectors():  # noqa: N802
    return Count(core._conv_sm90_vector_out_launches)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("grid", [None, "small"])
@pytest.mark.parametrize("form", list(FORMS))
def test_within_one_more_rounding_of_f32(sm90, rng, monkeypatch, form, grid, dtype):
    """|packed - f32| stays within half an ulp of relu's output (rounded once more) and one of the
    result: u * (3 |f32| + beta |r|), u the unit roundoff; a wrong residual, bias or relu is far
    outside it."""
    env = form_env(form, grid)
    vt = base.VALUE_TYPES[dtype]
    for cv in shapes_of(form):
        seed = int(rng.integers(1 << 31))
        with Packeds() as packed:
            got, inputs = fused_run(sm90, seed, monkeypatch, cv, dtype, "1", "relu", MAX_CONV_SM90_PACKED="1", **env)
        assert packed.n == 1, f"{cv} {form}: {packed.n} packed launches, of 1"
        with Packeds() as packed:
            want = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", "relu", **env)
        assert packed.n == 0
        a, b = got.view(vt).astype(np.float64), want.view(vt).astype(np.float64)
        r = np.asarray(inputs[3]).astype(np.float64).reshape(b.shape)
        bound = base.EPS[dtype] * (3 * np.abs(b) + 0.5 * np.abs(r))
        bad = ~(np.abs(a - b) <= bound)
        assert not bad.any(), f"{cv} {form} grid={grid}: {bad.sum()} elements off, e.g. {a[bad][:4]} vs {b[bad][:4]}"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("form", list(FORMS))
def test_exact(sm90, rng, monkeypatch, form, dtype):
    setenv(monkeypatch, dict(FORMS[form], MAX_CONV_SM90_SPLITK="1"))
    runs = 0
    with Packeds() as packed:
        for i, cv in enumerate(shapes_of(form)):
            base.run_epilogue(sm90, rng, cv, dtype, "relu", conv_bias=i % 2 == 0, beta=(0.5, 1)[i % 2], exact=True)
            runs += 1
    assert packed.n == runs


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("packed", ["1", "0"])
@pytest.mark.parametrize("form", list(LEAN_FORMS))
def test_vector_and_tma_stores_same_bits(sm90, rng, monkeypatch, form, packed, dtype):
    env = dict(LEAN_FORMS[form], MAX_CONV_SM90_SPLITK="1", MAX_CONV_SM90_PACKED=packed)
    for cv in shapes_of(form):
        seed = int(rng.integers(1 << 31))
        with Vectors() as vectors:
            vec = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", "relu", MAX_CONV_SM90_STORE_TMA="0", **env)
        assert vectors.n == 1, f"{cv} {form}: {vectors.n} vector-store launches, of 1"
        with Vectors() as vectors:
            tma = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", "relu", MAX_CONV_SM90_STORE_TMA="1", **env)
        assert vectors.n == 0
        assert np.array_equal(vec, tma), f"{cv} {form} packed={packed}: vector and TMA stores differ"


@pytest.mark.parametrize("case", ["no_activation", "staged_stores", "full_entry"])
def test_not_taken(sm90, rng, monkeypatch, case):
    setenv(monkeypatch, dict(LEAN_FORMS["trio"], MAX_CONV_SM90_SPLITK="1"))
    if case == "staged_stores":
        monkeypatch.setenv("MAX_CONV_SM90_TMA_OUT", "0")
    elif case == "full_entry":
        monkeypatch.setenv("MAX_CONV_SM90_LEAN", "0")
    act = "none" if case == "no_activation" else "relu"
    with Packeds() as packed:
        for cv in shapes_of("trio")[:3]:
            base.run_epilogue(sm90, rng, cv, DType.bfloat16, act, conv_bias=True, beta=0.5, exact=False)
    assert packed.n == 0


def test_default_on_the_resnet50_3x3_block(sm90, rng):
    with Packeds() as packed:
        base.run_resnet50_3x3_block(sm90, rng)
    assert packed.n == 1
