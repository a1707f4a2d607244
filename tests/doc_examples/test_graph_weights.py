"""The Python examples of graph.weights.md, as tests (see common.py for the method)."""

from doc_examples.common import *  # noqa: F401,F403


# --- graph.weights.md -------------------------------------------------------------------------


def test_graph_weights__weights_format(capsys):
    """graph.weights.md, weights_format: detects the format from the file names alone."""
    from max.graph.weights import weights_format  # added import
    from pathlib import Path

    # Detect format for safetensor files
    paths = [Path("model-00001.safetensors"), Path("model-00002.safetensors")]
    format = weights_format(paths)
    print(format)  # WeightsFormat.safetensors

    assert lines(capsys) == ["WeightsFormat.safetensors"]
