"""The event store: its contract, schema, hash chain, lineage, and the SQLite and PostgreSQL backends."""

from __future__ import annotations

from ._async import (
    AsyncSessionStore,
    blocking_call,
    on_store,
    run_in_store,
)
from ._config import (
    create_async_engine_for_url,
    create_engine_for_url,
    default_database_path,
    resolve_url,
    tables_for,
)
from ._contract import (
    ANY,
    AppendResult,
    BlobRef,
    ChainHead,
    ExpectedSeq,
    RecordedEvent,
    SessionInfo,
    SessionStore,
    SessionWrite,
    SnapshotRecord,
    VerifyReport,
)
from ._crypto import (
    MASTER_KEY_ENV,
    EnvKeyProvider,
    FileKeyProvider,
    KeyProvider,
    LocalKeyProvider,
)
from ._lineage import (
    SessionLog,
)
from ._migrate import (
    SCHEMA_REVISION,
    current_revision,
    database_revision,
    downgrade,
    upgrade,
)
from ._open import (
    open_async_store,
    open_store,
)
from ._postgres import (
    PostgresSessionStore,
)
from ._receipts import (
    ErasureReceipt,
    RetentionPlan,
)
from ._retry import (
    RetryPolicy,
)
from ._rls import (
    disable_row_level_security,
    enable_row_level_security,
    grant_tenant_role,
    revoke_tenant_role,
    row_level_security_sql,
)
from ._schema import (
    StoreTables,
    store_tables,
)
from ._sqlite import (
    SQLiteSessionStore,
)
from ._tokens import (
    TiktokenCounter,
    TokenCounter,
)

__all__ = [
    "ANY",
    "AppendResult",
    "AsyncSessionStore",
    "BlobRef",
    "ChainHead",
    "EnvKeyProvider",
    "ErasureReceipt",
    "ExpectedSeq",
    "FileKeyProvider",
    "KeyProvider",
    "LocalKeyProvider",
    "MASTER_KEY_ENV",
    "PostgresSessionStore",
    "RecordedEvent",
    "RetentionPlan",
    "RetryPolicy",
    "SCHEMA_REVISION",
    "SQLiteSessionStore",
    "SessionInfo",
    "SessionLog",
    "SessionStore",
    "SessionWrite",
    "SnapshotRecord",
    "StoreTables",
    "TiktokenCounter",
    "TokenCounter",
    "VerifyReport",
    "blocking_call",
    "create_async_engine_for_url",
    "create_engine_for_url",
    "current_revision",
    "database_revision",
    "default_database_path",
    "disable_row_level_security",
    "downgrade",
    "enable_row_level_security",
    "grant_tenant_role",
    "on_store",
    "open_async_store",
    "open_store",
    "resolve_url",
    "revoke_tenant_role",
    "row_level_security_sql",
    "run_in_store",
    "store_tables",
    "tables_for",
    "upgrade",
]
