"""PostgreSQL row-level security with real roles: an owner that migrates and installs the
policies, and two tenant roles whose connections must not see or write each other's rows.

Each test creates its roles (unique names), connects as them with ``options=-c role=...`` (the
pooled-service setup docs/storage.md describes), and drops them afterwards.
"""

from __future__ import annotations

import asyncio
import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

import sessionstore
from sessionstore import (
    MessageAppended,
    SessionNotFoundError,
    SessionStore,
    ToolResultPersisted,
    ValidationError,
)
from sessionstore.cli import main
from sessionstore.errors import AccessDeniedError, SessionExistsError
from sessionstore.store import (
    SnapshotRecord,
    TiktokenCounter,
    disable_row_level_security,
    enable_row_level_security,
    grant_tenant_role,
    revoke_tenant_role,
    row_level_security_sql,
)
from sessionstore.store._sql import translate_errors

from .conftest import Backend

pytestmark = pytest.mark.postgres


def _as_role(url: str, role: str) -> str:
    """``url`` with ``-c role=ROLE`` added to its startup options: every connection is that role."""
    parsed = make_url(url)
    options = parsed.query.get("options", "")
    given = options if isinstance(options, str) else " ".join(options)
    return parsed.update_query_dict({"options": f"{given} -c role={role}".strip()}).render_as_string(
        hide_password=False
    )


@dataclass
class Roles:
    owner: str
    acme: str
    beta: str
    url: str
    schema: str = ""

    def url_for(self, role: str) -> str:
        return _as_role(self.url, role)

    def open(self, role: str, **kwargs: Any) -> SessionStore:
        kwargs.setdefault("token_counter", None)
        return sessionstore.open_store(self.url_for(role), **kwargs)


@pytest.fixture
def roles(pg_backend: Backend) -> Iterator[Roles]:
    """An owner role holding the (migrated) tables and two tenant roles, acme and beta, with
    row-level security enabled by the owner; all three roles are dropped afterwards."""
    tag = uuid.uuid4().hex[:10]
    names = Roles(f"ss_owner_{tag}", f"ss_acme_{tag}", f"ss_beta_{tag}", pg_backend.url)
    admin = create_engine(sessionstore.store.resolve_url(pg_backend.url))
    with admin.begin() as conn:
        schema = conn.execute(text("SELECT current_schema()")).scalar_one()
        names.schema = schema
        for role in (names.owner, names.acme, names.beta):
            conn.execute(text(f"CREATE ROLE {role} NOLOGIN"))
        # The owner owns the schema, as a service's migration role would (it grants USAGE on it).
        conn.execute(text(f"ALTER SCHEMA {schema} OWNER TO {names.owner}"))
    try:
        owner_engine = create_engine(sessionstore.store.resolve_url(names.url_for(names.owner)))
        try:
            sessionstore.store.upgrade(owner_engine)  # the tables belong to the owner role
            enable_row_level_security(owner_engine)
            grant_tenant_role(owner_engine, "acme", names.acme)
            grant_tenant_role(owner_engine, "beta", names.beta)
        finally:
            owner_engine.dispose()
        yield names
    finally:
        with admin.begin() as conn:
            # The schema (dropped by pg_backend) holds objects the owner owns: drop them first.
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
            conn.execute(text(f"CREATE SCHEMA {schema}"))
            for role in (names.acme, names.beta, names.owner):
                conn.execute(text(f"DROP OWNED BY {role}"))
                conn.execute(text(f"DROP ROLE {role}"))
        admin.dispose()


def _messages(n: int, prefix: str) -> list[MessageAppended]:
    return [MessageAppended(role="user", content=f"{prefix} {i}") for i in range(n)]


def _snapshot(session_id: str) -> SnapshotRecord:
    return SnapshotRecord(session_id, "api_context", 2, "none", 1, b"state of " + session_id.encode())


def _populate(roles: Roles) -> dict[str, str]:
    """Each tenant writes a session with events, a snapshot and a blob; the blobs' hashes."""
    blobs = {}
    for role, tenant in ((roles.acme, "acme"), (roles.beta, "beta")):
        with roles.open(role, token_counter=TiktokenCounter()) as store:
            store.create_session(f"{tenant}-1", tenant=tenant, user="alice", events=_messages(3, tenant))
            store.read(f"{tenant}-1")  # counts the events: the snapshot stores the counts along
            store.put_snapshot(_snapshot(f"{tenant}-1"))
            data = f"{tenant}'s tool output".encode()
            blobs[tenant] = store.put_blob(data, session_id=f"{tenant}-1").sha256
    return blobs


def test_a_tenant_reads_only_its_own_rows(roles: Roles) -> None:
    blobs = _populate(roles)
    with roles.open(roles.acme) as acme:
        assert [i.id for i in acme.list_sessions()] == ["acme-1"]
        assert acme.list_sessions(tenant="beta") == []
        assert {e.session_id for e in acme.read_all()} == {"acme-1"}
        assert len(list(acme.read("acme-1", verify=True))) == 3
        assert acme.verify("acme-1").ok
        assert acme.latest_snapshot("acme-1", "api_context", 2, "none") == _snapshot("acme-1")
        assert acme.get_blob(blobs["acme"]) == b"acme's tool output"

        with pytest.raises(SessionNotFoundError):
            acme.get_session("beta-1")
        with pytest.raises(SessionNotFoundError):
            acme.read("beta-1")
        assert acme.latest_snapshot("beta-1", "api_context", 2, "none") is None
        with pytest.raises(KeyError):
            acme.get_blob(blobs["beta"])
        with acme.engine.connect() as conn:  # type: ignore[attr-defined]
            own = "SELECT count(*) FROM token_counts WHERE session_id = 'acme-1'"
            assert conn.execute(text(own)).scalar_one() == 3
            # Not even a count leaks through plain SQL.
            for table in ("sessions", "events", "snapshots", "blobs", "blob_refs", "token_counts"):
                seen = conn.execute(
                    text(
                        f"SELECT count(*) FROM {table} WHERE tenant_id = 'beta'"
                        if table in ("sessions", "blobs", "blob_refs")
                        else f"SELECT count(*) FROM {table} WHERE session_id = 'beta-1'"
                    )
                )
                assert seen.scalar_one() == 0, table


def test_a_tenant_cannot_write_into_another_tenants_rows(roles: Roles) -> None:
    _populate(roles)
    with roles.open(roles.acme) as acme:
        with pytest.raises(SessionNotFoundError):
            acme.append("beta-1", _messages(1, "intruder"), expected_seq="any")
        with pytest.raises(SessionNotFoundError):
            acme.create_session("fork-of-beta", parent_session_id="beta-1", fork_seq=1)
        with pytest.raises(AccessDeniedError, match="row-level security"):
            acme.create_session("posing", tenant="beta", user="mallory")
        with pytest.raises(AccessDeniedError, match="row-level security"):
            acme.create_session("unowned")  # a tenant's connection creates only its tenant's sessions
        with pytest.raises(AccessDeniedError, match="row-level security"):
            acme.put_snapshot(_snapshot("beta-1"))
        with pytest.raises(SessionExistsError):
            acme.create_session("beta-1", tenant="acme")  # the id is taken, whoever holds it

        engine = acme.engine  # type: ignore[attr-defined]
        forged = (
            "INSERT INTO events (session_id, seq, event_id, type, schema_version, payload, prev_hash, hash,"
            " created_at) VALUES ('beta-1', 99, :eid, 'message_appended', 1, '{}', :h, :h, now())"
        )
        denied = pytest.raises(AccessDeniedError, match="row-level security")
        with denied, translate_errors(), engine.begin() as conn:
            conn.execute(text(forged), {"eid": str(uuid.uuid4()), "h": "0" * 64})
        # A token count for another tenant's event.
        with denied, translate_errors(), engine.begin() as conn:
            conn.execute(text("INSERT INTO token_counts (session_id, seq) VALUES ('beta-1', 99)"))
        # A blob reference under another tenant (it would keep that tenant's blob from an erasure).
        with denied, translate_errors(), engine.begin() as conn:
            conn.execute(
                text("INSERT INTO blob_refs (session_id, sha256, tenant_id) VALUES ('b', 'x', 'beta')")
            )
        for statement in ("DELETE FROM events", "DELETE FROM sessions", "TRUNCATE snapshots"):
            with pytest.raises(AccessDeniedError), translate_errors(), engine.begin() as conn:
                conn.execute(text(statement))
        with translate_errors(), engine.begin() as conn:
            # UPDATE is granted only for the append lock: no policy lets it reach a row.
            changed = conn.execute(text("UPDATE events SET payload = '{}' WHERE session_id = 'beta-1'"))
            assert changed.rowcount == 0

    with roles.open(roles.owner) as owner:
        beta = owner.read("beta-1")
        assert [e.seq for e in beta] == [1, 2, 3]
        assert owner.verify("beta-1").ok
        assert owner.latest_snapshot("beta-1", "api_context", 2, "none") == _snapshot("beta-1")


def test_the_owner_sees_every_tenant_and_tenants_keep_their_own_work(roles: Roles) -> None:
    _populate(roles)
    with roles.open(roles.acme) as acme:
        fork = acme.create_session("acme-fork", parent_session_id="acme-1", fork_seq=2)
        assert (fork.tenant, fork.user) == ("acme", "alice")
        acme.append("acme-1", _messages(1, "more"), expected_seq=3)
        info, created = acme.get_or_create_session("acme", "alice", "chat-1")
        assert created and acme.get_or_create_session("acme", "alice", "chat-1") == (info, False)
    with roles.open(roles.owner) as owner:
        listed = {i.id: i.tenant for i in owner.list_sessions()}
        assert listed == {
            "acme-1": "acme",
            "acme-fork": "acme",
            info.id: "acme",
            "beta-1": "beta",
        }
        assert all(owner.verify(sid).ok for sid in listed)
        assert [i.id for i in owner.list_sessions(tenant="beta")] == ["beta-1"]


def test_the_same_bytes_stored_by_two_tenants_are_each_tenants_own(roles: Roles) -> None:
    data = b"the same tool output, twice"
    with roles.open(roles.owner) as owner:
        stored_by_owner = owner.put_blob(data)
    for role in (roles.acme, roles.beta):
        with roles.open(role) as store:
            with pytest.raises(KeyError):
                store.get_blob(stored_by_owner.sha256)  # the owner's row is not the tenant's
            assert store.put_blob(data) == stored_by_owner
            assert store.put_blob(data) == stored_by_owner  # a repeat is still a no-op
            assert store.get_blob(stored_by_owner.sha256) == data
    with roles.open(roles.owner) as owner, owner.engine.connect() as conn:  # type: ignore[attr-defined]
        rows = conn.execute(text("SELECT tenant_id FROM blobs ORDER BY tenant_id NULLS FIRST")).scalars()
        assert list(rows) == [None, "acme", "beta"]


def test_revoking_a_role_leaves_it_nothing(roles: Roles) -> None:
    _populate(roles)
    owner_engine = create_engine(sessionstore.store.resolve_url(roles.url_for(roles.owner)))
    try:
        revoke_tenant_role(owner_engine, roles.acme)
    finally:
        owner_engine.dispose()
    engine = create_engine(sessionstore.store.resolve_url(roles.url_for(roles.acme)))
    try:
        for table in ("sessions", "events", "snapshots", "blobs", "blob_refs"):
            with pytest.raises(AccessDeniedError), translate_errors(), engine.connect() as conn:
                conn.execute(text(f"SELECT count(*) FROM {roles.schema}.{table}"))
    finally:
        engine.dispose()
    with roles.open(roles.beta) as beta:
        assert [i.id for i in beta.list_sessions()] == ["beta-1"]


def test_disabling_shows_every_row_to_a_privileged_role(roles: Roles) -> None:
    _populate(roles)
    owner_engine = create_engine(sessionstore.store.resolve_url(roles.url_for(roles.owner)))
    try:
        disable_row_level_security(owner_engine)
        with pytest.raises(ValidationError, match="not enabled"):
            grant_tenant_role(owner_engine, "gamma", roles.acme)
        enable_row_level_security(owner_engine)  # again, as after a fresh install
        grant_tenant_role(owner_engine, "acme", roles.acme)
    finally:
        owner_engine.dispose()
    with roles.open(roles.acme) as acme:
        assert [i.id for i in acme.list_sessions()] == ["acme-1"]


def test_bad_uses_are_refused_clearly(pg_backend: Backend, tmp_path: Any) -> None:
    engine = create_engine(sessionstore.store.resolve_url(pg_backend.url))
    try:
        with pytest.raises(ValidationError, match="db upgrade"):
            enable_row_level_security(engine)
        sessionstore.store.upgrade(engine)
        enable_row_level_security(engine)
        with pytest.raises(ValidationError, match="no PostgreSQL role"):
            grant_tenant_role(engine, "acme", f"no_such_role_{uuid.uuid4().hex[:8]}")
        with pytest.raises(ValidationError, match="control characters"):
            grant_tenant_role(engine, "ac\nme", "postgres")
    finally:
        engine.dispose()
    sqlite = sessionstore.store.create_engine_for_url(f"sqlite:///{tmp_path / 's.db'}")
    try:
        with pytest.raises(ValidationError, match="needs PostgreSQL"):
            enable_row_level_security(sqlite)
    finally:
        sqlite.dispose()


def test_the_cli_installs_grants_and_prints_the_policies(pg_backend: Backend) -> None:
    tag = uuid.uuid4().hex[:10]
    role = f"ss_cli_{tag}"
    admin = create_engine(sessionstore.store.resolve_url(pg_backend.url))
    with admin.begin() as conn:
        conn.execute(text(f"CREATE ROLE {role} NOLOGIN"))
    try:
        assert main(["db", "upgrade", "--db", pg_backend.url], out=io.StringIO()) == 0
        out = io.StringIO()
        assert main(["rls", "enable", "--db", pg_backend.url], out=out) == 0
        assert "row-level security enabled" in out.getvalue()
        out = io.StringIO()
        assert main(["rls", "grant", "acme", role, "--db", pg_backend.url], out=out) == 0
        assert f"role {role} is tenant acme" in out.getvalue()
        with sessionstore.open_store(_as_role(pg_backend.url, role), token_counter=None) as acme:
            acme.create_session("mine", tenant="acme")
            assert [i.id for i in acme.list_sessions()] == ["mine"]
        assert main(["rls", "revoke", role, "--db", pg_backend.url], out=io.StringIO()) == 0
        assert main(["rls", "disable", "--db", pg_backend.url], out=io.StringIO()) == 0
        printed = io.StringIO()
        assert main(["rls", "sql", "--schema", "agents"], out=printed) == 0
        assert printed.getvalue().splitlines() == [f"{s};" for s in row_level_security_sql("agents")]
        assert 'CREATE POLICY tenant_select ON "agents"."events"' in printed.getvalue()
        printed = io.StringIO()
        assert main(["rls", "sql", "--schema", "agents", "--table-prefix", "ss_"], out=printed) == 0
        assert 'CREATE POLICY tenant_select ON "agents"."ss_events"' in printed.getvalue()
        assert '"agents"."ss_tenant_roles"' in printed.getvalue()
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP OWNED BY {role}"))
            conn.execute(text(f"DROP ROLE {role}"))
        admin.dispose()


def test_an_async_tenant_store_is_held_to_the_same_policies(roles: Roles) -> None:
    """The async store runs the same statements on its own connections: the role keeps it in."""
    blobs = _populate(roles)

    async def scenario() -> None:
        acme = await sessionstore.store.open_async_store(roles.url_for(roles.acme), token_counter=None)
        try:
            assert [i.id for i in await acme.list_sessions()] == ["acme-1"]
            with pytest.raises(SessionNotFoundError):
                await acme.read("beta-1")
            with pytest.raises(SessionNotFoundError):
                await acme.append("beta-1", _messages(1, "intruder"), expected_seq="any")
            with pytest.raises(KeyError):
                await acme.get_blob(blobs["beta"])
            with pytest.raises(AccessDeniedError):
                await acme.create_session("posing", tenant="beta")
            results = await asyncio.gather(
                *(acme.get_or_create_session("acme", "alice", "chat-async") for _ in range(8))
            )
            assert len({info.id for info, _ in results}) == 1
            assert sum(created for _, created in results) == 1
        finally:
            await acme.close()

    asyncio.run(scenario())
    with roles.open(roles.beta) as beta:
        assert [e.seq for e in beta.read("beta-1")] == [1, 2, 3]


def test_row_level_security_on_prefixed_tables(pg_backend: Backend) -> None:
    """A store with a table prefix (embedded next to a host's tables): the same isolation."""
    tag = uuid.uuid4().hex[:10]
    acme_role, beta_role = f"ss_acme_{tag}", f"ss_beta_{tag}"
    admin = create_engine(sessionstore.store.resolve_url(pg_backend.url))
    with admin.begin() as conn:
        for role in (acme_role, beta_role):
            conn.execute(text(f"CREATE ROLE {role} NOLOGIN"))
    try:
        with sessionstore.open_store(pg_backend.url, table_prefix="agent_", migrate=True) as owner:
            owner.create_session("beta-1", tenant="beta", user="bob", events=_messages(2, "beta"))
        engine = create_engine(sessionstore.store.resolve_url(pg_backend.url))
        try:
            enable_row_level_security(engine, table_prefix="agent_")
            grant_tenant_role(engine, "acme", acme_role, table_prefix="agent_")
            with pytest.raises(ValidationError, match="db upgrade"):  # the unprefixed tables are not there
                enable_row_level_security(engine)
        finally:
            engine.dispose()
        acme_url = _as_role(pg_backend.url, acme_role)
        with sessionstore.open_store(acme_url, table_prefix="agent_", token_counter=None) as acme:
            acme.create_session("acme-1", tenant="acme", user="alice", events=_messages(1, "acme"))
            assert [i.id for i in acme.list_sessions()] == ["acme-1"]
            with pytest.raises(SessionNotFoundError):
                acme.read("beta-1")
            with pytest.raises(AccessDeniedError):
                acme.create_session("posing", tenant="beta")
        with sessionstore.open_store(pg_backend.url, table_prefix="agent_") as owner:
            assert {i.id for i in owner.list_sessions()} == {"acme-1", "beta-1"}
    finally:
        with admin.begin() as conn:
            for role in (acme_role, beta_role):
                conn.execute(text(f"DROP OWNED BY {role}"))
                conn.execute(text(f"DROP ROLE {role}"))
        admin.dispose()


def test_erasing_a_tenants_last_session_removes_its_copy_of_a_blob_and_never_anothers(roles: Roles) -> None:
    """Each tenant stores its own row of the same bytes: the owner's erasure of acme's session
    removes acme's row (beta's session still refers to the bytes, but not to acme's row); beta's
    row stays while a beta session refers to it, by ref or only by a payload."""
    data = b"the same tool output, in two tenants"
    with roles.open(roles.acme) as acme:
        acme.create_session("acme-1", tenant="acme", user="alice")
        sha = acme.put_blob(data, session_id="acme-1").sha256
    with roles.open(roles.beta) as beta:
        beta.create_session("beta-1", tenant="beta", user="bob")
        beta.put_blob(data, session_id="beta-1")
        beta.create_session("beta-2", tenant="beta", user="bob")
        ref = beta.put_blob(data)
        persisted = ToolResultPersisted(
            tool_use_id="t",
            blob_sha256=ref.sha256,
            original_chars=ref.size,
            preview="p",
            reason="size",
            location="l",
        )
        beta.append("beta-2", [persisted], expected_seq=0)

    def tenants_holding() -> list[str]:
        with roles.open(roles.owner) as owner, owner.engine.connect() as conn:  # type: ignore[attr-defined]
            query = text("SELECT tenant_id FROM blobs WHERE sha256 = :sha ORDER BY tenant_id")
            return list(conn.execute(query, {"sha": sha}).scalars())

    with roles.open(roles.owner) as owner:
        removed = [owner.erase(sid, reason="r")[0].blobs_removed for sid in ("acme-1", "beta-1")]
        assert tenants_holding() == ["beta"]
        removed.append(owner.erase("beta-2", reason="r")[0].blobs_removed)

    assert removed == [1, 0, 1]
    assert tenants_holding() == []
    with roles.open(roles.beta) as beta, pytest.raises(KeyError):
        beta.get_blob(sha)


def test_a_server_whose_role_cannot_store_counts_logs_once_and_keeps_serving(
    roles: Roles, caplog: pytest.LogCaptureFixture
) -> None:
    """``sessionstore serve`` stores the counts its reads make; a tenant role not granted
    ``token_counts`` (not re-granted after revision 0007) still gets its pages, one warning,
    and the counts are made again by later readers."""
    from fastapi.testclient import TestClient

    from sessionstore.serve import create_app

    with roles.open(roles.acme, token_counter=TiktokenCounter()) as acme:  # counts deferred
        acme.create_session("acme-2", tenant="acme", user="alice", events=_messages(3, "acme"))
    owner = create_engine(sessionstore.store.resolve_url(roles.url_for(roles.owner)))
    with owner.begin() as conn:
        conn.execute(text(f"REVOKE INSERT ON token_counts FROM {roles.acme}"))
    owner.dispose()

    with roles.open(roles.acme, token_counter=TiktokenCounter()) as store:
        client = TestClient(create_app(store, store_counts_every=0), base_url="http://127.0.0.1")
        with caplog.at_level("WARNING", logger="sessionstore.serve"):
            pages = [client.get("/api/sessions/acme-2/events").status_code for _ in range(3)]
        with store.engine.connect() as conn:  # type: ignore[attr-defined]
            stored = conn.execute(text("SELECT count(*) FROM token_counts")).scalar_one()
    assert pages == [200, 200, 200]
    warnings = [r.getMessage() for r in caplog.records if r.name == "sessionstore.serve"]
    assert len(warnings) == 1
    assert warnings[0].startswith("token counts not stored (tried again later")
    assert stored == 0


def test_a_server_stores_counts_again_at_its_interval_once_the_role_may(roles: Roles) -> None:
    """After a failure the server tries less often (60 s, then more); the first store that
    succeeds puts it back on its own interval."""
    from sessionstore.serve._app import CountKeeper

    with roles.open(roles.acme, token_counter=TiktokenCounter()) as acme:
        acme.create_session("acme-3", tenant="acme", user="alice", events=_messages(3, "acme"))
    owner = create_engine(sessionstore.store.resolve_url(roles.url_for(roles.owner)))
    now = [1000.0]
    with roles.open(roles.acme, token_counter=TiktokenCounter()) as store:
        keeper = CountKeeper(store, 30.0, clock=lambda: now[0])
        with owner.begin() as conn:
            conn.execute(text(f"REVOKE INSERT ON token_counts FROM {roles.acme}"))
        store.read("acme-3")  # three counts to store
        now[0] += 30
        assert keeper.due()
        keeper.store()  # refused
        now[0] += 59
        assert not keeper.due()
        now[0] += 1
        assert keeper.due()
        keeper.store()  # refused again: 120 s now
        with owner.begin() as conn:
            conn.execute(text(f"GRANT INSERT ON token_counts TO {roles.acme}"))
        now[0] += 119
        assert not keeper.due()
        now[0] += 1
        keeper.store()  # stored: back to every 30 s
        now[0] += 30
        assert keeper.due()
        with store.engine.connect() as conn:  # type: ignore[attr-defined]
            stored = conn.execute(text("SELECT count(*) FROM token_counts")).scalar_one()
    owner.dispose()
    assert stored == 3
