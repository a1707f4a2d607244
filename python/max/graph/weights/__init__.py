"""Loading weights into a graph (``max.graph.weights``): readers for safetensors and GGUF
checkpoints with hierarchical access (``weights.encoder.layer[0].attention.query.weight``),
``load_weights`` to pick the reader from file extensions, and ``WeightData``.

The files are memory-mapped and parsed in Rust, checking every offset and size; tensors are
host Buffers viewing the map, so nothing is copied until a weight moves to a device (at
``InferenceSession.load``). Moves that take over a second draw a progress bar on stderr when
it is a terminal; set ``MAX_NO_PROGRESS=1`` to turn it off."""

from max.graph.weights.format import WeightsFormat, weights_format
from max.graph.weights.load import load_weights
from max.graph.weights.load_gguf import GGUFWeights
from max.graph.weights.load_safetensors import SafetensorWeights
from max.graph.weights.weights import WeightData, Weights

__all__ = [
    "GGUFWeights",
    "SafetensorWeights",
    "WeightData",
    "Weights",
    "WeightsFormat",
    "load_weights",
    "weights_format",
]
