"""Examples in docstrings run as written."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import sessionstore


def test_package_docstring_example_runs() -> None:
    """The quick start in sessionstore's docstring works."""
    result = doctest.testmod(sessionstore, verbose=False)

    assert result.attempted >= 5
    assert result.failed == 0


def test_readme_python_example_runs() -> None:
    """The README's usage example runs as written on the embedded default."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)

    assert blocks
    for block in blocks:
        namespace: dict[str, object] = {}
        exec(compile(block, "README.md", "exec"), namespace)
        namespace["store"].close()  # type: ignore[attr-defined]
