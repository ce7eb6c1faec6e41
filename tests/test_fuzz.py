"""Fuzzing the public entry points: whatever goes in, the outcome is success or a
``SessionStoreError`` (API), or a documented exit status with one ``sessionstore: ...`` line and
no traceback (CLI) — and a refused call writes nothing.

Deterministic in CI: ``.ci/run`` loads the ``ci`` Hypothesis profile (derandomized, no example
database). Every failure found here becomes an explicit ``@example`` or a test in
tests/test_bad_input.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import sessionstore
from sessionstore import ANY, SessionStore, SessionStoreError, import_claude_code
from sessionstore.cli import main

from .strategies import examples


# Fixtures (a store, a database file) are shared by a test's examples on purpose: every example
# works in a session of its own.
def _fuzz(count: int) -> settings:
    """``count`` examples (scaled by the profile), no deadline; fixtures shared by the examples."""
    return settings(
        max_examples=examples(count),
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


# --- hostile values ---------------------------------------------------------------------------

_text = st.one_of(
    st.text(max_size=12),
    st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3),  # lone surrogates
    st.sampled_from(["", "\x00", "caf\udce9", "\ud83d", "é" * 40]),
)
_numbers = st.one_of(
    st.integers(),
    st.integers(2**63 - 2, 2**64 + 2),
    st.integers(-(2**64), -(2**63) + 2),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf]),
    st.sampled_from([4299, 4300, -5000]).map(
        lambda digits: int(math.copysign(1, digits)) * 10 ** abs(digits)
    ),
)
_scalars = st.one_of(st.none(), st.booleans(), _numbers, _text)
_json_ish = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_text, inner, max_size=3)),
    max_leaves=12,
)
_deep = st.sampled_from([190, 199, 200, 201, 260, 5_000, 100_000]).map(_nested)
_not_json = st.sampled_from([b"bytes", frozenset({1}), (1, "tuple"), {1: "int key"}, object(), 1j])
_values = st.one_of(_json_ish, _deep, _not_json)

_event_types = st.one_of(
    st.sampled_from(
        ["message_appended", "usage_recorded", "context_configured", "session_started", "subagent_started"]
    ),
    _text,
)
_events = st.fixed_dictionaries(
    {"type": _event_types},
    optional={
        "role": st.one_of(st.sampled_from(["user", "assistant"]), _values),
        "content": st.one_of(
            _values, st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": _values}))
        ),
        "metadata": _values,
        "input_tokens": _values,
        "output_tokens": _values,
        "system": _values,
        "tools": _values,
        "child_session_id": _values,
        "event_id": st.one_of(st.uuids().map(str), _values),
    },
)
_batches = st.one_of(st.lists(st.one_of(_events, _values), max_size=3), _values)
_expected = st.one_of(st.just(ANY), _numbers, st.booleans(), st.none(), _text)


# --- the API ----------------------------------------------------------------------------------


@pytest.fixture
def fuzz_store(backend: Any) -> Any:
    opened = backend.open()
    yield opened
    opened.close()


def _fresh_session(store: SessionStore) -> str:
    return store.create_session(f"fuzz-{uuid.uuid4().hex[:12]}").id


@_fuzz(150)
@given(batch=_batches, expected=_expected)
@example(batch=None, expected=ANY)
@example(batch=[], expected=10**4300)
@example(batch=[{"type": "message_appended", "role": "user", "content": "\ud800"}], expected=ANY)
@example(
    batch=[{"type": "message_appended", "role": "user", "content": [{"type": "text", "v": math.nan}]}],
    expected=0,
)
@example(batch=[{"type": "message_appended", "role": "user", "content": _nested(300)}], expected=ANY)
@example(batch=[{"type": "session_started", "metadata": {"\udc00": 1}}], expected=True)
def test_append_succeeds_or_raises_a_session_store_error(
    fuzz_store: SessionStore, batch: Any, expected: Any
) -> None:
    """Success (and what was stored reads back), or a SessionStoreError with nothing written."""
    sid = _fresh_session(fuzz_store)

    try:
        result = fuzz_store.append(sid, batch, expected)
    except SessionStoreError:
        assert fuzz_store.last_seq(sid) == 0
        return
    stored = fuzz_store.read(sid)
    assert [r.seq for r in stored] == list(result.seqs)
    for recorded in stored:
        assert recorded.event.event_id is not None  # decodes
        assert json.loads(recorded.payload) == recorded.payload_dict()


@_fuzz(100)
@given(session_id=st.one_of(st.none(), _text), metadata=st.one_of(st.none(), _values))
@example(session_id="ok-1", metadata={"deep": _nested(300)})
@example(session_id="ok-2", metadata=[1, 2])
def test_create_session_succeeds_or_raises_a_session_store_error(
    fuzz_store: SessionStore, session_id: Any, metadata: Any
) -> None:
    """Success (the metadata reads back equal), or a SessionStoreError and no session."""
    before = {info.id for info in fuzz_store.list_sessions(limit=10_000)}

    try:
        info = fuzz_store.create_session(session_id, metadata=metadata)
    except SessionStoreError:
        assert {info.id for info in fuzz_store.list_sessions(limit=10_000)} == before
        return
    assert fuzz_store.get_session(info.id).metadata == (metadata or {})


@_fuzz(100)
@given(first=_values, second=_values)
@example(first=2**63, second=-1)
def test_reads_succeed_or_raise_a_session_store_error(
    fuzz_store: SessionStore, first: Any, second: Any
) -> None:
    """read / read_all / list_sessions / latest_snapshot with any numbers: the same on every backend."""
    sid = _fresh_session(fuzz_store)
    calls = [
        lambda: fuzz_store.read(sid, first, second),
        lambda: fuzz_store.read_all(first, second),
        lambda: fuzz_store.list_sessions(limit=first),
        lambda: fuzz_store.latest_snapshot(sid, "api_context", 1, "x", first),
    ]
    for call in calls:
        with contextlib.suppress(SessionStoreError):
            call()


# --- import -----------------------------------------------------------------------------------

_SESSION = "0f0e0d0c-0000-4000-8000-000000000001"


def _line(value: Any) -> bytes:
    """One transcript line: a (hostile) entry as JSON, or raw bytes."""
    if isinstance(value, bytes):
        return value
    for encode in (lambda v: json.dumps(v, ensure_ascii=False), repr):
        try:
            return encode(value).encode("utf-8", "surrogatepass")
        except (TypeError, ValueError, RecursionError):  # not JSON, too deep, too many digits
            continue
    return b"{not json"


_entries = st.fixed_dictionaries(
    {"type": st.one_of(st.sampled_from(["user", "assistant", "summary", "system"]), _text)},
    optional={
        "uuid": st.one_of(st.uuids().map(str), _values),
        "parentUuid": st.one_of(st.none(), st.uuids().map(str), _values),
        "sessionId": st.one_of(st.just(_SESSION), _values),
        "message": st.one_of(
            st.fixed_dictionaries(
                {"role": st.sampled_from(["user", "assistant"]), "content": st.one_of(_text, _values)}
            ),
            _values,
        ),
        "timestamp": st.one_of(st.just("2026-01-01T00:00:00Z"), _values),
    },
)
_lines = st.lists(st.one_of(_entries.map(_line), st.binary(max_size=30), _values.map(_line)), max_size=5)


@_fuzz(120)
@given(lines=_lines, skip=st.booleans())
@example(lines=[b'{"type":"user","n":' + b"9" * 5000 + b"}"], skip=True)
@example(lines=[b'{"type":"user","d":' + b"[" * 100_000 + b"]" * 100_000 + b"}"], skip=False)
@example(lines=[b'{"type":"user","v":NaN,"sessionId":"' + _SESSION.encode() + b'"}'], skip=True)
def test_import_succeeds_or_raises_a_session_store_error(
    fuzz_store: SessionStore, lines: list[bytes], skip: bool
) -> None:
    """Any bytes in a transcript: an import report, or a SessionStoreError with nothing written."""
    before = {info.id for info in fuzz_store.list_sessions(limit=10_000)}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{_SESSION}.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        try:
            report = import_claude_code(fuzz_store, [path], skip_bad_lines=skip)
        except SessionStoreError:
            assert {info.id for info in fuzz_store.list_sessions(limit=10_000)} == before
            return
    for session in report.sessions:
        for recorded in fuzz_store.read(session.session_id):
            assert json.loads(recorded.payload) == recorded.payload_dict()


# --- the command line -------------------------------------------------------------------------

_number_args = st.one_of(st.integers(-5, 5), st.sampled_from([2**63 - 1, 2**63, -(2**63) - 1, 10**30])).map(
    str
)
_arg_text = st.one_of(_text, _number_args, st.just("s-1")).filter(lambda s: "\x00" not in s)


def _commands(db: str, bad_db: list[str], bad_out: list[str]) -> st.SearchStrategy[list[str]]:
    """argv lists: real commands with hostile arguments; read commands also on bad --db values,
    export on output paths that cannot be written (all inside the test's folder)."""
    sid = st.one_of(st.just("s-1"), _arg_text)
    read_db = st.sampled_from([db, *bad_db])
    return st.one_of(
        st.tuples(st.just("sessions"), read_db, st.just("--limit"), _number_args).map(
            lambda t: [t[0], "--db", t[1], *t[2:]]
        ),
        st.tuples(
            st.sampled_from(["events", "show", "context", "audit", "checkpoints", "verify"]), read_db, sid
        ).map(lambda t: [t[0], "--db", t[1], t[2]]),
        st.tuples(sid, _number_args, _number_args).map(lambda t: ["diff", "--db", db, *t]),
        st.tuples(sid, _number_args).map(lambda t: ["served", "--db", db, t[0], "--turn", t[1]]),
        st.tuples(sid, _number_args).map(lambda t: ["snip", "--db", db, t[0], "--rounds", t[1]]),
        st.tuples(sid, _arg_text, st.one_of(_number_args, st.just("any"), _arg_text)).map(
            lambda t: ["append", "--db", db, t[0], "--text", t[1], "--expected", t[2]]
        ),
        st.tuples(_arg_text, _arg_text).map(lambda t: ["new", "--db", db, "--id", t[0], "--metadata", t[1]]),
        st.tuples(sid, st.sampled_from(bad_out)).map(lambda t: ["export", "--db", db, t[0], "-o", t[1]]),
        st.tuples(st.sampled_from(["upgrade", "downgrade"]), _arg_text).map(
            lambda t: ["db", t[0], "--db", db, t[1]]
        ),
    )


_stdin_lines = st.lists(st.one_of(_events.map(_line), st.binary(max_size=20), _values.map(_line)), max_size=3)


@pytest.fixture
def cli_db(tmp_path: Path) -> tuple[str, list[str], list[str]]:
    """A migrated database holding session ``s-1``, --db values and export paths that must fail."""
    db = str(tmp_path / "fuzz.db")
    with sessionstore.open_store(db, migrate=True) as store:
        store.create_session("s-1", events=[sessionstore.MessageAppended(role="user", content="hello")])
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    bad = ["mysql://app@db/x", "garbage://", f"{a_file}/x.db", str(tmp_path / "missing" / "x.db")]
    bad_out = [str(a_file), f"{a_file}/x.jsonl", str(tmp_path / "missing" / "x.jsonl"), str(tmp_path)]
    return db, bad, bad_out


def _run_cli(argv: list[str], stdin: bytes) -> tuple[int, str]:
    """main() in-process with ``stdin`` as the process would see it; (status, stderr)."""
    err = io.StringIO()
    real_stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    try:
        with contextlib.redirect_stderr(err):
            try:
                status = main(argv, out=io.StringIO())
            except SystemExit as e:  # argparse: a malformed command line
                status = e.code if isinstance(e.code, int) else 1
    finally:
        sys.stdin = real_stdin
    return status, err.getvalue()


@_fuzz(150)
@given(data=st.data(), stdin=_stdin_lines)
def test_the_cli_exits_with_a_documented_status_and_one_line(
    cli_db: tuple[str, list[str], list[str]], data: st.DataObject, stdin: list[bytes]
) -> None:
    """Exit 0, 1, 2 or 3; a failure prints one `sessionstore: ...` line (argparse's usage message
    for 2), never a traceback."""
    db, bad_db, bad_out = cli_db
    argv = data.draw(_commands(db, bad_db, bad_out), label="argv")
    if data.draw(st.booleans(), label="append from stdin"):
        argv = ["append", "--db", db, "s-1"]

    status, err = _run_cli(argv, b"\n".join(stdin) + b"\n")

    assert status in (0, 1, 2, 3), (status, err)
    assert "Traceback" not in err
    if status == 1:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("sessionstore: "), err
    if status == 2:
        assert "error:" in err, err
