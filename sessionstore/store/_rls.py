"""PostgreSQL row-level security: one tenant's connection sees and writes only its own rows.

The tenant is taken from the connection's **role** (``current_user``): a table maps each tenant
role to its tenant, and every policy compares a row's tenant with the one mapped to the role
running the statement. A role is a database credential: no statement a tenant's connection
runs can change which tenant it is (a ``SET app.tenant`` setting could be overwritten by any
SQL the application lets through). With a connection pool a service either gives each tenant a
login role (one small pool per tenant), or logs in as one application role that is a member of
every tenant role and opens each tenant's store with ``options=-c role=TENANT_ROLE`` in the URL,
so every pooled connection of that store is that tenant for its whole life (docs/storage.md,
"Tenants").

What the policies hold (the owner, who runs migrations, is not subject to them):

* ``sessions``: a tenant reads and creates only sessions whose ``tenant_id`` is its own.
* ``events`` and ``snapshots``: only those of its own sessions (snapshots may also be pruned).
* ``blobs``: only the blobs it stored; a blob is stored once per tenant (the column default
  fills in the tenant), so two tenants storing the same bytes do not share a row.
* ``blob_refs``: only the references its connections wrote (the same column default), which
  may name a session not created yet (an import stores blobs first).
* ``token_counts``: only the counts of its own sessions' events.
* ``session_keys`` and ``erasures``: only its own sessions' wrapped keys and erasure receipts
  (the receipt of a purged session, whose row is gone, is the owner's to read). Erasing is the
  owner's too: a tenant role may not delete keys or write receipts.

Nothing here is a migration: it is a deployment choice on PostgreSQL, installed by the owner
with ``enable_row_level_security`` (or ``sessionstore rls enable``) after ``db upgrade``. Every
function takes the store's ``table_prefix`` and ``schema`` (default: none, and the connection's
current schema), as the store does; the role map and the tenant function are named like the
version table (``sessionstore_tenant_roles``, or ``<prefix>tenant_roles``).
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine, inspect, text

from ..errors import ValidationError
from ._contract import check_owner_key
from ._schema import LEGACY_VERSION_TABLE, StoreTables, store_tables
from ._sql import translate_errors

__all__ = [
    "disable_row_level_security",
    "enable_row_level_security",
    "grant_tenant_role",
    "revoke_tenant_role",
    "row_level_security_sql",
]

_TABLES = (
    "sessions",
    "events",
    "snapshots",
    "blobs",
    "blob_refs",
    "session_keys",
    "erasures",
    "token_counts",
)


def _ident(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def _literal(value: str) -> str:
    """``value`` as a quoted SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


class _Names:
    """The schema-qualified names of one store's objects, for raw SQL."""

    def __init__(self, tables: StoreTables, schema: str) -> None:
        self.tables = tables
        self.schema = _ident(schema)
        self.role_map = self.of(tables.own_name("tenant_roles"))
        self.tenant = f"{self.of(tables.own_name('current_tenant'))}()"

    def of(self, name: str) -> str:
        return f"{self.schema}.{_ident(name)}"

    def table(self, base: str) -> str:
        return self.of(self.tables.name(base))


def row_level_security_sql(schema: str = "public", *, table_prefix: str = "") -> list[str]:
    """The statements ``enable_row_level_security`` runs, for the tables in ``schema``.

    For a DBA who applies them through their own change process instead (``sessionstore rls
    sql`` prints them).

    Raises:
        ValidationError: a schema or prefix that is not a plain lower-case name.
    """
    return _enable_sql(_Names(store_tables(table_prefix, schema), schema))


def _enable_sql(n: _Names) -> list[str]:
    blobs = n.tables.name("blobs")

    def own_session(table: str) -> str:
        return (
            f"EXISTS (SELECT 1 FROM {n.table('sessions')} AS owned "
            f"WHERE owned.id = {n.table(table)}.session_id AND owned.tenant_id = {n.tenant})"
        )

    statements = [
        f"CREATE TABLE IF NOT EXISTS {n.role_map} "
        "(role_name name PRIMARY KEY, tenant_id varchar(255) NOT NULL)",
        f"ALTER TABLE {n.role_map} ENABLE ROW LEVEL SECURITY",
        f"DROP POLICY IF EXISTS own_role ON {n.role_map}",
        # A tenant role reads only its own mapping (it learns no other tenant's name).
        f"CREATE POLICY own_role ON {n.role_map} FOR SELECT USING (role_name = current_user)",
        # STABLE: evaluated once per statement, not once per row.
        f"CREATE OR REPLACE FUNCTION {n.tenant} RETURNS varchar LANGUAGE sql STABLE AS "
        f"$$ SELECT tenant_id FROM {n.role_map} WHERE role_name = current_user $$",
        # Blobs are stored once per tenant: the key becomes (sha256, tenant), and the tenant a
        # connection stores under is filled in by the database, from its role.
        f"ALTER TABLE {n.table('blobs')} DROP CONSTRAINT IF EXISTS {_ident('pk_' + blobs)}",
        f"CREATE UNIQUE INDEX IF NOT EXISTS {_ident('uq_' + blobs + '_sha256_tenant')} "
        f"ON {n.table('blobs')} (sha256, COALESCE(tenant_id, ''))",
        f"ALTER TABLE {n.table('blobs')} ALTER COLUMN tenant_id SET DEFAULT {n.tenant}",
        f"ALTER TABLE {n.table('blob_refs')} ALTER COLUMN tenant_id SET DEFAULT {n.tenant}",
    ]
    policies = {
        "sessions": [
            ("SELECT", f"USING (tenant_id = {n.tenant})"),
            ("INSERT", f"WITH CHECK (tenant_id = {n.tenant})"),
        ],
        "events": [
            ("SELECT", f"USING ({own_session('events')})"),
            ("INSERT", f"WITH CHECK ({own_session('events')})"),
        ],
        "snapshots": [
            ("SELECT", f"USING ({own_session('snapshots')})"),
            ("INSERT", f"WITH CHECK ({own_session('snapshots')})"),
            # Snapshots are caches: put_snapshot prunes a key's older ones.
            ("DELETE", f"USING ({own_session('snapshots')})"),
        ],
        "blobs": [
            ("SELECT", f"USING (tenant_id = {n.tenant})"),
            ("INSERT", f"WITH CHECK (tenant_id = {n.tenant})"),
        ],
        "blob_refs": [
            ("SELECT", f"USING (tenant_id = {n.tenant})"),
            ("INSERT", f"WITH CHECK (tenant_id = {n.tenant})"),
        ],
        "session_keys": [
            ("SELECT", f"USING ({own_session('session_keys')})"),
            ("INSERT", f"WITH CHECK ({own_session('session_keys')})"),
        ],
        "erasures": [("SELECT", f"USING ({own_session('erasures')})")],
        "token_counts": [
            ("SELECT", f"USING ({own_session('token_counts')})"),
            ("INSERT", f"WITH CHECK ({own_session('token_counts')})"),
        ],
    }
    for base, rules in policies.items():
        statements.append(f"ALTER TABLE {n.table(base)} ENABLE ROW LEVEL SECURITY")
        for command, rule in rules:
            name = f"tenant_{command.lower()}"
            statements.append(f"DROP POLICY IF EXISTS {name} ON {n.table(base)}")
            statements.append(f"CREATE POLICY {name} ON {n.table(base)} FOR {command} {rule}")
    return statements


def _names(conn: Connection, table_prefix: str, schema: str | None) -> _Names:
    """The store's names on this connection (``schema`` None: the connection's current schema).

    Raises:
        ValidationError: not PostgreSQL, a bad prefix or schema, or no migrated tables there.
    """
    if conn.dialect.name != "postgresql":
        msg = f"row-level security needs PostgreSQL, not {conn.dialect.name}"
        raise ValidationError(msg, field="url")
    tables = store_tables(table_prefix, schema)
    where = schema or conn.execute(text("SELECT current_schema()")).scalar()
    if not where or not inspect(conn).has_table(tables.name("sessions"), schema=where):
        msg = "no sessionstore tables in this schema: run `sessionstore db upgrade` first"
        raise ValidationError(msg, field="url")
    return _Names(tables, str(where))


def _has(conn: Connection, n: _Names, name: str) -> bool:
    return inspect(conn).has_table(name, schema=n.schema.strip('"'))


def _position_sequence(conn: Connection, n: _Names) -> str:
    """The sequence that numbers events' global positions, as SQL."""
    found = conn.execute(text("SELECT pg_get_serial_sequence(:t, 'position')"), {"t": n.table("events")})
    return str(found.scalar_one())


def enable_row_level_security(engine: Engine, *, table_prefix: str = "", schema: str | None = None) -> None:
    """Install the tenant policies (see the module docstring) in one transaction; idempotent.

    Run it as the tables' owner. Until a role is granted a tenant (``grant_tenant_role``),
    only the owner (and superusers) can read or write anything.

    Raises:
        ValidationError: not PostgreSQL, or the schema is not migrated.
    """
    with translate_errors(), engine.begin() as conn:
        for statement in _enable_sql(_names(conn, table_prefix, schema)):
            conn.execute(text(statement))


def disable_row_level_security(engine: Engine, *, table_prefix: str = "", schema: str | None = None) -> None:
    """Remove the policies, the tenant function and the role map; every role with privileges on
    the tables sees every row again. Blobs keep their per-tenant key (rows are never deleted).

    Raises:
        ValidationError: not PostgreSQL, or the schema is not migrated.
    """
    with translate_errors(), engine.begin() as conn:
        n = _names(conn, table_prefix, schema)
        for base in _TABLES:
            conn.execute(text(f"ALTER TABLE {n.table(base)} DISABLE ROW LEVEL SECURITY"))
            for command in ("select", "insert", "delete"):
                conn.execute(text(f"DROP POLICY IF EXISTS tenant_{command} ON {n.table(base)}"))
        for base in ("blobs", "blob_refs"):
            conn.execute(text(f"ALTER TABLE {n.table(base)} ALTER COLUMN tenant_id DROP DEFAULT"))
        conn.execute(text(f"DROP FUNCTION IF EXISTS {n.tenant}"))
        conn.execute(text(f"DROP TABLE IF EXISTS {n.role_map}"))


def grant_tenant_role(
    engine: Engine, tenant: str, role: str, *, table_prefix: str = "", schema: str | None = None
) -> None:
    """Make ``role`` (an existing PostgreSQL role) the tenant ``tenant``'s, with the privileges
    the store needs and no more; granting another tenant later moves the role.

    The privileges: read the schema revision; SELECT and INSERT on sessions, events, blobs,
    blob_refs and token_counts; SELECT, INSERT, DELETE on snapshots (caches, pruned as they are
    replaced); the event position sequence; and UPDATE on events, which PostgreSQL requires for the
    ``LOCK TABLE events IN EXCLUSIVE MODE`` every append takes — no UPDATE policy exists, and
    the append-only trigger refuses it too, so no row can be changed through it.

    Raises:
        ValidationError: a bad tenant, a role that does not exist, or no policies installed.
    """
    check_owner_key("tenant", tenant)
    with translate_errors(), engine.begin() as conn:
        n = _names(conn, table_prefix, schema)
        if conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}).first() is None:
            msg = f"no PostgreSQL role {role!r}: create it first (CREATE ROLE ...)"
            raise ValidationError(msg, field="role")
        if not _has(conn, n, n.tables.own_name("tenant_roles")):
            msg = "row-level security is not enabled here: run `sessionstore rls enable` first"
            raise ValidationError(msg, field="role")
        r = _ident(role)
        versions = [v for v in (n.tables.version_table, LEGACY_VERSION_TABLE) if _has(conn, n, v)]
        tables = ", ".join(
            n.table(base) for base in ("sessions", "events", "blobs", "blob_refs", "token_counts")
        )
        statements = [
            f"GRANT USAGE ON SCHEMA {n.schema} TO {r}",
            *(f"GRANT SELECT ON {n.of(v)} TO {r}" for v in versions),
            f"GRANT SELECT ON {n.role_map} TO {r}",
            f"GRANT SELECT, INSERT ON {tables} TO {r}",
            f"GRANT SELECT, INSERT, DELETE ON {n.table('snapshots')} TO {r}",
            # Encrypted sessions: their keys are written with them; receipts are only read.
            f"GRANT SELECT, INSERT ON {n.table('session_keys')} TO {r}",
            f"GRANT SELECT ON {n.table('erasures')} TO {r}",
            f"GRANT UPDATE ON {n.table('events')} TO {r}",
            f"GRANT USAGE ON SEQUENCE {_position_sequence(conn, n)} TO {r}",
            f"GRANT EXECUTE ON FUNCTION {n.tenant} TO {r}",
            f"INSERT INTO {n.role_map} (role_name, tenant_id) VALUES ({_literal(role)}, {_literal(tenant)}) "
            "ON CONFLICT (role_name) DO UPDATE SET tenant_id = EXCLUDED.tenant_id",
        ]
        for statement in statements:
            conn.execute(text(statement))


def revoke_tenant_role(
    engine: Engine, role: str, *, table_prefix: str = "", schema: str | None = None
) -> None:
    """Take ``role``'s tenant and its privileges on the store's tables away (the role remains).

    Raises:
        ValidationError: not PostgreSQL, or the schema is not migrated.
    """
    with translate_errors(), engine.begin() as conn:
        n = _names(conn, table_prefix, schema)
        r = _ident(role)
        if _has(conn, n, n.tables.own_name("tenant_roles")):
            conn.execute(text(f"DELETE FROM {n.role_map} WHERE role_name = :r"), {"r": role})
            conn.execute(text(f"REVOKE ALL ON {n.role_map} FROM {r}"))
        versions = [v for v in (n.tables.version_table, LEGACY_VERSION_TABLE) if _has(conn, n, v)]
        tables = ", ".join([*(n.table(base) for base in _TABLES), *(n.of(v) for v in versions)])
        conn.execute(text(f"REVOKE ALL ON {tables} FROM {r}"))
        conn.execute(text(f"REVOKE ALL ON SEQUENCE {_position_sequence(conn, n)} FROM {r}"))
        conn.execute(text(f"REVOKE USAGE ON SCHEMA {n.schema} FROM {r}"))
