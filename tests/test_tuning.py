"""The settings and tuning registry (max.tuning): one declaration per entry, documented in
docs/configuration.md, one boolean syntax, scoped overrides that restore, clear errors, and the
user settings that need no GPU changing what runs. The GPU knobs' effects are checked by the
launch-selection table tests in crates/kernels-cuda and by the GPU tests (record_launches)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from max import tuning

ROOT = Path(__file__).resolve().parents[1]


def test_every_entry_is_declared_once_and_documented():
    knobs = tuning.knobs()
    names = [k.name for k in knobs]
    assert len(names) == len(set(names))
    doc = (ROOT / "docs" / "configuration.md").read_text()
    documented = set(re.findall(r"^\| `([a-z0-9_.]+)` \|", doc, re.M))
    documented |= set(re.findall(r"^\| `MAX_[A-Z_]+` \| `([a-z0-9_.]+)` \|", doc, re.M))
    assert documented == set(names)
    for k in knobs:
        assert k.doc.strip(), k.name
        assert (k.env is None) == ("." in k.name), k.name


def test_product_reads_few_environment_variables():
    """Only the user settings' variables and MAX_TUNING appear in the product's code."""
    declared = {k.env for k in tuning.knobs() if k.env} | {"MAX_TUNING"}
    found = set()
    sources = list((ROOT / "crates").glob("*/src/**/*.rs")) + list((ROOT / "python" / "max").rglob("*.py"))
    for path in sources:
        found |= set(re.findall(r'"(MAX_[A-Z0-9_]+)"', path.read_text()))
    assert found <= declared, found - declared
    assert len(declared) <= 12


def test_one_boolean_syntax_and_typed_values():
    for word, value in [("yes", "1"), ("ON", "1"), ("true", "1"), ("no", "0"), ("off", "0"), ("False", "0")]:
        with tuning.override(**{"conv.pdl": word}):
            assert tuning.get("conv.pdl") == value
    with tuning.override(cuda_graphs=False):
        assert tuning.get("cuda_graphs") == "off"
    with tuning.override("conv.bn=128, gemm.splitk=3", cuda_graphs="always"):
        assert (tuning.get("conv.bn"), tuning.get("gemm.splitk"), tuning.get("cuda_graphs")) == ("128", "3", "always")
        assert "conv.bn=128" in tuning.current() and "gemm.splitk=3" in tuning.current()


def test_overrides_nest_and_restore():
    before = (tuning.get("gemm.grid"), tuning.current())
    with tuning.override("gemm.grid=7"):
        with tuning.override("gemm.grid=9"):
            assert tuning.get("gemm.grid") == "9"
        assert tuning.get("gemm.grid") == "7"
    assert (tuning.get("gemm.grid"), tuning.current()) == before
    with pytest.raises(RuntimeError):
        with tuning.override("gemm.grid=5"):
            raise RuntimeError("the body failed")
    assert tuning.get("gemm.grid") == before[0]


@pytest.mark.parametrize(
    "spec, words",
    [
        ("conv.bn=100", ["conv.bn", "64, 128, 256", "'100'"]),
        ("conv.tm=24", ["conv.tm", "multiple of 16"]),
        ("conv.pdl=maybe", ["conv.pdl", "flag"]),
        ("conv.nope=1", ["conv.nope", "conv.bn"]),
        ("gemm.epilogue=fast", ["staged, direct"]),
        ("nothing", ["name=value"]),
    ],
)
def test_bad_entries_are_errors_naming_them(spec, words):
    before = tuning.current()
    with pytest.raises(ValueError) as e:
        with tuning.override(spec):
            pass
    for w in words:
        assert w in str(e.value), str(e.value)
    assert tuning.current() == before
    with pytest.raises(ValueError, match="no setting or tuning knob"):
        tuning.get("conv.nope")


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MAX_")} | env
    return subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=120)


def test_environment_is_read_once_with_warnings_for_bad_entries():
    code = "from max import tuning; print(tuning.get('conv.bn'), tuning.get('cuda_graphs'), tuning.get('gemm.grid'))"
    r = _run(code, MAX_TUNING="conv.bn=64,gemm.grid=oops", MAX_CUDA_GRAPHS="0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split(" ") == ["64", "off", "\n"]
    assert "MAX_TUNING entry 'gemm.grid=oops'" in r.stderr and "gemm.grid" in r.stderr
    r = _run(code, MAX_CUDA_GRAPHS="sometimes")
    assert r.returncode == 0 and "MAX_CUDA_GRAPHS=sometimes" in r.stderr


def _matmul_relu_graph(device):
    from max.dtype import DType
    from max.graph import DeviceRef, Graph, TensorType, ops

    ref = DeviceRef.CPU() if device.label == "cpu" else DeviceRef.GPU(device.id)
    t = TensorType(DType.float32, [4, 8], device=ref)
    w = TensorType(DType.float32, [8, 8], device=ref)
    with Graph("mm_relu", input_types=[t, w]) as g:
        a, b = g.inputs
        g.output(ops.relu(ops.matmul(a, b)))
    return g


def _plan_of(device, capfd, **values):
    """Loads and runs matmul + relu under the given entries with print_plan on; the plan."""
    from max import engine
    from max.driver import Buffer

    session = engine.InferenceSession(devices=[device])
    a = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32)
    with tuning.override(print_plan=True, **values):
        model = session.load(_matmul_relu_graph(device))
        args = [Buffer.from_numpy(x).to(device) for x in (a, b)]
        out = model.execute(*args)[0].to_numpy()
    np.testing.assert_allclose(out, np.maximum(a @ b, 0), rtol=1e-2, atol=1e-2)
    return capfd.readouterr().err


def test_print_plan_prints_each_plan(device, capfd):
    plan = _plan_of(device, capfd)
    assert "plan for mm_relu" in plan and "matmul" in plan
    from max import engine

    engine.InferenceSession(devices=[device]).load(_matmul_relu_graph(device))
    assert capfd.readouterr().err == "", "print_plan is off by default"


def test_epilogue_fusion_knob_changes_the_plan(gpu, capfd):
    fused, unfused = _plan_of(gpu, capfd), _plan_of(gpu, capfd, **{"fusion.epilogue": False})
    assert "relu" in unfused and fused != unfused, (fused, unfused)


def test_kernel_cache_dir_setting(tmp_path):
    from max._core import driver

    with tuning.override(kernel_cache_dir=str(tmp_path)):
        assert Path(driver._kernel_cache_dir()) == tmp_path
    assert Path(driver._kernel_cache_dir()) != tmp_path


def test_nvrtc_library_setting_names_the_file():
    code = "from max._core import driver\ntry:\n    driver._nvrtc_version()\nexcept RuntimeError as e:\n    print(e)"
    r = _run(code, MAX_NVRTC_LIBRARY="/nonexistent/libnvrtc.so.13")
    assert r.returncode == 0, r.stderr
    assert "/nonexistent/libnvrtc.so.13" in r.stdout
