"""Exporters: sessions out of the event log into foreign transcript formats.

``claude_code`` writes Claude Code's JSONL (docs/import-export.md).
"""

from __future__ import annotations

from .claude_code import ExportedFile, export_claude_code, write_claude_code

__all__ = ["ExportedFile", "export_claude_code", "write_claude_code"]
