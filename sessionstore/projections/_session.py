"""The live session: projections kept warm in memory, updated by what each turn appends.

A ``Session`` is built once (latest snapshot + replay of the tail) and then applies only the
events appended after it, so the cost of a turn is proportional to what the turn added, not to
the history. It snapshots itself every ``snapshot_every`` events so the next process resumes
cheaply.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ValidationError
from ..events import ContentBlock, Event
from ..store import (
    AppendResult,
    AsyncSessionStore,
    ExpectedSeq,
    SessionInfo,
    SessionLog,
    SessionStore,
    run_in_store,
)
from ..store._contract import check_int, check_number, check_store
from ._api_context import (
    ApiContextProjection,
    ApiContextState,
    IncrementalFingerprint,
    encode_request,
    materialize,
)
from ._base import fold, load_snapshot, read_pages, rebuild, save_snapshot
from ._digest import TranscriptDigestProjection, digest_entries
from ._file_history import FileHistoryProjection, FileHistoryState
from ._transcript import TranscriptEntry, TranscriptProjection, TranscriptState
from ._window import (
    DEFAULT_MODEL_LIMITS,
    ModelLimits,
    TokenState,
    WindowConfig,
    model_limits,
    token_state,
    token_window,
)

if TYPE_CHECKING:
    import anthropic

__all__ = [
    "DEFAULT_BLOCK_OVERHEAD",
    "DEFAULT_CALIBRATION",
    "Session",
    "SessionConfig",
    "check_session",
    "check_source",
]

#: Claude tokens per cl100k token, and Claude tokens per content block (role markers, tool-call
#: framing, ids), fitted on real Claude Code transcripts: growth ~= 1.126 x cl100k + 35.7 x blocks
#: (bench/calibration.py; docs/projections.md). Applied to estimates, never to API-reported usage.
DEFAULT_CALIBRATION = 1.126
DEFAULT_BLOCK_OVERHEAD = 35.7
#: Tokenizer key of snapshots taken by a store that counts no tokens.
NO_TOKENIZER = "none"


def check_session(name: str, value: object) -> Session:
    """Return ``value`` if it is a ``Session``: for the public calls that take one, before they
    read or write (a str or a store failed deep inside, or not at all).

    Raises:
        ValidationError: otherwise, naming the argument (for a store: how to open a session on it).
    """
    if isinstance(value, Session):
        return value
    hint = " (open one with sessionstore.Session(store, session_id))" if _is_store(value) else ""
    msg = f"{name} must be a sessionstore.Session, not {type(value).__name__}{hint}"
    raise ValidationError(msg, field=name)


def check_source(name: str, value: object) -> Session | SessionStore:
    """Return ``value`` if it is a ``Session`` or a sync ``SessionStore`` (the calls that read
    either one); an async store is told how to get a sync one (``check_store``).

    Raises:
        ValidationError: otherwise, naming the argument.
    """
    if isinstance(value, Session | SessionStore):
        return value
    if isinstance(value, AsyncSessionStore):
        check_store(name, value)
    msg = f"{name} must be a sessionstore.Session or a sessionstore.SessionStore, not {type(value).__name__}"
    raise ValidationError(msg, field=name)


def _is_store(value: object) -> bool:
    return isinstance(value, SessionStore | AsyncSessionStore)


@dataclass(frozen=True)
class SessionConfig:
    """How a live session measures and caches its context.

    Args:
        window: the context-window switches (overrides, disables).
        calibration: Claude tokens per stored (cl100k) token for the estimated part of "used".
        block_overhead: Claude tokens added per content block beyond its text, likewise.
        default_limits: limits for a model the registry does not know.
        cache_control: add prompt-cache breakpoints to every request.
        snapshot_every: persist projection snapshots every this many events (0: never).
    """

    window: WindowConfig = field(default_factory=WindowConfig)
    calibration: float = DEFAULT_CALIBRATION
    block_overhead: float = DEFAULT_BLOCK_OVERHEAD
    default_limits: ModelLimits = DEFAULT_MODEL_LIMITS
    cache_control: bool = False
    snapshot_every: int = 1000

    def __post_init__(self) -> None:
        """Raises:
        ValidationError: (a ``ValueError``) a value of the wrong type or out of range, named.
        """
        if check_number("calibration", self.calibration) <= 0:
            msg = f"calibration must be a positive finite number, got {self.calibration!r}"
            raise ValidationError(msg, field="calibration")
        if check_number("block_overhead", self.block_overhead) < 0:
            msg = f"block_overhead must be a finite number >= 0, got {self.block_overhead!r}"
            raise ValidationError(msg, field="block_overhead")
        check_int("snapshot_every", self.snapshot_every, minimum=0)
        for name, kind in (("window", WindowConfig), ("default_limits", ModelLimits)):
            if not isinstance(getattr(self, name), kind):
                msg = f"{name} must be a {kind.__name__}, not {type(getattr(self, name)).__name__}"
                raise ValidationError(msg, field=name)
        if not isinstance(self.cache_control, bool):  # "false" would switch caching on
            msg = f"cache_control must be a bool, got {self.cache_control!r}"
            raise ValidationError(msg, field="cache_control")


class Session:
    """One session's log with its views (API request, transcript, token state) kept current.

    Not thread-safe: use one ``Session`` per thread or task. Other processes may append to
    the same session; ``refresh()`` picks their events up, and ``append`` with the default
    ``expected_seq`` fails with ``ConcurrencyError`` if they wrote since the last refresh.
    """

    def __init__(
        self,
        store: SessionStore,
        session_id: str,
        config: SessionConfig | None = None,
        *,
        use_snapshots: bool = True,
    ) -> None:
        self.store = check_store("store", store)
        self.id = session_id
        self.config = config or SessionConfig()
        counter = store.token_counter
        self.tokenizer = counter.name if counter is not None else NO_TOKENIZER
        self._api_projection = ApiContextProjection()
        self._transcript_projection = TranscriptProjection()
        self._use_snapshots = use_snapshots
        #: The session's events in one numbering (a fork sees its parent's prefix).
        self.log = SessionLog(store, session_id)
        self._api, self.last_seq = rebuild(
            store,
            session_id,
            self._api_projection,
            tokenizer=self.tokenizer,
            use_snapshots=use_snapshots,
            read=self.log.read,
        )
        self._fingerprints = IncrementalFingerprint()
        # The transcript is built on first use: a resume that only needs the request skips it.
        self._transcript: TranscriptState | None = None
        # The digest of the transcript the audit and the replays read, built on first use too.
        self._digest: TranscriptState | None = None
        # The file-history view is built on first use too (a post-compact restore reads it),
        # then kept current by ``refresh``: one per session, never refolded from the log.
        self._file_history_projection = FileHistoryProjection()
        self._file_history: FileHistoryState | None = None
        self._last_snapshot_seq = self.last_seq

    @classmethod
    def create(
        cls,
        store: SessionStore,
        session_id: str | None = None,
        *,
        model: str | None = None,
        context_window: int | None = None,
        max_output_tokens: int | None = None,
        system: str | list[ContentBlock] | None = None,
        tools: Sequence[dict[str, Any]] = (),
        metadata: dict[str, Any] | None = None,
        config: SessionConfig | None = None,
        tenant: str | None = None,
        user: str | None = None,
        external_id: str | None = None,
    ) -> Session:
        """Create a session (SessionStarted, and ContextConfigured if system or tools) and open it.

        ``tenant``, ``user`` and ``external_id`` say who it belongs to (``SessionStore.create_session``).
        """
        # Dicts, validated by the store with the rest of the call: a bad argument (a str
        # context_window, tools that are no list of dicts) is a ValidationError naming its field,
        # and nothing is created.
        events: list[dict[str, Any]] = [
            {
                "type": "session_started",
                "model": model,
                "context_window": context_window,
                "max_output_tokens": max_output_tokens,
            }
        ]
        if system is not None or tools:
            events.append({"type": "context_configured", "system": system, "tools": tools})
        info: SessionInfo = store.create_session(
            session_id, metadata=metadata, events=events, tenant=tenant, user=user, external_id=external_id
        )
        return cls(store, info.id, config)

    # -- on an AsyncSessionStore: database I/O awaited on the event loop, no threads --

    @classmethod
    async def aload(
        cls,
        store: AsyncSessionStore,
        session_id: str,
        config: SessionConfig | None = None,
        *,
        use_snapshots: bool = True,
    ) -> Session:
        """Open a session of an async store (``Session(store, session_id)`` for asyncio).

        Its reads are awaited on the loop; folding the events into the views is CPU work and
        runs on the loop too. Call the returned session's methods that touch the database
        through its async forms (``arefresh``, ``aappend``, ``Pipeline.aprepare``,
        ``AsyncConversation``) or ``store.run_sync``.
        """
        return await store.run_sync(
            lambda sync_store: cls(sync_store, session_id, config, use_snapshots=use_snapshots)
        )

    @classmethod
    async def acreate(
        cls, store: AsyncSessionStore, session_id: str | None = None, **options: Any
    ) -> Session:
        """``Session.create`` on an async store; ``options`` are ``create``'s keyword arguments."""
        return await store.run_sync(lambda sync_store: cls.create(sync_store, session_id, **options))

    async def arefresh(self) -> int:
        """``refresh`` for asyncio: awaited on an async store's loop (a sync store's session
        refreshes in a worker thread)."""
        return await run_in_store(self.store, self.refresh)

    async def aappend(
        self, events: Sequence[Event | dict[str, Any]], *, expected_seq: ExpectedSeq | None = None
    ) -> AppendResult:
        """``append`` for asyncio (see ``arefresh``)."""
        return await run_in_store(self.store, lambda: self.append(events, expected_seq=expected_seq))

    def fork(
        self,
        *,
        at_seq: int | None = None,
        message_uuid: str | None = None,
        fork_id: str | None = None,
        config: SessionConfig | None = None,
    ) -> Session:
        """A new session sharing this one's history up to a point (nothing is copied).

        Args:
            at_seq: the last seq the fork shares (default: everything so far).
            message_uuid: share up to and including this message instead.
            fork_id: the fork's session id (default: a new uuid).

        Raises:
            ValidationError: an unknown message, or a seq beyond this session's last.
        """
        if at_seq is not None:
            check_int("at_seq", at_seq)
        if message_uuid is not None:
            entry = next(
                (
                    e
                    for e in self._loaded_transcript().entries
                    if e.type == "message_appended" and e.payload.get("message_uuid") == message_uuid
                ),
                None,
            )
            if entry is None:
                msg = f"message {message_uuid!r} is not in session {self.id!r}"
                raise ValidationError(msg, field="message_uuid")
            at_seq = entry.seq
        point = self.last_seq if at_seq is None else at_seq
        if not 0 <= point <= self.last_seq:
            msg = f"cannot fork session {self.id!r} at seq {point}: it has {self.last_seq}"
            raise ValidationError(msg, field="at_seq")
        # fork_seq is in this session's continuous numbering: a fork of a fork shares the prefix too.
        info = self.store.create_session(fork_id, parent_session_id=self.id, fork_seq=point)
        return Session(self.store, info.id, config or self.config)

    def _loaded_transcript(self) -> TranscriptState:
        """The transcript at ``last_seq``: its snapshot (if any, not beyond) plus the tail."""
        if self._transcript is None:
            projection = self._transcript_projection
            state, _ = rebuild(
                self.store,
                self.id,
                projection,
                tokenizer=self.tokenizer,
                use_snapshots=self._use_snapshots,
                to_seq=self.last_seq,
                read=self.log.read,
            )
            self._transcript = state
        return self._transcript

    def _loaded_file_history(self) -> FileHistoryState:
        """The file-history view at ``last_seq``: its snapshot (if any, not beyond) plus the tail."""
        if self._file_history is None:
            state, _ = rebuild(
                self.store,
                self.id,
                self._file_history_projection,
                tokenizer=self.tokenizer,
                use_snapshots=self._use_snapshots,
                to_seq=self.last_seq,
                read=self.log.read,
            )
            self._file_history = state
        return self._file_history

    # -- keeping current --

    def refresh(self) -> int:
        """Apply events appended since the last refresh (by anyone); returns how many."""
        tail = self.log.read(self.last_seq + 1)
        if not tail:
            return 0
        self._api = fold(self._api_projection, tail, self._api)
        if self._transcript is not None:
            self._transcript = fold(self._transcript_projection, tail, self._transcript)
        if self._digest is not None:
            self._digest = fold(TranscriptDigestProjection(), tail, self._digest)
        if self._file_history is not None:
            self._file_history = fold(self._file_history_projection, tail, self._file_history)
        self.last_seq = tail[-1].seq
        every = self.config.snapshot_every
        if every and self.last_seq // every > self._last_snapshot_seq // every:
            self.snapshot()
        return len(tail)

    def append(
        self, events: Sequence[Event | dict[str, Any]], *, expected_seq: ExpectedSeq | None = None
    ) -> AppendResult:
        """Append ``events`` after what this session has seen, then apply them.

        Args:
            expected_seq: defaults to ``last_seq``, so a write by someone else since the
                last refresh raises ``ConcurrencyError`` instead of interleaving.
        """
        result = self.log.append(events, self.last_seq if expected_seq is None else expected_seq)
        self.refresh()
        return result

    def snapshot(self) -> None:
        """Persist the projections at ``last_seq``: the API context, and the transcript and its
        digest when they are loaded (the fold of events re-read from the store)."""
        if self.last_seq < 1:
            return
        save_snapshot(
            self.store, self.id, self._api_projection, self._api, self.last_seq, tokenizer=self.tokenizer
        )
        if self._transcript is not None:  # an unloaded transcript has nothing new to save
            save_snapshot(
                self.store,
                self.id,
                self._transcript_projection,
                self._transcript,
                self.last_seq,
                tokenizer=self.tokenizer,
            )
        if self._digest is not None:
            digest = TranscriptDigestProjection()
            save_snapshot(self.store, self.id, digest, self._digest, self.last_seq, tokenizer=self.tokenizer)
        self._last_snapshot_seq = self.last_seq

    # -- views --

    @property
    def api_state(self) -> ApiContextState:
        """The normalized API-context state (read-only by convention)."""
        return self._api

    @property
    def transcript(self) -> list[TranscriptEntry]:
        """Every event of the session, in order."""
        return list(self._loaded_transcript().entries)

    def api_state_at(self, seq: int) -> ApiContextState:
        """The API view as it was at ``seq``: from the latest snapshot at or before it (and not
        beyond what this session has seen), then the events after it, read a page at a time.

        A snapshot that does not load, or is past the log's last event, is logged and ignored.

        Raises:
            ValidationError: ``seq`` is not a 64-bit int.
            SessionNotFoundError: the session is gone since it was opened (SessionErasedError:
                erased).
            DataCorruptionError: a stored event read on the way was altered.
        """
        check_int("seq", seq)
        projection = self._api_projection
        state, done = projection.initial(), 0
        bound = min(seq, self.last_seq)
        if self._use_snapshots and bound > 0:
            resumed = load_snapshot(self.store, self.id, projection, self.tokenizer, bound, self.log.read)
            if resumed is not None:
                state, done = resumed
        return fold(projection, read_pages(self.log.read, done + 1, seq), state)

    @property
    def transcript_digest(self) -> list[TranscriptEntry]:
        """The events the audit and the replays read, cut down to what they read of them
        (projections/_digest.py): a bounded read of a long session, from the digest's snapshot.

        Read once (then kept current by this session's appends); a snapshot that does not load,
        or is past the log's last event, is logged and ignored.

        Raises:
            SessionNotFoundError: the session is gone since it was opened (SessionErasedError:
                erased).
            DataCorruptionError: a stored event read on the way was altered.
        """
        if self._digest is None:
            entries = digest_entries(
                self.store,
                self.id,
                self.log.read,
                self.last_seq,
                tokenizer=self.tokenizer,
                use_snapshots=self._use_snapshots,
            )
            self._digest = TranscriptState(entries)
        return list(self._digest.entries)

    @property
    def transcript_state(self) -> TranscriptState:
        """The transcript projection's state (read-only by convention)."""
        return self._loaded_transcript()

    @property
    def file_history_state(self) -> FileHistoryState:
        """The ``file_history`` view: checkpoints, tracked files, reads (read-only by convention).

        Built on first use and then kept current by ``refresh``, like the transcript; reading
        files and rewinding them is ``sessionstore.checkpoints.FileHistory``.
        """
        return self._loaded_file_history()

    def message_index(self, message_uuid: str) -> int:
        """Index in ``api_state.messages`` of the view message holding ``message_uuid``.

        Raises:
            ValidationError: no message with that uuid in the session.
        """
        for entry in self._loaded_transcript().entries:
            if entry.type == "message_appended" and entry.payload.get("message_uuid") == message_uuid:
                return bisect.bisect_right(self._api.message_first_seq, entry.seq) - 1
        msg = f"message {message_uuid!r} is not in session {self.id!r}"
        raise ValidationError(msg, field="message_uuid")

    def request(self, *, cache_control: bool | None = None) -> dict[str, Any]:
        """The ``{system, tools, messages}`` to send next (add ``model`` and ``max_tokens``).

        Args:
            cache_control: override the config's prompt-cache breakpoints for this call.
        """
        use_cache = self.config.cache_control if cache_control is None else cache_control
        return materialize(self._api, cache_control=use_cache)

    def fingerprint(self, request: dict[str, Any]) -> str:
        """SHA-256 (hex) of ``request_bytes(request)``, hashing only what changed since last time.

        Messages are never edited in place (a change makes a new dict), so the hash state after
        each unchanged message is reused: a turn costs what it added, not the whole history.
        """
        return self._fingerprints.digest(request)

    def request_bytes(self, *, cache_control: bool | None = None) -> bytes:
        """The request, canonically serialized: identical bytes for an identical log.

        Equal to ``request_bytes(self.request(...))``, but joined from each message's kept JSON:
        after a resume nothing is parsed to produce them, and a turn serializes only what it
        added.
        """
        use_cache = self.config.cache_control if cache_control is None else cache_control
        return encode_request(self._api, cache_control=use_cache)

    def limits(self) -> ModelLimits:
        """The model's limits: the registry's, with SessionStarted's explicit numbers on top."""
        return model_limits(
            self._api.model,
            default=self.config.default_limits,
            context_window=self._api.context_window,
            max_output_tokens=self._api.max_output_tokens,
        )

    def count_text(self, text: str) -> int:
        """Raw tokens of ``text`` with the store's counter (about 4 characters a token without one)."""
        counter = self.store.token_counter
        return counter.count_text(text) if counter is not None else math.ceil(len(text) / 4)

    def estimate(self, raw_tokens: int, blocks: int) -> int:
        """Claude tokens for ``raw_tokens`` stored (cl100k) tokens in ``blocks`` content blocks."""
        return math.ceil(raw_tokens * self.config.calibration + blocks * self.config.block_overhead)

    def used_tokens(self) -> int:
        """Tokens in the context now: the latest API usage plus the calibrated estimate after it.

        With no usage recorded yet, the calibrated estimate of the whole view.
        """
        api = self._api
        if api.usage_total is None:
            return max(0, self.estimate(api.view_tokens, api.visible_blocks))
        # Edits after the latest usage shrink the context it reported; reverts grow it back.
        tokens = api.tokens_since_usage - (api.removed_tokens - api.removed_tokens_at_usage)
        blocks = api.blocks_since_usage - (api.removed_blocks - api.removed_blocks_at_usage)
        return max(0, api.usage_total + self.estimate(tokens, blocks))

    def token_state(self) -> TokenState:
        """Every number and flag of the context window for the current context."""
        return token_state(self.used_tokens(), token_window(self.limits(), self.config.window))

    def count_tokens_exact(self, client: anthropic.Anthropic, model: str | None = None) -> int:
        """Input tokens of the next request as the API counts them (one count_tokens call).

        Raises:
            ValueError: no model given and the session names none.
        """
        chosen = model or self._api.model
        if chosen is None:
            msg = "count_tokens needs a model: pass model= or start the session with one"
            raise ValueError(msg)
        result = client.messages.count_tokens(model=chosen, **self.request(cache_control=False))
        return int(result.input_tokens)
