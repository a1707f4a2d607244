"""The Hopper conv2d (kernels/conv_sm90.cu) with plain 128 x 64 ping-pong tiles of fewer than 128
rows (a multiple of 16): the launcher's default where every block has one unit and a shorter
tile keeps the grid to one wave (launch::conv_sm90::short_rows), forced by MAX_CONV_SM90_TM
(128: full tiles); `_conv_sm90_short_launches()` counts it.

Checked: exact against float64 and the same bits as 128-row tiles, for heights of 16 to 112,
M off the tile size, on persistent grids of one and three blocks (units alternating between the
consumer warpgroups, the ring wrapping) and of one block per SM, bf16 and f16; that launches
with an epilogue, other tile forms and clusters keep 128 rows; and the default on ResNet-50
layers at batch 32.

Skips without an sm_90a GPU."""

import numpy as np
import pytest

import test_gpu_conv_sm90 as base
from max._core import driver as core
from max.dtype import DType
from test_gpu_conv_cluster import PP64, plain_bits
from test_gpu_conv_pingpong import SHAPES, Count
from test_gpu_conv_sm90_more import sm90  # noqa: F401

pytestmark = pytest.mark.gpu
Conv = base.Conv
DTYPES = base.DTYPES
CASES = [
    SHAPES[1],  # 13x17 output
    SHAPES[2],  # M = 231
    SHAPES[4],  # 3x3 stride 2
    Conv("3x3_512_7x7", 3, 7, 7, 512, 128, 3, 3, 1, 1),  # 147 rows, 72 k-steps
]


def Shorts():  # noqa: N802
    return Count(core._conv_sm90_short_launches)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("grid", [None, "1", "3"])
@pytest.mark.parametrize("tm", ["112", "96", "64", "16"])
@pytest.mark.parametrize("cv", CASES, ids=repr)
def test_exact_and_same_bits_as_128_rows(sm90, rng, monkeypatch, cv, tm, grid, dtype):
    env = dict(PP64)
    if grid is not None:
        env["MAX_CONV_SM90_GRID"] = grid
    seed = int(rng.integers(1 << 31))
    with Shorts() as shorts:
        got = plain_bits(sm90, np.random.default_rng(seed), monkeypatch, cv, dtype, dict(env, MAX_CONV_SM90_TM=tm))
    assert shorts.n == 1, f"{cv}: {shorts.n} launches of {tm}-row tiles, of 1"
    with Shorts() as shorts:
        want = plain_bits(sm90, np.random.default_rng(seed), monkeypatch, cv, dtype,
                          dict(env, MAX_CONV_SM90_TM="128"))
    assert shorts.n == 0
    assert np.array_equal(got, want), f"{cv}: {tm}-row and 128-row tiles differ"


@pytest.mark.parametrize("case", ["epilogue", "bn128", "cooperative", "cluster"])
def test_other_forms_keep_128_rows(sm90, rng, monkeypatch, case):
    env = dict(PP64, MAX_CONV_SM90_TM="96")
    if case == "bn128":
        env["MAX_CONV_SM90_BN"] = "128"
    elif case == "cooperative":
        env["MAX_CONV_SM90_PINGPONG"] = "0"
    elif case == "cluster":
        env["MAX_CONV_SM90_CLUSTER"] = "2"
    cv = CASES[3]
    with Shorts() as shorts:
        if case == "epilogue":
            for k, v in env.items():
                monkeypatch.setenv(k, v)
            base.run_epilogue(sm90, rng, cv, DType.bfloat16, "relu", conv_bias=True, beta=0.5, exact=True)
        else:
            plain_bits(sm90, rng, monkeypatch, cv, DType.bfloat16, env)
    assert shorts.n == 0


@pytest.mark.parametrize(("name", "short"), [("s5_3x3_512_b32", 1), ("s5_3x3_512_s2_b32", 1),
                                             ("s4_3x3_256_b32", 0), ("s5_1x1_2048_512_b32", 0)])
def test_default_on_resnet50_layers(sm90, rng, monkeypatch, name, short):
    """The 7x7 3x3 512 layers (104 tiles of 128 x 64, one a block) run 112 tiles of 112 rows;
    layers on other forms keep 128."""
    (cv,) = [c for c in base.resnet_shapes(32) if c.name == name]
    with Shorts() as shorts:
        plain_bits(sm90, rng, monkeypatch, cv, DType.bfloat16, {})
    assert shorts.n == short
