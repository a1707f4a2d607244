"""Opening weight and model files fails with Python's own exceptions: FileNotFoundError for a
missing path, IsADirectoryError for a folder, PermissionError for an unreadable file (checked
as an unprivileged user in a child process when the tests run as root), from every reader and
from the pipeline's model resolution; after each error the same process still loads a good
file and reads its values."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

from max.graph.weights import GGUFWeights, SafetensorWeights, load_weights
from max.pipelines.lib.model_source import resolve
from weights_util import write_gguf

safetensors_numpy = pytest.importorskip("safetensors.numpy")

OPENERS = {
    "load_weights": lambda p: load_weights([p]),
    "GGUFWeights": GGUFWeights,
    "SafetensorWeights": lambda p: SafetensorWeights([p]),
    "resolve": lambda p: resolve(str(p)),
}


@pytest.fixture
def good(tmp_path, rng):
    """A GGUF and a safetensors file, each holding one random float32 tensor `w`."""
    w = rng.standard_normal((3, 5)).astype(np.float32)
    gguf_path = write_gguf(tmp_path / "good.gguf", [("w", w, None)])
    st_path = tmp_path / "good.safetensors"
    safetensors_numpy.save_file({"w": w}, str(st_path))
    return w, gguf_path, st_path


def still_usable(good) -> None:
    w, gguf_path, st_path = good
    np.testing.assert_array_equal(np.asarray(GGUFWeights(gguf_path).w.data()), w)
    np.testing.assert_array_equal(np.asarray(load_weights([st_path]).w.data()), w)


@pytest.mark.parametrize("opener", OPENERS)
def test_missing_file(tmp_path, good, opener):
    missing = tmp_path / "absent.gguf"
    with pytest.raises(FileNotFoundError) as info:
        OPENERS[opener](missing)
    assert type(info.value) is FileNotFoundError
    assert str(missing) in str(info.value)
    still_usable(good)


@pytest.mark.parametrize("opener", ["load_weights", "GGUFWeights", "SafetensorWeights"])
def test_directory(tmp_path, good, opener):
    folder = tmp_path / "model.gguf"
    folder.mkdir()
    with pytest.raises(IsADirectoryError) as info:
        OPENERS[opener](folder)
    assert type(info.value) is IsADirectoryError and str(folder) in str(info.value)
    still_usable(good)


def test_unreadable_file(rng):
    """PermissionError from each reader and from resolve, then a good file loads, in one process."""
    w = rng.standard_normal((2, 4)).astype(np.float32)
    folder = Path(tempfile.mkdtemp(prefix="max-perm-"))
    try:
        os.chmod(folder, 0o755)
        good = write_gguf(folder / "good.gguf", [("w", w, None)])
        np.save(folder / "want.npy", w)
        for name in ("locked.gguf", "locked.safetensors"):
            (folder / name).write_bytes(good.read_bytes())
            os.chmod(folder / name, 0)
        os.chmod(good, 0o644)
        os.chmod(folder / "want.npy", 0o644)
        child = textwrap.dedent(
            f"""
            import os, numpy as np
            from max.graph.weights import GGUFWeights, SafetensorWeights, load_weights
            from max.pipelines.lib.model_source import resolve
            # Everything is imported before dropping privileges (the interpreter's own files
            # may not be readable to the unprivileged user).
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            folder = {str(folder)!r}
            cases = [
                (load_weights, [folder + "/locked.gguf"]),
                (GGUFWeights, folder + "/locked.gguf"),
                (SafetensorWeights, [folder + "/locked.safetensors"]),
                (resolve, folder + "/locked.gguf"),
            ]
            for fn, arg in cases:
                try:
                    fn(arg)
                except Exception as e:
                    assert type(e) is PermissionError, (fn, type(e), e)
                    assert "locked" in str(e), e
                else:
                    raise AssertionError(f"{{fn}} read an unreadable file")
            got = np.asarray(GGUFWeights(folder + "/good.gguf").w.data())
            assert np.array_equal(got, np.load(folder + "/want.npy")), got
            print("ok")
            """
        )
        r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    finally:
        for p in folder.iterdir():
            p.unlink()
        folder.rmdir()
