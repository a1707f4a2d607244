"""``max.nn.rope.rope``: the rotary embedding modules' own module, as MAX documents their path
(``max.nn.rope.rope.TransposedRotaryEmbedding``); they are ``max.nn.rope``'s."""

from max.nn.rope import RotaryEmbedding, TransposedRotaryEmbedding, freqs

__all__ = ["RotaryEmbedding", "TransposedRotaryEmbedding", "freqs"]
