"""Token counting at append time: offline, calibrated, and counted once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import sessionstore
from sessionstore import MessageAppended
from sessionstore.store import TiktokenCounter
from sessionstore.store._tokens import MAX_ENCODED_CHARS

from ._claude_code_corpus import corpus_paths, entries

_NO_NETWORK = """
import socket

def _refuse(*args, **kwargs):
    raise OSError("network disabled in this test")

socket.socket.connect = _refuse
socket.socket.connect_ex = _refuse
socket.create_connection = _refuse
socket.getaddrinfo = _refuse
"""


def test_counting_needs_no_network(tmp_path: Path) -> None:
    """With sockets blocked and an empty tiktoken cache, counting still works."""
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(tmp_path / "empty-cache")}
    code = (
        _NO_NETWORK
        + "import sessionstore.store; print(sessionstore.store.TiktokenCounter().count_text('hello world'))"
    )
    proof = _NO_NETWORK + "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9/')"

    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    blocked = subprocess.run(
        [sys.executable, "-c", proof], env=env, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"
    assert blocked.returncode != 0
    assert "network disabled" in blocked.stderr


def test_message_counts_every_block_the_model_reads() -> None:
    """Text, thinking, tool calls and tool results all count; the total is their sum."""
    counter = TiktokenCounter()
    blocks = [
        {"type": "text", "text": "Let me look."},
        {"type": "thinking", "thinking": "The user wants the file.", "signature": "abc"},
        {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a.py"}},
        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "print(1)"}]},
    ]
    texts = ["Let me look.", "The user wants the file.", "Read", '{"path":"a.py"}', "print(1)"]

    count = counter.count(MessageAppended(role="assistant", content=blocks))

    assert count == sum(counter.count_text(t) for t in texts)


def test_each_event_is_tokenized_once_per_append() -> None:
    """The store counts each appended event exactly once."""

    class Recording(TiktokenCounter):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[str] = []

        def count(self, event: sessionstore.Event) -> int | None:
            self.seen.append(str(event.event_id))
            return super().count(event)

    counter = Recording()
    with sessionstore.open_store(":memory:", token_counter=counter) as store:
        sid = store.create_session().id
        batch = [MessageAppended(role="user", content=f"m{i}") for i in range(5)]
        store.append(sid, batch, expected_seq=0)
        store.read(sid)

    assert sorted(counter.seen) == sorted(str(e.event_id) for e in batch)


class _RecordingEncoding:
    """Wraps the real encoding and remembers the longest string it was handed."""

    def __init__(self, real: object) -> None:
        self.real = real
        self.longest = 0

    def encode_ordinary(self, text: str) -> list[int]:
        self.longest = max(self.longest, len(text))
        return self.real.encode_ordinary(text)  # type: ignore[attr-defined,no-any-return]


def _recording_counter() -> tuple[TiktokenCounter, _RecordingEncoding]:
    counter = TiktokenCounter()
    recording = _RecordingEncoding(counter._encoding)
    counter.__dict__["_encoding"] = recording  # replaces the cached_property's value
    return counter, recording


def test_a_long_run_without_whitespace_is_encoded_in_bounded_chunks() -> None:
    """BPE is quadratic in a piece's length: the encoder never gets more than the bound at once."""
    counter, recording = _recording_counter()
    run = "QUJD" * 50_000  # 200,000 characters of base64-like text, no whitespace

    count = counter.count(MessageAppended(role="user", content=run))

    assert recording.longest <= MAX_ENCODED_CHARS
    exact = len(recording.real.encode_ordinary(run[:MAX_ENCODED_CHARS]))  # type: ignore[attr-defined]
    assert count is not None
    assert abs(count - exact * len(run) / MAX_ENCODED_CHARS) <= 0.01 * count


def _corpus_text() -> str:
    texts: list[str] = []
    for path in corpus_paths():
        for _, entry in entries(path):
            message = entry.get("message")
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                texts.extend(b.get("text", "") for b in content if isinstance(b, dict))
    return "\n\n".join(t for t in texts if t)


def test_chunked_count_of_real_text_is_within_one_percent_of_the_exact_count() -> None:
    """Cutting at whitespace keeps the count of ordinary text (the corpus) within 1%."""
    text = _corpus_text()
    counter, recording = _recording_counter()

    chunked = counter.count_text(text)
    exact = len(recording.real.encode_ordinary(text))  # type: ignore[attr-defined]

    assert recording.longest <= MAX_ENCODED_CHARS
    assert abs(chunked - exact) <= 0.01 * exact


class _WordCounter:
    """A whole ``TokenCounter`` of its own: one token per word."""

    name = "words"

    def count(self, event: sessionstore.Event) -> int | None:
        texts = event.countable_text()
        return None if texts is None else sum(self.count_text(t) for t in texts)

    def count_text(self, text: str) -> int:
        return len(text.split())


class _NoTextCounter:
    """Counts events but not texts: half a ``TokenCounter``."""

    name = "events-only"

    def count(self, event: sessionstore.Event) -> int | None:
        return 1


def test_a_counter_lacking_count_text_is_refused_when_the_store_opens(tmp_path: Path) -> None:
    """The pipeline and the importer measure texts with ``count_text``: a counter without it is a
    clear error at open, before the database file exists, not a failure at some later turn."""
    path = tmp_path / "store.db"

    try:
        sessionstore.open_store(path, migrate=True, token_counter=_NoTextCounter())  # type: ignore[arg-type]
    except sessionstore.ValidationError as e:
        refused = e
    else:
        raise AssertionError("a counter without count_text was accepted")

    assert refused.field == "token_counter"
    assert "count_text" in str(refused)
    assert not path.exists()


def test_the_store_s_counter_measures_every_text(tmp_path: Path) -> None:
    """``store.token_counter`` (declared on every SessionStore, None by default) is what the live
    session and the importer count texts with; without one they estimate 4 characters a token."""
    text = "three little words and two more"
    with sessionstore.open_store(":memory:", token_counter=_WordCounter()) as counted:
        session = sessionstore.Session.create(counted)
        assert session.count_text(text) == 6
        session.append([MessageAppended(role="user", content=text)])
        assert counted.read(session.id)[-1].token_count == 6
    with sessionstore.open_store(":memory:", token_counter=None) as uncounted:
        assert uncounted.token_counter is None
        assert sessionstore.Session.create(uncounted).count_text(text) == 8  # ceil(31 / 4)
    assert sessionstore.SessionStore.token_counter is None
