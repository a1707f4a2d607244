# Stubs for max._core.dtype (crates/python/src/dtype.rs).
from typing import Any

def table() -> Any: ...
