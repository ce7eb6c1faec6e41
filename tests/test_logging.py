"""stdlib logging under the ``sessionstore`` logger: one structured record per append batch,
stage decision, compaction, revert and retry, with the session id and the numbers; silent
unless the host application configures logging."""

from __future__ import annotations

import logging
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

import sessionstore
from sessionstore import (
    MessageAppended,
    OfflineSummarizer,
    Pipeline,
    PipelineConfig,
    RetryPolicy,
    Session,
    SessionConfig,
    SessionStore,
    revert,
)
from sessionstore.errors import OperationalError, StoreUnavailableError
from sessionstore.pipeline import SnipConfig, snip
from sessionstore.pipeline._compaction import compact
from sessionstore.store import SessionWrite
from sessionstore.store._observed import log_erase

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _records(caplog: pytest.LogCaptureFixture, kind: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "sessionstore_event", None) == kind]


@pytest.fixture
def debug(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="sessionstore")
    return caplog


def _round(session: Session, n: int, size: int = 2_000) -> None:
    """One API round: a prompt, a tool call, its result."""
    session.append(
        [
            MessageAppended(role="user", content=f"step {n}"),
            MessageAppended(
                role="assistant",
                content=[{"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"n": n}}],
                api_message_id=f"msg_{n}",
                timestamp=T0,
            ),
            MessageAppended(
                role="user",
                content=[{"type": "tool_result", "tool_use_id": f"t{n}", "content": "line\n" * (size // 5)}],
            ),
        ]
    )


def _session(store: SessionStore, **started: object) -> Session:
    return Session.create(
        store,
        model="claude-sonnet-5-5",
        config=SessionConfig(snapshot_every=0),
        **started,  # type: ignore[arg-type]
    )


def test_one_record_per_append_batch_with_its_numbers(
    store: SessionStore, debug: pytest.LogCaptureFixture
) -> None:
    sid = store.create_session().id
    batch = [MessageAppended(role="user", content=f"hello number {i}") for i in range(3)]
    debug.clear()

    result = store.append(sid, batch, expected_seq=0)
    again = store.append(sid, batch, expected_seq=0)  # a retry after a lost reply

    first, retried = _records(debug, "append")
    assert first.name == "sessionstore.store"
    assert first.levelno == logging.DEBUG
    assert (first.session_id, first.event_count, first.first_seq, first.last_seq) == (sid, 3, 1, 3)  # type: ignore[attr-defined]
    assert (first.first_position, first.last_position) == (result.positions[0], result.positions[-1])  # type: ignore[attr-defined]
    # The default store counts tokens when the events are first read, not in the append.
    assert first.tokens is None and first.tokens_deferred == 3  # type: ignore[attr-defined]
    assert first.expected_seq == 0  # type: ignore[attr-defined]
    assert first.deduplicated is False  # type: ignore[attr-defined]
    assert first.getMessage() == (
        f"append: session {sid}, 3 event(s) at seqs 1-3, 3 event(s) counted when read, deduplicated=False"
    )
    assert again.deduplicated and retried.deduplicated is True  # type: ignore[attr-defined]
    assert retried.last_seq == 3  # type: ignore[attr-defined]


def test_an_append_that_counts_logs_its_tokens(debug: pytest.LogCaptureFixture) -> None:
    with sessionstore.open_store(":memory:", defer_token_counts=False) as store:
        sid = store.create_session().id
        debug.clear()
        store.append(sid, [MessageAppended(role="user", content="hello there")], expected_seq=0)
        (record,) = _records(debug, "append")
        assert record.tokens == store.read(sid)[0].token_count == 2  # type: ignore[attr-defined]
        assert record.tokens_deferred == 0  # type: ignore[attr-defined]
        message = f"append: session {sid}, 1 event(s) at seqs 1-1, 2 tokens, deduplicated=False"
        assert record.getMessage() == message


def test_a_refused_append_logs_no_batch(store: SessionStore, debug: pytest.LogCaptureFixture) -> None:
    sid = store.create_session().id
    debug.clear()
    with pytest.raises(sessionstore.ConcurrencyError):
        store.append(sid, [MessageAppended(role="user", content="late")], expected_seq=5)
    assert _records(debug, "append") == []


def test_created_sessions_and_multi_session_writes_log_each_batch(
    store: SessionStore, debug: pytest.LogCaptureFixture
) -> None:
    parent = store.create_session("parent", events=[MessageAppended(role="user", content="a")])
    store.write_sessions(
        [
            SessionWrite("parent", [MessageAppended(role="user", content="b")], expected_seq=1),
            SessionWrite("child", [MessageAppended(role="user", content="c")], create=True),
        ]
    )

    created, appended, child = _records(debug, "append")
    assert (created.operation, created.session_id, created.event_count) == ("create_session", parent.id, 1)  # type: ignore[attr-defined]
    assert (appended.operation, appended.session_id, appended.first_seq) == ("append", "parent", 2)  # type: ignore[attr-defined]
    assert (child.operation, child.session_id, child.last_seq) == ("create_session", "child", 1)  # type: ignore[attr-defined]


def test_each_stage_decision_is_one_record(store: SessionStore, debug: pytest.LogCaptureFixture) -> None:
    """Every configured stage reports per call: stood aside, nothing to do, or what it freed."""
    session = _session(store, context_window=100_000, max_output_tokens=10_000)
    for n in range(40):
        _round(session, n, size=4_000)
    config = PipelineConfig(snip=SnipConfig(enabled=True, trigger_percent=20, target_percent=10))
    debug.clear()

    prepared = Pipeline(config, clock=lambda: T0 + timedelta(minutes=1)).prepare(session)

    stages = _records(debug, "stage")
    assert [r.stage for r in stages] == [s.name for s in Pipeline(config).stages]  # type: ignore[attr-defined]
    assert {r.session_id for r in stages} == {session.id}  # type: ignore[attr-defined]
    (snipped,) = [r for r in stages if r.stage == "snip"]  # type: ignore[attr-defined]
    (report,) = [r for r in prepared.reports if r.stage == "snip"]
    assert snipped.tokens_freed == report.tokens_freed > 0  # type: ignore[attr-defined]
    assert snipped.tokens_before > snipped.tokens_after  # type: ignore[attr-defined]
    assert snipped.event_count == 1  # type: ignore[attr-defined]
    assert "stage snip on session" in snipped.getMessage()
    assert "acted" in snipped.getMessage()
    # The stages after snip see what snip left.
    later = stages[[r.stage for r in stages].index("snip") + 1 :]  # type: ignore[attr-defined]
    assert all(r.tokens_before == snipped.tokens_after for r in later[:1])  # type: ignore[attr-defined]


def test_compaction_and_revert_are_logged_at_info(
    store: SessionStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sessionstore")
    session = _session(store)
    for n in range(6):
        _round(session, n)

    report = snip(session, rounds=2)
    revert(session, report.event_ids[0])
    compacted = compact(session, OfflineSummarizer(), trigger="manual")

    assert _records(caplog, "append") == []  # DEBUG: not at INFO
    (reverted,) = _records(caplog, "revert")
    assert reverted.levelno == logging.INFO
    assert (reverted.session_id, reverted.target_event_id, reverted.target_type) == (  # type: ignore[attr-defined]
        session.id,
        report.event_ids[0],
        "snip_applied",
    )
    assert reverted.tokens_restored == report.tokens_freed > 0  # type: ignore[attr-defined]
    (logged,) = _records(caplog, "compaction")
    assert logged.levelno == logging.INFO
    assert logged.session_id == session.id  # type: ignore[attr-defined]
    assert (logged.trigger, logged.ok, logged.strategy) == ("manual", True, compacted.strategy)  # type: ignore[attr-defined]
    assert (logged.tokens_before, logged.tokens_after) == (compacted.tokens_before, compacted.tokens_after)  # type: ignore[attr-defined]
    assert logged.tokens_freed == compacted.tokens_before - compacted.tokens_after > 0  # type: ignore[attr-defined]
    assert logged.event_id == compacted.event_id  # type: ignore[attr-defined]


def test_each_retry_is_a_warning_with_its_attempt_and_pause(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="sessionstore")
    failures = iter([True, True, False])

    def flaky() -> str:
        if next(failures):
            raise OperationalError("server closed the connection unexpectedly", transient=True)
        return "done"

    policy = RetryPolicy(attempts=5, base_delay=0.001, max_delay=0.002)
    assert policy.run(flaky, what="append", session_id="s-1") == "done"

    first, second = _records(caplog, "retry")
    assert first.name == "sessionstore.store"
    assert first.levelno == logging.WARNING
    assert (first.operation, first.session_id, first.attempt, first.gave_up) == ("append", "s-1", 1, False)  # type: ignore[attr-defined]
    assert 0.0005 <= first.pause_seconds <= 0.001  # type: ignore[attr-defined]
    assert second.attempt == 2  # type: ignore[attr-defined]
    assert "server closed the connection" in first.error  # type: ignore[attr-defined]
    assert "retrying in" in first.getMessage()


def test_giving_up_is_logged_before_store_unavailable_is_raised(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="sessionstore")

    def down() -> None:
        raise OperationalError("connection refused", transient=True)

    with pytest.raises(StoreUnavailableError):
        RetryPolicy(attempts=2, base_delay=0.001, max_delay=0.001).run(down, what="read")

    retried, gave_up = _records(caplog, "retry")
    assert (retried.gave_up, gave_up.gave_up, gave_up.attempt) == (False, True, 2)  # type: ignore[attr-defined]
    assert gave_up.pause_seconds is None  # type: ignore[attr-defined]
    assert "giving up" in gave_up.getMessage()


def test_an_erasure_is_one_info_record_with_its_receipt(caplog: pytest.LogCaptureFixture) -> None:
    """The erasure path reports each receipt through ``log_erase`` (one record per session)."""
    caplog.set_level(logging.INFO, logger="sessionstore")

    log_erase("s-9", reason="user asked to be forgotten", event_count=12, mode="shredded")

    (erased,) = _records(caplog, "erase")
    assert (erased.name, erased.levelno) == ("sessionstore.store", logging.INFO)
    assert (erased.session_id, erased.event_count, erased.mode) == ("s-9", 12, "shredded")  # type: ignore[attr-defined]
    assert erased.getMessage() == "erased session s-9: user asked to be forgotten"


def test_a_field_shadowing_a_record_attribute_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sessionstore")
    with pytest.raises(ValueError, match="shadow"):
        log_erase("s-9", reason="r", name="x")


_QUIET = """
import logging
import sessionstore
from sessionstore import MessageAppended, RetryPolicy, Session, SessionConfig
from sessionstore.errors import OperationalError, StoreUnavailableError
from sessionstore.pipeline import snip
from sessionstore.pipeline._compaction import compact

store = sessionstore.open_store(":memory:")
session = Session.create(store, model="m", config=SessionConfig(snapshot_every=0))
for n in range(4):
    session.append([MessageAppended(role="user", content="x " * 500),
                    MessageAppended(role="assistant", content="y " * 500)])
compact(session, sessionstore.OfflineSummarizer())

def down():
    raise OperationalError("connection refused", transient=True)

try:
    RetryPolicy(attempts=2, base_delay=0.001).run(down, what="read")
except StoreUnavailableError:
    pass
print("handlers:", [type(h).__name__ for h in logging.getLogger("sessionstore").handlers])
"""


def test_nothing_is_printed_unless_the_host_configures_logging() -> None:
    """Warnings included: the NullHandler keeps logging's last-resort handler from printing them."""
    done = subprocess.run([sys.executable, "-c", _QUIET], capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout == "handlers: ['NullHandler']\n"


def test_a_host_configured_handler_receives_the_records() -> None:
    code = (
        "import logging\n"
        "logging.basicConfig(level=logging.INFO, format='%(name)s %(levelname)s %(message)s')\n"
    )
    done = subprocess.run([sys.executable, "-c", code + _QUIET], capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr
    assert "sessionstore.pipeline INFO compacted session" in done.stderr
    assert "sessionstore.store WARNING read failed on attempt 2 after" in done.stderr
    assert "giving up: connection refused" in done.stderr
