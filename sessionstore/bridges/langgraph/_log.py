"""Checkpoints as events: what the sync and the async saver share.

A LangGraph thread is one session; its checkpoints (every namespace) and pending writes are
``LangGraphCheckpointSaved`` / ``LangGraphWritesSaved`` events, appended with ``ANY`` (LangGraph
orders checkpoints by id, not by the log). Each operation takes the ``SessionStore`` to run on,
so ``AsyncSessionStore.run_sync`` runs the very same code for the async saver.

Why the log grows linearly with a run: an event holds only the channels whose version changed,
and a list channel (``messages``) that grew from its version in the parent checkpoint stores the
appended items, not the list again (``LangGraphChannelValue``).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from ...errors import SessionErasedError, SessionExistsError, SessionNotFoundError, ValidationError
from ...events import (
    LangGraphChannelValue,
    LangGraphCheckpointSaved,
    LangGraphValue,
    LangGraphWrite,
    LangGraphWritesSaved,
)
from ...store import ANY, SessionStore
from ._index import ThreadIndex

__all__ = ["ERASE_REASON", "SESSION_PREFIX", "CheckpointLog", "thread_session_id"]

#: Serialized values up to this size stay inline in the event; larger ones are blobs. A chat
#: message fits, so a step costs one append, and reading a thread back one read, not a blob each.
INLINE_MAX = 4096
#: Every bridged session's id starts with this.
SESSION_PREFIX = "langgraph-"
#: The reason ``delete_thread`` gives its erasure (the receipt keeps it).
ERASE_REASON = "LangGraph delete_thread"
#: How many bytes of blobs a saver keeps in memory (a run reads back what it just wrote).
_BLOB_BYTES_KEPT = 64 * 1024 * 1024
#: How many threads' folds a saver keeps (the least recently used go; read again when needed):
#: a server with many threads holds the busy ones, not every thread it ever touched.
_THREADS_KEPT = 1024
#: The session metadata key that names the thread.
_THREAD_KEY = "langgraph_thread_id"


def thread_session_id(thread_id: str, tenant: str | None, user: str | None, generation: int = 0) -> str:
    """The session a thread is stored in: a hash of (tenant, user, thread id), so any thread id
    (LangGraph allows any string) maps to a valid session id; ``generation`` counts the thread's
    earlier sessions that ``delete_thread`` erased (an erased session's id is never reused)."""
    digest = hashlib.sha256(json.dumps([tenant, user, thread_id]).encode()).hexdigest()[:40]
    return f"{SESSION_PREFIX}{digest}" + (f".{generation}" if generation else "")


def _configurable(config: RunnableConfig | None, what: str) -> Mapping[str, Any]:
    configurable = (config or {}).get("configurable")
    if not isinstance(configurable, Mapping) or configurable.get("thread_id") in (None, ""):
        msg = f"{what} needs config['configurable']['thread_id'] (the LangGraph thread)"
        raise ValidationError(msg, field="configurable.thread_id")
    return configurable


def _namespace(configurable: Mapping[str, Any]) -> str:
    ns = configurable.get("checkpoint_ns", "")
    if not isinstance(ns, str):
        msg = f"checkpoint_ns must be a str, not {type(ns).__name__}"
        raise ValidationError(msg, field="configurable.checkpoint_ns")
    return ns


def _digest(kind: str, data: bytes) -> bytes:
    """What identifies a serialized value whatever the store hashes (an encrypted store keys
    its blob hashes): used to find the prefix a list shares with its parent version."""
    return hashlib.sha256(kind.encode() + b"\0" + data).digest()


def _msgpack_array_header(length: int) -> bytes:
    """The msgpack header of an array of ``length`` items (fixarray, array 16, array 32)."""
    if length < 16:
        return bytes([0x90 | length])
    if length < 2**16:
        return b"\xdc" + length.to_bytes(2, "big")
    return b"\xdd" + length.to_bytes(4, "big")


class CheckpointLog:
    """The bridge's state shared by its operations: serializer, owner, and per-thread folds.

    Thread-safe for the sync saver (folding holds a lock, I/O does not); the async saver runs
    its calls on one event loop.
    """

    def __init__(self, serde: SerializerProtocol, *, tenant: str | None, user: str | None) -> None:
        self.serde = serde
        self.tenant = tenant
        self.user = user
        self._sessions: OrderedDict[str, str] = OrderedDict()
        self._indexes: OrderedDict[str, ThreadIndex] = OrderedDict()
        self._blobs: OrderedDict[str, bytes] = OrderedDict()
        self._blob_bytes = 0
        #: (session, namespace, channel) -> (version, item digests, item refs) of the list last
        #: written or read there: the next step's prefix check needs no blob reads.
        self._last_lists: dict[tuple[str, str, str], tuple[str, list[bytes], list[LangGraphValue]]] = {}
        self._lock = threading.Lock()

    # -- sessions --

    def session_of(self, store: SessionStore, thread_id: str, *, create: bool) -> str | None:
        """The thread's current session; created when ``create`` (else None if it has none)."""
        with self._lock:
            known = self._sessions.get(thread_id)
        if known is not None:
            return known
        generation = 0
        while True:
            sid = thread_session_id(thread_id, self.tenant, self.user, generation)
            try:
                store.get_session(sid)
            except SessionErasedError:
                generation += 1
                continue
            except SessionNotFoundError:
                if not create:
                    return None
                # Another writer may create it first: then it is this thread's session too.
                with contextlib.suppress(SessionExistsError):
                    store.create_session(
                        sid, metadata={_THREAD_KEY: thread_id}, tenant=self.tenant, user=self.user
                    )
            with self._lock:
                self._sessions[thread_id] = sid
                while len(self._sessions) > _THREADS_KEPT:
                    self._sessions.popitem(last=False)
            return sid

    def _forget(self, thread_id: str, sid: str) -> None:
        with self._lock:
            self._sessions.pop(thread_id, None)
            self._indexes.pop(sid, None)
            for key in [k for k in self._last_lists if k[0] == sid]:
                del self._last_lists[key]

    def index(self, store: SessionStore, sid: str, thread_id: str) -> ThreadIndex:
        """The thread's fold, caught up with the events appended since it last read."""
        with self._lock:
            index = self._indexes.get(sid)
            if index is None:
                index = self._indexes[sid] = ThreadIndex(sid, thread_id)
                while len(self._indexes) > _THREADS_KEPT:
                    evicted, _ = self._indexes.popitem(last=False)
                    for key in [k for k in self._last_lists if k[0] == evicted]:
                        del self._last_lists[key]
            self._indexes.move_to_end(sid)
        for recorded in store.read(sid, index.last_seq + 1):
            index.apply(recorded.seq, recorded.event)
        return index

    def _thread(self, store: SessionStore, thread_id: str, *, create: bool) -> ThreadIndex | None:
        """The thread's caught-up fold (None: no session and not ``create``); a session erased
        meanwhile (another process ran ``delete_thread``) is looked up again."""
        for _ in range(2):
            sid = self.session_of(store, thread_id, create=create)
            if sid is None:
                return None
            try:
                return self.index(store, sid, thread_id)
            except SessionNotFoundError:
                self._forget(thread_id, sid)
        return None

    # -- values --

    def _blob(self, store: SessionStore, sid: str, ref: str) -> bytes:
        with self._lock:
            data = self._blobs.get(ref)
        if data is None:
            data = store.get_blob(ref, session_id=sid)
            self._keep_blob(ref, data)
        return data

    def _keep_blob(self, ref: str, data: bytes) -> None:
        with self._lock:
            if ref not in self._blobs:
                self._blob_bytes += len(data)
            self._blobs[ref] = data
            self._blobs.move_to_end(ref)
            while self._blob_bytes > _BLOB_BYTES_KEPT:
                _, dropped = self._blobs.popitem(last=False)
                self._blob_bytes -= len(dropped)

    def _stored(self, store: SessionStore, sid: str, kind: str, data: bytes) -> LangGraphValue:
        """``(kind, data)`` as the event holds it: inline when small, else a blob."""
        if not data:
            return LangGraphValue(kind=kind)
        if len(data) <= INLINE_MAX:
            return LangGraphValue(kind=kind, data=base64.b64encode(data).decode("ascii"))
        ref = store.put_blob(data, session_id=sid).sha256
        self._keep_blob(ref, data)
        return LangGraphValue(kind=kind, blob=ref)

    def _bytes(self, store: SessionStore, sid: str, value: LangGraphValue) -> bytes:
        if value.blob is not None:
            return self._blob(store, sid, value.blob)
        return base64.b64decode(value.data) if value.data is not None else b""

    def _load(self, store: SessionStore, sid: str, value: LangGraphValue) -> Any:
        return self.serde.loads_typed((value.kind, self._bytes(store, sid, value)))

    def _dump(self, store: SessionStore, sid: str, obj: Any) -> LangGraphValue:
        kind, data = self.serde.dumps_typed(obj)
        return self._stored(store, sid, kind, data)

    # -- put --

    def put(
        self,
        store: SessionStore,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Append the checkpoint (and its changed channels); LangGraph's ``put``."""
        configurable = _configurable(config, "put")
        thread_id = str(configurable["thread_id"])
        ns = _namespace(configurable)
        index = self._thread(store, thread_id, create=True)
        assert index is not None  # created
        sid = index.session_id
        parent_id = configurable.get("checkpoint_id")
        parent = index.checkpoints.get(ns, {}).get(parent_id) if parent_id else None
        parent_versions: Mapping[str, Any] = {}
        if parent is not None:
            parent_versions = self._load(store, sid, parent.checkpoint)["channel_versions"]
        values = checkpoint["channel_values"]
        channels: dict[str, LangGraphChannelValue] = {}
        for channel, version in new_versions.items():
            if channel not in values:
                channels[channel] = LangGraphChannelValue(
                    version=str(version), value=LangGraphValue(kind="empty")
                )
            elif type(values[channel]) is list:
                base = parent_versions.get(channel)
                channels[channel] = self._list_value(
                    store,
                    index,
                    ns,
                    channel,
                    str(version),
                    None if base is None else str(base),
                    values[channel],
                )
            else:
                channels[channel] = LangGraphChannelValue(
                    version=str(version), value=self._dump(store, sid, values[channel])
                )
        bare = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        full_metadata = get_serializable_checkpoint_metadata(config, metadata)
        step = full_metadata.get("step")
        source = full_metadata.get("source")
        event = LangGraphCheckpointSaved(
            checkpoint_ns=ns,
            checkpoint_id=checkpoint["id"],
            parent_checkpoint_id=parent_id,
            source=source if isinstance(source, str) else None,
            step=step if isinstance(step, int) and not isinstance(step, bool) else None,
            checkpoint=self._dump(store, sid, bare),
            metadata=self._dump(store, sid, full_metadata),
            channels=channels,
        )
        result = store.append(sid, [event], ANY)
        index.apply_appended(result.seqs[0], event)
        return {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}
        }

    def _list_value(
        self,
        store: SessionStore,
        index: ThreadIndex,
        ns: str,
        channel: str,
        version: str,
        base: str | None,
        items: list[Any],
    ) -> LangGraphChannelValue:
        """A list channel's new version: the items appended to ``base``'s list when it is a
        prefix of this one, else every item."""
        sid = index.session_id
        dumped = [self.serde.dumps_typed(item) for item in items]
        digests = [_digest(kind, data) for kind, data in dumped]
        # A version is never its own base (a saver given the same version twice stores it whole).
        at_base = self._list_at(store, index, ns, channel, base) if base != version else None
        base_digests, base_refs = at_base if at_base is not None else ([], [])
        shared = len(base_digests)
        if at_base is None or shared > len(digests) or digests[:shared] != base_digests:
            base, shared, base_refs = None, 0, []  # not an extension of a stored list: all items
        new_refs = [self._stored(store, sid, kind, data) for kind, data in dumped[shared:]]
        with self._lock:
            self._last_lists[(sid, ns, channel)] = (version, digests, base_refs + new_refs)
        return LangGraphChannelValue(version=version, base_version=base, items=tuple(new_refs))

    def _list_at(
        self, store: SessionStore, index: ThreadIndex, ns: str, channel: str, version: str | None
    ) -> tuple[list[bytes], list[LangGraphValue]] | None:
        """The item digests and refs of the list ``channel`` held at ``version``; None when it
        held no list stored as items there."""
        if version is None:
            return None
        with self._lock:
            last = self._last_lists.get((index.session_id, ns, channel))
        if last is not None and last[0] == version:
            return last[1], last[2]
        refs = index.items(ns, channel, version)
        if refs is None:
            return None
        digests = [_digest(ref.kind, self._bytes(store, index.session_id, ref)) for ref in refs]
        return digests, list(refs)

    def put_writes(
        self,
        store: SessionStore,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:
        """Append a task's pending writes against the config's checkpoint; LangGraph's ``put_writes``."""
        configurable = _configurable(config, "put_writes")
        checkpoint_id = configurable.get("checkpoint_id")
        if not isinstance(checkpoint_id, str) or not checkpoint_id:
            msg = "put_writes needs config['configurable']['checkpoint_id'] (the checkpoint written to)"
            raise ValidationError(msg, field="configurable.checkpoint_id")
        if not writes:
            return
        thread_id = str(configurable["thread_id"])
        ns = _namespace(configurable)
        index = self._thread(store, thread_id, create=True)
        assert index is not None  # created
        sid = index.session_id
        stored = tuple(
            LangGraphWrite(
                idx=WRITES_IDX_MAP.get(channel, i), channel=channel, value=self._dump(store, sid, value)
            )
            for i, (channel, value) in enumerate(writes)
        )
        event = LangGraphWritesSaved(
            checkpoint_ns=ns, checkpoint_id=checkpoint_id, task_id=task_id, task_path=task_path, writes=stored
        )
        result = store.append(sid, [event], ANY)
        index.apply_appended(result.seqs[0], event)

    # -- read --

    def get_tuple(self, store: SessionStore, config: RunnableConfig) -> CheckpointTuple | None:
        """The config's checkpoint (the namespace's newest without a ``checkpoint_id``)."""
        configurable = _configurable(config, "get_tuple")
        index = self._thread(store, str(configurable["thread_id"]), create=False)
        if index is None:
            return None
        ns = _namespace(configurable)
        checkpoint_id = get_checkpoint_id(config)
        saved = index.checkpoints.get(ns, {}).get(checkpoint_id) if checkpoint_id else index.latest(ns)
        return None if saved is None else self._tuple(store, index, saved)

    def _tuple(
        self, store: SessionStore, index: ThreadIndex, saved: LangGraphCheckpointSaved
    ) -> CheckpointTuple:
        sid, ns = index.session_id, saved.checkpoint_ns
        checkpoint: Checkpoint = self._load(store, sid, saved.checkpoint)
        checkpoint["channel_values"] = self._channel_values(store, index, ns, checkpoint["channel_versions"])
        configurable = {"thread_id": index.thread_id, "checkpoint_ns": ns}
        parent = (
            {"configurable": {**configurable, "checkpoint_id": saved.parent_checkpoint_id}}
            if saved.parent_checkpoint_id
            else None
        )
        return CheckpointTuple(
            config={"configurable": {**configurable, "checkpoint_id": saved.checkpoint_id}},
            checkpoint=checkpoint,
            metadata=self._load(store, sid, saved.metadata),
            parent_config=parent,  # type: ignore[arg-type]
            pending_writes=[
                (w.task_id, w.write.channel, self._load(store, sid, w.write.value))
                for w in index.ordered_writes(ns, saved.checkpoint_id)
            ],
        )

    def _channel_values(
        self, store: SessionStore, index: ThreadIndex, ns: str, versions: Mapping[str, Any]
    ) -> dict[str, Any]:
        sid = index.session_id
        values: dict[str, Any] = {}
        for channel, version in versions.items():
            stored = index.channels.get((ns, channel, str(version)))
            if stored is None:
                continue
            if stored.items is not None:
                refs = index.items(ns, channel, stored.version) or ()
                dumped = [(ref.kind, self._bytes(store, sid, ref)) for ref in refs]
                with self._lock:
                    self._last_lists[(sid, ns, channel)] = (
                        stored.version,
                        [_digest(kind, data) for kind, data in dumped],
                        list(refs),
                    )
                values[channel] = self._decode_list(dumped)
            elif stored.value is not None and stored.value.kind != "empty":
                values[channel] = self._load(store, sid, stored.value)
        return values

    def _decode_list(self, dumped: list[tuple[str, bytes]]) -> list[Any]:
        """The list whose items are ``dumped``. With LangGraph's own serializer and msgpack items,
        one decode of the items joined under a msgpack array header: msgpack packs a list as that
        header and its items' bytes, so it is the very value, decoded ~50x faster than item by item."""
        if type(self.serde) is JsonPlusSerializer and all(kind == "msgpack" for kind, _ in dumped):
            joined = _msgpack_array_header(len(dumped)) + b"".join(data for _, data in dumped)
            decoded: list[Any] = self.serde.loads_typed(("msgpack", joined))
            return decoded
        return [self.serde.loads_typed(item) for item in dumped]

    def list(
        self,
        store: SessionStore,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of the config's thread (and namespace and checkpoint id,
        when given), or of every bridged thread of this saver's owner without a config."""
        if limit is not None and limit <= 0:
            return
        configurable = _configurable(config, "list") if config is not None else None
        before_id = get_checkpoint_id(before) if before else None
        left = limit
        for index in self._indexes_for(store, configurable):
            namespaces = list(index.checkpoints)
            if configurable is not None and configurable.get("checkpoint_ns") is not None:
                namespaces = [_namespace(configurable)]
            wanted_id = configurable.get("checkpoint_id") if configurable else None
            found = [
                saved
                for ns in namespaces
                for saved in index.checkpoints.get(ns, {}).values()
                if (not wanted_id or saved.checkpoint_id == wanted_id)
                and (before_id is None or saved.checkpoint_id < before_id)
            ]
            found.sort(key=lambda s: s.checkpoint_id, reverse=True)
            for saved in found:
                if filter:
                    metadata = self._load(store, index.session_id, saved.metadata)
                    if not all(metadata.get(k) == v for k, v in filter.items()):
                        continue
                yield self._tuple(store, index, saved)
                if left is not None:
                    left -= 1
                    if left <= 0:
                        return

    def _indexes_for(
        self, store: SessionStore, configurable: Mapping[str, Any] | None
    ) -> Iterator[ThreadIndex]:
        if configurable is not None:
            index = self._thread(store, str(configurable["thread_id"]), create=False)
            if index is not None:
                yield index
            return
        after: str | None = None
        tenant = self.tenant
        user = self.user if tenant is not None else None
        while True:
            page = store.list_sessions(limit=100, after=after, tenant=tenant, user=user)
            for info in page:
                thread_id = info.metadata.get(_THREAD_KEY)
                mine = info.tenant == self.tenant and info.user == self.user
                if mine and info.id.startswith(SESSION_PREFIX) and isinstance(thread_id, str):
                    try:
                        yield self.index(store, info.id, thread_id)
                    except SessionNotFoundError:
                        continue  # erased meanwhile
            if len(page) < 100:
                return
            after = page[-1].id

    # -- delete --

    def delete_thread(self, store: SessionStore, thread_id: str, *, reason: str) -> None:
        """Erase the thread's session (with ``store.erase``: purged or crypto-shredded, with a
        receipt); the thread id can be used again afterwards, for a new session."""
        thread_id = str(thread_id)
        sid = self.session_of(store, thread_id, create=False)
        if sid is None:
            return
        try:
            store.erase(sid, reason=reason, with_forks=True)
        finally:
            self._forget(thread_id, sid)
