"""max.dtype: members, properties and numpy/torch mappings, as MAX documents them."""

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from max.dtype import DType, finfo

SPEC = Path(__file__).resolve().parents[1].parent / "shared" / "seeds" / "max-api" / "dtype.md"

SIZES = {
    DType.bool: 1, DType.int8: 1, DType.uint8: 1, DType.int16: 2, DType.uint16: 2,
    DType.int32: 4, DType.uint32: 4, DType.int64: 8, DType.uint64: 8, DType.float16: 2,
    DType.bfloat16: 2, DType.float32: 4, DType.float64: 8,
}


def test_members_and_codes_match_the_documentation():
    if not SPEC.exists():
        pytest.skip("the API documentation is not beside the project")
    documented = dict(re.findall(r"> (\w+?)(?:\\_\w+?)* = (\d+)", SPEC.read_text()))
    pairs = re.findall(r"### `(\w+)` \{#max\.dtype\.DType\.\w+\} > [\w\\]+ = (\d+)", SPEC.read_text())
    assert len(pairs) >= 19, documented
    for name, value in pairs:
        assert DType[name].value == int(value), name


def test_properties():
    for d, size in SIZES.items():
        assert d.size_in_bytes == size and d.size_in_bits == 8 * size and d.align == size
    assert DType.float4_e2m1fn.size_in_bits == 4 and DType.float4_e2m1fn.size_in_bytes == 1
    assert DType.float6_e3m2fn.size_in_bits == 6
    assert DType.float32.is_float() and not DType.float32.is_integral()
    assert DType.int64.is_integral() and DType.int64.is_signed_integral()
    assert DType.uint16.is_unsigned_integral() and not DType.uint16.is_signed_integral()
    assert not DType.bool.is_integral() and not DType.bool.is_float()
    assert DType.float8_e5m2.is_float8() and not DType.bfloat16.is_float8()
    assert DType.bfloat16.is_half() and DType.float16.is_half() and not DType.float32.is_half()
    assert str(DType.float32) == "DType.float32" and repr(DType.float32) == "float32"


def test_unknown_dtype_is_a_value_error():
    with pytest.raises(ValueError):
        DType(2)
    with pytest.raises(KeyError):
        DType["complex64"]


def test_numpy_mapping_round_trips():
    for d in SIZES:
        assert DType.from_numpy(d.to_numpy()) is d
        assert DType.from_numpy(d.to_numpy().type) is d
    assert DType.bfloat16.to_numpy() == np.dtype(ml_dtypes.bfloat16)
    for d in DType:
        if d.is_float8():
            assert d.to_numpy() == np.uint8  # float8 data travels as its bits, as in MAX
            assert DType.from_numpy(getattr(ml_dtypes, d.name)) is d
    assert DType.from_numpy(np.dtype(">f4")) is DType.float32


@pytest.mark.parametrize("bad", [np.complex64, np.dtype("U3"), "float32", np.dtype([("a", "f4")]), object])
def test_from_numpy_rejects_unsupported(bad):
    with pytest.raises(ValueError, match="unsupported NumPy dtype"):
        DType.from_numpy(bad)


@pytest.mark.parametrize("d", [DType.float4_e2m1fn, DType.float6_e2m3fn])
def test_to_numpy_rejects_types_without_a_numpy_form(d):
    with pytest.raises(ValueError, match="unsupported DType"):
        d.to_numpy()


def test_finfo_against_ml_dtypes_and_numpy():
    for d in [DType.float16, DType.float32, DType.float64]:
        ref = np.finfo(d.to_numpy())
        f = finfo(d)
        assert (f.bits, f.eps, f.max, f.min, f.tiny) == (ref.bits, ref.eps, ref.max, ref.min, ref.tiny)
    for d in [DType.bfloat16, DType.float8_e4m3fn, DType.float8_e4m3fnuz, DType.float8_e5m2,
              DType.float8_e5m2fnuz, DType.float4_e2m1fn, DType.float6_e2m3fn, DType.float6_e3m2fn]:
        ref = ml_dtypes.finfo(getattr(ml_dtypes, d.name))
        f = finfo(d)
        assert (f.eps, f.max, f.min, f.tiny) == (float(ref.eps), float(ref.max), float(ref.min), float(ref.tiny)), d
        assert f.smallest_normal == f.tiny and f.dtype is d and f.bits == d.size_in_bits
    with pytest.raises(TypeError):
        finfo(DType.int32)
    with pytest.raises(TypeError):
        finfo(np.float32)


def test_torch_mapping():
    torch = pytest.importorskip("torch")
    for d in [DType.bool, DType.int8, DType.uint8, DType.int32, DType.int64, DType.float16,
              DType.bfloat16, DType.float32, DType.float64, DType.float8_e4m3fn, DType.float8_e5m2]:
        t = d.to_torch()
        assert isinstance(t, torch.dtype) and DType.from_torch(t) is d
    with pytest.raises(ValueError):
        DType.float4_e2m1fn.to_torch()
    with pytest.raises(ValueError):
        DType.from_torch(torch.complex64)
