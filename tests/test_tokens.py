"""Token counting at append time: offline, calibrated, and counted once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tiktoken

import sessionstore
from sessionstore import DataCorruptionError, MessageAppended
from sessionstore.store import TiktokenCounter, _cl100k
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
    blocks: list[dict[str, Any]] = [
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


def _registry_cl100k() -> dict[str, object]:
    """What tiktoken's own registry (tiktoken_ext/openai_public.py) says cl100k_base is: the
    published hash of its BPE file, its pattern and special tokens, read from the source (calling
    it would download the file)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("tiktoken_ext.openai_public")
    assert spec is not None and spec.origin is not None
    module = ast.parse(Path(spec.origin).read_text())
    constants = {
        target.id: ast.literal_eval(node.value)
        for node in module.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name) and isinstance(node.value, ast.Constant)
    }
    function = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "cl100k_base")
    found: dict[str, object] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.keyword) and node.arg == "expected_hash":
            found["sha256"] = ast.literal_eval(node.value)
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "special_tokens":
            assert isinstance(node.value, ast.Dict)
            found["special_tokens"] = {
                constants[key.id]: ast.literal_eval(value)  # type: ignore[union-attr]
                for key, value in zip(node.value.keys, node.value.values, strict=True)
            }
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "pat_str":
                    found["pat_str"] = ast.literal_eval(value)
    return found


def test_the_shipped_bpe_file_is_the_one_tiktoken_publishes() -> None:
    """The file inside the package hashes to what tiktoken's registry records for cl100k_base,
    and the encoding built from it uses the registry's pattern and special tokens."""
    import hashlib
    import importlib.resources

    registry = _registry_cl100k()
    shipped = importlib.resources.files("sessionstore.store").joinpath("data/cl100k_base.tiktoken")

    assert hashlib.sha256(shipped.read_bytes()).hexdigest() == registry["sha256"]
    assert registry["sha256"] == _cl100k.CL100K_SHA256
    assert registry["special_tokens"] == _cl100k.CL100K_SPECIAL_TOKENS
    ours = TiktokenCounter()._encoding
    assert ours.encode("hello world") == [15339, 1917]
    assert ours.n_vocab == 100277
    # The pattern's spelling changed across tiktoken versions (possessive quantifiers, same
    # splits): the installed registry's pattern must cut every text as ours does.
    pattern = registry["pat_str"]
    assert isinstance(pattern, str)
    theirs = tiktoken.Encoding(
        name="registry",
        pat_str=pattern,
        mergeable_ranks=_cl100k.parse_bpe(
            shipped.read_bytes(), expected_sha256=_cl100k.CL100K_SHA256, source="shipped"
        ),
        special_tokens=registry["special_tokens"],
    )
    for text in [*_PRETOKENIZER_CASES, _corpus_text()[:200_000]]:
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text), text[:80]


#: Texts that exercise every branch of the pre-tokenizer: contractions, letter runs after a
#: symbol, digit groups, punctuation runs with newlines, trailing and inner whitespace, non-Latin.
_PRETOKENIZER_CASES = [
    "I'm sure you'll see they've we're it's Don'T",
    "x=1234567 +abc -def _ghi .jkl",
    "a!!!\n\n\r\nb ... ;;\n",
    "trailing   ",
    "inner   \t\n  gaps\n\n\n",
    "   leading",
    "日本語のテキスト、そして emoji 🎉🎉 mixed123abc",
    "def f(x):\n    return x**2  # comment\n",
]


def test_a_damaged_bpe_file_is_refused_before_any_count() -> None:
    """One changed byte (or a swapped file) fails the hash check: a DataCorruptionError naming the
    file, never silently different counts."""
    import importlib.resources

    shipped = importlib.resources.files("sessionstore.store").joinpath("data/cl100k_base.tiktoken")
    contents = shipped.read_bytes()
    damaged = contents[:100] + bytes([contents[100] ^ 1]) + contents[101:]

    with pytest.raises(DataCorruptionError, match=r"cl100k_base\.tiktoken: SHA-256 .* is not the published"):
        _cl100k.parse_bpe(damaged, expected_sha256=_cl100k.CL100K_SHA256, source="cl100k_base.tiktoken")
    ranks = _cl100k.parse_bpe(contents, expected_sha256=_cl100k.CL100K_SHA256, source="shipped")
    assert len(ranks) == 100256
    assert ranks[b"hello"] == 15339


def test_a_malformed_line_is_refused_with_its_number() -> None:
    import hashlib

    text = b"aGVsbG8= 0\nbm90IGJhc2U2NA 1\n"  # line 2: base64 without its padding
    with pytest.raises(DataCorruptionError, match="line 2"):
        _cl100k.parse_bpe(text, expected_sha256=hashlib.sha256(text).hexdigest(), source="x")


def test_the_shipped_encoding_keeps_no_python_ranks_and_pickles_by_name() -> None:
    """The encoding drops tiktoken's Python copy of the ranks (memory), still counts exactly as
    tiktoken's own cl100k encoding of the same ranks, and a pickled copy is rebuilt from the file."""
    import pickle

    shipped = TiktokenCounter()._encoding
    ranks = _cl100k.parse_bpe(
        (Path(_cl100k.__file__).parent / "data" / "cl100k_base.tiktoken").read_bytes(),
        expected_sha256=_cl100k.CL100K_SHA256,
        source="shipped",
    )
    reference = tiktoken.Encoding(
        name="reference",
        pat_str=_cl100k.CL100K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=_cl100k.CL100K_SPECIAL_TOKENS,
    )
    restored = pickle.loads(pickle.dumps(shipped))

    assert shipped._mergeable_ranks == {}
    assert restored is shipped
    for text in [*_PRETOKENIZER_CASES, _corpus_text()[:50_000]]:
        assert shipped.encode_ordinary(text) == reference.encode_ordinary(text)
