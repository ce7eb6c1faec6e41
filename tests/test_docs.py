"""Examples in docstrings run as written."""

from __future__ import annotations

import doctest

import sessionstore


def test_package_docstring_example_runs() -> None:
    """The quick start in sessionstore's docstring works."""
    result = doctest.testmod(sessionstore, verbose=False)

    assert result.attempted >= 5
    assert result.failed == 0
