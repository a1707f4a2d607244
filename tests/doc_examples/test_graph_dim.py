"""The Python examples of graph.dim.md, as tests (see common.py for the method)."""

from doc_examples.common import *  # noqa: F401,F403


# --- graph.dim.md -----------------------------------------------------------------------------


def test_graph_dim__AlgebraicDim(capsys):
    """graph.dim.md, AlgebraicDim: expressions over symbolic dims."""
    from max.graph import AlgebraicDim, Dim

    isinstance(Dim("batch") * 5, AlgebraicDim)  # Returns True
    print(Dim("batch") * 5)  # Outputs: batch * 5
    -Dim("x") - 4 == -(Dim("x") + 4)  # Returns True

    assert isinstance(Dim("batch") * 5, AlgebraicDim)
    assert lines(capsys) == ["batch * 5"]
    assert -Dim("x") - 4 == -(Dim("x") + 4)


def test_graph_dim__Dim_conversion():
    """graph.dim.md, Dim: conversion constructors, 'a symbolic "batch" dimension, a static
    dimension of size 10'."""
    from max.dtype import DType  # added import
    from max.graph import Dim, TensorType, DeviceRef
    tensor_type = TensorType(DType.int64, ("batch", 10), device=DeviceRef.CPU())

    from max.graph import StaticDim, SymbolicDim

    assert isinstance(tensor_type.shape[0], SymbolicDim) and str(tensor_type.shape[0]) == "batch"
    assert isinstance(tensor_type.shape[1], StaticDim) and int(tensor_type.shape[1]) == 10


def test_graph_dim__Dim_helpers():
    """graph.dim.md, Dim: explicit dimension construction helpers."""
    from max.graph import AlgebraicDim, StaticDim, SymbolicDim  # added import
    from max.graph import Dim
    some_dims = [
        SymbolicDim("batch"),
        StaticDim(5),
        AlgebraicDim(Dim("batch") + 1),
    ]


def test_graph_dim__StaticDim():
    """graph.dim.md, StaticDim: 'static dimensions can be created implicitly'.
    Real MAX 26.7 rejects TensorType without device (see REAL_MAX_DIFFERS)."""
    from max.graph import TensorType
    from max.dtype import DType
    tensor = TensorType(DType.int64, (4, 5))

    from max.graph import StaticDim

    assert all(isinstance(d, StaticDim) for d in tensor.shape)
    assert dims(tensor.shape) == ["4", "5"]


def test_graph_dim__SymbolicDim_create():
    """graph.dim.md, SymbolicDim: creating a SymbolicDim."""
    from max.graph import SymbolicDim  # added import
    dim = SymbolicDim("name")


def test_graph_dim__SymbolicDim_in_TensorType():
    """graph.dim.md, SymbolicDim: using SymbolicDim in a TensorType ('The first and second
    dimensions are named `batch` and `x`'). Real MAX 26.7 rejects TensorType without device."""
    from max.dtype import DType  # added import
    from max.graph import SymbolicDim, TensorType  # added import
    tensor_type = TensorType(DType.bool, (SymbolicDim("batch"), SymbolicDim("x"), 10))

    assert dims(tensor_type.shape) == ["batch", "x", "10"]
