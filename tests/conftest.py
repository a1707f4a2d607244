"""Shared fixtures: fresh random generators, and GPU tests that skip cleanly without a GPU (or
without the Hopper GPU that the sm_90a kernels need); with MAX_REQUIRE_GPU=1 a missing GPU fails
them instead."""

import os

import numpy as np
import pytest

from max import driver, tuning


@pytest.fixture
def rng(request):
    """A generator with a fresh seed per test; the seed is printed so a failure can be replayed."""
    seed = int(os.environ.get("MAX_TEST_SEED", np.random.SeedSequence().entropy % (2**32)))
    print(f"{request.node.name}: MAX_TEST_SEED={seed}")
    return np.random.default_rng(seed)


def _no_gpu():
    if os.environ.get("MAX_REQUIRE_GPU") == "1":
        pytest.fail("MAX_REQUIRE_GPU=1 but there is no GPU on this machine")
    pytest.skip("no GPU on this machine")


@pytest.fixture(scope="session")
def gpu():
    """The first accelerator; skips the test on a machine without one."""
    if driver.accelerator_count() == 0:
        _no_gpu()
    return driver.Accelerator()


@pytest.fixture
def hopper(gpu):
    """The first accelerator when it is a Hopper GPU (sm_90a), with CUDA graphs off so that every
    execution goes through the launchers (and their launch records); skips otherwise."""
    if gpu.architecture_name != "sm_90a":
        pytest.skip(f"the Hopper kernels need sm_90a, this GPU is {gpu.architecture_name}")
    with tuning.override(cuda_graphs="off"):
        yield gpu


@pytest.fixture
def qgemv_kernels_of_any_size():
    """The tensor-core and streaming quantized GEMVs for weights of any size (by default 1-2
    rows of small weights take qgemv.cu), and for 4-8 rows (by default of large weights on
    qgemm_sm90.cu): tests of those kernels at small shapes."""
    with tuning.override(**{"qgemv.mma": True, "qgemv.stream": True, "qmatmul.qgemm_min_rows": 9}):
        yield


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def device(request):
    """Each test body once per device: the CPU, and the first accelerator (skipped without one)."""
    if request.param == "gpu":
        if driver.accelerator_count() == 0:
            _no_gpu()
        return driver.Accelerator()
    return driver.CPU()


# The tokenizer tests' vocabularies (tests/tokenizer_util.py builds them; the SmolLM2 one skips
# when its package is not installed).
@pytest.fixture(scope="module")
def smollm_metadata():
    from max.pipelines.tokenizer import read_gguf_metadata
    from tokenizer_util import _smollm_path

    return read_gguf_metadata(_smollm_path())


@pytest.fixture(scope="module")
def smollm(smollm_metadata):
    from max.pipelines.tokenizer import TextTokenizer
    from tokenizer_util import SMOLLM_FILE

    return TextTokenizer.from_gguf_metadata(smollm_metadata, name=SMOLLM_FILE)


@pytest.fixture(scope="module")
def spm():
    from max.pipelines.tokenizer import TextTokenizer
    from tokenizer_util import _spm_metadata

    return TextTokenizer.from_gguf_metadata(_spm_metadata())
