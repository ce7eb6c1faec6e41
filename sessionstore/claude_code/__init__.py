"""Claude Code transcripts: import JSONL into the log, export the log back byte for byte."""

from __future__ import annotations

from ._export import (
    ExportedFile,
    export_claude_code,
    iter_claude_code,
    write_claude_code,
    write_claude_code_file,
)
from ._follow import ClaudeCodeFollower, FollowReport, follow_claude_code
from ._import import (
    ImportedSession,
    ImportReport,
    SkippedLine,
    import_claude_code,
)
from ._mirror import MIRROR_KEY, ClientState, MirroredTranscript, MirrorFamily, TranscriptMirror
from ._sent import SentComparison, SentRequest, compare_all_sent, compare_sent, sent_requests

__all__ = [
    "ClaudeCodeFollower",
    "ClientState",
    "ExportedFile",
    "FollowReport",
    "ImportReport",
    "ImportedSession",
    "MIRROR_KEY",
    "MirrorFamily",
    "MirroredTranscript",
    "SentComparison",
    "SentRequest",
    "SkippedLine",
    "TranscriptMirror",
    "compare_all_sent",
    "compare_sent",
    "export_claude_code",
    "follow_claude_code",
    "import_claude_code",
    "iter_claude_code",
    "sent_requests",
    "write_claude_code",
    "write_claude_code_file",
]
