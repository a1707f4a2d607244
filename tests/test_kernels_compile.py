"""Every CUDA kernel family compiles with NVRTC for sm_90a, on a machine with no GPU, and the
compiled-kernel cache serves a second process from disk.

These need libnvrtc (the nvidia-cuda-nvrtc wheel that scripts/setup installs). They skip
without it, unless MAX_REQUIRE_NVRTC=1 (scripts/test sets it), so a broken kernel cannot land.
"""

import os
import subprocess
import sys

import pytest

from max._core import driver as core


@pytest.fixture(scope="module")
def nvrtc():
    try:
        return core._nvrtc_version()
    except RuntimeError as e:
        if os.environ.get("MAX_REQUIRE_NVRTC") == "1":
            raise
        pytest.skip(str(e))


def test_nvrtc_is_the_cuda_13_line(nvrtc):
    assert nvrtc[0] == 13


def test_every_family_compiles_for_sm90a(nvrtc):
    cubins = core._compile_kernels("sm_90a", "cubin")
    assert {"cast", "fill", "copy_strided", "matmul"} <= set(cubins)
    assert all(img[:4] == b"\x7fELF" for img in cubins.values())
    ptx = core._compile_kernels("sm_90a", "ptx")
    for name, text in ptx.items():
        assert b".target sm_90a" in text, name
    assert ptx["cast"].count(b".entry cast_") == 15 * 15


def test_bad_arch_is_a_clear_error(nvrtc):
    with pytest.raises(RuntimeError, match="NVRTC failed to compile"):
        core._compile_kernels("sm_1")
    with pytest.raises(ValueError, match="target must be"):
        core._compile_kernels("sm_90a", "sass")


def test_second_process_hits_the_disk_cache(nvrtc, tmp_path):
    env = dict(os.environ, MAX_KERNEL_CACHE_DIR=str(tmp_path))
    code = (
        "from max._core import driver as c; c._warm_kernel_cache('sm_90a'); "
        "s = c._kernel_cache_stats(); print(s['compiles'], s['disk_hits'])"
    )
    run = lambda: subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    families = len(core._compile_kernels("sm_90a", "ptx"))
    first = run().stdout.split()
    second = run().stdout.split()
    assert first == [str(families), "0"], first
    assert second == ["0", str(families)], second
    assert len(list(tmp_path.iterdir())) == families
