"""max.driver.Buffer on the host: construction, views, copies, numpy interop and bad input."""

import ml_dtypes
import numpy as np
import pytest

from helpers import CAST_DTYPES, VALUE_TYPES, random_bits, random_values
from max import driver
from max.dtype import DType


def test_construction_and_properties():
    b = driver.Buffer(shape=[2, 3], dtype=DType.float32)
    assert b.shape == (2, 3) and b.dtype is DType.float32 and b.rank == 2
    assert b.num_elements == 6 and b.element_size == 4 and b.is_host and b.is_contiguous
    assert b.device == driver.CPU() and not b.pinned
    assert np.array_equal(b.to_numpy(), np.zeros((2, 3), np.float32))
    assert driver.Tensor is driver.Buffer
    s = driver.Buffer(DType.int8, [])
    assert s.shape == () and s.num_elements == 1 and s.rank == 0
    e = driver.Buffer(DType.float16, [0, 5])
    assert e.num_elements == 0 and e.to_numpy().shape == (0, 5)


def test_zeros_and_scalar():
    z = driver.Buffer.zeros([4, 5], DType.int64)
    assert z.to_numpy().dtype == np.int64 and not z.to_numpy().any()
    s = driver.Buffer.scalar(2.5, DType.bfloat16)
    assert s.shape == () and s.item() == 2.5


@pytest.mark.parametrize("shape", [[-1, 2], [3, -7]])
def test_negative_shape_is_a_value_error(shape):
    with pytest.raises(ValueError, match=r"Buffer: shape .* negative dimension"):
        driver.Buffer(DType.float32, shape)


def test_overflowing_shape_is_a_value_error():
    with pytest.raises(ValueError, match="needs .* bytes"):
        driver.Buffer(DType.float32, [2**62, 2**62])
    with pytest.raises(ValueError, match="does not fit in 64 bits"):
        driver.Buffer(DType.float32, [2**70])
    with pytest.raises(ValueError, match="needs .* bytes"):
        driver.Buffer.zeros([2**40, 2**30], DType.float64)


def test_huge_but_valid_shape_is_a_memory_error():
    with pytest.raises(MemoryError):
        driver.Buffer(DType.uint8, [2**62])


@pytest.mark.parametrize("dtype", ["float32", np.float32, 81, None])
def test_unknown_dtype_is_a_type_error(dtype):
    with pytest.raises(TypeError, match=r"Buffer\(dtype\) must be a max.dtype.DType"):
        driver.Buffer(dtype, [2])


def test_bad_shape_entries_are_type_errors():
    with pytest.raises(TypeError, match="shape entries must be ints"):
        driver.Buffer(DType.float32, [2.5])
    with pytest.raises(TypeError, match="shape must be a sequence"):
        driver.Buffer(DType.float32, "ab")


def test_from_numpy_shares_memory_for_every_numpy_dtype(rng):
    for d, t in VALUE_TYPES.items():
        a = random_values(rng, d, (3, 5))
        b = driver.Buffer.from_numpy(a)
        assert b.dtype is d and b.shape == (3, 5)
        out = b.to_numpy()
        if d.is_float8():
            out = out.view(t)  # float8 comes back as its bits, as DType.to_numpy() says
        assert out.dtype == a.dtype and np.array_equal(out.view(np.uint8), a.view(np.uint8))
        assert np.shares_memory(out, a)


def test_bits_round_trip_for_every_dtype(rng):
    """Every DType round-trips exactly, via its bits where numpy lacks the type."""
    for d in DType:
        bits = random_bits(rng, d, (4, 6))
        raw = driver.Buffer.from_numpy(bits)
        typed = raw.view(d, [4, 6]) if bits.dtype.itemsize == d.size_in_bytes else None
        assert typed is not None and typed.dtype is d
        back = typed.view(raw.dtype).to_numpy()
        assert np.array_equal(back, bits) and np.shares_memory(back, bits)


def test_from_numpy_copies_noncontiguous_and_readonly():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    for view in [a[:, ::2], a.T, a[::-1]]:
        b = driver.Buffer.from_numpy(view)
        assert b.is_contiguous and np.array_equal(b.to_numpy(), view)
        assert not np.shares_memory(b.to_numpy(), a)
    ro = np.frombuffer(np.arange(4, dtype=np.int32).tobytes(), dtype=np.int32)
    b = driver.Buffer.from_numpy(ro)
    b[0] = 9
    assert b.to_numpy()[0] == 9 and ro[0] == 0
    big_endian = np.arange(5, dtype=">i4")
    assert np.array_equal(driver.Buffer.from_numpy(big_endian).to_numpy(), np.arange(5))


@pytest.mark.parametrize("bad", [np.zeros(3, np.complex64), np.zeros(2, "U2"), np.zeros(2, object)])
def test_from_numpy_rejects_unsupported_dtypes(bad):
    with pytest.raises(TypeError, match="Buffer.from_numpy: numpy dtype .* has no max.dtype.DType"):
        driver.Buffer.from_numpy(bad)


def test_from_numpy_rejects_non_arrays():
    with pytest.raises(TypeError, match="expects a numpy.ndarray, got list"):
        driver.Buffer.from_numpy([1, 2, 3])


INDEXES = [
    (1,), (-1,), (slice(None, None, -1),), (slice(1, None, 2), -2), (Ellipsis, 0),
    (None, slice(None), 3), (0, Ellipsis, None), (slice(-100, 100, 3),), (slice(5, 1),),
    (2, slice(None, None, -2), Ellipsis, 1), (slice(None), None, slice(1, 3)),
]


@pytest.mark.parametrize("key", INDEXES)
def test_indexing_matches_numpy(rng, key):
    a = rng.standard_normal((4, 5, 6)).astype(np.float32)
    b = driver.Buffer.from_numpy(a)
    view = b[key]
    expected = a[key]
    assert view.shape == expected.shape
    got = view.to_numpy()
    assert np.array_equal(got, expected)
    assert np.shares_memory(got, a) or expected.size == 0
    assert view.is_contiguous == (expected.flags.c_contiguous and all(s >= 0 for s in expected.strides))


@pytest.mark.parametrize("key, kind", [
    ((4,), IndexError), ((-5,), IndexError), ((0, 0, 0, 0), IndexError), ((0, 7), IndexError),
    ((Ellipsis, Ellipsis), IndexError), ((slice(None, None, 0),), ValueError), (("a",), TypeError),
    ((1.0,), TypeError), ((True,), TypeError), (([0, 1],), TypeError),
])
def test_bad_indexes(key, kind):
    b = driver.Buffer(DType.int32, [4, 5, 6])
    with pytest.raises(kind):
        b[key]


def test_item_and_setitem(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = driver.Buffer.from_numpy(a)
    assert b[1, 2].item() == float(a[1, 2])
    with pytest.raises(ValueError, match="exactly one element"):
        b.item()
    b[0, 1] = 7
    b[2] = -1.5
    b[:, 3] = True
    assert a[0, 1] == 7 and (a[2, :3] == -1.5).all() and (a[:, 3] == 1).all()
    b[1] = np.arange(4, dtype=np.float64)
    assert np.array_equal(a[1], np.arange(4, dtype=np.float32))
    with pytest.raises(ValueError, match="cannot assign a value of shape"):
        b[0] = np.zeros(3, np.float32)
    ints = driver.Buffer.from_numpy(np.zeros(3, np.int64))
    ints[1] = 2**62
    assert ints[1].item() == 2**62 and isinstance(ints[1].item(), int)
    flags = driver.Buffer.from_numpy(np.array([True, False]))
    assert flags[0].item() is True


def test_view_reinterprets_bytes(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = driver.Buffer.from_numpy(a)
    assert np.array_equal(b.view(DType.int32).to_numpy(), a.view(np.int32))
    assert b.view(DType.uint8).shape == (3, 16) and b.view(DType.float16).shape == (3, 8)
    assert b.view(DType.int64, [6]).shape == (6,)
    with pytest.raises(ValueError, match="has 40 bytes but the buffer"):
        b.view(DType.float64, [5])
    with pytest.raises(ValueError, match="contiguous"):
        b[:, ::2].view(DType.int32)
    with pytest.raises(ValueError, match="without a shape"):
        driver.Buffer(DType.uint8, [3]).view(DType.float32)


def test_copy_contiguous_and_inplace_copy(rng):
    a = rng.standard_normal((5, 6)).astype(np.float64)
    b = driver.Buffer.from_numpy(a)
    c = b.copy()
    assert np.array_equal(c.to_numpy(), a) and not np.shares_memory(c.to_numpy(), a)
    s = b[::-2, 1:5]
    assert not s.is_contiguous
    sc = s.contiguous()
    assert sc.is_contiguous and np.array_equal(sc.to_numpy(), a[::-2, 1:5])
    target = driver.Buffer(DType.float64, [30])
    target.inplace_copy_from(b)
    assert np.array_equal(target.to_numpy(), a.ravel())
    with pytest.raises(ValueError, match="same dtype and number of elements"):
        driver.Buffer(DType.float64, [29]).inplace_copy_from(b)
    with pytest.raises(ValueError, match="same dtype"):
        driver.Buffer(DType.float32, [30]).inplace_copy_from(b)
    with pytest.raises(ValueError, match="contiguous"):
        driver.Buffer(DType.float64, [3, 4]).inplace_copy_from(s)
    b.inplace_copy_from(b)  # same storage goes through a temporary
    assert np.array_equal(b.to_numpy(), a)


def test_to_same_device_is_the_same_memory_and_bad_targets_fail():
    b = driver.Buffer(DType.float32, [4])
    cpu = driver.CPU()
    assert np.shares_memory(b.to(cpu).to_numpy(), b.to_numpy())
    assert len(b.to([cpu, cpu])) == 2
    with pytest.raises(TypeError, match="Device"):
        b.to("cuda")
    with pytest.raises(TypeError):
        b.to(3)


def test_bfloat16_to_numpy_uses_ml_dtypes(rng):
    v = random_values(rng, DType.bfloat16, (7,))
    b = driver.Buffer.from_numpy(v)
    assert b.dtype is DType.bfloat16
    out = b.to_numpy()
    assert out.dtype == ml_dtypes.bfloat16 and np.array_equal(out.view(np.uint16), v.view(np.uint16))


def test_repr_and_str():
    b = driver.Buffer.from_numpy(np.arange(6, dtype=np.int32).reshape(2, 3))
    assert repr(b) == "max.driver.Buffer(DType.int32, (2, 3), cpu[0])"
    assert str(b).startswith("Buffer([[0 1 2]") and "device=Device(type=cpu,id=0)" in str(b)


def test_mmap(tmp_path, rng):
    a = rng.standard_normal((8, 3)).astype(np.float32)
    path = tmp_path / "w.bin"
    path.write_bytes(b"\0" * 16 + a.tobytes())
    m = driver.Buffer.mmap(path, DType.float32, (8, 3), offset=16)
    assert np.array_equal(m.to_numpy(), a)
    h = driver.Buffer.mmap(path, DType.bfloat16, [4], offset=16)
    assert h.dtype is DType.bfloat16 and np.array_equal(h.view(DType.uint16).to_numpy(), np.frombuffer(a.tobytes()[:8], np.uint16))
