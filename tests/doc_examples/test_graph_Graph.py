"""The Python examples of graph.Graph.md, as tests (see common.py for the method)."""

from doc_examples.common import *  # noqa: F401,F403


# --- graph.Graph.md ---------------------------------------------------------------------------


def test_graph_Graph__Graph():
    """graph.Graph.md, Graph: a Linear layer as the graph's forward function. Real MAX 26.7
    rejects TensorType without device and constant() of a float64 array as float32."""
    from max.graph import DeviceRef  # added import
    from dataclasses import dataclass
    import numpy as np
    from max.dtype import DType
    from max.graph import Graph, TensorType, TensorValue, ops

    @dataclass
    class Linear:
        weight: np.ndarray
        bias: np.ndarray

        def __call__(self, x: TensorValue) -> TensorValue:
            weight_tensor = ops.constant(self.weight, dtype=DType.float32, device=DeviceRef.CPU())
            bias_tensor = ops.constant(self.bias, dtype=DType.float32, device=DeviceRef.CPU())
            return ops.matmul(x, weight_tensor) + bias_tensor

    linear_graph = Graph(
        "linear",
        Linear(np.ones((2, 2)), np.ones((2,))),
        input_types=[TensorType(DType.float32, (2,))]
    )
