"""Importers: foreign transcripts into sessionstore's event log.

``claude_code`` reads Claude Code's JSONL session transcripts (docs/import-export.md).
"""

from __future__ import annotations

from .claude_code import ImportedSession, ImportReport, SkippedLine, import_claude_code

__all__ = ["ImportReport", "ImportedSession", "SkippedLine", "import_claude_code"]
