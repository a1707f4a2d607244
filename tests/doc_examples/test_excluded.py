"""The documentation examples that are not run, each with the reason (shown as skips)."""

import pytest

from doc_examples.common import EXCLUDED


@pytest.mark.parametrize(
    "page,heading,reason", EXCLUDED, ids=[f"{p}::{h}" for p, h, _ in EXCLUDED]
)
def test_excluded_example(page, heading, reason):
    pytest.skip(f"{page} {heading}: {reason}")
