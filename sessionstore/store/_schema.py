"""The database schema: where sessionstore's tables live, and what they are.

A store's tables are described by a ``StoreTables``: its table prefix and (PostgreSQL) schema,
and the SQLAlchemy Core ``Table`` objects under those names. ``store_tables()`` builds one
(cached: equal options give the same object); ``DEFAULT_TABLES`` is the unprefixed layout every
database had before embedding options existed. A store, the migrations and the audit layer all
take their names from the ``StoreTables`` they were given, never from literals, so a host
application can keep sessionstore's tables beside its own (see docs/storage.md "Embedding").

Keys lead with ``session_id`` so the schema partitions or shards by session without change.
Every constraint is named (see ``NAMING_CONVENTION``: names include the prefixed table name)
so Alembic migrations and downgrades address them by stable names on SQLite and PostgreSQL.

The append-only triggers are not expressible as ``Table`` metadata; the DDL for them lives
here too so the migrations and the tests share one definition.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from ..errors import ValidationError

__all__ = [
    "APPEND_ONLY_ERRCODE",
    "APPEND_ONLY_MESSAGE",
    "APPEND_ONLY_TABLES",
    "DEFAULT_TABLES",
    "ERASED_ERRCODE",
    "ERASED_GUARDED",
    "ERASED_MESSAGE",
    "LEGACY_VERSION_TABLE",
    "MAX_PREFIX_LENGTH",
    "StoreTables",
    "postgres_append_only_ddl",
    "postgres_reject_function_ddl",
    "postgres_table_triggers_ddl",
    "reject_function",
    "sqlite_append_only_ddl",
    "store_tables",
]

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

#: The version table of databases migrated before sessionstore had its own (see ``_migrate``).
LEGACY_VERSION_TABLE = "alembic_version"
#: The longest table prefix: the longest derived name (``fk_<p>snapshots_session_id_<p>sessions``)
#: must fit PostgreSQL's 63-byte identifiers.
MAX_PREFIX_LENGTH = 12
# Lower case, so names never need quoting and read the same on both backends.
_PREFIX = re.compile(r"[a-z][a-z0-9_]*")
_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")

# SQLite only aliases the rowid for a column declared exactly INTEGER PRIMARY KEY.
_Position = BigInteger().with_variant(Integer(), "sqlite")


@dataclass(frozen=True, eq=False)
class StoreTables:
    """Where one store's tables live: a table prefix, a PostgreSQL schema, and the tables.

    Build with ``store_tables()``. Names a caller needs in raw SQL come from ``sql_name``
    (schema-qualified); ``name`` is the bare prefixed name (SQLite objects, constraint names).
    """

    prefix: str
    schema: str | None
    metadata: MetaData = field(repr=False)
    sessions: Table = field(repr=False)
    events: Table = field(repr=False)
    blobs: Table = field(repr=False)
    snapshots: Table = field(repr=False)
    session_keys: Table = field(repr=False)
    erasures: Table = field(repr=False)
    erasure_guard: Table = field(repr=False)
    blob_refs: Table = field(repr=False)
    token_counts: Table = field(repr=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StoreTables):
            return NotImplemented
        return (self.prefix, self.schema) == (other.prefix, other.schema)

    def __hash__(self) -> int:
        return hash((self.prefix, self.schema))

    def name(self, base: str) -> str:
        """The prefixed name of one of sessionstore's objects (``events`` -> ``ss_events``)."""
        return f"{self.prefix}{base}"

    def sql_name(self, base: str) -> str:
        """The name to write in raw SQL: prefixed, and schema-qualified when there is a schema."""
        name = self.name(base)
        return f'"{self.schema}".{name}' if self.schema else name

    def own_name(self, base: str) -> str:
        """A database-wide name of ours that is no table (the version table, the trigger function):
        ``sessionstore_<base>``, or ``<prefix><base>`` under a prefix."""
        return f"{self.prefix or 'sessionstore_'}{base}"

    @property
    def version_table(self) -> str:
        """sessionstore's own Alembic version table (never the host's ``alembic_version``)."""
        return self.own_name("alembic_version")

    def constraint_names_by_columns(self) -> dict[str, str]:
        """SQLite's ``table.col, table.col`` wording of a failed constraint -> its name."""
        return _constraint_names_by_columns(self)


@functools.cache
def _constraint_names_by_columns(tables: StoreTables) -> dict[str, str]:
    names: dict[str, str] = {}
    for table in tables.metadata.tables.values():
        for constraint in table.constraints:
            columns = getattr(constraint, "columns", None)
            if columns is not None and constraint.name:
                key = ", ".join(f"{table.name}.{c.name}" for c in columns)
                names.setdefault(key, str(constraint.name))
        for index in table.indexes:  # unique indexes fail with the same wording
            if index.unique and index.name:
                key = ", ".join(f"{table.name}.{c.name}" for c in index.columns)
                names.setdefault(key, str(index.name))
    return names


def _check_options(prefix: str, schema: str | None) -> None:
    if not isinstance(prefix, str) or (prefix and not _PREFIX.fullmatch(prefix)):
        msg = f"table prefix must be lower-case letters, digits and '_', starting with a letter: {prefix!r}"
        raise ValidationError(msg, field="table_prefix")
    if len(prefix) > MAX_PREFIX_LENGTH:
        msg = f"table prefix {prefix!r} is longer than {MAX_PREFIX_LENGTH} characters"
        raise ValidationError(msg, field="table_prefix")
    if schema is not None and not (isinstance(schema, str) and _SCHEMA.fullmatch(schema)):
        msg = f"schema must be a lower-case PostgreSQL name (letters, digits, '_'): {schema!r}"
        raise ValidationError(msg, field="schema")


def store_tables(prefix: str = "", schema: str | None = None) -> StoreTables:
    """The tables of a store with this table ``prefix`` (``""``: none) in ``schema`` (None: the
    connection's default schema; PostgreSQL only).

    Raises:
        ValidationError: a prefix or schema that is not a plain lower-case name, or a prefix
            longer than ``MAX_PREFIX_LENGTH``.
    """
    _check_options(prefix, schema)
    return _build(prefix, schema)


@functools.cache
def _build(prefix: str, schema: str | None) -> StoreTables:
    metadata = MetaData(naming_convention=NAMING_CONVENTION, schema=schema)
    sessions, events, blobs, snapshots = _define(metadata, prefix)
    erasure = _erasure(metadata, prefix, sessions)
    blob_refs = _blob_refs(metadata, prefix)
    token_counts = _token_counts(metadata, prefix)
    return StoreTables(
        prefix, schema, metadata, sessions, events, blobs, snapshots, *erasure, blob_refs, token_counts
    )


def _define(metadata: MetaData, prefix: str) -> tuple[Table, Table, Table, Table]:
    """sessions, events, blobs and snapshots, named with ``prefix``, in ``metadata``."""
    sessions = Table(
        f"{prefix}sessions",
        metadata,
        Column("id", String(64), nullable=False),
        Column("parent_session_id", String(64), nullable=True),
        Column("fork_seq", BigInteger, nullable=True),
        Column("created_at", DateTime(timezone=True), nullable=False),
        Column("metadata", Text, nullable=False),
        # Who the session belongs to (revision 0004): NULL for sessions created without them,
        # including every session written before. A fork or child carries its parent's.
        Column("tenant_id", String(255), nullable=True),
        Column("user_id", String(255), nullable=True),
        # The caller's own key for the session (a conversation id), unique per tenant and user.
        Column("external_id", String(255), nullable=True),
        PrimaryKeyConstraint("id"),
        CheckConstraint("fork_seq IS NULL OR parent_session_id IS NOT NULL", name="fork_needs_parent"),
        CheckConstraint("fork_seq IS NULL OR fork_seq >= 0", name="fork_seq_not_negative"),
    )
    sessions.append_constraint(ForeignKeyConstraint(["parent_session_id"], [sessions.c.id]))
    Index(None, sessions.c.parent_session_id)
    # Listing a tenant's (or a user's) sessions pages through this index in id order.
    Index(None, sessions.c.tenant_id, sessions.c.user_id, sessions.c.id)
    # Get-or-create is race-safe because the database refuses a second row for the same key
    # (NULLs are distinct: sessions without an external id never collide).
    Index(
        f"uq_{sessions.name}_tenant_id_user_id_external_id",
        sessions.c.tenant_id,
        sessions.c.user_id,
        sessions.c.external_id,
        unique=True,
    )

    events = Table(
        f"{prefix}events",
        metadata,
        # Global position: monotonic across sessions, for subscribers and replication.
        Column("position", _Position, primary_key=True, autoincrement=True),
        Column("session_id", String(64), ForeignKey(sessions.c.id), nullable=False),
        Column("seq", BigInteger, nullable=False),
        Column("event_id", String(36), nullable=False),
        Column("type", String(64), nullable=False),
        Column("schema_version", Integer, nullable=False),
        # The exact JSON text that was hashed (or '' when ``payload_packed`` holds it compressed).
        # Text, not JSONB: JSONB re-serialises, and the hash chain must be computed over the
        # bytes actually stored.
        Column("payload", Text, nullable=False),
        Column("token_count", Integer, nullable=True),
        Column("prev_hash", String(64), nullable=False),
        Column("hash", String(64), nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False),
        # The payload compressed (revision 0006): a codec byte, then the compressed text; NULL
        # when ``payload`` holds the text itself (else ``payload`` is ''). See ``_codec.py``.
        Column("payload_packed", LargeBinary, nullable=True),
        # True when the event's tokens are counted after COMMIT (revision 0007): ``token_count`` is
        # then NULL, the count is in ``token_counts``, and the row's hash holds the flag instead of
        # a count (``_hashing.DEFERRED_COUNT``). NULL otherwise.
        Column("token_count_deferred", Boolean, nullable=True),
        UniqueConstraint("session_id", "seq"),
        UniqueConstraint("event_id"),
        CheckConstraint("seq >= 1", name="seq_positive"),
        CheckConstraint("schema_version >= 1", name="schema_version_positive"),
        CheckConstraint("token_count IS NULL OR token_count >= 0", name="token_count_not_negative"),
        sqlite_autoincrement=True,
    )

    blobs = Table(
        f"{prefix}blobs",
        metadata,
        Column("sha256", String(64), nullable=False),
        Column("size", BigInteger, nullable=False),
        Column("compression", String(16), nullable=False),
        Column("data", LargeBinary, nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False),
        # The tenant that stored it, under PostgreSQL row-level security (revision 0004; filled by
        # the column default the policies install, NULL otherwise). See ``_tenancy.py``.
        Column("tenant_id", String(255), nullable=True),
        PrimaryKeyConstraint("sha256"),
        CheckConstraint("size >= 0", name="size_not_negative"),
        CheckConstraint("compression IN ('none', 'zlib', 'zstd')", name="compression_known"),
    )

    snapshots = Table(
        f"{prefix}snapshots",
        metadata,
        Column("session_id", String(64), ForeignKey(sessions.c.id), nullable=False),
        Column("projection", String(64), nullable=False),
        Column("projection_version", Integer, nullable=False),
        Column("tokenizer", String(64), nullable=False),
        Column("seq", BigInteger, nullable=False),
        Column("state", LargeBinary, nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False),
        PrimaryKeyConstraint("session_id", "projection", "projection_version", "tokenizer", "seq"),
        CheckConstraint("seq >= 1", name="seq_positive"),
    )
    return sessions, events, blobs, snapshots


def _erasure(metadata: MetaData, prefix: str, sessions: Table) -> tuple[Table, Table, Table]:
    """session_keys, erasures and erasure_guard (revision 0005; docs/storage.md "Erasure and
    retention"), named with ``prefix``, in ``metadata``."""
    # One row per encrypted session: its data key, wrapped by the key provider's master key.
    # Deleting the row is crypto-shredding: the session's ciphertext stays, unreadable for good.
    session_keys = Table(
        f"{prefix}session_keys",
        metadata,
        Column("session_id", String(64), ForeignKey(sessions.c.id), nullable=False),
        # Which master key wrapped it (a KMS key id, or the local key's fingerprint).
        Column("key_id", String(255), nullable=False),
        Column("wrapped_key", LargeBinary, nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False),
        PrimaryKeyConstraint("session_id"),
    )
    # The receipt of every erasure: what went, when, why, and where its chain ended. Append-only.
    # No foreign key: a purged session's row is gone, its receipt stays.
    erasures = Table(
        f"{prefix}erasures",
        metadata,
        Column("session_id", String(64), nullable=False),
        Column("method", String(16), nullable=False),
        Column("reason", Text, nullable=False),
        Column("erased_at", DateTime(timezone=True), nullable=False),
        Column("parent_session_id", String(64), nullable=True),
        # The chain's head when erased: the last event's hash (the genesis for an empty session).
        Column("head_hash", String(64), nullable=False),
        Column("event_count", BigInteger, nullable=False),
        # The global positions its events held (the gap a purge leaves in read_all).
        Column("first_position", BigInteger, nullable=True),
        Column("last_position", BigInteger, nullable=True),
        Column("snapshots_dropped", Integer, nullable=False),
        Column("blobs_removed", Integer, nullable=False),
        PrimaryKeyConstraint("session_id"),
        CheckConstraint("method IN ('shredded', 'purged')", name="method_known"),
        CheckConstraint("event_count >= 0", name="event_count_not_negative"),
    )
    # The guard the append-only triggers check before refusing a DELETE: a purge inserts
    # ``session:<id>`` / ``blob:<sha256>`` rows, deletes, and removes them in the same
    # transaction, so no other transaction ever sees one. UPDATE is refused whatever it holds.
    erasure_guard = Table(
        f"{prefix}erasure_guard",
        metadata,
        Column("target", String(80), nullable=False),
        PrimaryKeyConstraint("target"),
    )
    return session_keys, erasures, erasure_guard


def _blob_refs(metadata: MetaData, prefix: str) -> Table:
    """blob_refs (revision 0006), named with ``prefix``, in ``metadata``."""
    # Which sessions stored each plaintext blob: a blob is shared by every session that stores
    # the same bytes, and an erasure deletes it only with the last session referring to it.
    # No foreign key: an import stores blobs before the sessions that name them exist.
    blob_refs = Table(
        f"{prefix}blob_refs",
        metadata,
        Column("session_id", String(64), nullable=False),
        Column("sha256", String(64), nullable=False),
        # The tenant that stored it, under PostgreSQL row-level security, as in ``blobs``.
        Column("tenant_id", String(255), nullable=True),
        PrimaryKeyConstraint("session_id", "sha256"),
    )
    Index(None, blob_refs.c.sha256)
    return blob_refs


def _token_counts(metadata: MetaData, prefix: str) -> Table:
    """token_counts (revision 0007), named with ``prefix``, in ``metadata``."""
    # The tokens of events appended with their count deferred (``events.token_count_deferred``):
    # filled when a reader first needs them, outside the hash chain. A missing row is counted
    # again by the next reader, so losing one (a crash before it was stored) loses nothing.
    # No foreign key: rows are inserted only for events that exist, and go with a purge.
    return Table(
        f"{prefix}token_counts",
        metadata,
        Column("session_id", String(64), nullable=False),
        Column("seq", BigInteger, nullable=False),
        Column("token_count", Integer, nullable=True),
        PrimaryKeyConstraint("session_id", "seq"),
        CheckConstraint("token_count IS NULL OR token_count >= 0", name="token_count_not_negative"),
    )


#: The default layout: unprefixed tables in the connection's default schema.
DEFAULT_TABLES = store_tables()


# --- append-only enforcement -------------------------------------------------------------

#: Tables whose rows may never change or disappear once written (sessions since revision 0003,
#: token_counts since 0008), by their unprefixed names.
APPEND_ONLY_TABLES = ("events", "blobs", "sessions", "token_counts")
#: Text every rejection carries; error translation recognises it on SQLite.
APPEND_ONLY_MESSAGE = "sessionstore: append-only table"
#: SQLSTATE raised by the PostgreSQL trigger function (a class of its own, so it can
#: never be confused with a constraint violation or a serialization failure).
APPEND_ONLY_ERRCODE = "SSAO1"

#: Tables whose rows name a session, and the column that does (revision 0008): the database
#: refuses a row naming a session that has an erasure receipt, so an erased id stays erased.
ERASED_GUARDED = {
    "sessions": "id",
    "events": "session_id",
    "snapshots": "session_id",
    "session_keys": "session_id",
    "blob_refs": "session_id",
    "token_counts": "session_id",
}
#: Text every refusal of an erased session's row carries; error translation recognises it.
ERASED_MESSAGE = "sessionstore: session erased"
#: SQLSTATE of that refusal on PostgreSQL (a class of its own, like ``APPEND_ONLY_ERRCODE``).
ERASED_ERRCODE = "SSER1"


def sqlite_append_only_ddl(table: str) -> tuple[list[str], list[str]]:
    """Return (create statements, drop statements) for the SQLite triggers of one table
    (its prefixed name: SQLite trigger names are database-wide, so they carry it)."""
    creates = [
        f"CREATE TRIGGER {table}_append_only_{op.lower()} BEFORE {op} ON {table} "
        f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY_MESSAGE} {table}: {op} rejected'); END"
        for op in ("UPDATE", "DELETE")
    ]
    drops = [f"DROP TRIGGER IF EXISTS {table}_append_only_{op}" for op in ("update", "delete")]
    return creates, drops


def reject_function(tables: StoreTables) -> str:
    """The PostgreSQL trigger function in SQL (``sessionstore_reject_change()`` by default)."""
    name = tables.own_name("reject_change")
    return f'"{tables.schema}".{name}()' if tables.schema else f"{name}()"


def postgres_reject_function_ddl(tables: StoreTables) -> tuple[str, str]:
    """(create, drop) of the PostgreSQL function every append-only trigger calls."""
    function = reject_function(tables)
    create = f"""
CREATE OR REPLACE FUNCTION {function} RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '{APPEND_ONLY_MESSAGE} %: % rejected', TG_TABLE_NAME, TG_OP
        USING ERRCODE = '{APPEND_ONLY_ERRCODE}';
END
$$
"""
    return create, f"DROP FUNCTION IF EXISTS {function}"


def postgres_table_triggers_ddl(tables: StoreTables, base: str) -> tuple[list[str], list[str]]:
    """(create statements, drop statements) of the PostgreSQL triggers of one table.

    Row triggers catch UPDATE and DELETE; TRUNCATE bypasses row triggers, so a
    statement-level BEFORE TRUNCATE trigger guards it.
    """
    name, table, function = tables.name(base), tables.sql_name(base), reject_function(tables)
    creates = [
        f"CREATE TRIGGER {name}_append_only_row BEFORE UPDATE OR DELETE ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION {function}",
        f"CREATE TRIGGER {name}_append_only_truncate BEFORE TRUNCATE ON {table} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {function}",
    ]
    drops = [
        f"DROP TRIGGER IF EXISTS {name}_append_only_row ON {table}",
        f"DROP TRIGGER IF EXISTS {name}_append_only_truncate ON {table}",
    ]
    return creates, drops


def postgres_append_only_ddl(tables: StoreTables, bases: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Return (create statements, drop statements) for the function and the tables' triggers."""
    create_function, drop_function = postgres_reject_function_ddl(tables)
    creates = [create_function]
    drops: list[str] = []
    for base in bases:
        c, d = postgres_table_triggers_ddl(tables, base)
        creates += c
        drops += d
    drops.append(drop_function)
    return creates, drops
