"""Splitting weights and layers over devices: ShardingStrategy's ranges, Weight.shard (shapes and
the values each device receives), the head plan of tensor-parallel attention, and the split
layers (Linear rowwise and columnwise, MLP, ColumnParallelLinear, VocabParallelEmbedding) against
their single-device selves, on simulated devices (CPU values standing for several devices)."""

from __future__ import annotations

import numpy as np
import pytest

from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, ShardingStrategy, TensorType, Weight
from max.graph.sharding import even_ranges
from max.nn import MLP, ColumnParallelLinear, Embedding, Linear, VocabParallelEmbedding
from max.nn.attention import head_plan
from max.nn.comm import Signals
from max.nn.kv_cache import KVCacheParams

SIM = [DeviceRef.CPU(i) for i in range(4)]


def test_even_ranges_cover_the_dim_in_order():
    assert even_ranges(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert even_ranges(9 * 64, 2, 64) == [(0, 320), (320, 576)]
    with pytest.raises(ValueError, match="whole number of units"):
        even_ranges(10, 2, 4)


def test_strategies_give_each_device_its_piece():
    assert ShardingStrategy.rowwise(2).shard_shape([6, 4], 1) == [3, 4]
    assert ShardingStrategy.columnwise(4).shard_shape([6, 8], 3) == [6, 2]
    assert ShardingStrategy.replicate(3).shard_shape([6, 8], 2) == [6, 8]
    heads = ShardingStrategy.head_aware_columnwise(2, 9, 64)
    assert [heads.shard_shape([5, 576], i) for i in range(2)] == [[5, 320], [5, 256]]
    with pytest.raises(ValueError, match="not 9 heads of 64"):
        heads.shard_shape([5, 500], 0)
    with pytest.raises(IndexError):
        ShardingStrategy.rowwise(2).shard_shape([6, 4], 2)


@pytest.mark.parametrize("n_heads,n_kv,n_dev,want", [
    (32, 8, 2, [((0, 16), (0, 4)), ((16, 32), (4, 8))]),
    (9, 3, 2, [((0, 6), (0, 2)), ((6, 9), (2, 3))]),
    (9, 3, 4, [((0, 2), (0, 1)), ((2, 3), (0, 1)), ((3, 6), (1, 2)), ((6, 9), (2, 3))]),
    (4, 2, 4, [((0, 1), (0, 1)), ((1, 2), (0, 1)), ((2, 3), (1, 2)), ((3, 4), (1, 2))]),
    (8, 8, 3, [((0, 3), (0, 3)), ((3, 6), (3, 6)), ((6, 8), (6, 8))]),
])
def test_head_plan(n_heads, n_kv, n_dev, want):
    plan = head_plan(n_heads, n_kv, n_dev)
    assert plan == want
    # Every query head once, in order; local heads a whole number of groups or part of one.
    assert [h for (qs, qe), _ in plan for h in range(qs, qe)] == list(range(n_heads))
    group = n_heads // n_kv
    for (qs, qe), (ks, ke) in plan:
        assert all(h // group in range(ks, ke) for h in range(qs, qe))
        assert (qe - qs) % (ke - ks) == 0
    params = KVCacheParams(DType.float32, n_kv, 8, 1, devices=SIM[:1] * n_dev, page_size=4)
    assert [params.kv_heads_on(i) for i in range(n_dev)] == [ke - ks for _, (ks, ke) in plan]


def test_head_plan_refuses_impossible_splits():
    with pytest.raises(ValueError, match="cannot split 4 attention heads over 5 devices"):
        head_plan(4, 2, 5)
    with pytest.raises(ValueError, match="not a multiple"):
        head_plan(6, 4, 2)


def _run(build, input_types, inputs, weights):
    """Stages build(*values) -> outputs and runs it on simulated devices."""
    with Graph("t", input_types=input_types) as g:
        g.output(*build(*[v for v in g.inputs]))
    model = engine.InferenceSession(devices=[driver.CPU()]).load(g, weights_registry=weights)
    return [o.to_numpy() for o in model.execute(*inputs)]


def test_weight_shards_are_slices_on_their_devices(rng):
    w = Weight("w", DType.float32, [5, 6], DeviceRef.CPU())
    w.sharding_strategy = ShardingStrategy.columnwise(3)
    pieces = w.shard(SIM[:3])
    assert [list(map(int, p.shape)) for p in pieces] == [[5, 2]] * 3
    assert [p.device for p in pieces] == SIM[:3] and [p.shard_idx for p in pieces] == [0, 1, 2]
    with pytest.raises(ValueError, match="already a shard"):
        pieces[0].shard(SIM[:3])
    with pytest.raises(ValueError, match="for 3 devices"):
        w.shard(SIM[:2])
    value = rng.standard_normal((5, 6)).astype(np.float32)
    outs = _run(lambda: [p * 1 for p in pieces], [], [], {"w": value})
    for i, o in enumerate(outs):
        np.testing.assert_array_equal(o, value[:, 2 * i : 2 * i + 2])


def test_unsharded_weight_needs_a_strategy():
    with pytest.raises(ValueError, match="sharding_strategy"):
        Weight("w", DType.float32, [4], DeviceRef.CPU()).shard(SIM[:2])


def _linear_state(rng, lin: Linear) -> dict:
    state = {"weight": rng.standard_normal((lin.out_dim, lin.in_dim)).astype(np.float32)}
    if lin.bias is not None:
        state["bias"] = rng.standard_normal(lin.out_dim).astype(np.float32)
    lin.load_state_dict(state)
    return lin.state_dict()


@pytest.mark.parametrize("strategy", ["rowwise", "columnwise"])
def test_linear_pieces_add_up_to_the_layer(rng, strategy):
    n = 3
    lin = Linear(12, 7, DType.float32, DeviceRef.CPU(), has_bias=True)
    weights = _linear_state(rng, lin)
    lin.sharding_strategy = getattr(ShardingStrategy, strategy)(n)
    pieces = lin.shard(SIM[:n])
    x = rng.standard_normal((4, 12)).astype(np.float32)
    types = [TensorType(DType.float32, [4, 12], d) for d in SIM[:n]]
    if strategy == "rowwise":
        outs = _run(lambda *xs: [p(v) for p, v in zip(pieces, xs)], types, [x] * n, weights)
        got = np.concatenate(outs, axis=1)
    else:
        cols = even_ranges(12, n)
        types = [TensorType(DType.float32, [4, b - a], d) for (a, b), d in zip(cols, SIM)]
        outs = _run(lambda *xs: [p(v) for p, v in zip(pieces, xs)], types, [x[:, a:b] for a, b in cols], weights)
        got = np.sum(outs, axis=0)
    want = x @ weights["weight"].T + weights["bias"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_mlp_pieces_add_up_to_the_mlp(rng):
    mlp = MLP(DType.float32, None, 8, 20, [DeviceRef.CPU()])
    state = {f"{p}.weight": rng.standard_normal(s).astype(np.float32) * 0.3
             for p, s in (("gate_proj", (20, 8)), ("up_proj", (20, 8)), ("down_proj", (8, 20)))}
    mlp.load_state_dict(state)
    weights = mlp.state_dict()
    pieces = mlp.shard(SIM[:3])
    x = rng.standard_normal((5, 8)).astype(np.float32)
    types = [TensorType(DType.float32, [5, 8], d) for d in SIM[:3]]
    outs = _run(lambda *xs: [p(v) for p, v in zip(pieces, xs)], types, [x] * 3, weights)
    g = x @ state["gate_proj.weight"].T
    want = (g / (1 + np.exp(-g)) * (x @ state["up_proj.weight"].T)) @ state["down_proj.weight"].T
    np.testing.assert_allclose(np.sum(outs, axis=0), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", [2, 4])
def test_vocab_parallel_embedding_and_column_parallel_head(rng, n):
    vocab, dim = 50, 6
    devices = SIM[:n]
    emb = VocabParallelEmbedding(vocab, dim, DType.float32, devices)
    head = ColumnParallelLinear(dim, vocab, DType.float32, devices, tied_weight=emb.weight)
    table = rng.standard_normal((vocab, dim)).astype(np.float32)
    emb.load_state_dict({"weight": table})
    ids = rng.integers(0, vocab, 9).astype(np.int64)
    signals = Signals(devices)
    types = [TensorType(DType.int64, [9], devices[0]), *signals.input_types()]

    def build(tokens, *sig):
        sig = [s.buffer for s in sig]
        rows = emb(tokens.tensor, sig)
        return [*rows, *head(rows, sig)]

    outs = _run(build, types, [ids, *signals.buffers()], emb.state_dict())
    for r in outs[:n]:
        np.testing.assert_array_equal(r, table[ids])
    for logits in outs[n:]:
        np.testing.assert_allclose(logits, table[ids] @ table.T, rtol=1e-5, atol=1e-5)


def test_quantized_columns_must_fall_on_blocks():
    from max.graph.quantization import QuantizationEncoding

    lin = Linear(64, 8, DType.float32, DeviceRef.CPU(), quantization_encoding=QuantizationEncoding.Q8_0)
    lin.sharding_strategy = ShardingStrategy.columnwise(2)
    pieces = lin.shard(SIM[:2])
    assert [list(map(int, p.weight.shape)) for p in pieces] == [[8, 34], [8, 34]]
    lin.sharding_strategy = ShardingStrategy.columnwise(4)
    with pytest.raises(ValueError, match="do not fall on Q8_0 blocks"):
        lin.shard(SIM[:4])


def test_pieces_of_large_weights_are_cut_once_at_load(rng):
    """Slices of host weights and transfers of loaded values fold at load whatever their size:
    executing the model moves no weight bytes."""
    w = Weight("big", DType.float32, [2048, 2304], DeviceRef.CPU())  # 4.7M elements, past the fold limit
    w.sharding_strategy = ShardingStrategy.columnwise(2)
    pieces = w.shard(SIM[:2])
    value = rng.standard_normal((2048, 2304)).astype(np.float32)
    types = [TensorType(DType.float32, [3, 2048], d) for d in SIM[:2]]
    with Graph("big", input_types=types) as g:
        g.output(*[x.tensor @ p for x, p in zip(g.inputs, pieces)])
    model = engine.InferenceSession(devices=[driver.CPU()]).load(g, weights_registry={"big": value})
    x = rng.standard_normal((3, 2048)).astype(np.float32)
    report = model._plan_report(x, x)
    assert "slice" not in report and "transfer_to" not in report, report
    outs = model.execute(x, x)
    for i, o in enumerate(outs):
        np.testing.assert_allclose(o.to_numpy(), x @ value[:, 1152 * i : 1152 * (i + 1)], rtol=1e-4, atol=1e-3)
