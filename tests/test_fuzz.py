"""Fuzzing the public entry points: whatever goes in, the outcome is success or a
``SessionStoreError`` (API), or a documented exit status with one ``sessionstore: ...`` line and
no traceback (CLI) — and a refused call writes nothing. The same calls give the same outcome
on every backend (SQLite in a file, in memory, PostgreSQL): results, error types and fields.

Deterministic in CI: ``.ci/run`` loads the ``ci`` Hypothesis profile (derandomized, no example
database). Every failure found here becomes an explicit ``@example`` or a test in
tests/test_bad_input.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import sessionstore
from sessionstore import ANY, Event, MessageAppended, SessionStore, SessionStoreError, import_claude_code
from sessionstore.cli import main

from .conftest import PG_URL, REQUIRE_PG, _make_backend
from .strategies import examples, message_events


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


# --- the same on every backend ------------------------------------------------------------------
#
# One generated sequence of calls runs on every backend, each on its own store; the outcomes must
# be equal: the same results (events compared by their stored columns, sessions by their rows),
# or the same error type with the same attributes and message.


@pytest.fixture
def every_store(tmp_path: Path) -> Iterator[dict[str, SessionStore]]:
    """A migrated store on SQLite in a file, SQLite in memory and (when configured) PostgreSQL."""
    names = ["sqlite-file", "sqlite-memory"]
    if PG_URL or REQUIRE_PG:  # REQUIRE_PG without a URL fails here, as every postgres test does
        names.append("postgres")
    with contextlib.ExitStack() as stack:
        stores: dict[str, SessionStore] = {}
        for name in names:
            backend = stack.enter_context(contextlib.contextmanager(_make_backend)(name, tmp_path))
            stores[name] = backend.open()
            stack.callback(stores[name].close)
        yield stores


def _mostly(sane: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``sane`` seven times in eight (and what examples shrink to): calls that succeed reach the
    database, where backends can differ. (``st.one_of`` would flatten ``hostile``'s many branches.)"""
    return st.integers(0, 7).flatmap(lambda pick: hostile if pick == 7 else sane)


#: This example's sessions, by name ("a" is created first), or any value as a session id.
_refs = _mostly(
    st.sampled_from(["a", "a", "b"]).map(lambda name: ("session", name)),
    st.one_of(_text, _values).map(lambda value: ("raw", value)),
)
#: Events that validate: messages (models, built once per example: the same event_id on every
#: backend) and dict events, whose default event_id and message_uuid each backend makes anew.
_good_events = st.one_of(
    message_events(),
    st.fixed_dictionaries(
        {
            "type": st.just("message_appended"),
            "role": st.sampled_from(["user", "assistant"]),
            "content": st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("usage_recorded"),
            "input_tokens": st.integers(0, 10**6),
            "output_tokens": st.integers(0, 10**6),
        }
    ),
)
#: An event of this example, with its event_id as drawn or one of three ids of this example
#: (so a batch can be a retry, or reuse an id with other content, or in another session).
_example_events = st.tuples(_mostly(_good_events, _events), st.one_of(st.none(), st.integers(0, 2)))
_example_batches = _mostly(
    st.lists(_example_events, min_size=1, max_size=3),
    st.one_of(
        st.lists(st.one_of(_example_events, _values.map(lambda value: ("raw", value))), max_size=3),
        _values.map(lambda value: ("raw", value)),
    ),
)
_expected_seqs = _mostly(st.one_of(st.just(ANY), st.integers(0, 4)), _expected)
_from_seqs = _mostly(st.integers(-1, 5), _values)
_to_seqs = _mostly(st.one_of(st.none(), st.integers(-1, 5)), _values)
_limits = _mostly(st.integers(0, 5), _values)
#: A position: where the example started, after its k-th event, or any value but a position of
#: an earlier example (PostgreSQL's sequence may leave gaps, so those are not the same number).
_positions = _mostly(
    st.one_of(st.just(("start",)), st.integers(0, 4).map(lambda k: ("event", k))),
    st.one_of(_numbers, _values)
    .filter(lambda v: not (type(v) is int and 0 < v < 2**62))
    .map(lambda value: ("raw", value)),
)
_operations = st.one_of(
    st.tuples(
        st.just("create"),
        _refs,
        _mostly(st.none() | st.dictionaries(st.text(max_size=3), st.integers()), _values),
    ),
    st.tuples(st.just("append"), _refs, _example_batches, _expected_seqs),
    st.tuples(st.just("append"), _refs, _example_batches, _expected_seqs),
    st.tuples(st.just("append"), _refs, _example_batches, _expected_seqs),
    st.tuples(st.just("read"), _refs, _from_seqs, _to_seqs),
    st.tuples(st.just("read_all"), _positions, _limits),
    st.tuples(st.just("list_sessions"), _limits),
    st.tuples(st.just("last_seq"), _refs),
    st.tuples(st.just("latest_snapshot"), _refs, _to_seqs),
)

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class _Example:
    """The calls of one example on one store, and what they gave."""

    def __init__(self, store: SessionStore, prefix: str) -> None:
        self.store = store
        self.prefix = prefix
        self.start = store.max_position()
        self.written: list[int] = []  # positions of the events this example wrote, in order

    def session(self, ref: tuple[str, Any]) -> Any:
        return self.prefix + ref[1] if ref[0] == "session" else ref[1]

    def batch(self, recipe: Any) -> Any:
        """The events to append: a list of (event, k) made with this example's k-th event id,
        ("raw", value) items kept as they are; or ("raw", value) as the whole batch."""
        if isinstance(recipe, tuple):
            return recipe[1]
        events = []
        for first, second in recipe:
            if isinstance(first, str):  # "raw"
                events.append(second)
            elif second is None:
                events.append(first)
            elif isinstance(first, Event):
                events.append(first.model_copy(update={"event_id": self.event_id(second)}))
            else:
                events.append({**first, "event_id": self.event_id(second)})
        return events

    def event_id(self, k: int) -> str:
        return str(uuid.uuid5(_NAMESPACE, f"{self.prefix}{k}"))

    def position(self, ref: tuple[Any, ...]) -> Any:
        if ref[0] == "start":
            return self.start
        if ref[0] == "event":
            return self.written[ref[1]] if ref[1] < len(self.written) else self.start
        return ref[1]

    def call(self, operation: tuple[Any, ...]) -> Any:
        """The operation's result in a form every backend must match, or its error's."""
        try:
            return self._call(*operation)
        except SessionStoreError as e:
            return ("error", type(e).__name__, vars(e), str(e))

    def _call(self, name: str, *args: Any) -> Any:
        store = self.store
        if name == "create":
            return _session_row(store.create_session(self.session(args[0]), metadata=args[1]))
        if name == "append":
            result = store.append(self.session(args[0]), self.batch(args[1]), args[2])
            assert list(result.positions) == sorted(set(result.positions))
            if not result.deduplicated:
                self.written.extend(result.positions)
            return ("appended", result.session_id, result.seqs, result.last_seq, result.deduplicated)
        if name == "read":
            return [_event_row(r) for r in store.read(self.session(args[0]), args[1], args[2])]
        if name == "read_all":
            return [_event_row(r) for r in store.read_all(self.position(args[0]), args[1])]
        if name == "list_sessions":
            listed = store.list_sessions(limit=args[0], after=self.prefix)
            return [info.id for info in listed if info.id.startswith(self.prefix)]
        if name == "last_seq":
            return store.last_seq(self.session(args[0]))
        assert name == "latest_snapshot"
        return store.latest_snapshot(self.session(args[0]), "api_context", 1, "x", args[1])


_NAMESPACE = uuid.UUID("6f1c5b1e-2a4d-4c3b-9e8f-0a1b2c3d4e5f")


def _session_row(info: Any) -> tuple[Any, ...]:
    """A session's row without its creation time."""
    return (
        info.id,
        info.parent_session_id,
        info.fork_seq,
        info.metadata,
        info.tenant,
        info.user,
        info.external_id,
    )


def _event_row(event: Any) -> tuple[Any, ...]:
    """An event's stored columns but its position (a sequence may skip numbers), time and hashes
    (which cover the time)."""
    return (
        event.session_id,
        event.seq,
        event.event_id,
        event.type,
        event.schema_version,
        event.payload,
        event.token_count,
    )


def _uuids_renamed(outcomes: Any) -> Any:
    """``outcomes`` with every uuid renamed by its first appearance: a default ``event_id`` or
    ``message_uuid`` is new on every backend, the ids an example chose are the same."""
    names: dict[str, str] = {}

    def rename(value: Any) -> Any:
        if isinstance(value, str):
            return _UUID.sub(lambda m: names.setdefault(m.group(), f"<uuid {len(names) + 1}>"), value)
        if isinstance(value, (list, tuple)):
            return type(value)(rename(v) for v in value)
        if isinstance(value, dict):
            return {rename(k): rename(v) for k, v in value.items()}
        return value

    return rename(outcomes)


_HI = {"type": "message_appended", "role": "user", "content": "hi"}
_AGAIN = MessageAppended(role="user", content="again")  # one event_id and message_uuid: a retry is one


@_fuzz(60)
@given(first=st.lists(_good_events, min_size=1, max_size=4), operations=st.lists(_operations, max_size=8))
@example(first=[_HI], operations=[("read", ("session", "a"), 2**63, -1), ("read_all", ("raw", 2**63), 1)])
@example(
    first=[_HI],
    operations=[
        ("list_sessions", 2**63),
        ("list_sessions", 1),
        ("read_all", ("raw", -1), -1),
        ("latest_snapshot", ("session", "a"), 2**64),
    ],
)
@example(
    first=[_HI, _HI],
    operations=[
        ("append", ("session", "a"), [(_AGAIN, None)], 2),
        ("append", ("session", "a"), [(_AGAIN, None)], 0),  # a retry: the original result
        ("append", ("session", "b"), [(_AGAIN, None)], ANY),  # its id in another session
        ("append", ("session", "a"), [(_HI, 0)], 3),  # with this example's id 0
        ("append", ("session", "a"), [({**_HI, "content": "yo"}, 0)], 4),  # that id, other content
        ("append", ("session", "a"), [(_HI, 1), (_HI, 2)], 1),  # a stale head
        ("read", ("session", "a"), 2, 3),
        ("read_all", ("event", 0), 10),
        ("list_sessions", 3),
        ("last_seq", ("session", "b")),
    ],
)
def test_the_same_calls_give_the_same_outcome_on_every_backend(
    every_store: dict[str, SessionStore], first: list[Any], operations: list[tuple[Any, ...]]
) -> None:
    """Sessions "a" and "b" created and ``first`` appended to "a", then create / append / read /
    read_all / list_sessions / last_seq / latest_snapshot with any arguments: the same results,
    or the same error with the same attributes and message, on SQLite in a file, in memory and
    PostgreSQL."""
    prefix = f"fuzz-{uuid.uuid4().hex[:12]}-"
    calls = [
        ("create", ("session", "a"), None),
        ("create", ("session", "b"), {"k": 1}),
        ("append", ("session", "a"), [(event, None) for event in first], 0),
        *operations,
    ]

    outcomes = {}
    for name, store in every_store.items():
        example = _Example(store, prefix)
        outcomes[name] = _uuids_renamed([example.call(operation) for operation in calls])

    reference = outcomes["sqlite-file"]
    assert outcomes == dict.fromkeys(outcomes, reference)


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
