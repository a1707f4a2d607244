"""The eager max.nn against the graph layers and numpy, and F.functional fusion: a 3-layer MLP
under F.functional compiles one graph and gives the eager numbers."""

import numpy as np
import pytest

import max.functional as F
from max import engine
from max.driver import CPU
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType
from max.nn import legacy
from max.nn import GemmaRMSNorm, Linear, RMSNorm, Sequential
from max.nn.rope import RotaryEmbedding, TransposedRotaryEmbedding, freqs
from max.tensor import Tensor, default_device, default_dtype
from max._eager import compiled


@pytest.fixture(autouse=True)
def _host_defaults():
    """These tests state the host's eager defaults (float32 on the CPU); on a machine with a GPU
    the defaults are bfloat16 on the GPU, so each test pins them (device cases pass their own)."""
    with default_device(CPU()), default_dtype(DType.float32):
        yield


def _mlp():
    return [Linear(16, 32), Linear(32, 32), Linear(32, 8)]


def _forward(layers, x):
    h = F.relu(layers[0](x))
    h = F.relu(layers[1](h))
    return layers[2](h)


def test_functional_mlp_is_one_graph_with_the_eager_numbers(rng):
    layers = _mlp()
    x = Tensor.constant(rng.standard_normal((4, 16)), dtype=DType.float32)
    eager = _forward(layers, x).to_numpy()
    fused = F.functional(lambda x: _forward(layers, x))
    before = compiled.STATS["compiled"]
    out = fused(x)
    assert compiled.STATS["compiled"] == before + 1  # the whole MLP: one graph
    again = fused(x)
    assert compiled.STATS["compiled"] == before + 1  # and cached
    np.testing.assert_allclose(out.to_numpy(), eager, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(again.to_numpy(), out.to_numpy())
    entry = list(compiled._CACHE.values())[-1]
    plan = entry.model._core.plan_report([(t.dtype.value, [int(d) for d in t.shape]) for t in entry.graph._input_types])
    assert plan.count("matmul") == 3, plan  # one program holding the three layers
    w = [(l.weight.to_numpy().astype(np.float64), l.bias.to_numpy().astype(np.float64)) for l in layers]
    h = x.to_numpy().astype(np.float64)
    for i, (wi, bi) in enumerate(w):
        h = h @ wi.T + bi
        h = np.maximum(h, 0) if i < 2 else h
    np.testing.assert_allclose(out.to_numpy(), h, rtol=1e-4, atol=1e-5)


def _graph_layer_run(layer, state, x, *extra_types):
    t = TensorType(DType.float32, list(x.shape), DeviceRef.CPU())
    g = Graph("ref", forward=lambda v: layer(v), input_types=[t])
    layer.load_state_dict(state)
    model = engine.InferenceSession([CPU()]).load(g, weights_registry=layer.state_dict())
    return model.execute(x)[0].to_numpy()


def test_eager_layers_match_graph_layers_bit_for_bit(rng):
    x = rng.standard_normal((3, 16)).astype(np.float32)
    lin = Linear(16, 8)
    state = {"weight": lin.weight.to_numpy(), "bias": lin.bias.to_numpy()}
    ref = _graph_layer_run(legacy.Linear(16, 8, DType.float32, DeviceRef.CPU(), has_bias=True), state, x)
    np.testing.assert_array_equal(lin(Tensor.from_numpy(x)).to_numpy(), ref)

    norm = RMSNorm(16, eps=1e-5)
    norm.weight = Tensor.constant(rng.standard_normal(16), dtype=DType.float32)
    ref = _graph_layer_run(legacy.RMSNorm(16, DType.float32, 1e-5, multiply_before_cast=False),
                           {"weight": norm.weight.to_numpy()}, x)
    np.testing.assert_array_equal(norm(Tensor.from_numpy(x)).to_numpy(), ref)

    gemma = GemmaRMSNorm(16)
    ref = _graph_layer_run(legacy.GemmaRMSNorm(16, DType.float32), {"weight": gemma.weight.to_numpy()}, x)
    np.testing.assert_array_equal(gemma(Tensor.from_numpy(x)).to_numpy(), ref)


def test_eager_layers_stage_inside_a_graph(rng):
    """The same module on graph values stages ops (its parameters become constants)."""
    model = Sequential(Linear(6, 4), RMSNorm(4))
    x = rng.standard_normal((2, 6)).astype(np.float32)
    g = Graph("staged", forward=lambda v: model(v), input_types=[TensorType(DType.float32, [2, 6], DeviceRef.CPU())])
    staged = engine.InferenceSession([CPU()]).load(g).execute(x)[0].to_numpy()
    np.testing.assert_array_equal(staged, model(Tensor.from_numpy(x)).to_numpy())


def _rope_ref(x, table, start, interleaved):
    b, s, h, d = x.shape
    cos, sin = table[start:start + s, 0::2], table[start:start + s, 1::2]
    if interleaved:
        re, im = x[..., 0::2], x[..., 1::2]
    else:
        re, im = x[..., : d // 2], x[..., d // 2:]
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    out_re, out_im = re * cos - im * sin, re * sin + im * cos
    out = np.empty_like(x)
    if interleaved:
        out[..., 0::2], out[..., 1::2] = out_re, out_im
    else:
        out[..., : d // 2], out[..., d // 2:] = out_re, out_im
    return out


def test_rotary_embeddings_match_numpy(rng):
    table = freqs(8, 32, theta=10000.0)
    x = rng.standard_normal((2, 5, 3, 8))
    for cls, interleaved in ((RotaryEmbedding, True), (TransposedRotaryEmbedding, False)):
        got = cls(table)(Tensor.constant(x, dtype=DType.float32), start_pos=4).to_numpy()
        want = _rope_ref(x, table.to_numpy().astype(np.float64), 4, interleaved)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_module_state_dict_transforms_and_compile_weights_are_checked(rng):
    """state_dict gives every parameter by name (what load_state_dict takes back); a transform
    must return Tensors; compile's `weights` must name every parameter, nothing else, with the
    parameters' shapes and dtypes."""
    lin = Linear(5, 3)
    state = lin.state_dict()
    assert set(state) == {"weight", "bias"} and list(state["weight"].shape) == [3, 5]
    w = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    lin.load_state_dict({"weight": w, "bias": b})
    np.testing.assert_array_equal(lin.state_dict()["weight"].to_numpy(), w)
    with pytest.raises(TypeError, match="apply_to_parameters: the function returned int for parameter 'weight'"):
        Linear(2, 3).apply_to_parameters(lambda n, t: 5)
    seq = Sequential(Linear(2, 3), Linear(3, 1))
    with pytest.raises(TypeError, match="returned NoneType for parameter '1.bias'"):
        seq.apply_to_parameters(lambda n, t: None if n == "1.bias" else t)

    t = TensorType(DType.float32, [2, 5], device=DeviceRef.CPU())
    with pytest.raises(KeyError, match="Linear.compile: no weight given for 'bias'"):
        lin.compile(t, weights={"weight": w})
    with pytest.raises(ValueError, match="Linear.compile: weights that match no parameter: extra"):
        lin.compile(t, weights={"weight": w, "bias": b, "extra": b})
    with pytest.raises(ValueError, match=r"weight 'weight': the module expects float32\[3, 5\], got float64\[3, 5\]"):
        lin.compile(t, weights={"weight": w.astype(np.float64), "bias": b})
    x = rng.standard_normal((2, 5)).astype(np.float32)
    out = lin.compile(t, weights={"weight": 2 * w, "bias": b})(Tensor.constant(x))
    np.testing.assert_allclose(out.to_numpy(), x @ (2 * w).T + b, rtol=1e-5, atol=1e-5)


def test_containers_copy_load_and_change_as_documented(rng):
    """map_parameters copies the whole tree (a Sequential's or ModuleList's children too) and
    leaves the original alone; a load_state_dict that fails changes nothing; ModuleList takes
    the list operations, renaming its children by index; RoPE's start_pos takes None and str."""
    from max.nn import ModuleList

    seq = Sequential(Linear(2, 3), Linear(3, 1))
    before = {n: t.to_numpy().copy() for n, t in seq.parameters}
    zeroed = seq.map_parameters(lambda n, t: t * 0)
    assert zeroed[0] is not seq[0] and not zeroed[0].weight.to_numpy().any()
    for n, t in seq.parameters:
        np.testing.assert_array_equal(t.to_numpy(), before[n])
    ml = ModuleList([Linear(2, 2)])
    ml.map_parameters(lambda n, t: t * 0)
    assert ml[0].weight.to_numpy().any()

    lin = Linear(2, 3)
    w = lin.weight.to_numpy().copy()
    for bad in ({"weight": np.ones((3, 2), np.float32), "bias": np.ones(4, np.float32)},
                {"weight": np.ones((3, 2), np.float32)}):
        with pytest.raises((ValueError, KeyError), match="bias"):
            lin.load_state_dict(bad)
        np.testing.assert_array_equal(lin.weight.to_numpy(), w)

    a, b, c = Linear(1, 1), Linear(1, 2), Linear(2, 1)
    ml = ModuleList([a])
    ml.extend([c])
    ml.insert(1, b)
    assert list(ml) == [a, b, c] and [n for n, _ in ml.children] == ["0", "1", "2"]
    assert [n for n, _ in ml.parameters][:4] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert ml.pop(0) is a and list(ml) == [b, c] and b in ml and a not in ml
    ml[1] = a
    del ml[0]
    assert list(ml) == [a] and [n for n, _ in ml.children] == ["0"]

    x = Tensor.constant(rng.standard_normal((1, 2, 1, 8)), dtype=DType.float32)
    rope = RotaryEmbedding(freqs(8, 16))
    np.testing.assert_array_equal(rope(x, None).to_numpy(), rope(x, 0).to_numpy())


def test_constructor_and_argument_errors_name_what_is_wrong():
    from max import random

    for bad in (0, -1, 2.5, "4", True):
        with pytest.raises(ValueError, match="Linear: in_dim must be a positive int"):
            Linear(bad, 3)
    with pytest.raises(ValueError, match="Linear: out_dim must be a positive int, got 0"):
        Linear(3, 0)
    for bad in ("a", 1.5, True):
        with pytest.raises(TypeError, match="random.set_seed: the seed must be an int"):
            random.set_seed(bad)
    random.set_seed(np.int64(7))
    random.set_seed(random.seed())  # the seed as random.seed() gives it, a scalar int64 Tensor
    with pytest.raises(TypeError, match="a tensor seed must be one integer"):
        random.set_seed(Tensor.ones([2]))
    r = RotaryEmbedding(freqs(8, 16))
    for neg in (-1, np.int64(-1)):
        with pytest.raises(ValueError, match="RotaryEmbedding: start_pos must not be negative, got -1"):
            r(Tensor.ones([1, 2, 1, 8]), start_pos=neg)
    assert list(F.hann_window(0, device=CPU()).shape) == [0]


def test_state_dict_of_a_tree_mixing_tensors_and_graph_layers_has_both():
    from max.nn import Module

    class Mixed(Module):
        def __init__(self):
            self.scale = Tensor.ones([3])
            self.proj = legacy.Linear(3, 2, DType.float32, DeviceRef.CPU())

    assert set(Mixed().state_dict()) == {"scale", "proj.weight"}


def test_module_paths_as_max_documents_them():
    """MAX 26.7's paths: max.nn.norm.rms_norm (RMSNorm, GemmaRMSNorm, rms_norm), max.nn.sequential
    (Sequential, ModuleList) and max.nn.rope.rope hold the eager modules; the graph layers keep
    theirs under max.nn.legacy."""
    import max.nn as nn
    from max.nn.legacy.norm import LayerNorm as LegacyLayerNorm
    from max.nn.legacy.norm import RMSNorm as LegacyRMSNorm
    from max.nn.legacy.sequential import Sequential as LegacySequential
    from max.nn.norm import GemmaRMSNorm as G
    from max.nn.norm.rms_norm import GemmaRMSNorm, RMSNorm as R, rms_norm
    from max.nn.rope.rope import TransposedRotaryEmbedding as T
    from max.nn.sequential import ModuleList as ML, Sequential as S

    assert (R, GemmaRMSNorm, G, S, ML, T) == (nn.RMSNorm, nn.GemmaRMSNorm, nn.GemmaRMSNorm, nn.Sequential,
                                              nn.ModuleList, TransposedRotaryEmbedding)
    assert rms_norm is nn.rms_norm
    assert list(S(Linear(5, 10), Linear(10, 5))(Tensor.ones([5])).shape) == [5]
    assert list(R(8).weight.shape) == [8]
    assert LegacyRMSNorm.__module__ == LegacyLayerNorm.__module__ == "max.nn._legacy_norm"
    assert LegacySequential.__module__ == "max.nn._legacy_sequential"
