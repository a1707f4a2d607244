"""Graph weights and outputs as MAX documents them: another weight under a taken name is a
ValueError (the same weight, or an identical one, gives the same value), bad Weight parameters
are refused when the weight is made, naming it, a missing attribute is an AttributeError that
stages nothing, ``forward`` may return one value of any kind ``Graph.output`` takes, and GPTQ's
absent block parameters are a ValueError."""

import numpy as np
import pytest

from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, Weight
from max.graph.quantization import QuantizationEncoding

CPU = DeviceRef.CPU()


def test_a_taken_weight_name_and_bad_weights():
    a = Weight("w", DType.uint8, [1, 612], CPU, quantization_encoding=QuantizationEncoding.Q4_0)
    with Graph("g") as g:
        first = g.add_weight(a)
        assert g.add_weight(a) is first
        same = Weight("w", DType.uint8, [1, 612], CPU, quantization_encoding=QuantizationEncoding.Q4_0)
        assert g.add_weight(same) is first
        other = Weight("w", DType.uint8, [1, 612], CPU, quantization_encoding=QuantizationEncoding.Q8_0, align=64)
        with pytest.raises(ValueError, match="named 'w' already exists with another quantization_encoding and align"):
            g.add_weight(other)
        with pytest.raises(TypeError, match="add_weight expects a Weight, got ndarray"):
            g.add_weight(np.ones(3))
    for shape, shown in (([-1], "dim 0 of shape .* must be a static size >= 0, got -1"),
                         (["n", 2], "dim 0 of shape .* must be a static size >= 0, got n")):
        with pytest.raises(ValueError, match="Weight 'layers.7.k.weight': " + shown):
            Weight("layers.7.k.weight", DType.float32, shape, CPU)
    for align in (3, 0, -8, 2.0):
        with pytest.raises(ValueError, match="Weight 'x': align must be a positive power of two"):
            Weight("x", DType.float32, [4], CPU, align=align)


def test_missing_attributes_and_single_outputs():
    w = Weight("w", DType.float32, [2], CPU)
    assert not hasattr(w, "foo") and getattr(w, "foo", None) is None
    with Graph("g") as g:
        assert not hasattr(w, "foo")
        assert not g._weights  # nothing staged by asking
        assert list(w.shape) == [2]
    assert [str(t) for t in Graph("one", lambda: w).output_types] == [str(TensorType(DType.float32, [2], CPU))]
    t = TensorType(DType.float32, [2, 3], CPU)
    assert len(Graph("shape", lambda x: x.tensor.shape, input_types=[t]).output_types) == 1
    assert len(Graph("pair", lambda x: (x, x), input_types=[t]).output_types) == 2
    assert len(Graph("scalar", lambda x: np.float32(1), input_types=[t]).output_types) == 1


def test_gptq_has_no_block_parameters():
    for prop in ("block_parameters", "block_size", "elements_per_block"):
        with pytest.raises(ValueError, match="GPTQ is not a block encoding"):
            getattr(QuantizationEncoding.GPTQ, prop)
    assert QuantizationEncoding.Q8_0.block_size == 34 and QuantizationEncoding.Q4_K.elements_per_block == 256
