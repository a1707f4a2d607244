"""The Hopper GEMM's stream-K tail (persistent grids): the tiles of a last, partial wave cut into
equal k-ranges, one per cluster, whose pieces meet in a workspace and are added in range order.
Small grids (MAX_GEMM_SM90_GRID) make the partial wave with few tiles; MAX_GEMM_SM90_LOG shows
that the plan took stream-K. Each case: numpy float64 reference, bit-identical on a second run,
and against the same product with the tail left whole (MAX_GEMM_SM90_TAIL=0)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from engine_util import run
from max.dtype import DType
from max.graph import Graph, TensorType, ops
from test_gpu_matmul_sm90 import GPU, TOL, rand, sm90  # noqa: F401 (sm90 is a fixture)

pytestmark = pytest.mark.gpu

# (knobs, (M, K, N)), each chosen to leave a partial last wave:
CASES = {
    # 5 clusters of 2, 12 cluster tiles: 2 left, 64 k-tiles as 5 ranges of 13 (3 pieces a tile)
    "c2_grid10": ({"CLUSTER": "2", "BN": "256", "GRID": "10"}, (1000, 2048, 600)),
    # 7 CTAs, 18 tiles of 128 columns: 4 left, 256 k-tiles as 7 ranges of 37
    "c1_n128_grid7": ({"CLUSTER": "1", "BN": "128", "GRID": "7"}, (300, 4096, 700)),
    "c1_n128_grid7_transposed": ({"CLUSTER": "1", "BN": "128", "GRID": "7", "TRANSPOSE": "1"}, (300, 4096, 700)),
    "c2_grid10_staged": ({"CLUSTER": "2", "BN": "256", "GRID": "10", "EPI": "staged"}, (1000, 2048, 600)),
    # ping-pong: the warpgroups alternate over the pieces too
    "pingpong_grid7": ({"SCHEDULE": "pingpong", "CLUSTER": "1", "GRID": "7"}, (300, 4096, 700)),
    "pingpong_c2_grid6": ({"SCHEDULE": "pingpong", "CLUSTER": "2", "GRID": "6"}, (1000, 2048, 600)),
    # K not a multiple of 64, rows and columns past the tile edges (and a cluster's second row
    # tile past the last one)
    "c2_grid10_ragged": ({"CLUSTER": "2", "BN": "256", "GRID": "10"}, (777, 3000, 520)),
    # 2 x 2 clusters (A shared along N too): 7 x 5 tiles as 4 x 3 cluster tiles (the last row
    # and column past the edge) on 5 clusters: 2 left, 47 k-tiles as ranges of 19
    "c2x2_grid20": ({"CLUSTER": "2", "CLUSTER_N": "2", "BN": "256", "GRID": "20"}, (777, 3000, 1100)),
    # 1 x 2: 3 x 6 tiles as 3 x 3 cluster tiles on 2 clusters: 1 left, 64 k-tiles as 2 ranges
    "c1x2_n128_grid4": ({"CLUSTER": "1", "CLUSTER_N": "2", "BN": "128", "GRID": "4"}, (300, 4096, 700)),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", [DType.bfloat16, DType.float16], ids=lambda d: d.name)
def test_stream_k_tail(sm90, rng, monkeypatch, capfd, case, dtype):
    knobs, (m, k, n) = CASES[case]
    # one split (not split-K over every tile, which the few tiles would otherwise get), the tail
    # split allowed, the direct epilogue unless the case stages it
    for key, value in {"SPLITK": "1", "TAIL": "1", "EPI": "direct", **knobs}.items():
        monkeypatch.setenv(f"MAX_GEMM_SM90_{key}", value)
    monkeypatch.setenv("MAX_GEMM_SM90_LOG", "1")
    x, w = rand(rng, dtype, (m, k)), rand(rng, dtype, (k, n), 1 / math.sqrt(k))
    b, r = rand(rng, dtype, (n,)), rand(rng, dtype, (m, n))
    types = [TensorType(dtype, a.shape, GPU) for a in (x, w, b, r)]
    g = Graph("sk", lambda x, w, b, r: r + ops.relu(x @ w + b), input_types=types)
    capfd.readouterr()
    (got,) = run(g, x, w, b, r, device=sm90)
    err = capfd.readouterr().err
    assert re.search(r"sk_len: [1-9]", err), err
    # the variant's kernel ran: staged (_st), ping-pong (pp), B transposed to Bt (_t_: forced,
    # or N % 8 != 0, which TMA cannot stride as it is)
    name = re.search(r"gemm_sm90p_\w+", err).group(0)
    assert (knobs.get("EPI") == "staged") == name.endswith("_st"), name
    assert ("SCHEDULE" in knobs) == name.endswith("pp"), name
    assert ("TRANSPOSE" in knobs or n % 8 != 0) == ("_t_" in name), name
    (again,) = run(g, x, w, b, r, device=sm90)
    assert np.array_equal(got.view(np.uint16), again.view(np.uint16))
    f = [a.astype(np.float64) for a in (x, w, b, r)]
    ref = np.maximum(f[0] @ f[1] + f[2], 0) + f[3]
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=TOL[dtype], atol=TOL[dtype])
    monkeypatch.setenv("MAX_GEMM_SM90_TAIL", "0")
    capfd.readouterr()
    (whole,) = run(g, x, w, b, r, device=sm90)
    assert "sk_len: 0" in capfd.readouterr().err
    np.testing.assert_allclose(got.astype(np.float64), whole.astype(np.float64), rtol=TOL[dtype], atol=TOL[dtype])
