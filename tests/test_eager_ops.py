"""The eager Tensor ops and max.functional against numpy in float64, with fresh random inputs,
once per device (the GPU case skips without one); the errors eager ops raise."""

import math

import numpy as np
import pytest

import max.functional as F
from max.dtype import DType
from max.driver import CPU
from max.tensor import Tensor, default_device, default_dtype

_erf = np.vectorize(math.erf)


@pytest.fixture(autouse=True)
def _host_defaults():
    """These tests state the host's eager defaults (float32 on the CPU); on a machine with a GPU
    the defaults are bfloat16 on the GPU, so each test pins them (device cases pass their own)."""
    with default_device(CPU()), default_dtype(DType.float32):
        yield


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# name: (eager function of the input Tensors, numpy reference of the float64 inputs, input
# shapes, input domain). Reductions keep the reduced axis (MAX's convention); axis=None
# reduces everything to shape [1].
CASES = {
    "abs": (lambda x: abs(x), np.abs, [(3, 5)], "any"),
    "neg": (lambda x: -x, np.negative, [(7,)], "any"),
    "exp": (F.exp, np.exp, [(4, 4)], "any"),
    "log": (F.log, np.log, [(4, 4)], "pos"),
    "log1p": (F.log1p, np.log1p, [(9,)], "pos"),
    "sqrt": (F.sqrt, np.sqrt, [(2, 3, 4)], "pos"),
    "rsqrt": (F.rsqrt, lambda x: 1 / np.sqrt(x), [(6,)], "pos"),
    "sin": (F.sin, np.sin, [(5, 5)], "any"),
    "cos": (F.cos, np.cos, [(5, 5)], "any"),
    "tanh": (F.tanh, np.tanh, [(5, 5)], "any"),
    "atanh": (F.atanh, np.arctanh, [(8,)], "unit"),
    "erf": (F.erf, _erf, [(8,)], "any"),
    "floor": (F.floor, np.floor, [(8,)], "any"),
    "trunc": (F.trunc, np.trunc, [(8,)], "any"),
    "relu": (F.relu, lambda x: np.maximum(x, 0), [(3, 4)], "any"),
    "sigmoid": (F.sigmoid, _sigmoid, [(3, 4)], "any"),
    "silu": (F.silu, lambda x: x * _sigmoid(x), [(3, 4)], "any"),
    "gelu": (F.gelu, lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))), [(3, 4)], "any"),
    "softmax": (F.softmax, _softmax, [(3, 7)], "any"),
    "logsoftmax": (F.logsoftmax, lambda x: np.log(_softmax(x)), [(3, 7)], "any"),
    "add": (lambda a, b: a + b, np.add, [(3, 4), (4,)], "any"),
    "sub": (lambda a, b: a - b, np.subtract, [(3, 4), (3, 1)], "any"),
    "rsub": (lambda a: 2.5 - a, lambda a: 2.5 - a, [(5,)], "any"),
    "mul": (lambda a, b: a * b, np.multiply, [(2, 3), (2, 3)], "any"),
    "scalar_mul_add": (lambda a: a * 1.0001 + 1, lambda a: a * 1.0001 + 1, [(1024,)], "any"),
    "div": (lambda a, b: a / b, np.divide, [(2, 3), (2, 3)], "pos"),
    "pow": (lambda a: a**2, lambda a: a**2, [(6,)], "any"),
    "pow_tensor": (F.pow, np.power, [(6,), (6,)], "pos"),
    "maximum": (F.max, np.maximum, [(4, 3), (4, 3)], "any"),
    "minimum": (F.min, np.minimum, [(4, 3), (4, 3)], "any"),
    "matmul": (lambda a, b: a @ b, np.matmul, [(3, 5), (5, 4)], "any"),
    "batched_matmul": (F.matmul, np.matmul, [(2, 3, 5), (2, 5, 4)], "any"),
    "vector_matmul": (lambda a, b: a @ b.T, lambda a, b: a @ b.T, [(5,), (4, 5)], "any"),
    "outer": (F.outer, np.outer, [(3,), (4,)], "any"),
    "greater": (lambda a, b: a > b, np.greater, [(10,), (10,)], "any"),
    "less_equal": (lambda a, b: a <= b, np.less_equal, [(10,), (10,)], "any"),
    "where": (lambda a, b: F.where(a > b, a, b), lambda a, b: np.where(a > b, a, b), [(3, 3), (3, 3)], "any"),
    "sum_last": (lambda x: x.sum(), lambda x: x.sum(-1, keepdims=True), [(3, 4)], "any"),
    "sum_0": (lambda x: x.sum(axis=0), lambda x: x.sum(0, keepdims=True), [(3, 4)], "any"),
    "sum_all": (lambda x: x.sum(axis=None), lambda x: x.sum().reshape(1), [(3, 4)], "any"),
    "mean": (lambda x: x.mean(axis=1), lambda x: x.mean(1, keepdims=True), [(2, 3, 4)], "any"),
    "max_all": (lambda x: x.max(axis=None), lambda x: x.max().reshape(1), [(3, 4)], "any"),
    "min_0": (lambda x: F.min(x, axis=0), lambda x: x.min(0, keepdims=True), [(3, 4)], "any"),
    "argmax": (lambda x: x.argmax(), lambda x: x.argmax(-1)[:, None], [(3, 6)], "any"),
    "argmin_all": (lambda x: x.argmin(axis=None), lambda x: np.array([x.argmin()]), [(3, 6)], "any"),
    "cumsum": (F.cumsum, lambda x: np.cumsum(x, -1), [(2, 5)], "any"),
    "reshape": (lambda x: x.reshape([4, 3]), lambda x: x.reshape(4, 3), [(2, 6)], "any"),
    "transpose": (lambda x: x.T, lambda x: np.swapaxes(x, -1, -2), [(2, 3, 4)], "any"),
    "permute": (lambda x: x.permute([2, 0, 1]), lambda x: x.transpose(2, 0, 1), [(2, 3, 4)], "any"),
    "flatten": (lambda x: F.flatten(x, 1), lambda x: x.reshape(2, -1), [(2, 3, 4)], "any"),
    "unsqueeze": (lambda x: x.unsqueeze(-1), lambda x: x[..., None], [(3,)], "any"),
    "squeeze": (lambda x: x.squeeze(1), lambda x: x[:, 0], [(4, 1, 2)], "any"),
    "broadcast_to": (lambda x: x.broadcast_to([2, 3, 4]), lambda x: np.broadcast_to(x, (2, 3, 4)), [(3, 1)], "any"),
    "concat": (lambda a, b: F.concat([a, b], axis=1), lambda a, b: np.concatenate([a, b], 1), [(2, 3), (2, 2)], "any"),
    "stack": (lambda a, b: F.stack([a, b]), lambda a, b: np.stack([a, b]), [(2, 3), (2, 3)], "any"),
    "split_first": (lambda x: F.split(x, 3)[3], lambda x: x[9:], [(10, 2)], "any"),
    "chunk": (lambda x: F.chunk(x, 2, axis=1)[1], lambda x: x[:, 2:], [(3, 4)], "any"),
    "tile": (lambda x: F.tile(x, [2, 1]), lambda x: np.tile(x, (2, 1)), [(2, 3)], "any"),
    "pad": (lambda x: F.pad(x, [1, 0, 0, 2]), lambda x: np.pad(x, ((1, 0), (0, 2))), [(2, 3)], "any"),
    "getitem": (lambda x: x[1, ::2], lambda x: x[1, ::2], [(3, 5)], "any"),
    "getitem_ellipsis": (lambda x: x[..., -1], lambda x: x[..., -1], [(2, 3, 4)], "any"),
    "clip": (lambda x: x.clip(min=-0.5, max=0.5), lambda x: np.clip(x, -0.5, 0.5), [(10,)], "any"),
    "cast_int": (lambda x: (x * 10).cast(DType.int32), lambda x: np.trunc(x * 10), [(10,)], "any"),
    "gather": (lambda x: F.gather(x, Tensor.constant([2, 0], dtype=DType.int64, device=x.device), axis=0),
               lambda x: x[[2, 0]], [(3, 4)], "any"),
    "layer_norm": (lambda x: F.layer_norm(x, Tensor.ones_like(x[0]), Tensor.zeros_like(x[0]), 1e-5),
                   lambda x: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5),
                   [(3, 8)], "any"),
    "functional_region": (F.functional(lambda a, b: F.relu(a @ b) * 2 - 1),
                          lambda a, b: np.maximum(a @ b, 0) * 2 - 1, [(3, 4), (4, 2)], "any"),
}


def _inputs(rng, shapes, domain):
    out = []
    for s in shapes:
        x = rng.standard_normal(s)
        if domain == "pos":
            x = np.abs(x) + 0.1
        elif domain == "unit":
            x = np.tanh(x) * 0.9
        out.append(x)
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_numpy(name, rng, device):
    fn, ref, shapes, domain = CASES[name]
    xs = _inputs(rng, shapes, domain)
    tensors = [Tensor.constant(x, dtype=DType.float32, device=device) for x in xs]
    got = fn(*tensors)
    want = ref(*[x.astype(np.float32).astype(np.float64) for x in xs])
    assert list(got.shape) == list(np.shape(want)), f"{name}: shape {list(got.shape)} vs {np.shape(want)}"
    np.testing.assert_allclose(got.to_numpy().astype(np.float64), want, rtol=2e-5, atol=2e-6, err_msg=name)


def test_repeated_op_compiles_once():
    from max._eager import compiled

    x = Tensor.constant(np.ones(1024, np.float32))
    x = x * 1.0001 + 1
    before = compiled.STATS["compiled"]
    for _ in range(50):
        x = x * 1.0001 + 1
    assert compiled.STATS["compiled"] == before
    expect = np.ones(1024)
    for _ in range(51):
        expect = expect * np.float32(1.0001) + 1
    np.testing.assert_allclose(x.to_numpy(), expect, rtol=1e-5)


def test_cache_key_tells_shapes_dtypes_and_constants_apart():
    a = Tensor.constant([1.0, 2.0])
    assert (a * 2).to_numpy().tolist() == [2.0, 4.0]
    assert (a * 3).to_numpy().tolist() == [3.0, 6.0]
    assert (Tensor.constant([1.0, 2.0, 3.0]) * 2).to_numpy().tolist() == [2.0, 4.0, 6.0]
    i = Tensor.constant([1, 2], dtype=DType.int32)
    assert (i * 2).dtype == DType.int32 and (i * 2).to_numpy().tolist() == [2, 4]


def test_errors_name_the_op_and_shapes():
    a, b = Tensor.ones([2, 3]), Tensor.ones([3, 2])
    with pytest.raises(ValueError, match=r"add.*\[2, 3\].*\[3, 2\]"):
        a + b
    with pytest.raises(ValueError, match="matmul"):
        a @ a


def test_mixing_dtypes_without_a_cast_raises():
    a = Tensor.ones([2, 3])
    with pytest.raises(TypeError, match=r"add: the operands' dtypes differ \(float32\[2, 3\].*float64\[2, 3\]"):
        a + Tensor.ones([2, 3], dtype=DType.float64)
    with pytest.raises(TypeError, match="mul"):
        a * Tensor.ones([2, 3], dtype=DType.int32)
    assert (a + Tensor.ones([2, 3], dtype=DType.float64).cast(DType.float32)).to_numpy().sum() == 12


def test_integer_constants_must_fit():
    """Tensor.constant and Tensor.full check integer values as ops.constant does: a value out
    of the dtype's range, or a float with a fraction (or NaN), raises instead of wrapping."""
    with pytest.raises(ValueError, match=r"Tensor.full: value: 300 does not fit in uint8 \(range 0..255\)"):
        Tensor.full([2], 300, dtype=DType.uint8)
    with pytest.raises(ValueError, match="Tensor.constant: value: -1 does not fit in uint32"):
        Tensor.constant([-1], dtype=DType.uint32)
    with pytest.raises(ValueError, match=r"Tensor.constant: value: 1099511627776 does not fit in int32"):
        Tensor.constant([2**40], dtype=DType.int32)
    with pytest.raises(ValueError, match="non-integral values cannot be loaded as int32"):
        Tensor.constant([1.7, -2.9], dtype=DType.int32)
    with pytest.raises(ValueError, match="non-integral values cannot be loaded as int16"):
        Tensor.full([3], float("nan"), dtype=DType.int16)
    with pytest.raises(ValueError, match="9223372036854775808 does not fit in int64"):
        Tensor.full([1], 2.0**63, dtype=DType.int64)  # (float(2**63 - 1) rounds up to 2**63)
    with pytest.raises(ValueError, match="does not fit in uint64"):
        Tensor.full([1], 2.0**64, dtype=DType.uint64)
    import ml_dtypes

    with pytest.raises(ValueError, match="non-integral values cannot be loaded as int32"):
        Tensor.constant(np.array([2.5], ml_dtypes.bfloat16), dtype=DType.int32)
    assert Tensor.full([1], -(2.0**63), dtype=DType.int64).to_numpy().tolist() == [-(2**63)]
    assert Tensor.full([2], 255, dtype=DType.uint8).to_numpy().tolist() == [255, 255]
    assert Tensor.constant([-2.0, 3.0], dtype=DType.int8).to_numpy().tolist() == [-2, 3]
    assert Tensor.constant(np.array([1, 2], dtype=np.int64), dtype=DType.uint16).to_numpy().tolist() == [1, 2]
    assert np.isnan(Tensor.full([1], float("nan"), dtype=DType.float32).to_numpy()).all()
    # bool takes 0 and 1 (or bools), as MAX's "does not fit within the dtype" asks
    for bad, shown in ((2, "2"), ([0, -1], "-1"), (0.5, "0.5"), (float("nan"), "nan")):
        with pytest.raises(ValueError, match=f"Tensor.full: value: {shown} does not fit in bool"):
            Tensor.full([2], bad, dtype=DType.bool)
    assert Tensor.constant([0.0, 1.0, 1], dtype=DType.bool).to_numpy().tolist() == [False, True, True]
    with pytest.raises(ValueError, match="Tensor.constant: value: nested lists must be rectangular"):
        Tensor.constant([[1, 2], [3]])


def test_constants_refuse_what_is_not_a_number_or_does_not_fit():
    """None and complex values are refused, and a finite float that would round to inf is an
    error for a constant (as MAX documents); beside a tensor a float operand rounds as numpy's
    weak scalars do. from_numpy copies, a 0-d array stays 0-d."""
    from max.graph import DeviceRef, Graph, TensorType, ops

    for make in (lambda: Tensor.constant(None), lambda: Tensor.constant([1.0, None]),
                 lambda: Tensor.full((2,), None)):
        with pytest.raises(TypeError, match="values must be numbers, got None"):
            make()
    with pytest.raises(ValueError, match="complex values cannot be loaded as float32"):
        Tensor.constant(1 + 2j)
    with pytest.raises(ValueError, match=r"70000.0 does not fit in float16 \(largest finite value 65504.0\)"):
        Tensor.constant(70000.0, dtype=DType.float16)
    with pytest.raises(ValueError, match="1e\\+39 does not fit in float32"):
        Tensor.full((2,), 1e39, dtype=DType.float32)
    with pytest.raises(ValueError, match="does not fit in bfloat16"):
        Tensor.constant([3.4e38], dtype=DType.bfloat16)
    assert Tensor.constant([65519.0], dtype=DType.float16).to_numpy().tolist() == [65504.0]  # rounds down
    assert np.isinf(Tensor.constant([np.inf], dtype=DType.float16).to_numpy()).all()  # inf is a value
    cpu = DeviceRef.CPU()
    with Graph("g", input_types=[TensorType(DType.float16, [2], cpu)]) as g:
        with pytest.raises(ValueError, match="constant: value: 10000000000.0 does not fit in float16"):
            ops.constant(1e10, DType.float16, cpu)
        assert (g.inputs[0].tensor + 1e10).dtype is DType.float16
    a = np.array(2.0, np.float32)
    assert list(Tensor.from_numpy(a).shape) == []
    b = np.ones(3, np.float32)
    t = Tensor.from_numpy(b)
    b[0] = 5
    assert t.to_numpy().tolist() == [1, 1, 1]


def test_creation_keeps_the_dtype_and_exact_values():
    """float8 tensors are made as float8 (their numpy form is bits: values go through float32
    and the driver's cast), integer ranges past 2**53 are exact, and a filled tensor is made
    without a wider temporary (checked through the array handed over: of the tensor's dtype)."""
    for dt in (DType.float8_e4m3fn, DType.float8_e5m2):
        t = Tensor.constant([1.5, 2.0, -0.5], dtype=dt)
        assert t.dtype == dt and t.cast(DType.float32).to_numpy().tolist() == [1.5, 2.0, -0.5]
        for made in (Tensor.full([2], 3.0, dtype=dt), Tensor.ones([2], dtype=dt), Tensor.zeros_like(t)):
            assert made.dtype == dt
        assert (Tensor.zeros_like(t) + t).cast(DType.float32).to_numpy().tolist() == [1.5, 2.0, -0.5]
    big = Tensor.arange(2**60, 2**60 + 4, dtype=DType.int64).to_numpy().tolist()
    assert big == [2**60 + i for i in range(4)]
    assert Tensor.arange(2**63, 2**63 + 3, dtype=DType.uint64).to_numpy().tolist() == [2**63 + i for i in range(3)]
    assert Tensor.arange(5, 0, -2, dtype=DType.int8).to_numpy().tolist() == [5, 3, 1]
    assert Tensor.arange(0.0, 1.0, 0.25, dtype=DType.float32).to_numpy().tolist() == [0.0, 0.25, 0.5, 0.75]
    with pytest.raises(ValueError, match="Tensor.arange: values: 300 does not fit in int8"):
        Tensor.arange(298, 301, dtype=DType.int8)
    from max._eager import creation

    assert creation.filled((3,), 0, DType.uint8).dtype == np.uint8
    assert creation.filled((3,), 7, DType.bfloat16).dtype == DType.bfloat16.to_numpy()
    assert creation.filled((3,), 7, DType.float8_e5m2).dtype == np.float32  # (bits in numpy: cast)


def test_mixing_devices_without_a_move_raises(gpu):
    with pytest.raises(TypeError, match="devices differ"):
        Tensor.ones([4], device=CPU()) + Tensor.ones([4], dtype=DType.float32, device=gpu)


def test_item_and_conversions():
    t = Tensor.constant([[1.5]])
    assert t.item() == 1.5 and float(t) == 1.5
    with pytest.raises(TypeError, match="item"):
        Tensor.ones([2]).item()
    x = Tensor.arange(6, dtype=DType.int32).reshape([2, 3])
    assert np.asarray(x).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert np.from_dlpack(x).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert Tensor.from_dlpack(np.arange(3.0)).dtype == DType.float64
    assert bool(Tensor.ones([1])) and not bool(Tensor.zeros([1, 1]))
    with pytest.raises(TypeError, match=r"truth value of a tensor of 2 elements \(shape \[2\]\) is ambiguous"):
        bool(Tensor.ones([2]))
    with pytest.raises(TypeError, match="indices must be ints"):
        Tensor.ones([3])[1.5]


def test_permute_takes_dims_as_arguments_a_list_or_a_keyword():
    x = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)
    t = Tensor.constant(x)
    for got in (t.permute(2, 0, 1), t.permute([2, 0, 1]), t.permute(dims=[2, 0, 1])):
        np.testing.assert_array_equal(got.to_numpy(), x.transpose(2, 0, 1))
    with pytest.raises(TypeError, match="dims"):
        t.permute([2, 0, 1], order=[0, 1, 2])


def test_tensors_passed_by_keyword_take_their_own_values(rng):
    """Tensors given by keyword are the op's own inputs, eagerly, under lazy() and in a graph
    function staged twice (the compiled-graph cache), beside positional ones."""
    xa, xb, xc = rng.standard_normal(4), rng.standard_normal(4), rng.standard_normal(4)
    a, b, c = (Tensor.constant(x, dtype=DType.float32) for x in (xa, xb, xc))
    f32 = lambda x: x.astype(np.float32).astype(np.float64)  # noqa: E731
    for _ in range(2):
        np.testing.assert_allclose(F.sub(a, rhs=b).to_numpy(), f32(xa) - f32(xb), rtol=1e-6)
        np.testing.assert_allclose(F.sub(lhs=b, rhs=a).to_numpy(), f32(xb) - f32(xa), rtol=1e-6)
        got = F.where(a > 0, x=b, y=c).to_numpy()
        np.testing.assert_allclose(got, np.where(f32(xa) > 0, f32(xb), f32(xc)), rtol=1e-6)
        np.testing.assert_allclose(a.clip(min=b).to_numpy(), np.maximum(f32(xa), f32(xb)), rtol=1e-6)
        with F.lazy():
            lazy = F.sub(a, rhs=b)
        np.testing.assert_allclose(lazy.to_numpy(), f32(xa) - f32(xb), rtol=1e-6)


def test_tensors_in_a_namedtuple_beside_an_unhashable_argument_keep_their_order():
    """A namedtuple is an atom to the dispatcher (as to its cache key): Tensors inside it are
    not substituted, so the ones after it must not shift (an unhashable argument takes the
    uncached path, which collects the Tensors again)."""
    from collections import namedtuple

    from max._eager.dispatch import apply

    P = namedtuple("P", "p q")
    a, b = Tensor.constant([1.0, 2.0]), Tensor.constant([10.0, 20.0])
    out = apply(lambda pr, z, extra: pr.p - pr.q + z, (P(a, b), b, {1: [set()]}))
    assert out.to_numpy().tolist() == [1.0, 2.0]


def test_lazy_defers_until_needed():
    with F.lazy():
        x = Tensor.ones([3]) * 2
        assert not x.real
    assert not x.real
    assert x.to_numpy().tolist() == [2.0, 2.0, 2.0] and x.real


def test_sums_and_means_of_bool_tensors_count():
    """As numpy: a bool tensor's sum and running sum count its True values (int64), its mean is
    the fraction of them (float32); comparisons' results sum the same way."""
    a = np.array([[True, True, False], [True, True, True]])
    t = Tensor.constant(a, dtype=DType.bool)
    s = F.sum(t, None)
    assert s.dtype == DType.int64 and s.to_numpy().tolist() == [5]
    assert t.sum().to_numpy().reshape(-1).tolist() == [2, 3]
    assert F.cumsum(t).to_numpy().tolist() == np.cumsum(a, axis=-1).tolist()
    np.testing.assert_allclose(F.mean(t, None).to_numpy(), [5 / 6], rtol=1e-6)
    x = Tensor.constant([0.5, 2.0, 3.0, 1.5])
    assert (x > 1).sum().to_numpy().reshape(-1).tolist() == [3]


def test_clip_names_its_own_bounds():
    t = Tensor.constant([-5, 0, 7], dtype=DType.int32)
    with pytest.raises(ValueError, match="clip: min: a Python float does not combine with a tensor of int32"):
        t.clip(min=-1.5)
    with pytest.raises(ValueError, match="clip: max: a Python float does not combine"):
        t.clip(max=2.5)
    assert t.clip(min=-1, max=3).to_numpy().tolist() == [-1, 0, 3]
    f = Tensor.constant([-2.0, 0.5, 9.0])
    assert f.clip(min=Tensor.constant([0.0, 0.0, 0.0]), max=1.0).to_numpy().tolist() == [0.0, 0.5, 1.0]


def test_a_failing_lazy_tensor_does_not_block_the_others():
    """Under F.lazy, realizing a tensor computes what is pending together; when that fails, the
    tensor asked for is computed alone and the failing one raises when it is asked for."""
    x = Tensor.constant([[0.0, 1.0], [2.0, 3.0]])
    with F.lazy():
        a = Tensor.ones([2]) + 1
        bad = F.gather(x, Tensor.constant([5], dtype=DType.int64) * 1, 0)
        assert a.to_numpy().tolist() == [2.0, 2.0]
        c = a + Tensor.ones([2]) * 3
        assert c.to_numpy().tolist() == [5.0, 5.0]
        with pytest.raises(ValueError, match="gather: index 5 is out of range"):
            bad.to_numpy()


def test_scalar_zero_signs_and_nans_are_not_confused_by_the_op_cache():
    """-0.0 == 0.0 (and hash alike): a cache keyed by the value gave `t * -0.0` the graph of
    `t * 0.0`, whichever ran first."""
    t = Tensor.constant([1.0, -2.0])
    for first, second in [(0.0, -0.0), (-0.0, 0.0)]:
        for z in (first, second, np.float32(first), np.float32(second)):
            got = (t * z).to_numpy()
            np.testing.assert_array_equal(np.signbit(got), np.signbit(np.array([1.0, -2.0], np.float32) * z))
    assert np.isnan((t + float("nan")).to_numpy()).all() and np.isnan((t + float("nan")).to_numpy()).all()


def test_bfloat16_tensors_from_host_values_round_once():
    """Values just above a bfloat16 tie (through float32 they land on it and round to even)."""
    v, f = 2**28 + 2**20 + 1, 1 + 2**-8 + 2**-30
    assert Tensor.constant([v], dtype=DType.bfloat16).item() == 2**28 + 2**21
    assert Tensor.full([2], v, dtype=DType.bfloat16).to_numpy().astype(np.float64).tolist() == [2**28 + 2**21] * 2
    assert Tensor.arange(v, v + 1, dtype=DType.bfloat16).item() == 2**28 + 2**21
    assert Tensor.constant([f], dtype=DType.bfloat16).item() == 1 + 2**-7
    assert Tensor.constant(np.array([f]), dtype=DType.bfloat16).item() == 1 + 2**-7
    assert Tensor.full([1], 1.625 + 2**-30, dtype=DType.float8_e5m2).item() == 1.75  # (above the tie 1.625)


def test_float_arrays_do_not_become_integers():
    ti = Tensor.constant([1, 2], dtype=DType.int32)
    for rhs in ([1.0, 2.0], np.array([3.0, 4.0], np.float32), [1, 2.5]):
        with pytest.raises(ValueError, match="float values do not combine with a tensor of int32"):
            ti + rhs
    assert (ti + [10, 20]).to_numpy().tolist() == [11, 22]
    assert (ti + np.array([1, 1], np.int64)).dtype == DType.int32


@pytest.mark.parametrize("axis", [5, -3])
def test_split_by_size_names_a_bad_axis(axis):
    with pytest.raises(IndexError, match=f"split: axis {axis} is out of range for a tensor of rank 2"):
        Tensor.ones([4, 2]).split(2, axis=axis)
    with pytest.raises(IndexError, match="rank 0"):
        Tensor.constant(1.0).split(1)
