"""The load progress bar is drawn only when stderr is a terminal and MAX_NO_PROGRESS is unset
(or "0"): checked in subprocesses whose stderr is a pseudo-terminal or a pipe."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest

CODE = "import sys; from max._core import weights; sys.stdout.write(str(weights.progress_enabled()))"


def enabled(stderr_is_tty: bool, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "MAX_NO_PROGRESS"} | env
    if not stderr_is_tty:
        return subprocess.run([sys.executable, "-c", CODE], capture_output=True, env=environ, check=True).stdout.decode()
    main, child = pty.openpty()
    try:
        out = subprocess.run([sys.executable, "-c", CODE], stdout=subprocess.PIPE, stderr=child, env=environ, check=True)
    finally:
        os.close(child)
        os.close(main)
    return out.stdout.decode()


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="no pseudo-terminals here")
def test_progress_only_on_a_terminal_without_max_no_progress():
    assert enabled(True) == "True"
    assert enabled(True, MAX_NO_PROGRESS="0") == "True"
    assert enabled(True, MAX_NO_PROGRESS="1") == "False"
    assert enabled(True, MAX_NO_PROGRESS="yes") == "False"
    assert enabled(False) == "False"
