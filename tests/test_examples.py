"""Every program in examples/ (and tests/typed/usage.py, the file mypy checks) runs to
completion on the CPU (each checks its own result against numpy or a known answer and exits
non-zero when it is wrong); the model examples use the test models of requirements-models.txt
and skip without them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import models

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
PROGRAMS = {p.name: p for p in [*EXAMPLES.glob("*.py"), ROOT / "tests" / "typed" / "usage.py"]}

# Command-line arguments of the examples that take a model.
ARGS = {
    "smollm2_generate.py": lambda: [str(models.smollm2_gguf())],
    "serve_openai.py": lambda: [str(models.smollm2_gguf())],
    "minilm_embeddings.py": lambda: [str(models.minilm_dir())],
}
NEEDS = {"serve_openai.py": ["openai", "fastapi", "uvicorn"]}


def test_every_example_is_listed():
    assert {p.name for p in EXAMPLES.glob("*.py")} >= set(ARGS)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_example_runs(name):
    for module in NEEDS.get(name, []):
        pytest.importorskip(module)
    args = ARGS[name]() if name in ARGS else []
    env = dict(os.environ, MAX_DEVICES="cpu", CUDA_VISIBLE_DEVICES="")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, str(PROGRAMS[name]), *args], capture_output=True, text=True,
                       env=env, timeout=300, cwd=ROOT)
    assert r.returncode == 0, f"{name} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    assert r.stdout.strip(), f"{name} printed nothing"
