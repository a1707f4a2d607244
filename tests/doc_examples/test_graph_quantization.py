"""The Python examples of graph.quantization.md, as tests (see common.py for the method)."""

from doc_examples.common import *  # noqa: F401,F403


# --- graph.quantization.md --------------------------------------------------------------------


def test_graph_quantization__QuantizationEncoding():
    """graph.quantization.md, QuantizationEncoding: a quantized weight (a symbolic GPU device;
    no GPU is needed to create it)."""
    from max.dtype import DType  # added import
    from max.graph import DeviceRef  # added import
    from max.graph.quantization import QuantizationEncoding
    from max.graph import Weight

    encoding = QuantizationEncoding.Q4_K
    quantized_weight = Weight(
        name="linear.weight",
        dtype=DType.uint8,
        shape=[4096, 4096],
        device=DeviceRef.GPU(0),
        quantization_encoding=encoding
    )
