"""The CUDA cast kernels against the host cast, bit for bit, for all 225 dtype pairs and every
bit pattern class (NaN, inf, out-of-range, subnormal) the random inputs hit."""

import numpy as np
import pytest

from helpers import CAST_DTYPES, random_bits
from max import driver
from max.dtype import DType

pytestmark = pytest.mark.gpu

BITS = {1: DType.uint8, 2: DType.uint16, 4: DType.uint32, 8: DType.uint64}


@pytest.mark.parametrize("src", CAST_DTYPES, ids=lambda d: d.name)
def test_gpu_cast_matches_host_cast_bit_exact(rng, gpu, src):
    n = 100_003
    bits = random_bits(rng, src, (n,))
    host = driver.Buffer.from_numpy(bits).view(src, [n])
    dev = host.to(gpu)
    for to in CAST_DTYPES:
        want = host._cast(to).view(BITS[to.size_in_bytes], [n]).to_numpy()
        got_buf = dev._cast(to)
        assert got_buf.device == gpu and got_buf.dtype is to
        got = got_buf.view(BITS[to.size_in_bytes], [n]).to_numpy()
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, f"{src.name}->{to.name}: inputs {bits[bad[:4]]} gave {got[bad[:4]]}, host {want[bad[:4]]}"


def test_gpu_cast_of_strided_view(rng, gpu):
    a = rng.standard_normal((40, 30)).astype(np.float32)
    dev = driver.Buffer.from_numpy(a).to(gpu)
    out = dev[::-3, 2::2]._cast(DType.float16).to_numpy()
    assert np.array_equal(out, a[::-3, 2::2].astype(np.float16))
