"""Bad input: a typed ``SessionStoreError`` from the API, one ``sessionstore: ...`` line and a
documented exit status from the CLI, and nothing written."""

from __future__ import annotations

import asyncio
import io
import json
import math
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

import sessionstore
from sessionstore import (
    ANY,
    MessageAppended,
    SessionStore,
    ValidationError,
    import_claude_code,
)
from sessionstore.audit import read_heads, verify_all
from sessionstore.claude_code import ClaudeCodeFollower, follow_claude_code, write_claude_code_file
from sessionstore.cli import main
from sessionstore.store import SessionWrite, SnapshotRecord
from sessionstore.store._migrate import known_revisions

from .conftest import STORE_APIS, Backend
from .test_audit import _scripted

pytestmark = pytest.mark.store_contract


SCRIPT = str(Path(sys.executable).parent / "sessionstore")


def _cli(
    *argv: str, stdin: str | None = None, monkeypatch: pytest.MonkeyPatch | None = None
) -> tuple[int, str]:
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def _one_error_line(err: str) -> str:
    """The single stderr line of a failed command (no traceback, nothing else)."""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("sessionstore: "), err
    assert "Traceback" not in err
    return lines[0]


def _console(*argv: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, *argv], capture_output=True, text=True, timeout=120, **kwargs)  # type: ignore[call-overload,no-any-return]


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A migrated SQLite file holding session ``s-1`` with two messages."""
    path = str(tmp_path / "bad.db")
    with sessionstore.open_store(path, migrate=True) as store:
        store.create_session(
            "s-1",
            events=[
                MessageAppended(role="user", content="hello"),
                MessageAppended(role="assistant", content="hi"),
            ],
        )
    return path


# --- exit statuses ----------------------------------------------------------------------------


def test_a_malformed_expected_seq_is_a_usage_error(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`--expected abc` is a malformed command line: argparse's usage error, exit 2."""
    with pytest.raises(SystemExit) as exited:
        main(["append", "--db", db, "s-1", "--text", "x", "--expected", "abc"])

    assert exited.value.code == 2
    assert "argument --expected: must be an integer or 'any', not 'abc'" in capsys.readouterr().err


def test_invalid_json_on_stdin_is_one_error_line(
    db: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad stdin line names the line; exit 1; nothing of the batch is written."""
    lines = '{"type": "message_appended", "role": "user", "content": "ok"}\n{not json\n'

    code, _ = _cli("append", "--db", db, "s-1", stdin=lines, monkeypatch=monkeypatch)

    assert code == 1
    assert _one_error_line(capsys.readouterr().err).startswith("sessionstore: stdin line 2: invalid JSON")
    with sessionstore.open_store(db) as store:
        assert store.last_seq("s-1") == 2


def test_append_with_stdin_closed_is_one_error_line(db: str) -> None:
    """`append SID <&-` (a job started without standard input): exit 1, one line saying where
    the events come from (it was a TypeError's traceback); nothing written."""
    done = subprocess.run(
        [SCRIPT, "append", "--db", db, "s-1"],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.close(0),
    )

    assert done.returncode == 1
    assert _one_error_line(done.stderr) == (
        "sessionstore: no standard input to read the events from: pipe JSON lines in, or pass --text"
    )
    with sessionstore.open_store(db) as store:
        assert store.last_seq("s-1") == 2


def test_metadata_nested_too_deeply_is_a_usage_error(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`new --metadata '[[[...'`: argparse's usage error like any other malformed JSON, exit 2
    (it was RecursionError's traceback)."""
    with pytest.raises(SystemExit) as exited:
        main(["new", "--db", db, "--metadata", "[" * 100_000 + "]" * 100_000])

    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --metadata: JSON nested too deeply" in err
    assert "Traceback" not in err


def test_metadata_with_a_key_twice_is_a_usage_error(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`new --metadata '{"a": 1, "a": 2}'`: refused naming the key, not stored as {"a": 2}."""
    with pytest.raises(SystemExit) as exited:
        main(["new", "--db", db, "--id", "s-2", "--metadata", '{"who": "ada", "who": "bob"}'])

    assert exited.value.code == 2
    assert "--metadata: the key 'who' occurs twice in one JSON object" in capsys.readouterr().err
    with sessionstore.open_store(db) as store:
        assert [info.id for info in store.list_sessions()] == ["s-1"]


def test_a_tampered_log_exits_with_the_integrity_status(tmp_path: Path) -> None:
    """verify and served exit 3 on tampering: distinct from an error (1) and a usage error (2)."""
    db = str(tmp_path / "t.db")
    with sessionstore.open_store(db, migrate=True) as store:
        session = _scripted(store)
        with store.engine.begin() as conn:  # type: ignore[attr-defined]
            conn.exec_driver_sql("DROP TRIGGER events_append_only_update")
            conn.exec_driver_sql(
                "UPDATE events SET payload = replace(payload, 'turn 0', 'turn X') WHERE seq = 2"
            )

    assert _cli("verify", "--db", db, session.id)[0] == 3
    assert _cli("served", "--db", db, session.id, "--turn", "1")[0] == 3


def test_export_to_a_missing_folder_is_one_error_line(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`export -o /missing/dir/x`: exit 1, the path and the reason, nothing written."""
    target = tmp_path / "missing" / "dir" / "x.jsonl"

    code, _ = _cli("export", "--db", db, "s-1", "-o", str(target))

    assert code == 1
    assert _one_error_line(capsys.readouterr().err) == f"sessionstore: {target}: No such file or directory"
    assert not (tmp_path / "missing").exists()


def test_export_that_fills_the_disk_names_the_file_and_leaves_nothing(db: str, tmp_path: Path) -> None:
    """A write that fails partway (the file size limit, as a full disk would): one line naming
    the target, exit 1, no partial file and no temp (it said `[Errno 27] File too large`, naming
    no file)."""
    with sessionstore.open_store(db) as store:
        store.append("s-1", [MessageAppended(role="user", content="x" * 200) for _ in range(500)], "any")
    folder = tmp_path / "out"
    folder.mkdir()
    target = folder / "s-1.jsonl"  # about 150 kB: past the limit

    def limit() -> None:  # above SQLite's 32 kB shared-memory file, below the export
        resource.setrlimit(resource.RLIMIT_FSIZE, (64_000, 64_000))

    for where in (["-o", str(target)], ["--dir", str(folder)]):
        done = subprocess.run(
            [SCRIPT, "export", "--db", db, "s-1", *where],
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=limit,
        )

        assert done.returncode == 1
        assert done.stderr == f"sessionstore: {target}: File too large\n"
        assert list(folder.iterdir()) == []


def test_export_over_an_existing_file_needs_force(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An existing output file is kept unless --force: one line, exit 1."""
    target = tmp_path / "x.jsonl"
    target.write_text("keep me")

    code, _ = _cli("export", "--db", db, "s-1", "-o", str(target))

    assert code == 1
    assert "exists (use --force to overwrite)" in _one_error_line(capsys.readouterr().err)
    assert target.read_text() == "keep me"


def test_export_onto_a_folder_does_not_offer_force(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`export -o DIR`: refused as no regular file, with or without --force (it said `exists (use
    --force to overwrite)`, and --force was then refused too)."""
    folder = tmp_path / "project"
    folder.mkdir()

    for force in ([], ["--force"]):
        assert _cli("export", "--db", db, "s-1", "-o", str(folder), *force)[0] == 1
        line = _one_error_line(capsys.readouterr().err)
        assert "exists and is not a regular file" in line and "--force" not in line
    assert list(folder.iterdir()) == []


def test_a_closed_pipe_ends_the_command_quietly(db: str) -> None:
    """`sessionstore events SID | head`: when the reader goes away, no traceback, no message."""
    with sessionstore.open_store(db) as store:
        store.append("s-1", [MessageAppended(role="user", content="x" * 200) for _ in range(2000)], "any")
    done = _into_a_closed_pipe([SCRIPT, "events", "--db", db, "s-1"])

    assert done.stderr == ""
    assert done.returncode == 141


def _into_a_closed_pipe(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` run with its standard output a pipe whose reader has already gone (the first
    write fails with EPIPE), as `| head` leaves it."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(argv, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)


def test_completion_into_a_full_disk_or_a_closed_pipe_is_like_every_command() -> None:
    """`completion bash > /dev/full`: one line, exit 1; into a closed pipe: 141, quietly (both
    were tracebacks: the script was written outside the command's error handling)."""
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [SCRIPT, "completion", "bash"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60
        )
    assert done.returncode == 1
    assert _one_error_line(done.stderr).endswith("No space left on device")

    done = _into_a_closed_pipe([SCRIPT, "completion", "bash"])
    assert (done.returncode, done.stderr) == (141, "")


@pytest.mark.parametrize("view", [["audit"], ["context", "--breakdown"]], ids=["audit", "breakdown"])
def test_a_closed_pipe_ends_a_table_view_quietly_too(db: str, view: list[str]) -> None:
    """`sessionstore audit SID | head`: the tables rich draws stop like every other output, with
    the broken pipe's status (rich's own handler exited 1, the status of an error, saying nothing)."""
    done = _into_a_closed_pipe([SCRIPT, view[0], "--db", db, "s-1", *view[1:]])

    assert done.stderr == ""
    assert done.returncode == 141


def test_ctrl_c_during_an_import_prints_one_line(tmp_path: Path) -> None:
    """SIGINT in the middle of an import: one line on stderr, exit 130, no traceback."""
    transcript = tmp_path / "big.jsonl"
    with transcript.open("w") as f:
        parent = None
        for n in range(40_000):
            uuid = f"00000000-0000-4000-8000-{n:012d}"
            entry = {
                "type": "user",
                "uuid": uuid,
                "parentUuid": parent,
                "sessionId": "big-session",
                "message": {"role": "user", "content": f"line {n} " + "word " * 20},
            }
            f.write(json.dumps(entry) + "\n")
            parent = uuid
    db = str(tmp_path / "i.db")
    sessionstore.open_store(db, migrate=True).close()
    with subprocess.Popen(
        [SCRIPT, "import", "--db", db, "--progress", str(transcript)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stderr is not None
        assert proc.stderr.read(len(b"\rimporting:")) == b"\rimporting:"  # the import is under way
        proc.send_signal(signal.SIGINT)
        rest = proc.stderr.read().decode()
        proc.wait(timeout=120)

    assert proc.returncode == 130
    assert "Traceback" not in rest
    assert rest.splitlines()[-1] == "sessionstore: interrupted"


# --- values that are not JSON that reads back equal ---------------------------------------------


def _nested(depth: int) -> object:
    value: object = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def _text_block(**extra: object) -> list[dict[str, object]]:
    return [{"type": "text", "text": "x", **extra}]


NOT_STORABLE = {
    "lone surrogate in text": "\ud800",
    "lone surrogate in a block": _text_block(text="ok \udfff"),
    "lone surrogate in a key": _text_block(**{"\ud800": 1}),
    "NaN": _text_block(value=math.nan),
    "infinity": _text_block(value=-math.inf),
    "integer over 4,300 digits": _text_block(value=10**4400),
    "nested 300 deep (past the serializer's limit)": _text_block(value=_nested(300)),
    "nested 100,000 deep": _text_block(value=_nested(100_000)),
}


@pytest.mark.parametrize("content", NOT_STORABLE.values(), ids=NOT_STORABLE.keys())
def test_content_that_would_not_read_back_is_refused(
    store: SessionStore, content: str | list[dict[str, object]]
) -> None:
    """A typed error naming the event and field; the session is unchanged (NaN used to be stored
    as null, breaking byte-identical export; the others raised from the serializer)."""
    store.create_session("s")
    good = MessageAppended(role="user", content="fine")

    as_model = [good, MessageAppended(role="user", content=content)]
    as_dict = [{"type": "message_appended", "role": "user", "content": content}]
    for batch in (as_model, as_dict):
        with pytest.raises(ValidationError) as refused:
            store.append("s", batch, ANY)
        assert refused.value.event_type == "message_appended"
        assert str(refused.value.field).startswith("content")

    assert store.last_seq("s") == 0


#: Input pydantic would coerce or the API would refuse later: (event, the field named, what is said).
COERCED_OR_REFUSED_LATER = {
    "content given as bytes": (
        {"type": "message_appended", "role": "user", "content": b"hi"},
        "content",
        "bytes is not text",
    ),
    "bytes inside a content block": (
        {"type": "message_appended", "role": "user", "content": [{"type": "text", "text": b"hi"}]},
        "content.0.text",
        "bytes, which JSON has not",
    ),
    "a content block type the API does not take": (
        {"type": "message_appended", "role": "user", "content": [{"type": "txet", "text": "hi"}]},
        "content",
        "content block 0 has type 'txet', which the Messages API does not take",
    ),
    "a usage count of True": (
        {"type": "usage_recorded", "input_tokens": True, "output_tokens": 1},
        "input_tokens",
        "an integer count, not the bool True",
    ),
    "a usage count of 2**70": (
        {"type": "usage_recorded", "input_tokens": 1, "output_tokens": 1, "cache_read_input_tokens": 2**70},
        "cache_read_input_tokens",
        "at most 9223372036854775807",
    ),
    "a message_uuid of a million characters": (
        {"type": "message_appended", "role": "user", "content": "x", "message_uuid": "u" * 1_000_000},
        "message_uuid",
        "an id of at most 256 characters, got 1000000",
    ),
    "an api_message_id of a million characters": (
        {"type": "usage_recorded", "input_tokens": 1, "output_tokens": 1, "api_message_id": "m" * 1_000_000},
        "api_message_id",
        "an id of at most 256 characters",
    ),
}


@pytest.mark.parametrize(
    ("event", "field", "says"), COERCED_OR_REFUSED_LATER.values(), ids=COERCED_OR_REFUSED_LATER.keys()
)
def test_input_that_would_be_coerced_or_refused_by_the_api_is_refused_at_append(
    store: SessionStore, event: dict[str, object], field: str, says: str
) -> None:
    """A typed error naming the event, the field and what is wrong, without repeating a huge value;
    nothing written (bytes used to be decoded, True stored as 1, an unknown block type sent on)."""
    store.create_session("s")

    with pytest.raises(ValidationError) as refused:
        store.append("s", [{"type": "message_appended", "role": "user", "content": "fine"}, event], ANY)

    assert refused.value.index == 1
    assert refused.value.event_type == event["type"]
    assert refused.value.field == field
    assert says in str(refused.value)
    assert len(str(refused.value)) < 1000
    assert store.last_seq("s") == 0


def test_every_content_block_type_of_the_installed_sdk_is_taken() -> None:
    """The known block types are the Messages API's: each type a block of the installed SDK's
    unions (stable and beta, request and response) may have is appended without complaint."""
    import types
    import typing

    import anthropic.types
    import anthropic.types.beta
    import pydantic

    from sessionstore.events._base import CONTENT_BLOCK_TYPES

    def literal_types(union: object) -> set[str]:
        while typing.get_origin(union) is typing.Annotated:
            union = typing.get_args(union)[0]
        found: set[str] = set()
        for member in typing.get_args(union):
            if typing.get_origin(member) in (typing.Annotated, typing.Union, types.UnionType):
                found |= literal_types(member)
                continue
            if isinstance(member, type) and issubclass(member, pydantic.BaseModel):
                annotation = member.model_fields["type"].annotation
            else:
                annotation = typing.get_type_hints(member)["type"]
            while typing.get_origin(annotation) is not typing.Literal:
                annotation = typing.get_args(annotation)[0]
            found |= set(typing.get_args(annotation))
        return found

    sdk = set().union(
        *(
            literal_types(union)
            for union in (
                anthropic.types.ContentBlock,
                anthropic.types.ContentBlockParam,
                anthropic.types.beta.BetaContentBlock,
                anthropic.types.beta.BetaContentBlockParam,
            )
        )
    )

    assert {"text", "tool_use", "tool_result", "compaction"} <= sdk
    assert sdk - CONTENT_BLOCK_TYPES == set()
    for kind in sorted(CONTENT_BLOCK_TYPES):
        MessageAppended(role="assistant", content=[{"type": kind}])


def test_a_stored_event_from_before_the_checks_still_reads_back_as_stored() -> None:
    """The append checks do not make the log unreadable: an event stored before them (a block type
    since refused, a long id, a count past 64 bits) decodes to exactly what was stored."""
    from sessionstore.events._base import decode_event

    message = decode_event(
        "message_appended",
        1,
        json.dumps({"role": "user", "content": [{"type": "txet"}], "message_uuid": "u" * 300}),
        "00000000-0000-4000-8000-000000000001",
    )
    usage = decode_event(
        "usage_recorded",
        1,
        json.dumps({"input_tokens": 2**70, "output_tokens": 1}),
        "00000000-0000-4000-8000-000000000002",
    )

    assert message.content == [{"type": "txet"}]  # type: ignore[attr-defined]
    assert len(message.message_uuid) == 300  # type: ignore[attr-defined]
    assert usage.input_tokens == 2**70  # type: ignore[attr-defined]


BAD_METADATA = {
    "lone surrogate": {"who": "\ud800"},
    "lone surrogate key": {"\udc00": 1},
    "NaN": {"score": math.nan},
    "nested 100,000 deep": {"deep": _nested(100_000)},
    "not JSON": {"when": object()},
    "a list": [1, 2],
    "a string": "ada",
}


@pytest.mark.parametrize("metadata", BAD_METADATA.values(), ids=BAD_METADATA.keys())
def test_session_metadata_must_be_a_json_object(store: SessionStore, metadata: object) -> None:
    """Metadata is a JSON object that reads back equal; otherwise no session is created."""
    with pytest.raises(ValidationError) as refused:
        store.create_session("m", metadata=metadata)  # type: ignore[arg-type]

    assert refused.value.field == "metadata"
    assert store.list_sessions() == []


@pytest.mark.parametrize(
    "expected", [True, 2**63, 10**4300, -1, 1.0, None], ids=["True", "2**63", "10**4300", "-1", "1.0", "None"]
)
def test_expected_seq_must_be_a_64_bit_int_not_a_bool(store: SessionStore, expected: object) -> None:
    """`True == 1` in Python: a bool must not pass as a seq (it was compared as one), and a seq
    past 64 bits is refused (one past 4,300 digits raised ValueError formatting the conflict)."""
    store.create_session("s", events=[MessageAppended(role="user", content="one")])

    with pytest.raises(ValidationError) as refused:
        store.append("s", [MessageAppended(role="user", content="two")], expected)  # type: ignore[arg-type]

    assert refused.value.field == "expected_seq"
    assert store.last_seq("s") == 1


OUT_OF_RANGE: dict[str, Callable[[SessionStore], object]] = {
    "read from_seq 2**63": lambda s: s.read("s", 2**63),
    "read from_seq -2**63-1": lambda s: s.read("s", -(2**63) - 1),
    "read to_seq 2**63": lambda s: s.read("s", 1, 2**63),
    "read_all after_position 2**63": lambda s: s.read_all(2**63),
    "read_all limit 2**63": lambda s: s.read_all(0, 2**63),
    "read_all limit -1": lambda s: s.read_all(0, -1),
    "read_all limit True": lambda s: s.read_all(0, True),
    "list_sessions limit 2**63": lambda s: s.list_sessions(limit=2**63),
    "list_sessions limit -1": lambda s: s.list_sessions(limit=-1),
    "latest_snapshot max_seq 2**63": lambda s: s.latest_snapshot("s", "api_context", 1, "x", 2**63),
    "fork_seq 2**63": lambda s: s.create_session("f", parent_session_id="s", fork_seq=2**63),
}


@pytest.mark.parametrize("call", OUT_OF_RANGE.values(), ids=OUT_OF_RANGE.keys())
def test_seqs_positions_and_limits_outside_64_bits_are_refused(
    store: SessionStore, call: Callable[[SessionStore], object]
) -> None:
    """The same ValidationError on every backend (SQLite raised OverflowError; a negative limit
    meant "no limit" on SQLite and a database error on PostgreSQL)."""
    store.create_session("s", events=[MessageAppended(role="user", content="one")])

    with pytest.raises(ValidationError):
        call(store)

    assert [info.id for info in store.list_sessions()] == ["s"]


def test_a_limit_of_zero_reads_nothing(store: SessionStore) -> None:
    """The smallest valid limit: an empty page, the same on every backend."""
    store.create_session("s", events=[MessageAppended(role="user", content="one")])

    assert store.read_all(0, 0) == []
    assert store.list_sessions(limit=0) == []


LOOKUPS: dict[str, Callable[[SessionStore], object]] = {
    "read": lambda s: s.read("s\ud800"),
    "get_session": lambda s: s.get_session("\udc00"),
    "last_seq": lambda s: s.last_seq("\ud800"),
    "append": lambda s: s.append("\ud800", [MessageAppended(role="user", content="x")], ANY),
    "list_sessions after": lambda s: s.list_sessions(after="\ud800"),
    "latest_snapshot": lambda s: s.latest_snapshot("\ud800", "api_context", 1, "x"),
}


NUL_LOOKUPS: dict[str, Callable[[SessionStore], object]] = {
    "read": lambda s: s.read("s\x00"),
    "get_session": lambda s: s.get_session("a\x00b"),
    "last_seq": lambda s: s.last_seq("\x00"),
    "erasure": lambda s: s.erasure("\x00"),
    "list_sessions after": lambda s: s.list_sessions(after="\x00"),
}


@pytest.mark.parametrize("call", LOOKUPS.values(), ids=LOOKUPS.keys())
def test_looking_up_text_with_a_lone_surrogate_is_a_validation_error(
    store: SessionStore, call: Callable[[SessionStore], object]
) -> None:
    """The driver cannot encode it (UnicodeEncodeError escaped from every read)."""
    store.create_session("s")

    with pytest.raises(ValidationError, match="not valid Unicode"):
        call(store)


@pytest.mark.parametrize("call", NUL_LOOKUPS.values(), ids=NUL_LOOKUPS.keys())
def test_looking_up_text_with_a_nul_is_a_validation_error(
    store: SessionStore, call: Callable[[SessionStore], object]
) -> None:
    """No session id holds one, and PostgreSQL text cannot hold it (the driver refuses to send
    it): a ValidationError on every backend, not a DatabaseError (a 500 in serve)."""
    store.create_session("s")

    with pytest.raises(ValidationError, match="NUL"):
        call(store)


class _NotAnId:
    """Something that is not a session id (the driver could not bind it)."""


WRONG_IDS: dict[str, Callable[[SessionStore], object]] = {
    "the SessionInfo list_sessions returns": lambda s: s.list_sessions()[0],
    "bytes": lambda s: b"s",
    "an int past 64 bits": lambda s: 2**64,
    "an object": lambda s: _NotAnId(),
    "a str holding NUL": lambda s: "s\x00",
}

BY_SESSION_ID: dict[str, Callable[[SessionStore, object], object]] = {
    "read": lambda s, v: s.read(v),  # type: ignore[arg-type]
    "read_stored": lambda s, v: s.read_stored(v),  # type: ignore[arg-type]
    "last_seq": lambda s, v: s.last_seq(v),  # type: ignore[arg-type]
    "get_session": lambda s, v: s.get_session(v),  # type: ignore[arg-type]
    "visible_log": lambda s, v: s.visible_log(v).read(),  # type: ignore[arg-type]
    "head": lambda s, v: s.head(v),  # type: ignore[arg-type]
    "verify": lambda s, v: s.verify(v),  # type: ignore[arg-type]
    "append": lambda s, v: s.append(v, [MessageAppended(role="user", content="x")], ANY),  # type: ignore[arg-type]
    "erasure": lambda s, v: s.erasure(v),  # type: ignore[arg-type]
    "descendants": lambda s, v: s.descendants(v),  # type: ignore[arg-type]
    "latest_snapshot": lambda s, v: s.latest_snapshot(v, "api_context", 1, "x"),  # type: ignore[arg-type]
    "get_blob": lambda s, v: s.get_blob("0" * 64, session_id=v),  # type: ignore[arg-type]
    "put_blob": lambda s, v: s.put_blob(b"x", session_id=v),  # type: ignore[arg-type]
}


def _wrong_id_cases() -> list[object]:
    """Every call with every wrong id on SQLite (sync); on the other backends and the async API,
    each call with one of them, in turn, so each value still reaches every backend. The check
    happens before any SQL: the whole matrix everywhere (390 tests) proved nothing more."""
    values = list(WRONG_IDS.items())
    cases: list[object] = []
    for backend, api in [(b, a) for b in ("sqlite-file", "sqlite-memory", "postgres") for a in STORE_APIS]:
        marks = [pytest.mark.postgres] if backend == "postgres" else []
        for index, (call_name, call) in enumerate(BY_SESSION_ID.items()):
            chosen = values if (backend, api) == ("sqlite-file", "sync") else [values[index % len(values)]]
            for value_name, value in chosen:
                test_id = f"{backend}-{api}-{call_name}-{value_name}"
                cases.append(pytest.param(backend, api, call, value, marks=marks, id=test_id))
    return cases


@pytest.mark.parametrize(
    ("backend", "store_api", "call", "value"), _wrong_id_cases(), indirect=["backend", "store_api"]
)
def test_a_session_id_that_is_not_a_str_is_a_validation_error_naming_it(
    store: SessionStore,
    call: Callable[[SessionStore, object], object],
    value: Callable[[SessionStore], object],
) -> None:
    """Passing the ``SessionInfo`` itself instead of its ``.id`` (or bytes, a number, a NUL) is
    the caller's mistake, said so on every backend: the driver's binding error (SQLite's
    ProgrammingError, PostgreSQL's "operator does not exist", "cannot contain NUL"), an
    OverflowError or a TypeError from a cache key escaped before; nothing is written."""
    store.create_session("s", events=[MessageAppended(role="user", content="one")])
    before = (store.max_position(), store.list_sessions())

    with pytest.raises(ValidationError) as refused:
        call(store, value(store))

    assert refused.value.field == "session_id"
    assert (store.max_position(), store.list_sessions()) == before


CURSORS_AND_KEYS: dict[str, Callable[[SessionStore], object]] = {
    "list_sessions after": lambda s: s.list_sessions(after=s.list_sessions()[0]),  # type: ignore[arg-type]
    "list_sessions after True": lambda s: s.list_sessions(after=True),  # type: ignore[arg-type]
    "erasures after": lambda s: s.erasures(after=2**64),  # type: ignore[arg-type]
    "erasures limit": lambda s: s.erasures(limit="10"),  # type: ignore[arg-type]
    "get_blob sha256": lambda s: s.get_blob(b"0" * 64),  # type: ignore[arg-type]
    "latest_snapshot projection": lambda s: s.latest_snapshot("s", None, 1, "x"),  # type: ignore[arg-type]
    "latest_snapshot projection_version": lambda s: s.latest_snapshot("s", "api_context", 2**40, "x"),
    "verify head": lambda s: s.verify("s", head=7),  # type: ignore[arg-type]
    "retention_plan now": lambda s: s.retention_plan(timedelta(days=1), now="2030-01-01"),  # type: ignore[arg-type]
    "retention_plan tenant": lambda s: s.retention_plan(timedelta(days=1), tenant=b"t"),  # type: ignore[arg-type]
    "retention_plan older_than": lambda s: s.retention_plan(timedelta(days=10**6)),
    "write_sessions of one write": lambda s: s.write_sessions(SessionWrite("w", create=True)),  # type: ignore[arg-type]
    "write_sessions of dicts": lambda s: s.write_sessions([{"session_id": "w", "create": True}]),  # type: ignore[list-item]
    "write_streamed of one write": lambda s: s.write_streamed(SessionWrite("w", create=True)),  # type: ignore[arg-type]
    "write_sessions expected_seq 2**64": lambda s: s.write_sessions([SessionWrite("s", expected_seq=2**64)]),
    "put_snapshot of a dict": lambda s: s.put_snapshot({"session_id": "s"}),  # type: ignore[arg-type]
    "put_snapshot at seq 0": lambda s: s.put_snapshot(SnapshotRecord("s", "api_context", 1, "x", 0, b"{}")),
}


@pytest.mark.parametrize("call", CURSORS_AND_KEYS.values(), ids=CURSORS_AND_KEYS.keys())
def test_other_arguments_of_the_wrong_type_are_validation_errors(
    store: SessionStore, call: Callable[[SessionStore], object]
) -> None:
    """A cursor, key, limit, anchor, clock or write list of the wrong type: a ValidationError,
    not SQLAlchemy's ArgumentError, a driver error, KeyError, TypeError or AttributeError."""
    store.create_session("s", events=[MessageAppended(role="user", content="one")])
    before = (store.max_position(), store.list_sessions())

    with pytest.raises(ValidationError):
        call(store)

    assert (store.max_position(), store.list_sessions()) == before


SUBSCRIPTIONS: dict[str, dict[str, object]] = {
    "after_position None": {"after_position": None},
    "batch_size 0 (read nothing, forever)": {"batch_size": 0},
    "poll_interval NaN": {"poll_interval": math.nan},
    "poll_interval -1": {"poll_interval": -1},
    "poll_interval infinity": {"poll_interval": math.inf},
    "poll_interval '1'": {"poll_interval": "1"},
    "poll_interval 10**5000 (repr() of it raised)": {"poll_interval": 10**5000},
    "stop True": {"stop": True},
}


@pytest.mark.parametrize("kwargs", SUBSCRIPTIONS.values(), ids=SUBSCRIPTIONS.keys())
def test_a_subscription_with_bad_arguments_is_refused_before_it_reads(
    store: SessionStore, kwargs: dict[str, object]
) -> None:
    """The first ``next`` raises ValidationError (a TypeError or ValueError from the sleep, or
    a loop that never advanced, before)."""
    store.create_session("s", events=[MessageAppended(role="user", content="one")])
    stop = threading.Event()
    stop.set()  # a subscription that were accepted reads its history and ends

    with pytest.raises(ValidationError):
        next(iter(store.subscribe(**{"stop": stop, **kwargs})))  # type: ignore[arg-type]


CLI_BAD_INPUT = {
    "stdin with a lone surrogate": (
        ["append", "s-1"],
        '{"type": "message_appended", "role": "user", "content": "\\ud800"}\n',
        "field content: a lone surrogate",
    ),
    "stdin with NaN": (
        ["append", "s-1"],
        '{"type": "message_appended", "role": "user", "content": [{"type": "text", "v": NaN}]}\n',
        "field content.0.v: nan",
    ),
    "stdin with an integer over 4,300 digits": (
        ["append", "s-1"],
        '{"type": "message_appended", "role": "user", "content": "x", "n": ' + "9" * 5000 + "}\n",
        "stdin line 1: invalid JSON: Exceeds the limit (4300 digits) for integer string conversion",
    ),
    "stdin with a key twice in one object": (
        ["append", "s-1"],
        '{"type": "message_appended", "role": "user", "content": "x"}\n'
        '{"type": "message_appended", "role": "user", "content": "a", "content": "b"}\n',
        "stdin line 2: the key 'content' occurs twice in one JSON object",
    ),
    "stdin nested 100,000 deep": (
        ["append", "s-1"],
        '{"type": "message_appended", "role": "user", "content": ' + "[" * 100_000 + "]" * 100_000 + "}\n",
        "stdin line 1: JSON nested too deeply",
    ),
    "metadata that is not an object": (["new", "--id", "s-2", "--metadata", "[1]"], None, "a JSON object"),
    "metadata with a lone surrogate": (
        ["new", "--id", "s-2", "--metadata", '{"a": "\\udfff"}'],
        None,
        "lone surrogate",
    ),
    "sessions --limit 2**63": (["sessions", "--limit", str(2**63)], None, "limit must be from 0"),
    "sessions --limit -1": (["sessions", "--limit", "-1"], None, "limit must be from 0"),
    "diff past 2**63": (["diff", "s-1", "1", str(2**63)], None, "must be from -2**63 to 2**63 - 1"),
    "purge older than the calendar": (
        ["purge", "--older-than", "999999w"],
        None,
        "older_than reaches before year 1",
    ),
}


@pytest.mark.parametrize(("argv", "stdin", "says"), CLI_BAD_INPUT.values(), ids=CLI_BAD_INPUT.keys())
def test_bad_input_on_the_command_line_is_one_line_and_writes_nothing(
    db: str,
    argv: list[str],
    stdin: str | None,
    says: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Exit 1, one `sessionstore: ...` line saying what is wrong, the database unchanged."""
    code, _ = _cli(argv[0], "--db", db, *argv[1:], stdin=stdin or "", monkeypatch=monkeypatch)

    assert code == 1
    assert says in _one_error_line(capsys.readouterr().err)
    with sessionstore.open_store(db) as store:
        assert [info.id for info in store.list_sessions()] == ["s-1"]
        assert store.last_seq("s-1") == 2


# --- serve's address ----------------------------------------------------------------------------


@pytest.mark.parametrize("port", ["-1", "65536", str(2**64)])
def test_a_port_out_of_range_is_a_usage_error(db: str, port: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`serve --port -1`: argparse's usage error, exit 2 (it was OverflowError's traceback from bind)."""
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--db", db, "--port", port])

    assert exited.value.code == 2
    assert f"argument --port: must be a port number from 0 to 65535, not {port!r}" in capsys.readouterr().err


def test_serve_on_port_0_listens_on_one_port_at_every_address_and_prints_it() -> None:
    """`serve --host '' --port 0` binds IPv4 and IPv6 (where the machine has both) to the one port
    the first address got, and the URL it prints has an address (it printed `http://:PORT/`, and
    each address had a port of its own: a client of the printed one could reach another server)."""
    from sessionstore.cli._serve import _listen, _where

    sockets = _listen("", 0)
    try:
        ports = {sock.getsockname()[1] for sock in sockets}
        url = _where("", sockets)
    finally:
        for sock in sockets:
            sock.close()

    assert len(ports) == 1 and 0 not in ports
    port = ports.pop()
    assert url in (f"http://0.0.0.0:{port}/", f"http://[::]:{port}/")


@pytest.mark.parametrize("where", ["a port in use", "an address of another machine"])
def test_serve_that_cannot_listen_is_one_line(db: str, where: str) -> None:
    """A port another server holds, an address this machine does not have: one line naming it,
    exit 1 (uvicorn logged `ERROR: ...` after the "serving on" line and exited 3, the status of a
    failed integrity check)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        if where == "a port in use":
            host, argv, reason = "127.0.0.1", [], "Address already in use"
        else:  # TEST-NET-3 (RFC 5737): never this machine's
            host, argv, reason = "203.0.113.7", ["--token", "t" * 16], "Cannot assign requested address"
        done = _console("serve", "--db", db, "--host", host, "--port", str(port), *argv)

    assert done.returncode == 1
    assert _one_error_line(done.stderr) == f"sessionstore: cannot listen on {host}:{port}: {reason}"


# --- imported transcripts -----------------------------------------------------------------------

_IMPORTED = "7d1c2a4e-0000-4000-8000-00000000000a"


def _user_line(n: int, parent: str | None) -> str:
    entry = {
        "type": "user",
        "uuid": f"u-{n}",
        "parentUuid": parent,
        "sessionId": _IMPORTED,
        "message": {"role": "user", "content": f"prompt {n}"},
    }
    return json.dumps(entry, separators=(",", ":"))


def _with_content(raw_content: str) -> str:
    """A user line whose message content is the raw JSON text ``raw_content``."""
    head = '{"type":"user","uuid":"u-bad","parentUuid":"u-1","sessionId":"' + _IMPORTED + '",'
    return head + '"message":{"role":"user","content":' + raw_content + "}}"


BAD_LINES = {
    "integer over 4,300 digits": _with_content('[{"type":"text","text":"x","n":' + "9" * 5000 + "}]"),
    "nested 100,000 deep": _with_content("[" * 100_000 + "]" * 100_000),
    "nested past the serializer's limit": _with_content(
        '[{"type":"text","d":' + "[" * 260 + "]" * 260 + "}]"
    ),
    "lone surrogate": _with_content('"caf\\udce9"'),
    "lone surrogate in a key": _with_content('[{"type":"text","text":"x","\\ud800":1}]'),
    "NaN": _with_content('[{"type":"text","text":"x","v":NaN}]'),
    "Infinity": _with_content('[{"type":"text","text":"x","v":-Infinity}]'),
    "a number too large for a float": _with_content('[{"type":"text","text":"x","v":1e999}]'),
    "a negative one": _with_content('[{"type":"text","text":"x","v":-1e400}]'),
}


def _transcript(tmp_path: Path, bad: str) -> Path:
    path = tmp_path / f"{_IMPORTED}.jsonl"
    path.write_text("\n".join([_user_line(1, None), bad, _user_line(3, "u-1")]) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("bad", BAD_LINES.values(), ids=BAD_LINES.keys())
def test_an_unreadable_imported_line_fails_the_import_or_is_skipped(
    tmp_path: Path, store: SessionStore, bad: str
) -> None:
    """The line is named and nothing is imported; with skip_bad_lines it is skipped and reported,
    and the rest is imported (it used to raise ValueError, RecursionError or a serializer error,
    or store NaN as null)."""
    path = _transcript(tmp_path, bad)

    with pytest.raises(ValidationError, match=rf"{path}:2: malformed line"):
        import_claude_code(store, [path])
    assert store.list_sessions() == []

    report = import_claude_code(store, [path], skip_bad_lines=True)

    assert [(s.path, s.line) for s in report.skipped] == [(str(path), 2)]
    assert [(s.session_id, s.lines) for s in report.sessions] == [(_IMPORTED, 2)]


@pytest.mark.parametrize("bad", BAD_LINES.values(), ids=BAD_LINES.keys())
def test_the_import_command_reports_a_skipped_line_or_fails_with_one_line(
    db: str, tmp_path: Path, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`import` exits 1 with one line naming the line; `--skip-bad-lines` reports it and exits 0."""
    path = _transcript(tmp_path, bad)

    assert _cli("import", "--db", db, str(path))[0] == 1
    assert f"{path}:2: malformed line" in _one_error_line(capsys.readouterr().err)

    assert _cli("import", "--db", db, "--skip-bad-lines", str(path))[0] == 0
    assert capsys.readouterr().err.startswith(f"skipped {path}:2")


# --- where the database is ----------------------------------------------------------------------


@pytest.mark.parametrize("url", ["mysql://app@db/agents", "garbage://", "postgresql://u:secret@h:port/db"])
def test_an_unsupported_database_url_is_a_validation_error(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typed error (it was a bare ValueError, or SQLAlchemy's), never echoing a password."""
    with pytest.raises(ValidationError) as refused:
        sessionstore.open_store(url)
    assert refused.value.field == "url"

    assert _cli("sessions", "--db", url)[0] == 1
    line = _one_error_line(capsys.readouterr().err)
    assert "secret" not in line and ("unsupported database" in line or "not a database URL" in line)


def test_a_server_that_does_not_answer_fails_the_command_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing listens on the port: one line within a second or so, not after the library's
    retries of a restarting server (ten tries over seven seconds and more)."""
    url = "postgresql+psycopg://app@127.0.0.1:1/agents"
    for argv in (["sessions"], ["events", "s-1"], ["new", "--id", "s-2"]):
        started = time.monotonic()
        assert _cli(*argv, "--db", url)[0] == 1
        elapsed = time.monotonic() - started

        assert "Connection refused" in _one_error_line(capsys.readouterr().err)
        assert elapsed < 3, elapsed


def _unwritable_folder(tmp_path: Path) -> Path:
    """A folder no file can be created in: read-only permissions, or for root (whom permissions
    do not stop) /sys, which the kernel keeps read-only."""
    if os.geteuid() == 0:
        return Path("/sys")
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


def test_a_database_that_cannot_be_created_is_an_operational_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--db <file>/x.db` and an unwritable SESSIONSTORE_HOME: the path and the reason, one line
    (they raised FileExistsError / PermissionError)."""
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    home = _unwritable_folder(tmp_path) / "sessionstore-home"

    cannot_create = f"cannot create the database {a_file}/x.db"
    with pytest.raises(sessionstore.errors.OperationalError, match=cannot_create):
        sessionstore.open_store(a_file / "x.db")
    assert _cli("new", "--db", str(a_file / "x.db"))[0] == 1
    assert str(a_file) in _one_error_line(capsys.readouterr().err)

    monkeypatch.setenv("SESSIONSTORE_HOME", str(home))
    with pytest.raises(sessionstore.errors.OperationalError, match=f"cannot create the database {home}"):
        sessionstore.open_store()
    assert _cli("new")[0] == 1
    assert str(home) in _one_error_line(capsys.readouterr().err)
    assert not home.exists()


@pytest.mark.parametrize("command", [["sessions"], ["events", "s-1"], ["db", "current"], ["db", "upgrade"]])
def test_a_sqlite_path_that_is_no_database_is_named(
    tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`--db notes.txt`, `--db <a folder>`: the line names the path SQLite could not use (it said
    only `file is not a database`, which of $SESSIONSTORE_URL, --db or the default it did not say)."""
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n" * 300)

    for target, says in ((notes, "file is not a database"), (tmp_path, "unable to open database file")):
        assert _cli(*command, "--db", str(target))[0] == 1
        assert _one_error_line(capsys.readouterr().err) == f"sessionstore: {target}: {says}"
    assert notes.read_text() == "not a database\n" * 300


@pytest.mark.parametrize("what", ["a text file", "a folder", "an unreachable server"])
def test_db_current_on_a_database_it_cannot_read_is_one_line(
    tmp_path: Path, what: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`db current` (the first command one runs against a new URL) fails like every other
    command: one line, exit 1 (it printed SQLAlchemy's traceback)."""
    notes = tmp_path / "notes.db"
    notes.write_text("not a database\n" * 300)
    target = {
        "a text file": str(notes),
        "a folder": str(tmp_path),
        "an unreachable server": "postgresql+psycopg://app@127.0.0.1:1/agents",
    }[what]

    for extra in ([], ["--json"]):
        assert _cli("db", "current", "--db", target, *extra)[0] == 1
        line = _one_error_line(capsys.readouterr().err)
        assert "Background on this error" not in line
    assert notes.read_text() == "not a database\n" * 300


@pytest.mark.parametrize("revision", ["nosuch", "", "@", "0001@"])
def test_an_unknown_revision_changes_nothing(
    db: str, revision: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`db upgrade|downgrade NOSUCH`: one line listing the revisions (it was alembic's traceback;
    an empty or `@` revision an AssertionError inside alembic)."""
    for action in ("upgrade", "downgrade"):
        assert _cli("db", action, "--db", db, revision)[0] == 1
        line = _one_error_line(capsys.readouterr().err)
        assert f"cannot {action} to revision {revision!r}" in line
        assert f"(revisions: base, {', '.join(known_revisions())}, head)" in line

    assert _cli("db", "current", "--db", db)[1].strip() == sessionstore.store.SCHEMA_REVISION


def test_a_database_written_by_a_newer_sessionstore_says_so(
    shared_backend: Backend, capsys: pytest.CaptureFixture[str]
) -> None:
    """Opening, `db upgrade` and `db downgrade` name the revision and say a newer sessionstore
    wrote it (they said "run db upgrade", which then failed with a traceback)."""
    with shared_backend.open() as store:
        store.create_session("kept")
        with store.engine.begin() as conn:  # type: ignore[attr-defined]
            conn.execute(text("UPDATE sessionstore_alembic_version SET version_num = '0099'"))

    with pytest.raises(
        sessionstore.SchemaOutOfDateError, match="at schema revision 0099, written by a newer"
    ):
        sessionstore.open_store(shared_backend.url)
    with pytest.raises(sessionstore.SchemaOutOfDateError) as caught:
        shared_backend.open()  # migrate=True: upgrading cannot help either
    assert (caught.value.current, caught.value.newer) == ("0099", True)

    for argv in (["db", "upgrade"], ["db", "downgrade", "base", "--yes"], ["sessions"]):
        assert _cli(*argv, "--db", shared_backend.url)[0] == 1
        assert "written by a newer sessionstore" in _one_error_line(capsys.readouterr().err)
    assert _cli("db", "current", "--db", shared_backend.url)[1].strip() == "0099"


@pytest.mark.parametrize("below", ["", "sub"], ids=["the file", "a folder below it"])
def test_export_into_a_file_instead_of_a_folder_is_refused(
    db: str, tmp_path: Path, below: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`export --dir <a file>`: a ValidationError naming the file, one line, nothing written
    (it was FileExistsError / NotADirectoryError from mkdir)."""
    a_file = tmp_path / "a-file"
    a_file.write_text("keep me")
    target = a_file / below if below else a_file

    with (
        sessionstore.open_store(db) as store,
        pytest.raises(ValidationError, match=f"{a_file} is not a folder"),
    ):
        sessionstore.write_claude_code(store, "s-1", target)
    assert _cli("export", "--db", db, "s-1", "--dir", str(target))[0] == 1

    assert f"{a_file} is not a folder" in _one_error_line(capsys.readouterr().err)
    assert a_file.read_text() == "keep me"


def test_an_error_naming_a_path_with_a_newline_is_still_one_line(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The message is joined onto one line: scripts read exactly one line per failure."""
    target = tmp_path / "two\nlines" / "x.jsonl"

    assert _cli("export", "--db", db, "s-1", "-o", str(target))[0] == 1

    assert _one_error_line(capsys.readouterr().err).endswith("No such file or directory")


BAD_SESSION_ARGUMENTS: dict[str, dict[str, object]] = {
    "context_window '200k'": {"context_window": "200k"},
    "max_output_tokens 1.5": {"max_output_tokens": 1.5},
    "model True": {"model": True},
    "system 1.5": {"system": 1.5},
    "tools 5": {"tools": 5},
    "tools a str": {"tools": "read_file"},
}


@pytest.mark.parametrize("kwargs", BAD_SESSION_ARGUMENTS.values(), ids=BAD_SESSION_ARGUMENTS.keys())
def test_session_create_with_a_bad_argument_is_a_validation_error_and_creates_nothing(
    store: SessionStore, kwargs: dict[str, object]
) -> None:
    """pydantic's own ValidationError (not a SessionStoreError) or a TypeError from ``list(tools)``
    escaped from ``Session.create`` before; now the field is named and no session exists."""
    with pytest.raises(ValidationError) as refused:
        sessionstore.Session.create(store, "c", **kwargs)  # type: ignore[arg-type]

    assert refused.value.field is not None
    assert next(iter(kwargs)) in refused.value.field
    assert store.list_sessions() == []


BAD_SPAWNS: dict[str, dict[str, object]] = {
    "tool_use_id 5": {"tool_use_id": 5},
    "agent_type 5 (stored in the child's metadata, refused by the parent's event)": {
        "tool_use_id": "toolu_1",
        "agent_type": 5,
    },
    "tools 5": {"tool_use_id": "toolu_1", "tools": 5},
    "model 3": {"tool_use_id": "toolu_1", "model": 3},
}


@pytest.mark.parametrize("kwargs", BAD_SPAWNS.values(), ids=BAD_SPAWNS.keys())
def test_spawn_subagent_with_a_bad_argument_writes_nothing(
    store: SessionStore, kwargs: dict[str, object]
) -> None:
    """A ValidationError, no child session and nothing appended to the parent (an ``agent_type``
    that is not a str created the child, then failed on the parent's event, leaving an orphan)."""
    parent = sessionstore.Session.create(store, "p", model="claude-sonnet-4-5", system="be brief")
    last = store.last_seq("p")

    with pytest.raises(ValidationError):
        sessionstore.spawn_subagent(parent, **kwargs)  # type: ignore[arg-type]

    assert [info.id for info in store.list_sessions()] == ["p"]
    assert store.last_seq("p") == last


SESSION_NUMBERS: dict[str, Callable[[sessionstore.Session], object]] = {
    "fork at_seq '1'": lambda s: s.fork(at_seq="1"),  # type: ignore[arg-type]
    "api_state_at None": lambda s: s.api_state_at(None),  # type: ignore[arg-type]
    "api_state_at b'1'": lambda s: s.api_state_at(b"1"),  # type: ignore[arg-type]
    "served_request turn None": lambda s: sessionstore.served_request(s, None),  # type: ignore[arg-type]
    "served_request turn '1'": lambda s: sessionstore.served_request(s, "1"),  # type: ignore[arg-type]
    "snip rounds '1'": lambda s: sessionstore.pipeline.snip(s, "1"),  # type: ignore[arg-type]
    "revert a dict": lambda s: sessionstore.revert(s, {"event_id": "x"}),  # type: ignore[arg-type]
    "verify_all page_size 0": lambda s: list(verify_all(s.store, page_size=0)),
    "verify_all heads a list": lambda s: list(verify_all(s.store, heads=[s.store.head(s.id)])),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("call", SESSION_NUMBERS.values(), ids=SESSION_NUMBERS.keys())
def test_a_seq_turn_or_page_size_that_is_not_an_int_is_a_validation_error(
    store: SessionStore, call: Callable[[sessionstore.Session], object]
) -> None:
    """A TypeError from a comparison, or an IndexError from an empty page, escaped before; no fork
    is created."""
    session = sessionstore.Session.create(store, "s", model="claude-sonnet-4-5")
    session.append([MessageAppended(role="user", content="one")])

    with pytest.raises(ValidationError):
        call(session)

    assert [info.id for info in store.list_sessions()] == ["s"]


BAD_CONFIGS: dict[str, Callable[[], object]] = {
    "SessionConfig calibration '1.1'": lambda: sessionstore.SessionConfig(calibration="1.1"),  # type: ignore[arg-type]
    "SessionConfig block_overhead None": lambda: sessionstore.SessionConfig(block_overhead=None),  # type: ignore[arg-type]
    "SessionConfig snapshot_every None": lambda: sessionstore.SessionConfig(snapshot_every=None),  # type: ignore[arg-type]
    "SessionConfig cache_control 'false'": lambda: sessionstore.SessionConfig(cache_control="false"),  # type: ignore[arg-type]
    "SessionConfig window a dict": lambda: sessionstore.SessionConfig(window={}),  # type: ignore[arg-type]
    "CompactConfig precompute_percent '80'": lambda: sessionstore.CompactConfig(precompute_percent="80"),  # type: ignore[arg-type]
    "CompactConfig extract_init_tokens None": lambda: sessionstore.CompactConfig(extract_init_tokens=None),  # type: ignore[arg-type]
    "CompactConfig precompute_percent 10**5000 (str() of it raised)": lambda: sessionstore.CompactConfig(
        precompute_percent=10**5000
    ),
    "MicrocompactConfig gap_minutes None": lambda: sessionstore.MicrocompactConfig(gap_minutes=None),  # type: ignore[arg-type]
    "PipelineConfig compact a dict": lambda: sessionstore.PipelineConfig(compact={}),  # type: ignore[arg-type]
    "PipelineConfig snip True": lambda: sessionstore.PipelineConfig(snip=True),  # type: ignore[arg-type]
    "PipelineConfig auto_compact 'no'": lambda: sessionstore.PipelineConfig(auto_compact="no"),  # type: ignore[arg-type]
    "Pipeline of a CompactConfig": lambda: sessionstore.Pipeline(sessionstore.CompactConfig()),  # type: ignore[arg-type]
    "Pipeline clock a datetime": lambda: sessionstore.Pipeline(clock=datetime.now(UTC)),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("make", BAD_CONFIGS.values(), ids=BAD_CONFIGS.keys())
def test_a_config_value_of_the_wrong_type_is_refused_when_the_config_is_made(
    make: Callable[[], object],
) -> None:
    """A ValidationError naming the field at construction: before, a TypeError from a comparison
    (at construction, or in the middle of a turn), an AttributeError from the pipeline's first
    ``prepare``, or a str switch taken as True."""
    with pytest.raises(ValidationError) as refused:
        make()

    assert refused.value.field is not None


_ONE_FILE = "t.jsonl"

BAD_PATHS: dict[str, tuple[Callable[[SessionStore, Path], object], str]] = {
    "import one path, not a list": (lambda s, tmp: import_claude_code(s, str(tmp / _ONE_FILE)), "paths"),
    "import a SessionInfo": (lambda s, tmp: import_claude_code(s, s.list_sessions()[0]), "paths"),  # type: ignore[arg-type]
    "import a path holding NUL": (lambda s, tmp: import_claude_code(s, [f"{tmp}/t\x00.jsonl"]), "paths"),
    "import bytes in the list": (lambda s, tmp: import_claude_code(s, [b"t.jsonl"]), "paths"),  # type: ignore[list-item]
    "write_claude_code_file to a path holding NUL": (
        lambda s, tmp: write_claude_code_file(s, "s-1", f"{tmp}/\x00"),
        "path",
    ),
    "write_claude_code_file to None": (lambda s, tmp: write_claude_code_file(s, "s-1", None), "path"),  # type: ignore[arg-type]
    "write_claude_code into a folder holding NUL": (
        lambda s, tmp: sessionstore.write_claude_code(s, "s-1", "\x00"),
        "directory",
    ),
    "write_claude_code into 7": (lambda s, tmp: sessionstore.write_claude_code(s, "s-1", 7), "directory"),  # type: ignore[arg-type]
    "read_heads of a path holding NUL": (lambda s, tmp: read_heads(f"{tmp}/h\x00"), "path"),
    "read_heads of None": (lambda s, tmp: read_heads(None), "path"),  # type: ignore[arg-type]
    "read_heads of a lone surrogate": (lambda s, tmp: read_heads(f"{tmp}/\ud800"), "path"),
    "write_claude_code_file to a lone surrogate": (
        lambda s, tmp: write_claude_code_file(s, "s-1", f"{tmp}/\ud800"),
        "path",
    ),
    "follow one path, not a list": (lambda s, tmp: ClaudeCodeFollower(s, str(tmp / _ONE_FILE)), "paths"),
}


@pytest.mark.parametrize(("call", "field"), BAD_PATHS.values(), ids=BAD_PATHS.keys())
def test_a_path_argument_that_is_no_path_is_a_validation_error(
    db: str, tmp_path: Path, call: Callable[[SessionStore, Path], object], field: str
) -> None:
    """A ValidationError naming the argument: before, TypeError or "embedded null byte" ValueError
    from the OS layer, or, for one path given bare, each of its characters taken as a path
    ("/: no Claude Code transcripts in this folder"). Nothing is written."""
    (tmp_path / _ONE_FILE).write_text("")
    with sessionstore.open_store(db) as store:
        before = (store.max_position(), store.list_sessions())

        with pytest.raises(ValidationError) as refused:
            call(store, tmp_path)

        assert refused.value.field == field
        assert (store.max_position(), store.list_sessions()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.db", "t.jsonl"]


BAD_FOLLOWS: dict[str, dict[str, object]] = {
    "until_idle NaN (never idle: followed forever)": {"until_idle": math.nan},
    "until_idle '1'": {"until_idle": "1"},
    "poll_interval NaN": {"poll_interval": math.nan, "until_idle": 0},
    "poll_interval infinity": {"poll_interval": math.inf, "until_idle": 0},
    "poll_interval None": {"poll_interval": None, "until_idle": 0},
    "stop True": {"stop": True, "until_idle": 0},
}


@pytest.mark.parametrize("kwargs", BAD_FOLLOWS.values(), ids=BAD_FOLLOWS.keys())
def test_following_with_bad_timing_arguments_is_refused_before_the_first_poll(
    db: str, tmp_path: Path, kwargs: dict[str, object]
) -> None:
    """A ValidationError at once: ValueError, OverflowError, TypeError or AttributeError escaped
    after the first poll, and an ``until_idle`` of NaN followed forever."""
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("")
    outcome: list[BaseException | None] = []

    def follow() -> None:
        with sessionstore.open_store(db) as store:
            try:
                follow_claude_code(store, [transcript], **kwargs)  # type: ignore[arg-type]
                outcome.append(None)
            except BaseException as e:  # handed to the test's thread
                outcome.append(e)

    worker = threading.Thread(target=follow, daemon=True)
    worker.start()
    worker.join(10)

    assert outcome, "still following after 10 s"
    assert isinstance(outcome[0], ValidationError), outcome


@pytest.mark.parametrize(
    "session_id", [10**5000, "x" * 1_000_000], ids=["an int of 5,000 digits", "a str of a million characters"]
)
def test_an_unusable_new_session_id_is_described_not_repeated(
    store: SessionStore, session_id: object
) -> None:
    """The refusal names the argument in a short message: repr() of the int raised ValueError
    (past 4,300 digits), and a megabyte id was copied into the error."""
    for create in (
        lambda: store.create_session(session_id),  # type: ignore[arg-type]
        lambda: store.get_or_create_session("t", "u", "e", session_id=session_id),  # type: ignore[arg-type]
        lambda: store.erase(session_id, reason="r"),  # type: ignore[arg-type]
    ):
        with pytest.raises(ValidationError) as refused:
            create()
        assert refused.value.field == "session_id"
        assert len(str(refused.value)) < 300

    assert store.list_sessions() == []


BAD_URLS = {
    "an int": 5,
    "bytes": b"x.db",
    "a path holding NUL": "{tmp}/a\x00.db",
    "a path holding a lone surrogate (its file was created)": "{tmp}/\udcfe.db",
}


@pytest.mark.parametrize("url", BAD_URLS.values(), ids=BAD_URLS.keys())
def test_opening_a_store_at_a_url_that_is_no_path_is_refused_and_creates_nothing(
    tmp_path: Path, url: object
) -> None:
    """A ValidationError naming ``url`` from ``open_store`` and ``open_async_store`` (TypeError,
    "embedded null byte" ValueError, or UnicodeEncodeError after the file was made) and no file."""
    given = url.format(tmp=tmp_path) if isinstance(url, str) else url

    with pytest.raises(ValidationError) as refused:
        sessionstore.open_store(given, migrate=True)  # type: ignore[arg-type]
    assert refused.value.field == "url"

    async def open_async() -> None:
        await sessionstore.open_async_store(given, migrate=True)  # type: ignore[arg-type]

    with pytest.raises(ValidationError) as refused:
        asyncio.run(open_async())
    assert refused.value.field == "url"
    assert list(tmp_path.iterdir()) == []


def test_a_sessionstore_url_in_the_environment_that_is_no_path_is_refused_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``$SESSIONSTORE_URL`` is checked as the ``url`` argument is: a lone surrogate in it (a file
    name that is no UTF-8) created the file, then failed in the driver with UnicodeEncodeError."""
    monkeypatch.setenv("SESSIONSTORE_URL", f"{tmp_path}/\udcfe.db")

    with pytest.raises(ValidationError) as refused:
        sessionstore.open_store(migrate=True)
    assert refused.value.field == "url"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["", "m" * 65, 7], ids=["empty", "65 characters", "no str"])
def test_a_token_counter_whose_name_no_snapshot_can_hold_is_refused_at_open(name: object) -> None:
    """Snapshots are keyed by the counter's name (64 characters): a longer one opened fine, then
    failed a ``Session``'s first snapshot, after its append had committed."""

    class Named(sessionstore.store.TiktokenCounter):
        @property
        def name(self) -> str:
            return name  # type: ignore[return-value]

    with pytest.raises(ValidationError, match="token_counter's name must be a str of 1 to 64") as refused:
        sessionstore.open_store(":memory:", token_counter=Named())
    assert refused.value.field == "token_counter"
    longest = type("Longest", (Named,), {"name": "m" * 64})()
    with sessionstore.open_store(":memory:", token_counter=longest) as store:
        assert store.token_counter is longest
