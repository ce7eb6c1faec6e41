"""Sessions with a tenant, a user and an external id: creation, inheritance, hashing, listing,
get-or-create under concurrency, and databases written before the keys existed.

Runs on every backend (SQLite file and memory, PostgreSQL).
"""

from __future__ import annotations

import io
import json
import threading
from datetime import UTC, datetime
from typing import Any, TypedDict

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import DateTime, bindparam, text

import sessionstore
from sessionstore import MessageAppended, Session, SessionStarted, SessionStore, ValidationError, open_store
from sessionstore.agent import spawn_subagent
from sessionstore.claude_code import import_claude_code
from sessionstore.cli import main
from sessionstore.errors import SessionExistsError
from sessionstore.events._base import encode_event
from sessionstore.store import SessionWrite
from sessionstore.store._config import create_engine_for_url
from sessionstore.store._hashing import SessionIdentity, event_hash, session_genesis
from sessionstore.store._migrate import upgrade

from ._claude_code_corpus import PARENT_SESSION, flat_project
from .conftest import Backend
from .strategies import examples
from .test_tamper import _tamper

pytestmark = pytest.mark.store_contract


class _Owner(TypedDict, total=False):
    """The owner arguments of ``create_session``."""

    tenant: str
    user: str


def _messages(n: int, prefix: str = "message") -> list[MessageAppended]:
    return [MessageAppended(role="user", content=f"{prefix} {i}") for i in range(n)]


class TestOwnerKeys:
    def test_a_session_carries_its_tenant_user_and_external_id(self, store: SessionStore) -> None:
        created = store.create_session(
            "s1", tenant="acme", user="alice@acme.example", external_id="chat-1", events=_messages(1)
        )
        stored = store.get_session("s1")

        assert (stored.tenant, stored.user, stored.external_id) == ("acme", "alice@acme.example", "chat-1")
        assert stored == created
        assert store.list_sessions()[0] == stored
        assert store.verify("s1").ok

    def test_a_session_without_them_has_none(self, store: SessionStore) -> None:
        info = store.create_session("plain")
        assert (info.tenant, info.user, info.external_id) == (None, None, None)
        assert store.get_session("plain") == info

    @pytest.mark.parametrize(
        ("kwargs", "field", "match"),
        [
            ({"user": "alice"}, "tenant", "a user needs a tenant"),
            ({"tenant": "acme", "external_id": "x"}, "external_id", "needs a tenant and a user"),
            ({"tenant": ""}, "tenant", "1-255 characters"),
            ({"tenant": "a" * 256}, "tenant", "1-255 characters"),
            ({"tenant": "acme", "user": "al\nice"}, "user", "control characters"),
            ({"tenant": "acme\ud800"}, "tenant", "lone surrogates"),
            ({"tenant": 7}, "tenant", "must be a str, not int"),
        ],
    )
    def test_bad_keys_are_refused_and_nothing_is_written(
        self, store: SessionStore, kwargs: dict[str, Any], field: str, match: str
    ) -> None:
        with pytest.raises(ValidationError, match=match) as caught:
            store.create_session("bad", **kwargs)
        assert caught.value.field == field
        assert store.list_sessions() == []

    def test_a_key_names_one_session_only(self, store: SessionStore) -> None:
        store.create_session("first", tenant="acme", user="alice", external_id="chat-1")
        with pytest.raises(SessionExistsError, match="'first' already has tenant 'acme'") as caught:
            store.create_session("second", tenant="acme", user="alice", external_id="chat-1")

        assert caught.value.key == ("acme", "alice", "chat-1")
        assert [i.id for i in store.list_sessions()] == ["first"]
        # The same external id under another user or tenant is another session.
        store.create_session("bobs", tenant="acme", user="bob", external_id="chat-1")
        store.create_session("other-tenants", tenant="beta", user="alice", external_id="chat-1")
        assert len(store.list_sessions()) == 3

    def test_write_sessions_creates_owned_sessions(self, store: SessionStore) -> None:
        store.write_sessions(
            [
                SessionWrite("parent", _messages(2), create=True, tenant="acme", user="alice"),
                SessionWrite("child", _messages(1), create=True, parent_session_id="parent"),
            ]
        )
        child = store.get_session("child")
        assert (child.tenant, child.user) == ("acme", "alice")
        assert store.verify("parent").ok and store.verify("child").ok
        with pytest.raises(ValidationError, match="given when it is created"):
            store.write_sessions([SessionWrite("parent", _messages(1), tenant="beta")])


class TestInheritance:
    def test_a_fork_belongs_to_its_parent_owner(self, store: SessionStore) -> None:
        store.create_session("p", tenant="acme", user="alice", external_id="chat-1", events=_messages(3))
        fork = Session(store, "p").fork(at_seq=2, fork_id="p-fork")

        info = store.get_session(fork.id)
        assert (info.tenant, info.user, info.external_id) == ("acme", "alice", None)
        assert store.verify(fork.id).ok
        # A fork of the fork too.
        grandchild = store.create_session("p-fork-2", parent_session_id=fork.id, fork_seq=1)
        assert (grandchild.tenant, grandchild.user) == ("acme", "alice")

    def test_a_sub_agent_belongs_to_its_parent_owner(self, store: SessionStore) -> None:
        store.create_session("main", tenant="acme", user="alice", events=[SessionStarted(model="m")])
        child = spawn_subagent(Session(store, "main"), tool_use_id="toolu_1", session_id="main-sub")

        info = store.get_session(child.id)
        assert (info.tenant, info.user) == ("acme", "alice")
        assert store.list_sessions(tenant="acme", user="alice") == [store.get_session("main"), info]

    @pytest.mark.parametrize("kwargs", [{"tenant": "beta"}, {"tenant": "acme", "user": "bob"}])
    def test_a_fork_cannot_move_to_another_owner(self, store: SessionStore, kwargs: _Owner) -> None:
        store.create_session("p", tenant="acme", user="alice", events=_messages(1))
        with pytest.raises(ValidationError, match="belongs to its parent's"):
            store.create_session("f", parent_session_id="p", fork_seq=1, **kwargs)
        assert [i.id for i in store.list_sessions()] == ["p"]

    def test_a_fork_may_restate_its_parent_owner_and_take_its_own_external_id(
        self, store: SessionStore
    ) -> None:
        store.create_session("p", tenant="acme", user="alice", external_id="chat-1")
        fork = store.create_session(
            "f", parent_session_id="p", tenant="acme", user="alice", external_id="chat-2"
        )
        assert (fork.tenant, fork.user, fork.external_id) == ("acme", "alice", "chat-2")

    def test_an_unowned_parent_gives_an_unowned_fork(self, store: SessionStore) -> None:
        store.create_session("p", events=_messages(1))
        with pytest.raises(ValidationError, match="belongs to its parent's"):
            store.create_session("f", parent_session_id="p", tenant="acme")
        assert store.create_session("f", parent_session_id="p").tenant is None


class TestChainBinding:
    def test_moving_a_session_to_another_owner_breaks_its_chain_at_seq_1(self, store: SessionStore) -> None:
        """The genesis binds tenant, user and external id: an edited row no longer verifies."""
        for column, value in (("tenant_id", "beta"), ("user_id", "mallory"), ("external_id", "chat-9")):
            sid = f"moved-{column}"
            store.create_session(sid, tenant="acme", user="alice", external_id=sid, events=_messages(2))
            assert store.verify(sid).ok
            _tamper(store, f"UPDATE sessions SET {column} = :value WHERE id = :sid", value=value, sid=sid)

            report = store.verify(sid)
            assert not report.ok
            assert report.first_bad_seq == 1

    def test_giving_an_old_session_an_owner_breaks_its_chain(self, store: SessionStore) -> None:
        store.create_session("old", events=_messages(2))
        _tamper(store, "UPDATE sessions SET tenant_id = 'acme' WHERE id = 'old'")
        assert store.verify("old").first_bad_seq == 1

    def test_unowned_genesis_is_what_earlier_versions_computed(self) -> None:
        """Pinned values computed by the code before owners existed: their chains still verify."""
        moment = datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=UTC)
        plain = SessionIdentity("before-0004", None, None, moment, {"k": "v"})
        fork = SessionIdentity("fork-0004", "before-0004", 2, moment, {})

        assert (
            session_genesis(plain, "") == "5c7392033fbabb6e73f3c5518baef57db880a9248d4c04d805e465650f4ed49a"
        )
        assert session_genesis(fork, "ab" * 32) == (
            "8207a5d69a08bfafc43af3d8dae67d5ac596ba379cc0a2f101eb0912fe669c47"
        )
        owned = SessionIdentity("before-0004", None, None, moment, {"k": "v"}, tenant="acme")
        assert session_genesis(owned, "") != session_genesis(plain, "")


class TestListing:
    def _populate(self, store: SessionStore) -> None:
        for i in range(7):
            store.create_session(f"acme-alice-{i}", tenant="acme", user="alice")
        for i in range(3):
            store.create_session(f"acme-bob-{i}", tenant="acme", user="bob")
        store.create_session("beta-alice", tenant="beta", user="alice")
        store.create_session("nobody")

    def test_sessions_of_a_tenant_or_user(self, store: SessionStore) -> None:
        self._populate(store)

        alice = [i.id for i in store.list_sessions(tenant="acme", user="alice")]
        acme = [i.id for i in store.list_sessions(tenant="acme")]

        assert alice == [f"acme-alice-{i}" for i in range(7)]
        assert acme == alice + [f"acme-bob-{i}" for i in range(3)]
        assert [i.id for i in store.list_sessions(tenant="beta", user="alice")] == ["beta-alice"]
        assert store.list_sessions(tenant="gamma") == []
        assert len(store.list_sessions()) == 12

    def test_pages_follow_a_stable_cursor(self, store: SessionStore) -> None:
        """Paging with the last id as the cursor sees every session once, even while new ones
        are created between pages (they appear in id order, never shifting a page)."""
        self._populate(store)
        seen: list[str] = []
        after = None
        while True:
            page = store.list_sessions(tenant="acme", user="alice", limit=3, after=after)
            if not page:
                break
            seen += [i.id for i in page]
            after = page[-1].id
            if len(seen) == 3:
                store.create_session("acme-alice-0a", tenant="acme", user="alice")  # before the cursor
                store.create_session("acme-alice-9", tenant="acme", user="alice")  # after it

        assert seen == [f"acme-alice-{i}" for i in range(7)] + ["acme-alice-9"]
        assert len(seen) == len(set(seen))

    def test_a_user_without_a_tenant_is_refused(self, store: SessionStore) -> None:
        with pytest.raises(ValidationError, match="a user needs a tenant"):
            store.list_sessions(user="alice")
        with pytest.raises(ValidationError, match="control characters"):
            store.list_sessions(tenant="a\x00b")


class TestGetOrCreate:
    def test_creates_once_then_returns_the_same_session(self, store: SessionStore) -> None:
        first, created = store.get_or_create_session(
            "acme", "alice", "chat-1", metadata={"title": "hi"}, events=[SessionStarted(model="m")]
        )
        again, created_again = store.get_or_create_session("acme", "alice", "chat-1", metadata={"other": 1})

        assert (created, created_again) == (True, False)
        assert again == first
        assert again.metadata == {"title": "hi"}
        assert store.last_seq(first.id) == 1
        assert store.get_or_create_session("acme", "bob", "chat-1")[0].id != first.id

    def test_a_chosen_id_taken_by_another_key_is_an_error(self, store: SessionStore) -> None:
        store.create_session("taken", tenant="acme", user="bob", external_id="x")
        with pytest.raises(SessionExistsError, match="'taken' already exists"):
            store.get_or_create_session("acme", "alice", "chat-1", session_id="taken")

    def test_needs_all_three_keys(self, store: SessionStore) -> None:
        with pytest.raises(ValidationError, match="1-255 characters"):
            store.get_or_create_session("acme", "", "chat-1")
        with pytest.raises(ValidationError, match="needs a tenant, a user and an external_id"):
            store.get_or_create_session("acme", "alice", None)  # type: ignore[arg-type]

    def test_concurrent_callers_get_one_session(self, backend: Backend) -> None:
        """Threads racing on the same key, each with its own store (its own connections on a
        shared database): exactly one creates, every one gets that session."""
        stores = [backend.open(token_counter=None)]
        if backend.shareable:
            stores += [backend.open(token_counter=None) for _ in range(5)]
        workers = 12
        barrier = threading.Barrier(workers)
        results: list[tuple[str, bool]] = []
        errors: list[BaseException] = []

        def worker(n: int) -> None:
            store = stores[n % len(stores)]
            barrier.wait()
            try:
                for key in range(5):
                    info, created = store.get_or_create_session("acme", "alice", f"chat-{key}")
                    results.append((info.id, created))
            except BaseException as e:  # reported by the assertion below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        try:
            assert errors == []
            ids = {sid for sid, _ in results}
            assert len(results) == workers * 5
            assert len(ids) == 5
            assert sum(created for _, created in results) == 5
            assert len(stores[0].list_sessions(tenant="acme", user="alice")) == 5
        finally:
            for store in stores:
                store.close()


def test_a_database_from_before_owners_verifies_after_the_migration(shared_backend: Backend) -> None:
    """A 0003 database, its rows written as that revision wrote them (a plain session and a fork),
    upgraded to the head: every chain verifies, identity bound as before; new appends continue it."""
    engine = create_engine_for_url(shared_backend.url)
    upgrade(engine, "0003")
    moment = datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=UTC)
    insert_session = text(
        "INSERT INTO sessions (id, parent_session_id, fork_seq, created_at, metadata) "
        "VALUES (:id, :parent, :fork_seq, :created_at, :metadata)"
    ).bindparams(bindparam("created_at", type_=DateTime(timezone=True)))
    insert_event = text(
        "INSERT INTO events (session_id, seq, event_id, type, schema_version, payload, token_count, "
        "prev_hash, hash, created_at) VALUES (:sid, :seq, :event_id, :type, :version, :payload, NULL, "
        ":prev, :hash, :created_at)"
    ).bindparams(bindparam("created_at", type_=DateTime(timezone=True)))

    def write(identity: SessionIdentity, fork_point: str, count: int) -> str:
        conn.execute(
            insert_session,
            {
                "id": identity.session_id,
                "parent": identity.parent_session_id,
                "fork_seq": identity.fork_seq,
                "created_at": moment,
                "metadata": '{"k":"v"}',
            },
        )
        prev = session_genesis(identity, fork_point)
        for seq, event in enumerate(_messages(count, identity.session_id), start=1):
            payload = encode_event(event)
            digest = event_hash(
                prev, identity.session_id, seq, str(event.event_id), event.type, 1, None, moment, payload
            )
            conn.execute(
                insert_event,
                {
                    "sid": identity.session_id,
                    "seq": seq,
                    "event_id": str(event.event_id),
                    "type": event.type,
                    "version": 1,
                    "payload": payload,
                    "prev": prev,
                    "hash": digest,
                    "created_at": moment,
                },
            )
            prev = digest
        return prev

    try:
        with engine.begin() as conn:
            write(SessionIdentity("old", None, None, moment, {"k": "v"}), "", 3)
            at_two = conn.execute(
                text("SELECT hash FROM events WHERE session_id = 'old' AND seq = 2")
            ).scalar_one()
            write(SessionIdentity("old-fork", "old", 2, moment, {"k": "v"}), at_two, 2)
        upgrade(engine)
    finally:
        engine.dispose()

    with shared_backend.open(migrate=False) as store:
        for sid in ("old", "old-fork"):
            report = store.verify(sid)
            assert report.ok, report.reason
            assert report.identity_bound
            assert store.get_session(sid).tenant is None
        store.append("old", _messages(1, "after"), expected_seq=3)
        assert store.verify("old").ok
        assert store.create_session("new-fork", parent_session_id="old", fork_seq=4).tenant is None
        assert store.verify("new-fork").ok
        assert store.list_sessions(tenant="acme") == []


def test_the_cli_creates_gets_and_lists_owned_sessions(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "cli.db")

    def run(*argv: str) -> tuple[int, str]:
        out = io.StringIO()
        return main([*argv, "--db", db], out=out), out.getvalue()

    assert run("db", "upgrade")[0] == 0
    code, first = run("new", "--tenant", "acme", "--user", "alice", "--external-id", "chat-1")
    assert code == 0
    assert run("new", "--tenant", "acme", "--user", "alice", "--external-id", "chat-1") == (0, first)
    assert run("new", "--id", "a2", "--tenant", "acme", "--user", "alice")[0] == 0
    assert run("new", "--id", "b1", "--tenant", "acme", "--user", "bob")[0] == 0
    assert run("new", "--id", "plain")[0] == 0

    code, listed = run("sessions", "--tenant", "acme", "--user", "alice", "--json")
    rows = [json.loads(line) for line in listed.splitlines()]
    assert code == 0
    assert sorted(r["id"] for r in rows) == sorted([first.strip(), "a2"])
    assert {(r["tenant"], r["user"]) for r in rows} == {("acme", "alice")}
    page = run("sessions", "--tenant", "acme", "--limit", "1")[1].split()[0]
    rest = [line.split()[0] for line in run("sessions", "--tenant", "acme", "--after", page)[1].splitlines()]
    assert len(rest) == 2 and page not in rest  # ids, not text: a uuid may hold "a2"
    assert "tenant=acme user=bob" in run("sessions", "--tenant", "acme")[1]

    assert run("new", "--user", "alice", "--external-id", "x")[0] == 1
    assert "needs a tenant, a user and an external_id" in capsys.readouterr().err
    assert run("sessions", "--user", "alice")[0] == 1
    assert "a user needs a tenant" in capsys.readouterr().err


class TestOtherWaysIn:
    def test_session_create_takes_the_owner(self, store: SessionStore) -> None:
        session = Session.create(store, "s", model="m", tenant="acme", user="alice", external_id="chat-1")
        info = store.get_session(session.id)
        assert (info.tenant, info.user, info.external_id) == ("acme", "alice", "chat-1")
        assert store.get_or_create_session("acme", "alice", "chat-1") == (info, False)

    def test_an_import_belongs_to_the_tenant_and_user_given(self, tmp_path: Any, store: SessionStore) -> None:
        """The main session gets them, its sub-agents inherit them; a re-import for someone else
        is refused and changes nothing."""
        folder = flat_project(tmp_path)
        main_file = folder / f"{PARENT_SESSION}.jsonl"
        report = import_claude_code(store, [main_file], tenant="acme", user="alice")

        owners = {
            s.session_id: (store.get_session(s.session_id).tenant, store.get_session(s.session_id).user)
            for s in report.sessions
        }
        assert len(owners) == 3
        assert set(owners.values()) == {("acme", "alice")}
        assert all(store.verify(sid).ok for sid in owners)
        assert import_claude_code(store, [main_file], tenant="acme", user="alice").sessions[0].written == 0
        with pytest.raises(ValidationError, match="already stored with tenant 'acme', not 'beta'"):
            import_claude_code(store, [main_file], tenant="beta", user="alice")
        with pytest.raises(ValidationError, match="a user needs a tenant"):
            import_claude_code(store, [main_file], user="alice")
        assert len(store.list_sessions()) == 3

    def test_the_cli_imports_for_a_tenant(self, tmp_path: Any) -> None:
        db = str(tmp_path / "cli.db")
        main_file = flat_project(tmp_path) / f"{PARENT_SESSION}.jsonl"
        assert main(["db", "upgrade", "--db", db], out=io.StringIO()) == 0
        assert (
            main(
                ["import", str(main_file), "--tenant", "acme", "--user", "alice", "--db", db],
                out=io.StringIO(),
            )
            == 0
        )
        with open_store(db, token_counter=None) as store:
            assert len(store.list_sessions(tenant="acme", user="alice")) == 3


_KEY = st.text(st.characters(exclude_categories=("Cc", "Cs")), min_size=1, max_size=255)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tenant=_KEY, user=_KEY, external_id=_KEY, other=_KEY, column=st.sampled_from(["tenant_id", "user_id"]))
@example(tenant="a", user="b c", external_id="d", other="a\u00a0", column="tenant_id")
def test_any_valid_key_round_trips_and_is_bound_into_the_chain(
    tenant: str, user: str, external_id: str, other: str, column: str
) -> None:
    """Whatever the keys (any non-control Unicode, up to 255 characters), they read back exactly,
    find the session again, and changing one to any other value breaks the chain at seq 1."""
    with sessionstore.open_store(":memory:", token_counter=None) as store:
        info, _ = store.get_or_create_session(tenant, user, external_id, events=_messages(1))
        assert store.get_session(info.id) == info
        assert (info.tenant, info.user, info.external_id) == (tenant, user, external_id)
        assert store.list_sessions(tenant=tenant, user=user) == [info]
        assert store.verify(info.id).ok
        assume(other != (tenant if column == "tenant_id" else user))

        _tamper(store, f"UPDATE sessions SET {column} = :value", value=other)

        assert store.verify(info.id).first_bad_seq == 1


@pytest.mark.parametrize(
    "key",
    ["ü" * 255, "🦜 parrot", "O'Brien; DROP TABLE sessions", "tab-free\u2028line-separator", "%s ? :x"],
)
def test_unusual_keys_round_trip_on_every_backend(store: SessionStore, key: str) -> None:
    info, created = store.get_or_create_session(key, key, key)
    again, created_again = store.get_or_create_session(key, key, key)

    assert (created, created_again) == (True, False)
    assert again == info == store.get_session(info.id)
    assert (info.tenant, info.user, info.external_id) == (key, key, key)
    assert store.list_sessions(tenant=key, user=key) == [info]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"metadata": ["not", "a", "dict"]}, "must be a JSON object"),
        ({"session_id": "no spaces allowed"}, "invalid session id"),
        ({"events": [{"type": "no_such_event"}]}, "no_such_event"),
    ],
)
def test_get_or_create_checks_its_input_even_when_the_session_exists(
    store: SessionStore, kwargs: dict[str, Any], match: str
) -> None:
    """Bad input is an error whether the call would create the session or find it."""
    for _ in range(2):
        with pytest.raises(sessionstore.SessionStoreError, match=match):
            store.get_or_create_session("acme", "alice", "chat-1", **kwargs)
        store.get_or_create_session("acme", "alice", "chat-1")
    assert len(store.list_sessions()) == 1
