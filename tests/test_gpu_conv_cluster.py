"""The Hopper conv2d (kernels/conv_sm90.cu) launched as clusters of two CTAs that share each
k-step's A tile by multicast (an even number of column tiles; 192-row tiles in the plain or lean
entry, or 128 x 64 ping-pong tiles in the plain one; MAX_CONV_SM90_CLUSTER=2;
`_conv_sm90_cluster_launches()` counts them).

Checked: the same bits as the unclustered kernel, and exact against float64, for 1x1 convs (A
through the tiled map) and padded / strided 3x3 ones (A in im2col mode), with M off the tile
size (the last tile's second half past M, or wholly past it), K of 2 to 8 column tiles, plain
and fused (bias, relu, residual in the ring), on persistent grids of one cluster (several pairs
per cluster, the ring wrapping) and of every cluster the device holds; and that shapes with an
odd number of column tiles, other tile forms and split launches are not clustered.

Skips without an sm_90a GPU."""

import numpy as np
import pytest

import test_gpu_conv_sm90 as base
from max._core import driver as core
from max.dtype import DType
from test_gpu_conv_lean import bias_act
from test_gpu_conv_pingpong import Count
from test_gpu_conv_sm90_more import assert_same_but_contraction, fused_bits, sm90  # noqa: F401

pytestmark = pytest.mark.gpu
Conv = base.Conv
DTYPES = base.DTYPES
TRIO = {"MAX_CONV_SM90_BM": "192", "MAX_CONV_SM90_SPLITK": "1"}
PP64 = {"MAX_CONV_SM90_BM": "128", "MAX_CONV_SM90_BN": "64", "MAX_CONV_SM90_PINGPONG": "1", "MAX_CONV_SM90_SPLITK": "1"}
FORMS = {"trio": TRIO, "pp64": PP64}
SHAPES = [
    Conv("1x1_512_256", 2, 28, 28, 512, 256, 1, 1, 1, 0),  # 1568 rows: the last tile's half past M
    Conv("1x1_256_1024_m_off", 3, 11, 13, 256, 1024, 1, 1, 1, 0),  # 429 rows, 8 column tiles
    Conv("3x3_128_256", 2, 14, 14, 128, 256, 3, 3, 1, 1),
    Conv("3x3_s2_64_256", 3, 15, 17, 64, 256, 3, 3, 2, 1),
    Conv("1x1_m_below_96", 1, 9, 9, 64, 256, 1, 1, 1, 0),  # 81 rows: the second half wholly past M
]
ODD_COLUMN_TILES = Conv("k384", 2, 14, 14, 128, 384, 3, 3, 1, 1)


def Clusters():  # noqa: N802
    return Count(core._conv_sm90_cluster_launches)


def setenv(monkeypatch, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)


def plain_bits(gpu, rng, monkeypatch, cv, dtype, env):
    """The plain conv's output bits for integer inputs, checked exact against float64."""
    setenv(monkeypatch, env)
    vt = base.VALUE_TYPES[dtype]
    gen = lambda shape: rng.integers(-1, 2, size=shape).astype(vt)  # noqa: E731
    x, w = gen((cv.n, cv.h, cv.w, cv.c)), gen((cv.r, cv.s, cv.c, cv.k))
    model = base.session(gpu).load(base.build(cv, dtype, base.GPU, bias=False))
    g = base.run_gpu(model, [x, w], gpu, cv)
    want = base.conv_ref(x.astype(np.float64), w.astype(np.float64), cv).astype(np.float32).astype(vt)
    base.check_exact(g, want, f"{cv} {dtype.name} {env}")
    return base.bits(g)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("grid", [None, "2"])
@pytest.mark.parametrize("cv", SHAPES, ids=repr)
@pytest.mark.parametrize("form", list(FORMS))
def test_plain_exact_and_same_bits(sm90, rng, monkeypatch, form, cv, grid, dtype):
    env = dict(FORMS[form])
    if grid is not None:
        env["MAX_CONV_SM90_GRID"] = grid
    seed = int(rng.integers(1 << 31))
    with Clusters() as clusters:
        got = plain_bits(sm90, np.random.default_rng(seed), monkeypatch, cv, dtype, dict(env, MAX_CONV_SM90_CLUSTER="2"))
    assert clusters.n == 1, f"{cv}: {clusters.n} clustered launches, of 1"
    want = plain_bits(sm90, np.random.default_rng(seed), monkeypatch, cv, dtype, dict(env, MAX_CONV_SM90_CLUSTER="1"))
    assert np.array_equal(got, want), f"{cv}: clustered and single-CTA results differ"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("grid", [None, "2"])
def test_fused_same_bits(sm90, rng, monkeypatch, grid, dtype):
    env = dict(TRIO)
    if grid is not None:
        env["MAX_CONV_SM90_GRID"] = grid
    for cv in SHAPES:
        seed = int(rng.integers(1 << 31))
        with Clusters() as clusters:
            got = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", "relu", MAX_CONV_SM90_CLUSTER="2", **env)
        assert clusters.n == 1, f"{cv}: {clusters.n} clustered launches, of 1"
        want = fused_bits(sm90, seed, monkeypatch, cv, dtype, "1", "relu", MAX_CONV_SM90_CLUSTER="1", **env)
        assert_same_but_contraction(got, want, dtype, f"{cv} grid={grid} clustered")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_fused_exact(sm90, rng, monkeypatch, dtype):
    setenv(monkeypatch, dict(TRIO, MAX_CONV_SM90_CLUSTER="2"))
    runs = 0
    with Clusters() as clusters:
        for i, cv in enumerate(SHAPES):
            base.run_epilogue(sm90, rng, cv, dtype, ("relu", "none")[i % 2], conv_bias=i % 2 == 0, beta=(0.5, 1)[i % 2],
                              exact=True)
            g, want = bias_act(sm90, rng, cv, dtype, conv_bias=True, fused_bias=True, relu=True)
            base.check_exact(g, want, f"{cv} {dtype.name} clustered bias relu")
            runs += 2
    assert clusters.n == runs


@pytest.mark.parametrize("case", ["odd_column_tiles", "rows128", "split", "full_epilogue", "pp128", "pp64_odd",
                                  "pp64_epilogue"])
def test_not_clustered(sm90, rng, monkeypatch, case):
    env = dict(TRIO, MAX_CONV_SM90_CLUSTER="2")
    cv = SHAPES[2]
    if case == "odd_column_tiles":
        cv = ODD_COLUMN_TILES
    elif case == "pp128":
        env.update(PP64, MAX_CONV_SM90_BN="128")
    elif case == "pp64_odd":
        env.update(PP64)
        cv = Conv("k192", 2, 14, 14, 128, 192, 3, 3, 1, 1)
    elif case == "pp64_epilogue":
        env.update(PP64)
        case = "full_epilogue"
    elif case == "rows128":
        env["MAX_CONV_SM90_BM"] = "128"
    elif case == "split":
        env["MAX_CONV_SM90_SPLITK"] = "3"
    with Clusters() as clusters:
        if case == "full_epilogue":
            setenv(monkeypatch, env)
            base.run_epilogue(sm90, rng, cv, DType.bfloat16, "gelu", conv_bias=True, beta=0.5, exact=False)
        else:
            plain_bits(sm90, rng, monkeypatch, cv, DType.bfloat16, env)
    assert clusters.n == 0


@pytest.mark.parametrize(("name", "clustered"), [("s4_1x1_512_256_b32", 1), ("s5_1x1_1024_512_b32", 0)])
def test_default_on_resnet50_layers(sm90, rng, monkeypatch, name, clustered):
    """Clusters by default where the blocks hold 1.5 tiles or more (28x28 512 -> 256: 262 tiles
    of 192 x 128), not where they hold one (14x14 1024 -> 512: 132)."""
    (cv,) = [c for c in base.resnet_shapes(32) if c.name == name]
    with Clusters() as clusters:
        plain_bits(sm90, rng, monkeypatch, cv, DType.bfloat16, {})
    assert clusters.n == clustered
