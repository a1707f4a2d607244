"""max.graph.dim and shape: the dim algebra of graph.dim.md and its canonical form."""

import pickle

import numpy as np
import pytest

from max.graph import AlgebraicDim, Dim, Shape, StaticDim, SymbolicDim


def test_constructors_pick_the_subclass():
    assert type(Dim(4)) is StaticDim and Dim(4).dim == 4
    assert type(Dim(np.int64(7))) is StaticDim
    assert type(Dim("batch")) is SymbolicDim and Dim("batch").name == "batch"
    assert type(Dim("batch") * 5) is AlgebraicDim
    assert isinstance(Dim("batch") * 5, AlgebraicDim)
    assert type(AlgebraicDim(Dim("batch") + 1)) is AlgebraicDim
    assert type(Dim(2) * Dim(3)) is StaticDim and Dim(2) * Dim(3) == 6
    assert type(Dim("a") + 0) is SymbolicDim


def test_documented_examples():
    assert str(Dim("batch") * 5) == "batch * 5"
    assert -Dim("x") - 4 == -(Dim("x") + 4)
    assert repr(Dim("batch") * 5) == "Dim('batch') * Dim(5)"


@pytest.mark.parametrize("expr, text", [
    (lambda b, x: b + 4 - x * 2, "(x * -2) + batch + 4"),
    (lambda b, x: (b + 1) * (b - 1), "(batch * batch) + -1"),
    (lambda b, x: (b * 4) // 2, "batch * 2"),
    (lambda b, x: b // 2, "batch // 2"),
    (lambda b, x: 3 - b, "(batch * -1) + 3"),
    (lambda b, x: (b + x) // (b + x), "1"),
    (lambda b, x: b * x - x * b, "0"),
])
def test_canonical_forms(expr, text):
    assert str(expr(Dim("batch"), Dim("x"))) == text


def test_algebraic_identities():
    a, b = Dim("a"), Dim("b")
    assert a * b == b * a
    assert (a + b) * 2 == 2 * a + 2 * b
    assert (a * 6) // 3 == a * 2
    assert a - a == 0 and type(a - a) is StaticDim
    assert a + 1 != a
    assert hash(a * 2) == hash(2 * a)
    assert {a * 2: 1}[a + a] == 1
    assert (a * b + 1).parameters == [SymbolicDim("a"), SymbolicDim("b")]
    assert ((a // 2) * 2 + 1).substitute({"a": 9}) == 9


def test_static_arithmetic_and_conversions():
    assert int(Dim(5)) == 5 and list(range(Dim(3))) == [0, 1, 2]
    assert Dim(7) // 2 == 3 and Dim(-7) // 2 == -4
    assert Dim(-1) == -1
    assert Dim(2) < 3
    with pytest.raises(TypeError, match="Int conversions only supported for static dims"):
        int(Dim("a"))
    with pytest.raises(ValueError, match="division by zero"):
        Dim("a") // 0
    for zero in (lambda: Dim(7) // 0, lambda: 7 // Dim(0), lambda: Dim("a") // Dim(0)):
        with pytest.raises(ZeroDivisionError, match="dimension division by zero"):
            zero()
    with pytest.raises(ValueError, match="overflows"):
        Dim(2**62) * 4


@pytest.mark.parametrize("bad", [2.5, None, [1], True])
def test_bad_values_are_type_errors(bad):
    with pytest.raises(TypeError, match="Unsupported dimension type"):
        Dim(bad)


@pytest.mark.parametrize("name", ["1abc", "", "a b", "x-y"])
def test_bad_names_are_value_errors(name):
    with pytest.raises(ValueError, match="invalid name"):
        Dim(name)


def test_unsupported_operators():
    with pytest.raises(TypeError):
        Dim("a") % 4
    with pytest.raises(TypeError):
        Dim("a") / 2
    with pytest.raises(TypeError):
        StaticDim("a")
    with pytest.raises(TypeError):
        SymbolicDim(3)


def test_shape():
    s = Shape([1, "a", Dim("b") * 2])
    assert s.rank == 3 and s == [1, "a", Dim("b") * 2]
    assert repr(s) == "[Dim(1), Dim('a'), Dim('b') * Dim(2)]"
    assert Shape([1, 2]).static_dims == [1, 2] and Shape([1, "a"]).static_dims == [1]
    assert Shape.is_static(Shape([3, 4])) and not Shape.is_static(s)
    assert [p.name for p in Shape(["x", Dim("x") * Dim("y")]).parameters] == ["x", "y"]
    assert isinstance(s[1:], Shape)
    with pytest.raises(TypeError):
        Shape("ab")


def test_dims_pickle():
    for d in [Dim(3), Dim("batch")]:
        assert pickle.loads(pickle.dumps(d)) == d


def test_algebraic_dims_survive_reshape_concat_and_slice():
    from max.dtype import DType
    from max.graph import DeviceRef, Graph, TensorType, ops

    n = Dim("n")
    with Graph("alg", input_types=[TensorType(DType.float32, (n * 2 + 1, 4), DeviceRef.CPU())]) as g:
        x = g.inputs[0].tensor
        flat = ops.reshape(x, (-1,))
        assert flat.shape == [(n * 2 + 1) * 4] and str(flat.shape[0]) == "(n * 8) + 4"
        back = ops.reshape(flat, (n * 2 + 1, 2, 2))
        assert back.shape == [n * 2 + 1, 2, 2]
        both = ops.concat([x, x], axis=0)
        assert both.shape == [n * 4 + 2, 4]
        head = both[1:]
        assert head.shape == [n * 4 + 1, 4]
        assert ops.concat([head, x], axis=0).shape == [n * 6 + 2, 4]
        assert x[:, ::2].shape == [n * 2 + 1, 2]


def test_sizes_out_of_range():
    """A dim beyond int64 raises ValueError naming it; a tensor or buffer type refuses a negative
    static size when it is built (not first at execute), while -1 stays a dim reshape takes."""
    from max.dtype import DType
    from max.graph import BufferType, DeviceRef, TensorType

    with pytest.raises(ValueError, match="dimension 1180591620717411303424 is outside the int64 range"):
        Dim(2**70)
    with pytest.raises(ValueError, match=r"TensorType: shape \[-2, 3\]: dim 0 is -2; sizes are >= 0"):
        TensorType(DType.float32, (-2, 3), DeviceRef.CPU())
    with pytest.raises(ValueError, match="BufferType: .*dim 1 is -1"):
        BufferType(DType.float32, ("n", -1), DeviceRef.CPU())
    assert Dim(-1) == -1 and TensorType(DType.float32, ("n", 0), DeviceRef.CPU()).rank == 2


def test_static_dims_order_hash_and_pickle_like_ints():
    """Every ordering works between static dims and ints (both ways); a static dim hashes as
    its int and a symbolic one as its name (they compare equal to them); symbolic and algebraic
    dims order with nothing."""
    import pickle

    d = Dim(3)
    assert (d < 4, d <= 3, d > 2, d >= 3, d <= Dim(4), 4 >= d, 2 < d) == (True,) * 7
    assert not (d > 3 or d >= 4 or d < 3)
    assert {Dim(3): "x"}[3] == "x" and 3 in {Dim(3)} and Dim(3) in {3}
    assert {Dim("n"): 1}["n"] == 1
    for bad in (lambda: Dim("n") <= 3, lambda: Dim(3) >= Dim("n") + 1, lambda: 3 > Dim("n")):
        with pytest.raises(TypeError, match="only static dims can be ordered"):
            bad()
    assert pickle.loads(pickle.dumps(Dim(-7))) == -7 and pickle.loads(pickle.dumps(Dim("n"))) == Dim("n")


def test_algebraic_dims_and_types_holding_them_copy_and_pickle():
    import copy

    from max.dtype import DType
    from max.graph import DeviceRef, TensorType

    n, m = Dim("n"), Dim("m")
    exprs = [n * 2, n + 1, n * m - 3 * n + 7, (n + 1) // 2, ((n * m) // 3 + n) * (m // 5) - 1, -n]
    for e in exprs:
        for back in (copy.copy(e), copy.deepcopy(e), pickle.loads(pickle.dumps(e))):
            assert back == e and type(back) is type(e) and str(back) == str(e), (e, back)
    t = TensorType(DType.float32, [n + 1, (m * 4) // 3, 4], DeviceRef.CPU())
    assert copy.deepcopy(t) == t and pickle.loads(pickle.dumps(t)) == t


def test_an_overflowing_exact_division_is_a_value_error_not_a_panic():
    for e in (Dim("a") * -(2**63), Dim("a") + -(2**63)):
        with pytest.raises(ValueError, match="overflows"):
            e // -1
    assert (Dim("a") * -(2**63)) // 2 == Dim("a") * -(2**62)
