"""The Python examples of dtype.md, as tests (see common.py for the method)."""

from doc_examples.common import *  # noqa: F401,F403


# --- dtype.md ---------------------------------------------------------------------------------


def test_dtype__module():
    """dtype.md, module intro: converting between MAX and NumPy dtypes, dtype properties."""
    import numpy as np
    from max.dtype import DType
    tensor = np.zeros((2, 3), dtype=DType.float32.to_numpy())
    # Convert NumPy dtype to MAX DType
    array = np.ones((4, 4), dtype=np.float16)
    max_dtype = DType.from_numpy(array.dtype)
    # Check properties of data types
    is_float = DType.float32.is_float()  # True
    is_int = DType.int64.is_integral()  # True
    size = DType.float64.size_in_bytes  # 8

    assert max_dtype == DType.float16
    assert is_float is True
    assert is_int is True
    assert size == 8
