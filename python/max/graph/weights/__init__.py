"""Loading weights into a graph (``max.graph.weights``). Readers for the formats arrive with
the weights work; the format detection is here already."""

from max.graph.weights.format import WeightsFormat, weights_format

__all__ = ["WeightsFormat", "weights_format"]
