"""The Python examples of graph.Value.md, as tests (see common.py for the method)."""

from doc_examples.common import *  # noqa: F401,F403


# --- graph.Value.md ---------------------------------------------------------------------------


def test_graph_Value__Value(capsys):
    """graph.Value.md, Value: the result of an op is a Value.
    Real MAX 26.7 rejects constant() of an int64 array as float32 (see REAL_MAX_DIFFERS)."""
    from max.graph import DeviceRef  # added import
    from max.graph import Graph, ops, Value
    from max.dtype import DType
    import numpy as np

    with Graph("value_example") as graph:
        # Create input values
        a = ops.constant(np.array([1, 2, 3]), dtype=DType.float32, device=DeviceRef.CPU())
        b = ops.constant(np.array([4, 5, 6]), dtype=DType.float32, device=DeviceRef.CPU())

        # Use values to perform operations
        c = a + b  # c is a Value representing the addition

        # Demonstrate that the result is a Value
        print(f"Type of c: {type(c)}")
        print(f"Is c a Value? {isinstance(c, Value)}")

    type_line, is_value = lines(capsys)
    assert type_line.startswith("Type of c: <class ")
    assert is_value == "Is c a Value? True"
