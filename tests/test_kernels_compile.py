"""The kernel compiler's Python hooks: NVRTC compiles for sm_90a on a machine with no GPU, and
the compiled-kernel cache serves a second process from disk. Every family's compile and ptxas
check runs once, in `cargo test` (crates/kernels-cuda/tests/ptxas.rs); here the smaller
families stand in.

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


SMALL = ["cast", "fill", "copy_strided"]


def test_families_are_listed():
    names = core._kernel_families()
    assert {"cast", "fill", "copy_strided", "matmul", "gemm_sm90p_bf16", "conv_sm90_bf16", "conv_sm90_pp_f16"} <= set(names)
    # qgemv: one family per GGUF encoding and activation type
    encodings, types = ["q4_0", "q4_1", "q8_0", "q4_k", "q5_k", "q6_k"], ["f32", "bf16", "f16"]
    assert {n for n in names if n.startswith("qgemv_q")} == {f"qgemv_{e}_{t}" for e in encodings for t in types}
    assert len(names) == len(set(names))


def test_small_families_compile_for_sm90a(nvrtc):
    cubins = core._compile_kernels("sm_90a", "cubin", SMALL)
    assert set(cubins) == set(SMALL)
    assert all(img[:4] == b"\x7fELF" for img in cubins.values())
    ptx = core._compile_kernels("sm_90a", "ptx", SMALL)
    for name, text in ptx.items():
        assert b".target sm_90a" in text, name
    assert ptx["cast"].count(b".entry cast_") == 15 * 15


def test_bad_arch_is_a_clear_error(nvrtc):
    with pytest.raises(RuntimeError, match="NVRTC failed to compile"):
        core._compile_kernels("sm_1", families=["fill"])
    with pytest.raises(ValueError, match="target must be"):
        core._compile_kernels("sm_90a", "sass")


def test_unknown_family_is_a_clear_error():
    with pytest.raises(ValueError, match='unknown kernel family "nope"; known: cast'):
        core._compile_kernels("sm_90a", "ptx", ["fill", "nope"])


def test_second_process_hits_the_disk_cache(nvrtc, tmp_path):
    env = dict(os.environ, MAX_KERNEL_CACHE_DIR=str(tmp_path))
    code = (
        f"from max._core import driver as c; c._warm_kernel_cache('sm_90a', {SMALL!r}); "
        "s = c._kernel_cache_stats(); print(s['compiles'], s['disk_hits'])"
    )
    run = lambda: subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    first = run().stdout.split()
    second = run().stdout.split()
    assert first == [str(len(SMALL)), "0"], first
    assert second == ["0", str(len(SMALL))], second
    assert len(list(tmp_path.iterdir())) == len(SMALL)
