"""Opening a checkpoint file for the Rust readers with Python's exact exceptions: the file is
opened here first, so a missing path raises FileNotFoundError, a directory IsADirectoryError
and an unreadable file PermissionError (each naming the caller and the path) instead of the
readers' generic ValueError."""

from __future__ import annotations

import os
from pathlib import Path


def readable_file(path: str | os.PathLike[str], where: str) -> Path:
    """`path` as a Path once it opens for reading; else the OSError subclass that ``open``
    raised, its message prefixed with `where` (e.g. ``"GGUFWeights: source"``)."""
    p = Path(path)
    try:
        with open(p, "rb"):
            pass
    except OSError as e:
        raise type(e)(e.errno, f"{where}: {e.strerror}", str(p)) from None
    return p
