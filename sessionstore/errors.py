"""Every error sessionstore raises, under one root.

The tree::

    SessionStoreError
    ├── ValidationError (ValueError)         bad input: names the event and the field
    │   └── PathRefusedError                 a path outside the root or folder, or not a regular file (_paths)
    ├── InvalidRequestError (ValueError)     a Messages API payload breaks an invariant (_validate)
    ├── BlockingLimitError                   still at the blocking limit after every stage (_pipeline)
    ├── PromptTooLongError                   the API refused a request as too long; recovery
    │                                        could not help (_conversation)
    ├── SubagentSpawnRefusedError            the context is at the spawn-block mark (_collapse)
    ├── FilesRewindError                     a files rewind stopped half way; logged (checkpoints)
    ├── SummaryFailedError                   no usable summary; nothing recorded (_summarizers)
    │   └── SummaryPromptTooLongError        the summarization request itself was over the limit
    │                                        (not the agent loop's PromptTooLongError)
    ├── CompactionDisabledError              the session disables all compaction (_compaction)
    ├── CompactionRevertTooLargeError        a compaction's history would not fit back (_revert)
    ├── SessionNotFoundError (LookupError)
    │   └── SessionErasedError               the session was erased: its receipt says when and why
    ├── SessionExistsError
    ├── ErasureRefusedError                  erasing would strand forks or children: names them
    ├── EncryptionKeyError                   no key provider, or it cannot unwrap a session's key
    ├── ConcurrencyError                     expected seq != actual seq; nothing written
    ├── DuplicateEventError                  an event_id reused with different content
    ├── AppendOnlyViolation                  the database refused an UPDATE / DELETE / TRUNCATE
    ├── DataCorruptionError                  stored data is not what was written: a hash or link does
    │                                        not verify, an event or blob is missing (not IntegrityError)
    ├── UnknownEventTypeError                a stored event type this version cannot read
    ├── SchemaOutOfDateError                 not migrated to this version (or by a newer one)
    ├── DatabaseNotFoundError (LookupError)  no database at the path, and this call may not create one
    ├── MissingDependencyError (ImportError) an optional extra is not installed; names it
    └── DatabaseError                        PEP 249 names for storage failures
        ├── OperationalError                 lost connection, lock timeout, disk full ...
        │   ├── StoreUnavailableError        still failing when the retry budget ran out (_retry)
        │   └── DatabaseFileGoneError        the SQLite file was deleted or replaced while open
        ├── IntegrityError                   a database constraint the store did not expect (PEP 249)
        └── ProgrammingError                 broken SQL, missing table
            └── AccessDeniedError            the role lacks a privilege, or a row-level security
                                             policy refused the row (another tenant's)

Driver errors are translated in exactly one place (``sessionstore.store._sql``)
with ``raise ... from e``, so callers never import SQLAlchemy or a driver to catch errors.

Names renamed in 0.2.0 stay importable from this module as deprecated aliases (a
``DeprecationWarning`` says the new name); CHANGELOG.md lists them.

The command line turns an error into one ``sessionstore: ...`` line on stderr and an exit
status (``EXIT_*`` below; docs/cli.md has the table).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Protocol

__all__ = [
    "AccessDeniedError",
    "AppendOnlyViolation",
    "BlockingLimitError",
    "CompactionDisabledError",
    "CompactionRevertTooLargeError",
    "ConcurrencyError",
    "DataCorruptionError",
    "DatabaseError",
    "DatabaseFileGoneError",
    "DatabaseNotFoundError",
    "DuplicateEventError",
    "EncryptionKeyError",
    "ErasureRefusedError",
    "FilesRewindError",
    "IntegrityError",
    "InvalidRequestError",
    "MissingDependencyError",
    "OperationalError",
    "PathRefusedError",
    "ProgrammingError",
    "PromptTooLongError",
    "SchemaOutOfDateError",
    "SessionErasedError",
    "SessionExistsError",
    "SessionNotFoundError",
    "SessionStoreError",
    "StageOutcome",
    "StoreUnavailableError",
    "SubagentSpawnRefusedError",
    "SummaryFailedError",
    "SummaryPromptTooLongError",
    "UnknownEventTypeError",
    "ValidationError",
]


#: Exit statuses of the ``sessionstore`` command (docs/cli.md, "Exit status").
EXIT_OK = 0
#: Any error: a missing session, an invalid event, a file that cannot be written ...
EXIT_ERROR = 1
#: A malformed command line (argparse's own status).
EXIT_USAGE = 2
#: An integrity check failed: ``verify`` found tampering, ``served`` a request that differs.
EXIT_INTEGRITY = 3
#: Interrupted by Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130
#: The reader closed the pipe (``sessionstore context SID | head``): stopped quietly
#: (128 + SIGPIPE, as a shell reports a program the pipe ended).
EXIT_BROKEN_PIPE = 141


class StageOutcome(Protocol):
    """What ``BlockingLimitError`` reads of a pipeline stage's report (``pipeline.StageReport``).

    A protocol, not the class itself: this module sits below every layer and imports none.
    """

    @property
    def stage(self) -> str: ...

    @property
    def tokens_freed(self) -> int: ...


def _rebuilt(cls: type[SessionStoreError], args: tuple[object, ...]) -> SessionStoreError:
    """An error of ``cls`` holding ``args`` (its message), made without calling its ``__init__``.

    Unpickling calls this; pickle then restores the instance's attributes (its fields).
    """
    error = cls.__new__(cls, *args)
    # The builtin base sets what it keeps beside ``args`` (``ImportError.msg``).
    builtin: type[BaseException] = next(base for base in cls.__mro__ if base.__module__ == "builtins")
    builtin.__init__(error, *args)
    return error


class SessionStoreError(Exception):
    """Root of every error raised by sessionstore.

    Every error survives ``pickle`` (a multiprocessing pool, Celery or Ray sends it back to the
    caller) with its type, message and attributes. Unpickling does not call the class's own
    ``__init__``, whose arguments differ from the ``args`` the message is kept in.
    """

    def __reduce__(self) -> tuple[object, ...]:
        """Rebuild from the message and the attributes, not from the constructor's arguments."""
        reduced = super().__reduce__()  # (class, args) or (class, args, state): a tuple, never a str
        return (_rebuilt, (type(self), self.args), *reduced[2:])


class ValidationError(SessionStoreError, ValueError):
    """An event or argument failed validation; nothing was written.

    Attributes:
        index: position of the offending event in the batch (None for a single value).
        event_type: the event's ``type``, when known.
        field: dotted path of the offending field, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        index: int | None = None,
        event_type: str | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(message)
        self.index = index
        self.event_type = event_type
        self.field = field


class PathRefusedError(ValidationError):
    """Paths that may not be read or restored; nothing was read, written or recorded.

    Raised with *every* refused path at once, so a caller fixes them all in one go.

    Attributes:
        refused: each refused path (as stored or given), mapped to the reason.
    """

    def __init__(self, refused: Mapping[str, str]) -> None:
        self.refused = dict(sorted(refused.items()))
        reasons = "; ".join(f"{path!r}: {why}" for path, why in self.refused.items())
        super().__init__(f"refused {len(self.refused)} path(s), nothing was written: {reasons}", field="path")


class InvalidRequestError(SessionStoreError, ValueError):
    """A Messages API request breaks an invariant; raised by :func:`validate_request`.

    Attributes:
        path: where, JSON-path-like (``messages[3].content[0]``); ``""`` for the request.
        rule: stable identifier of the broken invariant (see the module docstring).
    """

    def __init__(self, message: str, *, path: str, rule: str) -> None:
        super().__init__(message)
        self.path = path
        self.rule = rule


class BlockingLimitError(SessionStoreError):
    """The context is still at or above the blocking limit after every stage ran.

    Attributes:
        used: tokens in the context.
        limit: the blocking limit.
        tried: the stages that ran, with the tokens each freed.
    """

    def __init__(self, used: int, limit: int, tried: Sequence[StageOutcome]) -> None:
        stages = ", ".join(f"{r.stage} freed {r.tokens_freed}" for r in tried) or "no stage ran"
        super().__init__(
            f"context is {used} tokens, at or above the blocking limit of {limit} ({stages}); "
            "compact the session or start a new one"
        )
        self.used = used
        self.limit = limit
        self.tried = list(tried)


class PromptTooLongError(SessionStoreError):
    """The API refused the request as too long and recovery could not help; raised once per turn.

    The message says why: still too long after the turn's reactive compaction, the compaction
    failed, or compaction is disabled (nothing was tried). ``gap`` is the tokens over the limit.
    """

    def __init__(self, message: str, *, gap: int | None) -> None:
        super().__init__(message)
        self.gap = gap


class SubagentSpawnRefusedError(SessionStoreError):
    """The context is at or above the spawn-block mark: no sub-agent may start now."""

    def __init__(self, used: int, limit: int) -> None:
        super().__init__(f"context is {used} tokens, at or above {limit}: sub-agents are not spawned now")
        self.used = used
        self.limit = limit


class FilesRewindError(SessionStoreError):
    """A files rewind failed after it began changing files; ``FilesRewindFailed`` records it.

    Attributes:
        applied: paths that hold their checkpoint content now.
        not_applied: paths that still hold what they held before.
    """

    def __init__(
        self, message_uuid: str, applied: list[str], not_applied: list[str], error: BaseException
    ) -> None:
        super().__init__(
            f"files rewind to {message_uuid} stopped after {len(applied)} of "
            f"{len(applied) + len(not_applied)} changes: {error}; not applied: {', '.join(not_applied)} "
            "(recorded in the log; rewind again to finish)"
        )
        self.applied = applied
        self.not_applied = not_applied


class SummaryFailedError(SessionStoreError):
    """The summarizer produced no usable summary; the context is left as it was."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SummaryPromptTooLongError(SummaryFailedError):
    """The summarization request itself was over the model's limit.

    Attributes:
        gap: tokens over the limit, when the API's message states them.
    """

    def __init__(self, reason: str, gap: int | None) -> None:
        super().__init__(reason)
        self.gap = gap


class CompactionDisabledError(SessionStoreError):
    """Compaction is switched off for the session (``WindowConfig(disable_compaction=True)``).

    Raised by every compaction, manual or not, before anything is summarized or recorded.

    Attributes:
        session_id: the session whose compaction was refused.
    """

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"compaction is disabled for session {session_id!r} "
            "(WindowConfig.disable_compaction): nothing was summarized or recorded"
        )
        self.session_id = session_id


class CompactionRevertTooLargeError(SessionStoreError):
    """Reverting a compaction would give back more context than the window takes; nothing was recorded.

    Attributes:
        event_id: the compaction's event id.
        needed: tokens the request would hold after the revert (estimated as "used" is).
        limit: the window's blocking limit (requests at or above it are refused).
    """

    def __init__(self, event_id: str, needed: int, limit: int) -> None:
        super().__init__(
            f"reverting compaction {event_id} would need {needed} tokens; the limit is {limit}: "
            "revert and compact again at once (recompact), or keep it and collapse spans instead"
        )
        self.event_id = event_id
        self.needed = needed
        self.limit = limit


class SessionNotFoundError(SessionStoreError, LookupError):
    """The session id does not exist in this store."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} does not exist")
        self.session_id = session_id


class SessionErasedError(SessionNotFoundError):
    """The session was erased (its key destroyed, or its rows purged): nothing of it can be read.

    A ``SessionNotFoundError``, so code that handles a missing session handles an erased one.

    Attributes:
        method: ``"shredded"`` (encrypted: the key was destroyed) or ``"purged"`` (rows removed).
        erased_at: when, as an ISO 8601 string.
    """

    def __init__(self, session_id: str, *, method: str, erased_at: str) -> None:
        SessionStoreError.__init__(self, f"session {session_id!r} was erased ({method} at {erased_at})")
        self.session_id = session_id
        self.method = method
        self.erased_at = erased_at


class ErasureRefusedError(SessionStoreError):
    """Erasing the session would leave forks or child sessions pointing at a log that is gone.

    Nothing was erased. Erase them together (``with_forks=True``, ``erase --with-forks``).

    Attributes:
        session_id: the session asked for.
        descendants: its forks and children (and theirs), not yet erased.
    """

    def __init__(self, session_id: str, descendants: Sequence[str], *, why: str = "") -> None:
        listed = ", ".join(descendants)
        reason = why or "it has forks or child sessions that share its log"
        super().__init__(
            f"session {session_id!r} not erased: {reason}: {listed} (erase them too with --with-forks)"
        )
        self.session_id = session_id
        self.descendants = tuple(descendants)


class EncryptionKeyError(SessionStoreError):
    """A session is encrypted but its data key cannot be used: no key provider was configured,
    or the provider cannot unwrap the key (another master key, a KMS refusing)."""


class SessionExistsError(SessionStoreError):
    """A session with this id already exists, or one with this (tenant, user, external id).

    Attributes:
        session_id: the existing session's id.
        key: the (tenant, user, external_id) another session already has, when that was the clash.
    """

    def __init__(self, session_id: str, *, key: tuple[str, str, str] | None = None) -> None:
        if key is None:
            super().__init__(f"session {session_id!r} already exists")
        else:
            tenant, user, external_id = key
            super().__init__(
                f"session {session_id!r} already has tenant {tenant!r}, user {user!r} and "
                f"external id {external_id!r} (get_or_create_session returns it)"
            )
        self.session_id = session_id
        self.key = key


class ConcurrencyError(SessionStoreError):
    """Another writer appended first: the session's last seq is not the one expected.

    Nothing of the batch was written. Reload the session and decide again; the store
    never retries this by itself.
    """

    def __init__(self, session_id: str, expected: int | None, actual: int) -> None:
        super().__init__(f"session {session_id!r}: expected last seq {expected}, but it is {actual}")
        self.session_id = session_id
        self.expected = expected
        self.actual = actual


class DuplicateEventError(SessionStoreError):
    """An event_id already stored with different content (or in another session or batch)."""

    def __init__(self, event_id: str, reason: str) -> None:
        super().__init__(f"event {event_id}: {reason}")
        self.event_id = event_id


class AppendOnlyViolation(SessionStoreError):
    """The database itself refused to change or remove a stored event or blob."""


class DataCorruptionError(SessionStoreError):
    """Stored data is not what was written: an event or blob was altered, removed or reordered.

    Found by the hash chain (``verify``, reading a blob, opening a fork), whatever the cause:
    tampering, a damaged disk or a bad restore. Not :class:`IntegrityError`, which is PEP 249's
    name for a database constraint the store did not expect.

    Attributes:
        session_id: the session checked (None for a blob).
        seq: the first seq whose hash or link does not match (None for a blob).
    """

    def __init__(self, message: str, *, session_id: str | None = None, seq: int | None = None) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.seq = seq


class UnknownEventTypeError(SessionStoreError):
    """A stored event has a type or schema version this version of sessionstore cannot read."""


class SchemaOutOfDateError(SessionStoreError):
    """The database schema is missing or older/newer than this version expects.

    Attributes:
        current: the database's revision (None: no sessionstore schema).
        expected: the revision this version of sessionstore needs.
        newer: the database was migrated by a newer sessionstore (a revision this version does
            not know): ``db upgrade`` cannot help, upgrading sessionstore does.
    """

    def __init__(self, url: str, current: str | None, expected: str, *, newer: bool = False) -> None:
        if newer:
            message = (
                f"database {url} is at schema revision {current}, written by a newer sessionstore: "
                f"this one knows revisions up to {expected}. Upgrade sessionstore to use it"
            )
        else:
            message = (
                f"database {url} is at revision {current or 'no schema'}, this sessionstore needs "
                f"{expected}: run `sessionstore db upgrade --db {url}`"
            )
        super().__init__(message)
        self.current = current
        self.expected = expected
        self.newer = newer


class DatabaseNotFoundError(SessionStoreError, LookupError):
    """There is no database at the path, and this call only reads: it never creates one.

    Attributes:
        path: the SQLite file that does not exist.
    """

    def __init__(self, path: str) -> None:
        super().__init__(
            f"no database at {path}: reading never creates one (check the path; "
            f"`sessionstore db upgrade --db {path}` creates it)"
        )
        self.path = path


class MissingDependencyError(SessionStoreError, ImportError):
    """A feature needs an optional extra that is not installed (e.g. PostgreSQL needs ``postgres``).

    Attributes:
        extra: the extra to install (``pip install 'sessionstore[EXTRA]'``).
        feature: what needed it.
    """

    def __init__(self, extra: str, feature: str, missing: str) -> None:
        super().__init__(
            f"{feature} needs the '{extra}' extra, which is not installed ({missing}): "
            f"pip install 'sessionstore[{extra}]'",
            name=missing,
        )
        self.extra = extra
        self.feature = feature


class DatabaseError(SessionStoreError):
    """A storage failure (PEP 249 ``DatabaseError``)."""


class OperationalError(DatabaseError):
    """The database could not do the work: connection lost, lock timeout, disk full.

    Attributes:
        transient: the failure is worth retrying (a dropped connection, a server restarting,
            a serialization failure); the store's retry policy retries only these.
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class StoreUnavailableError(OperationalError):
    """A transient failure outlasted the retry policy: the database stayed unreachable.

    Nothing is known to be half-written: the call was retried as a whole each time, and an
    append that did commit before its acknowledgement was lost is found again by its event ids.

    Attributes:
        operation: the store call that failed.
        attempts: how many times it was tried.
        elapsed: seconds from the first try to giving up.
    """

    def __init__(self, operation: str, attempts: int, elapsed: float, last: OperationalError) -> None:
        tries = f"{attempts} time(s) over {elapsed:.1f} s"
        super().__init__(
            f"database unavailable: {operation} failed {tries}; last error: {last}", transient=True
        )
        self.operation = operation
        self.attempts = attempts
        self.elapsed = elapsed


class IntegrityError(DatabaseError):
    """A database constraint the store does not translate into a domain error (PEP 249's name).

    Not :class:`DataCorruptionError`, which says stored data fails its hash check.

    Attributes:
        constraint: the violated constraint's name, when the driver reports it.
    """

    def __init__(self, message: str, *, constraint: str | None = None) -> None:
        super().__init__(message)
        self.constraint = constraint


class ProgrammingError(DatabaseError):
    """Broken SQL or a missing table or column."""


class AccessDeniedError(ProgrammingError):
    """The database refused the connection's role (PostgreSQL SQLSTATE 42501): a privilege it
    lacks, or a row-level security policy that keeps the row to another tenant. Nothing was written.
    """


class DatabaseFileGoneError(OperationalError):
    """The SQLite file was deleted or replaced while the store had it open.

    Writes would go to the deleted file and be lost with it, so nothing was acknowledged: the
    write was refused (or, if the file vanished during the commit, reported as not kept).

    Attributes:
        path: the database file's path.
    """

    def __init__(self, path: str, what: str) -> None:
        super().__init__(
            f"database file {path} was {what} while open: the write was not kept; "
            "reopen the store on the file that should hold the data"
        )
        self.path = path


#: Names renamed in 0.2.0 -> their new names. Importing an old name still works (user code
#: written against 0.1 keeps running) but warns; the facade exports only the new names.
DEPRECATED_NAMES: dict[str, str] = {
    "IntegrityCheckError": "DataCorruptionError",
    "PromptTooLong": "SummaryPromptTooLongError",
    "SubagentSpawnRefused": "SubagentSpawnRefusedError",
    "SummaryFailed": "SummaryFailedError",
}


def __getattr__(name: str) -> type[SessionStoreError]:
    """Resolve a deprecated error name to its new class, with a ``DeprecationWarning``."""
    new_name = DEPRECATED_NAMES.get(name)
    if new_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"sessionstore.errors.{name} is deprecated, use {new_name} (the same class)",
        DeprecationWarning,
        stacklevel=2,
    )
    error: type[SessionStoreError] = globals()[new_name]
    return error
