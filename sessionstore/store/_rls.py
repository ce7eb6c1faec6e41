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

Nothing here is a migration: it is a deployment choice on PostgreSQL, installed by the owner
with ``enable_row_level_security`` (or ``sessionstore rls enable``) after ``db upgrade``.
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine, inspect, text

from ..errors import ValidationError
from ._contract import check_owner_key
from ._sql import translate_errors

__all__ = [
    "TENANT_ROLES_TABLE",
    "disable_row_level_security",
    "enable_row_level_security",
    "grant_tenant_role",
    "revoke_tenant_role",
    "row_level_security_sql",
]

#: Maps each tenant role to its tenant.
TENANT_ROLES_TABLE = "sessionstore_tenant_roles"
_FUNCTION = "sessionstore_current_tenant"
_VERSION_TABLES = ("alembic_version", "sessionstore_alembic_version")


def _ident(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def _literal(value: str) -> str:
    """``value`` as a quoted SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def row_level_security_sql(schema: str = "public") -> list[str]:
    """The statements ``enable_row_level_security`` runs, for the tables in ``schema``.

    For a DBA who applies them through their own change process instead (``sessionstore rls
    sql`` prints them).
    """
    s = _ident(schema)
    tenant = f"{s}.{_FUNCTION}()"
    own_session = (
        f"EXISTS (SELECT 1 FROM {s}.sessions AS owned WHERE owned.id = {{table}}.session_id "
        f"AND owned.tenant_id = {tenant})"
    )
    statements = [
        f"CREATE TABLE IF NOT EXISTS {s}.{TENANT_ROLES_TABLE} ("
        "role_name name PRIMARY KEY, tenant_id varchar(255) NOT NULL)",
        f"ALTER TABLE {s}.{TENANT_ROLES_TABLE} ENABLE ROW LEVEL SECURITY",
        f"DROP POLICY IF EXISTS own_role ON {s}.{TENANT_ROLES_TABLE}",
        # A tenant role reads only its own mapping (it learns no other tenant's name).
        f"CREATE POLICY own_role ON {s}.{TENANT_ROLES_TABLE} FOR SELECT USING (role_name = current_user)",
        # STABLE: evaluated once per statement, not once per row.
        f"CREATE OR REPLACE FUNCTION {tenant} RETURNS varchar LANGUAGE sql STABLE AS "
        f"$$ SELECT tenant_id FROM {s}.{TENANT_ROLES_TABLE} WHERE role_name = current_user $$",
        # Blobs are stored once per tenant: the key becomes (sha256, tenant), and the tenant a
        # connection stores under is filled in by the database, from its role.
        f"ALTER TABLE {s}.blobs DROP CONSTRAINT IF EXISTS pk_blobs",
        f"CREATE UNIQUE INDEX IF NOT EXISTS uq_blobs_sha256_tenant "
        f"ON {s}.blobs (sha256, COALESCE(tenant_id, ''))",
        f"ALTER TABLE {s}.blobs ALTER COLUMN tenant_id SET DEFAULT {tenant}",
    ]
    policies = {
        "sessions": [
            ("SELECT", f"USING (tenant_id = {tenant})"),
            ("INSERT", f"WITH CHECK (tenant_id = {tenant})"),
        ],
        "events": [
            ("SELECT", f"USING ({own_session.format(table='events')})"),
            ("INSERT", f"WITH CHECK ({own_session.format(table='events')})"),
        ],
        "snapshots": [
            ("SELECT", f"USING ({own_session.format(table='snapshots')})"),
            ("INSERT", f"WITH CHECK ({own_session.format(table='snapshots')})"),
            # Snapshots are caches: put_snapshot prunes a key's older ones.
            ("DELETE", f"USING ({own_session.format(table='snapshots')})"),
        ],
        "blobs": [
            ("SELECT", f"USING (tenant_id = {tenant})"),
            ("INSERT", f"WITH CHECK (tenant_id = {tenant})"),
        ],
    }
    for table, rules in policies.items():
        statements.append(f"ALTER TABLE {s}.{table} ENABLE ROW LEVEL SECURITY")
        for command, rule in rules:
            name = f"tenant_{command.lower()}"
            statements.append(f"DROP POLICY IF EXISTS {name} ON {s}.{table}")
            statements.append(f"CREATE POLICY {name} ON {s}.{table} FOR {command} {rule}")
    return statements


def _schema_of(conn: Connection) -> str:
    if conn.dialect.name != "postgresql":
        msg = f"row-level security needs PostgreSQL, not {conn.dialect.name}"
        raise ValidationError(msg, field="url")
    schema = conn.execute(text("SELECT current_schema()")).scalar()
    if not schema or not inspect(conn).has_table("sessions", schema=schema):
        msg = "no sessionstore tables in this database's schema: run `sessionstore db upgrade` first"
        raise ValidationError(msg, field="url")
    return str(schema)


def enable_row_level_security(engine: Engine) -> None:
    """Install the tenant policies (see the module docstring) in one transaction; idempotent.

    Run it as the tables' owner. Until a role is granted a tenant (``grant_tenant_role``),
    only the owner (and superusers) can read or write anything.

    Raises:
        ValidationError: not PostgreSQL, or the schema is not migrated.
    """
    with translate_errors(), engine.begin() as conn:
        for statement in row_level_security_sql(_schema_of(conn)):
            conn.execute(text(statement))


def disable_row_level_security(engine: Engine) -> None:
    """Remove the policies, the tenant function and the role map; every role with privileges on
    the tables sees every row again. Blobs keep their per-tenant key (rows are never deleted).

    Raises:
        ValidationError: not PostgreSQL, or the schema is not migrated.
    """
    with translate_errors(), engine.begin() as conn:
        s = _ident(_schema_of(conn))
        for table in ("sessions", "events", "snapshots", "blobs"):
            conn.execute(text(f"ALTER TABLE {s}.{table} DISABLE ROW LEVEL SECURITY"))
            for command in ("select", "insert", "delete"):
                conn.execute(text(f"DROP POLICY IF EXISTS tenant_{command} ON {s}.{table}"))
        conn.execute(text(f"ALTER TABLE {s}.blobs ALTER COLUMN tenant_id DROP DEFAULT"))
        conn.execute(text(f"DROP FUNCTION IF EXISTS {s}.{_FUNCTION}()"))
        conn.execute(text(f"DROP TABLE IF EXISTS {s}.{TENANT_ROLES_TABLE}"))


def grant_tenant_role(engine: Engine, tenant: str, role: str) -> None:
    """Make ``role`` (an existing PostgreSQL role) the tenant ``tenant``'s, with the privileges
    the store needs and no more; granting another tenant later moves the role.

    The privileges: read the schema revision; SELECT and INSERT on sessions, events and blobs;
    SELECT, INSERT, DELETE on snapshots (caches, pruned as they are replaced); the event
    position sequence; and UPDATE on events, which PostgreSQL requires for the
    ``LOCK TABLE events IN EXCLUSIVE MODE`` every append takes — no UPDATE policy exists, and
    the append-only trigger refuses it too, so no row can be changed through it.

    Raises:
        ValidationError: a bad tenant, a role that does not exist, or no policies installed.
    """
    check_owner_key("tenant", tenant)
    with translate_errors(), engine.begin() as conn:
        schema = _schema_of(conn)
        if conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}).first() is None:
            msg = f"no PostgreSQL role {role!r}: create it first (CREATE ROLE ...)"
            raise ValidationError(msg, field="role")
        if not inspect(conn).has_table(TENANT_ROLES_TABLE, schema=schema):
            msg = "row-level security is not enabled here: run `sessionstore rls enable` first"
            raise ValidationError(msg, field="role")
        s, r = _ident(schema), _ident(role)
        version_tables = [t for t in _VERSION_TABLES if inspect(conn).has_table(t, schema=schema)]
        statements = [
            f"GRANT USAGE ON SCHEMA {s} TO {r}",
            *(f"GRANT SELECT ON {s}.{t} TO {r}" for t in version_tables),
            f"GRANT SELECT ON {s}.{TENANT_ROLES_TABLE} TO {r}",
            f"GRANT SELECT, INSERT ON {s}.sessions, {s}.events, {s}.blobs TO {r}",
            f"GRANT SELECT, INSERT, DELETE ON {s}.snapshots TO {r}",
            f"GRANT UPDATE ON {s}.events TO {r}",
            f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {s} TO {r}",
            f"GRANT EXECUTE ON FUNCTION {s}.{_FUNCTION}() TO {r}",
            f"INSERT INTO {s}.{TENANT_ROLES_TABLE} (role_name, tenant_id) "
            f"VALUES ({_literal(role)}, {_literal(tenant)}) "
            "ON CONFLICT (role_name) DO UPDATE SET tenant_id = EXCLUDED.tenant_id",
        ]
        for statement in statements:
            conn.execute(text(statement))


def revoke_tenant_role(engine: Engine, role: str) -> None:
    """Take ``role``'s tenant and its privileges on the store's tables away (the role remains).

    Raises:
        ValidationError: not PostgreSQL, or the schema is not migrated.
    """
    with translate_errors(), engine.begin() as conn:
        schema = _schema_of(conn)
        s, r = _ident(schema), _ident(role)
        if inspect(conn).has_table(TENANT_ROLES_TABLE, schema=schema):
            conn.execute(text(f"DELETE FROM {s}.{TENANT_ROLES_TABLE} WHERE role_name = :r"), {"r": role})
            conn.execute(text(f"REVOKE ALL ON {s}.{TENANT_ROLES_TABLE} FROM {r}"))
        tables = ["sessions", "events", "blobs", "snapshots"]
        tables += [t for t in _VERSION_TABLES if inspect(conn).has_table(t, schema=schema)]
        conn.execute(text(f"REVOKE ALL ON {', '.join(f'{s}.{t}' for t in tables)} FROM {r}"))
        conn.execute(text(f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA {s} FROM {r}"))
        conn.execute(text(f"REVOKE USAGE ON SCHEMA {s} FROM {r}"))
