"""LongRoPE's frequency table (``LongRoPERotaryEmbedding``): one set of factors for every position,
the long ones when the table's context exceeds the original context (as llama.cpp chooses), else
the short ones; cos and sin scaled by the attention factor; checked against the float64
reference's Phi-3 frequencies (tests/reference/llm.py, itself checked against transformers),
and clear errors for factors a model file gets wrong."""

from __future__ import annotations

import numpy as np
import pytest

from max.nn import LongRoPERotaryEmbedding, LongRoPEScalingParams
from reference.checkpoints import PHI3_LONGROPE_SCALING
from reference.llm import decoder_spec

CONFIG = {
    "architectures": ["Phi3ForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
    "num_hidden_layers": 1, "rope_theta": 10000.0, "partial_rotary_factor": 0.75, "max_position_embeddings": 256,
    "original_max_position_embeddings": 32, "rope_scaling": PHI3_LONGROPE_SCALING,
}


def _rope(context: int, attention_factor: float | None = None) -> LongRoPERotaryEmbedding:
    params = LongRoPEScalingParams(PHI3_LONGROPE_SCALING["short_factor"], PHI3_LONGROPE_SCALING["long_factor"], 32, 256,
                                   attention_factor)
    return LongRoPERotaryEmbedding(64, 4, 10000.0, context, 16, rotary_dim=12, scaling_params=params)


@pytest.mark.parametrize("context, long", [(80, True), (32, False), (20, False)])
def test_table_uses_one_set_of_factors_for_its_context(context, long):
    spec = decoder_spec(CONFIG)
    table = _rope(context).freqs_cis_base().reshape(context, 6, 2).astype(np.float64)
    positions = np.arange(context, dtype=np.float64)[:, None]
    inv = spec.long_inv_freq if long else spec.layers[0].inv_freq
    scale = spec.rope_attention_factor
    assert scale == pytest.approx(np.sqrt(1 + np.log(8) / np.log(32)))
    np.testing.assert_allclose(table[..., 0], scale * np.cos(positions * inv), atol=2e-7)
    np.testing.assert_allclose(table[..., 1], scale * np.sin(positions * inv), atol=2e-7)


def test_attention_factor_given_is_used():
    np.testing.assert_allclose(_rope(20, 1.0).freqs_cis_base()[0, :2], [1.0, 0.0])
    np.testing.assert_allclose(_rope(20, 2.0).freqs_cis_base()[0, :2], [2.0, 0.0])


@pytest.mark.parametrize("short, long, match", [
    ([1.0] * 5, [1.0] * 6, "short_factor has 5 values, the rotary dims need 6"),
    ([1.0] * 6, [1.0] * 7, "long_factor has 7 values"),
    ([1.0] * 5 + [0.0], [1.0] * 6, "short_factor must be positive"),
    ([1.0] * 6, [1.0] * 5 + [float("nan")], "long_factor must be positive"),
])
def test_bad_factors_are_clear_errors(short, long, match):
    with pytest.raises(ValueError, match=match):
        LongRoPERotaryEmbedding(64, 4, 10000.0, 80, 16, rotary_dim=12,
                                scaling_params=LongRoPEScalingParams(short, long, 32, 256))
