"""A slow files rewind for the crash test in tests/test_file_history.py, which SIGKILLs it.

``python -m tests._file_history_worker PHASE URL SESSION_ID ROOT MESSAGE_UUID`` rewinds the files
of the session to the message's checkpoint with one step slowed down and announced on stdout:
``write`` announces each temp file's fsync (``fsync N``), ``replace`` each rename over a
target (``replace N``). Each line is flushed before the step runs, so the parent knows how far
the rewind got when it kills the process.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import sessionstore
from sessionstore import FileHistory, Session


def _announced(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
    count = 0

    def slow(*args: Any) -> Any:
        nonlocal count
        print(f"{name} {count}", flush=True)
        count += 1
        time.sleep(0.05)
        return real(*args)

    return slow


def main(argv: list[str]) -> None:
    """Run the rewind; never returns normally in the crash test (the parent kills it)."""
    phase, url, session_id, root, message_uuid = argv
    store = sessionstore.open_store(url, migrate=False, token_counter=None)
    history = FileHistory(Session(store, session_id), root)
    if phase == "write":
        os.fsync = _announced("fsync", os.fsync)
    else:
        os.replace = _announced("replace", os.replace)
    history.rewind_files(message_uuid)
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
