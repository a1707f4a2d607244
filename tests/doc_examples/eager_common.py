"""Helpers for the eager pages' doc examples (tensor.md, functional.md, random.md, nn.*.md,
the guides and graph.ops.md's Tensor examples): reading a printed Tensor back, and comparing
it with the values the docs print, numerically (the docs round, e.g. 0.119 for 0.1192...)."""

import re

import numpy as np

_PRINTED = re.compile(r"TensorType\(dtype=(\w+), shape=\[(.*?)\], device=(\S+?)\): (.*)$")


def parse(text: str) -> tuple[str, list[int], str, np.ndarray]:
    """(dtype, shape, device, flat values) of a printed Tensor."""
    m = _PRINTED.search(text)
    assert m, f"not a printed Tensor: {text!r}"
    dtype, shape, device, values = m.groups()
    dims = [int(d) for d in re.findall(r"Dim\((\d+)\)", shape)]
    vals = values.strip()
    flat = np.array(eval(vals.replace("True", "1").replace("False", "0")), dtype=np.float64).reshape(-1)
    return dtype, dims, device, flat


def same_values(printed: str, expected: list, rtol: float = 1e-3, atol: float = 1e-3) -> None:
    """`printed` (a Tensor's print) holds `expected` (the docs' numbers, flattened)."""
    _, _, _, flat = parse(printed)
    want = np.array(expected, dtype=np.float64).reshape(-1)
    assert flat.shape == want.shape, f"{flat.tolist()} vs {want.tolist()}"
    np.testing.assert_allclose(flat, want, rtol=rtol, atol=atol)


def same_print(printed: str, documented: str, rtol: float = 1e-3, atol: float = 1e-3) -> None:
    """`printed` matches the docs' printed line: same header (dtype, shape, device), values
    equal to the docs' to float tolerance."""
    got, want = parse(printed), parse(documented)
    assert got[:3] == want[:3], f"{printed!r} vs {documented!r}"
    np.testing.assert_allclose(got[3], want[3], rtol=rtol, atol=atol)
