"""The graph layers of max.nn (and max.nn.legacy): state dicts, and each layer's numbers against
numpy float64 on fresh random weights, per device."""

from __future__ import annotations

import numpy as np
import pytest

from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, TensorValue, ops
from max.graph.quantization import QuantizationEncoding
from max.nn import legacy as nn


def _session(device):
    return engine.InferenceSession(devices=[driver.CPU()] if device.is_host else [driver.CPU(), device])


def _run(device, module, graph, *inputs):
    model = _session(device).load(graph, weights_registry=module.state_dict())
    bufs = [driver.Buffer.from_numpy(np.ascontiguousarray(x)).to(device) for x in inputs]
    return [o.to_numpy() for o in model.execute(*bufs)]


class MLPBlock(nn.Module):
    """MAX's tutorial "Build an MLP block as a module", as the tutorial writes it."""

    def __init__(self, in_features, out_features, hidden_features=None, activation=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.hidden_features = hidden_features or []
        self.activation = activation or ops.relu
        layers = []
        current_dim = in_features
        for i, h_dim in enumerate(self.hidden_features):
            layers.append(
                nn.Linear(in_dim=current_dim, out_dim=h_dim, dtype=DType.float32, device=DeviceRef.CPU(),
                          has_bias=True, name=f"hidden_{i}")
            )
            layers.append(self.activation)
            current_dim = h_dim
        layers.append(
            nn.Linear(in_dim=current_dim, out_dim=out_features, dtype=DType.float32, device=DeviceRef.CPU(),
                      has_bias=True, name="output")
        )
        self.model = nn.Sequential(layers)

    def __call__(self, x: TensorValue) -> TensorValue:
        return self.model(x)

    def __repr__(self) -> str:
        layers = [f"  ({i}): {layer!r}" for i, layer in enumerate(self.model.layers)]
        return "MLPBlock(\n" + "\n".join(layers) + "\n)"


def test_tutorial_mlp_block_runs_and_matches_numpy(rng):
    mlp = MLPBlock(in_features=10, out_features=5, hidden_features=[32, 16], activation=ops.relu)
    names = sorted(mlp.raw_state_dict())
    assert names == sorted(
        f"model.layers.{i}.{w}" for i in (0, 2, 4) for w in ("weight", "bias")
    ), names
    weights = {n: rng.standard_normal(w.shape).astype(np.float32) for n, w in mlp.raw_state_dict().items()}
    mlp.load_state_dict(weights)
    graph = Graph("simple_mlp_graph", mlp, input_types=[TensorType(DType.float32, (1, 10), DeviceRef.CPU())])
    assert "simple_mlp_graph" in str(graph)
    x = rng.standard_normal((1, 10)).astype(np.float32)
    (out,) = _run(driver.CPU(), mlp, graph, x)
    h = x.astype(np.float64)
    for i in (0, 2):
        h = np.maximum(h @ weights[f"model.layers.{i}.weight"].T + weights[f"model.layers.{i}.bias"], 0)
    want = h @ weights["model.layers.4.weight"].T + weights["model.layers.4.bias"]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    assert "Linear(10 -> 32" in repr(mlp)


def test_load_state_dict_is_strict_and_checks_shapes(rng):
    lin = nn.Linear(4, 3, DType.float32, DeviceRef.CPU(), has_bias=True)
    with pytest.raises(ValueError, match="missing weights: bias"):
        lin.load_state_dict({"weight": np.zeros((3, 4), np.float32)})
    with pytest.raises(ValueError, match="unused weights: extra"):
        lin.load_state_dict({"weight": np.zeros((3, 4), np.float32), "bias": np.zeros(3, np.float32),
                             "extra": np.zeros(1)})
    with pytest.raises(ValueError, match=r"weight: the module expects shape \[3, 4\], got \[4, 3\]"):
        lin.load_state_dict({"weight": np.zeros((4, 3), np.float32), "bias": np.zeros(3, np.float32)})
    lin.load_state_dict({"weight": np.ones((3, 4), np.float32)}, strict=False)
    sd = lin.state_dict()
    assert set(sd) == {"weight", "bias"} and sd["bias"].shape == (3,) and not sd["bias"].any()
    with pytest.raises(ValueError, match="has no value"):
        nn.Linear(2, 2, DType.float32, DeviceRef.CPU(), has_bias=True).state_dict(auto_initialize=False)


@pytest.mark.parametrize("enc", [None, QuantizationEncoding.Q8_0, QuantizationEncoding.Q4_0])
def test_linear_and_embedding(device, rng, enc):
    import gguf

    ref = DeviceRef.from_device(device)
    lin = nn.Linear(64, 24, DType.float32, ref, has_bias=True, quantization_encoding=enc)
    emb = nn.Embedding(50, 64, DType.float32, ref, quantization_encoding=enc)
    w = rng.standard_normal((24, 64)).astype(np.float32)
    table = rng.standard_normal((50, 64)).astype(np.float32)
    if enc is None:
        wq, tq, wd, td = w, table, w, table
    else:
        qt = getattr(gguf.GGMLQuantizationType, enc.value)
        wq, tq = gguf.quants.quantize(w, qt), gguf.quants.quantize(table, qt)
        wd, td = gguf.quants.dequantize(wq, qt), gguf.quants.dequantize(tq, qt)
    bias = rng.standard_normal(24).astype(np.float32)

    class Both(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.emb = lin, emb

        def __call__(self, ids):
            return self.lin(self.emb(ids))

    both = Both()
    both.load_state_dict({"lin.weight": wq, "lin.bias": bias, "emb.weight": tq})
    g = Graph("le", both, input_types=[TensorType(DType.int64, ["n"], ref)])
    ids = rng.integers(0, 50, size=7).astype(np.int64)
    (out,) = _run(device, both, g, ids)
    want = td[ids].astype(np.float64) @ wd.astype(np.float64).T + bias
    tol = 1e-4 if enc is None else 2e-2
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol * np.abs(want).max())


def test_norms_and_mlp(device, rng):
    ref = DeviceRef.from_device(device)
    rms = nn.RMSNorm(32, DType.float32, eps=1e-5)
    gem = nn.GemmaRMSNorm(32, DType.float32, eps=1e-6)
    ln = nn.LayerNorm(32, devices=[ref], dtype=DType.float32, eps=1e-5)
    mlp = nn.MLP(DType.float32, None, 32, 48, [ref], activation_function="gelu_tanh")

    class All(nn.Module):
        def __init__(self):
            super().__init__()
            self.rms, self.gem, self.ln, self.mlp = rms, gem, ln, mlp

        def __call__(self, x):
            return self.rms(x), self.gem(x), self.ln(x), self.mlp(x)

    m = All()
    vals = {n: rng.standard_normal(w.shape).astype(np.float32) for n, w in m.raw_state_dict().items()}
    m.load_state_dict(vals)
    g = Graph("norms", m, input_types=[TensorType(DType.float32, [5, 32], ref)])
    x = rng.standard_normal((5, 32)).astype(np.float32)
    r, gm, l, f = _run(device, m, g, x)
    x64 = x.astype(np.float64)
    inv = 1 / np.sqrt((x64**2).mean(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(r, x64 * inv * vals["rms.weight"], rtol=1e-5, atol=1e-5)
    inv6 = 1 / np.sqrt((x64**2).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(gm, x64 * inv6 * (1 + vals["gem.weight"]), rtol=1e-5, atol=1e-5)
    mu, var = x64.mean(-1, keepdims=True), x64.var(-1, keepdims=True)
    np.testing.assert_allclose(l, (x64 - mu) / np.sqrt(var + 1e-5) * vals["ln.weight"] + vals["ln.bias"], rtol=1e-5, atol=1e-5)

    def gelu_tanh(v):
        return 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v**3)))

    up = x64 @ vals["mlp.up_proj.weight"].T
    gate = x64 @ vals["mlp.gate_proj.weight"].T
    np.testing.assert_allclose(f, (gelu_tanh(gate) * up) @ vals["mlp.down_proj.weight"].T, rtol=1e-4, atol=1e-4)


def test_multihead_attention_with_padding_mask(device, rng):
    ref = DeviceRef.from_device(device)
    mha = nn.MultiheadAttention(4, 32, devices=[ref], qkv_has_bias=True, o_proj_has_bias=True)
    vals = {n: rng.standard_normal(w.shape).astype(np.float32) * 0.3 for n, w in mha.raw_state_dict().items()}
    mha.load_state_dict(vals)
    g = Graph("mha", lambda x, m: mha(x, m), input_types=[
        TensorType(DType.float32, [2, 6, 32], ref), TensorType(DType.bool, [2, 6], ref)])
    x = rng.standard_normal((2, 6, 32)).astype(np.float32)
    mask = np.array([[1] * 6, [1] * 4 + [0] * 2], bool)
    (out,) = _run(device, mha, g, x, mask)

    def proj(name, v):
        return v @ vals[f"{name}.weight"].T + vals[f"{name}.bias"]

    x64 = x.astype(np.float64)
    q, k, v = (proj(n, x64).reshape(2, 6, 4, 8).transpose(0, 2, 1, 3) for n in ("q_proj", "k_proj", "v_proj"))
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(8) + np.where(mask, 0, -1e30)[:, None, None, :]
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    want = proj("o_proj", (p @ v).transpose(0, 2, 1, 3).reshape(2, 6, 32))
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_multihead_attention_with_a_square_additive_mask(device, rng):
    """A rank-2 float mask is additive over [seq, seq] (a causal one), broadcast over batch and
    heads; a rank-2 bool or integer one is the [batch, seq] keep mask (above)."""
    ref = DeviceRef.from_device(device)
    mha = nn.MultiheadAttention(2, 16, devices=[ref])
    vals = {n: rng.standard_normal(w.shape).astype(np.float32) * 0.3 for n, w in mha.raw_state_dict().items()}
    mha.load_state_dict(vals)
    g = Graph("mha", lambda x, m: mha(x, m), input_types=[
        TensorType(DType.float32, [3, 5, 16], ref), TensorType(DType.float32, [5, 5], ref)])
    x = rng.standard_normal((3, 5, 16)).astype(np.float32)
    mask = np.triu(np.full((5, 5), -1e9, np.float32), 1)
    (out,) = _run(device, mha, g, x, mask)
    x64 = x.astype(np.float64)
    q, k, v = (((x64 @ vals[f"{n}.weight"].T)).reshape(3, 5, 2, 8).transpose(0, 2, 1, 3)
               for n in ("q_proj", "k_proj", "v_proj"))
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(8) + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    want = (p @ v).transpose(0, 2, 1, 3).reshape(3, 5, 16) @ vals["o_proj.weight"].T
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_rotary_embedding_padded_call(device, rng):
    ref = DeviceRef.from_device(device)
    for interleaved in (True, False):
        rope = nn.RotaryEmbedding(64, 4, 10000.0, 32, interleaved=interleaved)
        g = Graph("rope", lambda x: rope(x, start_pos=3), input_types=[TensorType(DType.float32, [2, 5, 4, 16], ref)])
        x = rng.standard_normal((2, 5, 4, 16)).astype(np.float32)
        out = _session(device).load(g).execute(driver.Buffer.from_numpy(x).to(device))[0].to_numpy()
        inv = 1 / 10000.0 ** (np.arange(0, 16, 2) / 16)
        ang = np.arange(3, 8)[:, None] * inv
        c, s = np.cos(ang)[None, :, None, :], np.sin(ang)[None, :, None, :]
        x64 = x.astype(np.float64)
        if interleaved:
            a, b = x64[..., 0::2], x64[..., 1::2]
            want = np.stack([a * c - b * s, b * c + a * s], -1).reshape(x.shape)
        else:
            a, b = x64[..., :8], x64[..., 8:]
            want = np.concatenate([a * c - b * s, b * c + a * s], -1)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_numbered_mask_variants_stand_for_the_named_ones():
    """MHAMaskVariant has MAX's numbers; anything taking an AttentionMaskVariant takes it too."""
    from max.nn.attention import AttentionMaskVariant as A, MHAMaskVariant as M
    from max.nn.attention.mask_config import op_mask

    assert [m.value for m in M] == ["0", "1", "2", "3", "4"]
    assert A(M.CAUSAL_MASK) is A.CAUSAL_MASK and A("4") is A.SLIDING_WINDOW_CAUSAL_MASK
    assert op_mask(M.NULL_MASK) == "null" and op_mask(M.SLIDING_WINDOW_CAUSAL_MASK) == "sliding_window"
    with pytest.raises(ValueError, match="CAUSAL_ALIBI_MASK"):
        A(M.CAUSAL_ALIBI_MASK)
