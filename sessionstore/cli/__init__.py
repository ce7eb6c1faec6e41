"""The ``sessionstore`` command line: argument parsing, rendering and the demo."""

from __future__ import annotations

from ._main import main

__all__ = ["main"]
