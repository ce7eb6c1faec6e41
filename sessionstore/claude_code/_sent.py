"""The requests Claude Code sent, rebuilt from its ``api-request*`` lines, and how the log's differ.

Claude Code 2.1.3xx records every request it sends in the transcript, content-addressed:

* ``api-request-shape``: ``{shapeHash, shape: {system, tools, ...}}``, the parts that rarely change;
* ``api-request-blob``: ``{hash, message: {role, content}}``, one message of some request that
  the transcript does not hold (system reminders, attachments as rendered, the environment);
  a message the transcript holds is named by the same hash (SHA-256 of ``{role, content}`` as
  JSON with sorted keys; an assistant message is all the lines of its API response);
* ``api-request``: ``{id, base, keep, tail, params, shapeHash, cacheControl, ...}``: the messages
  are the first ``keep`` messages of request ``base`` followed by the blobs named in ``tail``;
  ``params`` holds the model and the other body fields, ``cacheControl`` where the
  ``cache_control`` markers go (``{path, value}``).

The importer keeps these lines whole as opaque entries (export gives them back byte for byte);
this module reads them back from the log, so ``served --as-sent`` can show what Claude Code sent
at turn N and what the log alone rebuilds for the same point. Everything read is checked: a
missing blob, base or shape, or a malformed field, is a ``ValidationError`` naming the line.

With ``--system-prompt-snapshot on`` (the default outside ``--bare``) Claude Code also records the
system prompt it rendered on a conversation's first request, as ``prompt_snapshot`` attachment
lines (``systemPrompt``: its parts; ``cliPrefix``: the line it puts before them), and sends that
record as-is on every later request until the conversation is compacted. The log's rebuild of a
request uses the record of the request's conversation, the stretch between two compactions (the
record follows the first request it was sent with), and is compared with what was sent.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import ValidationError
from ..projections import ApiContextProjection, Session, TranscriptEntry, fold, materialize
from ..projections._base import read_pages
from ..projections._session import check_session
from ..store import RecordedEvent

__all__ = ["SentComparison", "SentRequest", "compare_all_sent", "compare_sent", "sent_requests"]

_KINDS = frozenset({"api-request", "api-request-blob", "api-request-shape"})
#: Body fields of ``params`` that are HTTP headers, not part of the JSON body.
_HEADER_PARAMS = frozenset({"betas"})


@dataclass(frozen=True)
class SentRequest:
    """One request as Claude Code recorded sending it.

    Attributes:
        turn: 1 for the first request of the session, in log order.
        request_id: Claude Code's id of the request (``api-request.id``).
        line: the transcript line of its ``api-request`` entry.
        seq: the seq of that entry's event: the log up to ``seq - 1`` is what preceded it.
        request: the body: ``params`` (without header-only fields such as ``betas``), the
            shape's ``system`` and ``tools``, and the ``messages``, with ``cache_control`` set,
            as on the wire (a user or system message of one plain text block is a string).
            Not recorded, so not here: ``stream``, ``metadata`` and the billing-header text
            block Claude Code puts first in ``system``.
        query_source: Claude Code's ``querySource`` (``sdk``, ``repl_main_thread``, ...).
        recorded_system: the system prompt the transcript recorded for the request's
            conversation (``prompt_snapshot``), as text blocks; None when none was recorded.
    """

    turn: int
    request_id: str
    line: int
    seq: int
    request: dict[str, Any]
    query_source: str | None
    recorded_system: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class SentComparison:
    """What Claude Code sent at a turn next to what the log rebuilds for the same point.

    ``differences`` lists, in order, each system prompt block (when the transcript recorded the
    system prompt) and each message of one side that the other side lacks, described as
    ``"sent only: user message 1: <system-reminder> ..."``; system reminders and rendered
    attachments are what Claude Code adds that the transcript does not carry.
    """

    sent: SentRequest
    rebuilt: dict[str, Any]
    differences: tuple[str, ...]

    @property
    def same_messages(self) -> bool:
        """True when both sides hold the same messages (text, tool calls and results), and the same
        system prompt where the transcript recorded one."""
        return not self.differences

    def to_dict(self) -> dict[str, Any]:
        """The comparison as a JSON-ready dict."""
        return {
            "turn": self.sent.turn,
            "request_id": self.sent.request_id,
            "line": self.sent.line,
            "seq": self.sent.seq,
            "sent": self.sent.request,
            "rebuilt": self.rebuilt,
            "differences": list(self.differences),
        }


def _bad(line: int, what: str) -> ValidationError:
    return ValidationError(f"api-request entry on line {line}: {what}", field="entry", index=line)


def _str_list(value: object) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def _message_hash(message: dict[str, Any]) -> str:
    """Claude Code's blob hash: SHA-256 of the message as JSON with sorted keys, no spaces."""
    text = json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


def sent_requests(session: Session) -> list[SentRequest]:
    """Every request the session's ``api-request`` lines record, in log order (none before 2.1.3xx).

    The transcript's digest says which lines there are and which blobs and shapes their requests
    name; the log is then read a page at a time, keeping only those and the recorded system
    prompts (none is read when no request was recorded).
    """
    check_session("session", session)
    lines = [e for e in session.transcript_digest if e.type in ("opaque_entry", "imported_entry")]
    requests = [e.payload["entry"] for e in lines if e.payload.get("entry_type") == "api-request"]
    if not requests:
        _check_blobs(lines)
        return []
    needed: set[str] = set()
    for request in requests:
        needed.update(_str_list(request.get("tail")) or [])
        if isinstance(request.get("shapeHash"), str):
            needed.add(request["shapeHash"])
    # To the end: a conversation's system prompt is recorded after its first request.
    return _read_requests(read_pages(session.log.read, 1, None), needed)


def _check_blobs(lines: list[TranscriptEntry]) -> None:
    """Raise for the first malformed blob line, as reading them all would."""
    for entry in lines:
        if entry.payload.get("entry_type") == "api-request-blob" and not entry.payload["entry"]["valid"]:
            line = entry.payload["line"] if isinstance(entry.payload.get("line"), int) else 0
            raise _bad(line, "a blob needs a string 'hash' and a 'message' object")


def _read_requests(events: Iterator[RecordedEvent], needed: set[str]) -> list[SentRequest]:
    """The requests of the ``api-request`` lines among ``events``, keeping only the blobs and
    shapes in ``needed`` (no request names any other, so no other is ever looked up)."""
    shapes: dict[str, dict[str, Any]] = {}
    blobs: dict[str, dict[str, Any]] = {}
    messages_of: dict[str, list[dict[str, Any]]] = {}
    sent: list[SentRequest] = []
    responses: dict[str, list[Any]] = {}  # an API response's blocks so far (one line per block)
    # The conversation (0, then one more after each compaction) of each request, and each
    # conversation's recorded system prompt.
    conversation, conversation_of = 0, []
    prompts: dict[int, _RecordedPrompt] = {}
    for event in events:
        if event.type == "compact_boundary":
            conversation += 1
            continue
        if event.type == "message_appended":
            payload = event.payload_dict()
            # A message the transcript holds is not written again as a blob: the request
            # names it by the same hash.
            content, role = payload.get("content"), payload.get("role")
            api_id = payload.get("api_message_id")
            if role == "assistant" and isinstance(api_id, str) and isinstance(content, list):
                content = responses.setdefault(api_id, [])
                content.extend(payload["content"])
            # A copy: the response's list grows with its later lines, a blob must not.
            _keep(
                blobs,
                needed,
                {"role": role, "content": list(content) if isinstance(content, list) else content},
            )
            if isinstance(content, str):  # hashed as the one text block it is on the wire, too
                block = {"role": role, "content": [{"type": "text", "text": content}]}
                _keep(blobs, needed, block, replace=False)
            continue
        if event.type not in ("opaque_entry", "imported_entry") or not _may_be_sent(event.payload):
            continue
        payload = event.payload_dict()
        if payload.get("entry_type") == "attachment":
            prompts.setdefault(conversation, _RecordedPrompt()).add(payload.get("entry"))
            continue
        entry = payload.get("entry")
        if payload.get("entry_type") not in _KINDS or not isinstance(entry, dict):
            continue
        line = payload["line"] if isinstance(payload.get("line"), int) else 0
        kind = payload["entry_type"]
        if kind == "api-request-shape":
            shape_hash, shape = entry.get("shapeHash"), entry.get("shape")
            if isinstance(shape_hash, str) and isinstance(shape, dict) and shape_hash in needed:
                shapes[shape_hash] = shape
        elif kind == "api-request-blob":
            message = entry.get("message")
            if not isinstance(entry.get("hash"), str) or not isinstance(message, dict):
                raise _bad(line, "a blob needs a string 'hash' and a 'message' object")
            if entry["hash"] in needed:
                blobs[entry["hash"]] = message
        else:
            request = _rebuild(entry, line, shapes, blobs, messages_of)
            query_source = entry.get("querySource")
            sent.append(
                SentRequest(
                    len(sent) + 1,
                    str(entry["id"]),
                    line,
                    event.seq,
                    request,
                    query_source if isinstance(query_source, str) else None,
                )
            )
            conversation_of.append(conversation)
    return [
        dataclasses.replace(request, recorded_system=prompts[at].blocks() if at in prompts else None)
        for request, at in zip(sent, conversation_of, strict=True)
    ]


@dataclass
class _RecordedPrompt:
    """A conversation's system prompt as its ``prompt_snapshot`` lines record it.

    Claude Code records it once and sends the record as-is: the first line gives the parts
    (``systemPrompt``), and a later one of the same conversation adds ``cliPrefix``, the line
    sent before them. A line whose fields are not those shapes records nothing.
    """

    parts: list[str] | None = None
    prefix: str | None = None

    def add(self, entry: object) -> None:
        """Fold in one attachment line (any other attachment than a prompt snapshot is passed over)."""
        attachment = entry.get("attachment") if isinstance(entry, dict) else None
        if not isinstance(attachment, dict) or attachment.get("type") != "prompt_snapshot":
            return
        parts, prefix = _str_list(attachment.get("systemPrompt")), attachment.get("cliPrefix")
        if self.parts is None and parts is not None:
            self.parts = parts
        if self.prefix is None and isinstance(prefix, str):
            self.prefix = prefix

    def blocks(self) -> list[dict[str, Any]] | None:
        """The system prompt as the text blocks sent (None: no parts were recorded)."""
        if self.parts is None:
            return None
        texts = ([self.prefix] if self.prefix is not None else []) + self.parts
        return [{"type": "text", "text": text} for text in texts]


def _keep(
    blobs: dict[str, dict[str, Any]], needed: set[str], message: dict[str, Any], *, replace: bool = True
) -> None:
    """Record ``message`` under its hash if a request names that hash."""
    digest = _message_hash(message)
    if digest in needed and (replace or digest not in blobs):
        blobs[digest] = message


def _may_be_sent(text: str) -> bool:
    """Whether a line's payload text can be an ``api-request*`` line or a recorded system prompt:
    canonical JSON escapes no letter, so its type appears verbatim (most lines are passed over
    unparsed)."""
    return '"api-request' in text or '"prompt_snapshot"' in text


def _rebuild(
    entry: dict[str, Any],
    line: int,
    shapes: dict[str, dict[str, Any]],
    blobs: dict[str, dict[str, Any]],
    messages_of: dict[str, list[dict[str, Any]]],
) -> dict[str, Any]:
    request_id, keep, tail = entry.get("id"), entry.get("keep", 0), _str_list(entry.get("tail"))
    if not isinstance(request_id, str):
        raise _bad(line, "no string 'id'")
    if not isinstance(keep, int) or isinstance(keep, bool) or keep < 0 or tail is None:
        raise _bad(line, "'keep' must be a count and 'tail' a list of blob hashes")
    base = entry.get("base")
    earlier: list[dict[str, Any]] = []
    if base is not None:
        if not isinstance(base, str) or base not in messages_of:
            raise _bad(line, f"its base request {base!r} is not recorded before it")
        earlier = messages_of[base]
    if keep > len(earlier):
        raise _bad(line, f"keeps {keep} messages of a request that had {len(earlier)}")
    missing = [h for h in tail if h not in blobs]
    if missing:
        raise _bad(line, f"names blobs not recorded before it: {', '.join(missing)}")
    messages = earlier[:keep] + [blobs[h] for h in tail]
    messages_of[request_id] = messages
    params = entry.get("params")
    request: dict[str, Any] = {
        k: v for k, v in (params if isinstance(params, dict) else {}).items() if k not in _HEADER_PARAMS
    }
    shape_hash = entry.get("shapeHash")
    shape = shapes.get(shape_hash) if isinstance(shape_hash, str) else None
    if shape is None:
        raise _bad(line, f"its shape {entry.get('shapeHash')!r} is not recorded before it")
    request.update(shape)
    request["messages"] = list(messages)
    # Markers are set copy-on-write: the blobs and shapes are shared by every request.
    for marker in entry.get("cacheControl") or []:
        _set_marker(request, marker, line)
    request["messages"] = [_as_on_the_wire(message) for message in request["messages"]]
    return request


def _as_on_the_wire(message: dict[str, Any]) -> dict[str, Any]:
    """On the wire a user or system message of one plain text block is that text."""
    content = message.get("content")
    if (
        message.get("role") != "assistant"
        and isinstance(content, list)
        and len(content) == 1
        and isinstance(content[0], dict)
        and content[0].keys() == {"type", "text"}
        and content[0]["type"] == "text"
    ):
        return {**message, "content": content[0]["text"]}
    return message


def _set_marker(request: dict[str, Any], marker: object, line: int) -> None:
    """Put one ``cache_control`` marker where its ``path`` points (``["messages", 3, "content", 0]``),
    copying each container on the way (the request's own dict is already its own)."""
    path = marker.get("path") if isinstance(marker, dict) else None
    if not isinstance(marker, dict) or not isinstance(path, list) or not path or "value" not in marker:
        raise _bad(line, "a cacheControl marker needs a non-empty 'path' and a 'value'")
    target: Any = request
    for step in path:
        found = (isinstance(target, dict) and isinstance(step, str) and step in target) or (
            isinstance(target, list) and isinstance(step, int) and 0 <= step < len(target)
        )
        if not found:
            raise _bad(line, f"cacheControl path {path} does not exist in the request")
        child = target[step]
        if isinstance(child, str) and isinstance(target, list):
            child = {"type": "text", "text": child}  # a string content is one text block on the wire
        elif isinstance(child, dict | list):
            child = copy.copy(child)
        target[step] = child
        target = child
    if not isinstance(target, dict):
        raise _bad(line, f"cacheControl path {path} does not lead to a block")
    target["cache_control"] = marker["value"]


def compare_sent(session: Session, turn: int) -> SentComparison:
    """Claude Code's request at ``turn`` (1 = its first) next to the log's rebuild at that point.

    The rebuild is the API view of every event before the ``api-request`` line, i.e. what
    ``sessionstore`` itself would send there. Messages are compared by role and content,
    without ``cache_control`` markers.

    Raises:
        ValidationError: the session recorded no such turn, or an ``api-request`` line is
            malformed (naming its line).
    """
    check_session("session", session)
    sent = sent_requests(session)
    if not 1 <= turn <= len(sent):
        msg = (
            f"session {session.id!r} recorded {len(sent)} requests Claude Code sent; there is no turn {turn}"
        )
        raise ValidationError(msg, field="turn")
    return next(_comparisons(session, sent[turn - 1 : turn]))


def compare_all_sent(session: Session) -> Iterator[SentComparison]:
    """``compare_sent`` for every recorded turn, in order, folding the log once."""
    check_session("session", session)
    return _comparisons(session, sent_requests(session))


def _comparisons(session: Session, sent: list[SentRequest]) -> Iterator[SentComparison]:
    projection = ApiContextProjection()
    state, folded = None, 0
    for request in sent:
        if state is None:  # the first: from the latest snapshot before it
            state, folded = session.api_state_at(request.seq - 1), request.seq - 1
        elif request.seq - 1 > folded:
            state = fold(projection, read_pages(session.log.read, folded + 1, request.seq - 1), state)
            folded = request.seq - 1
        rebuilt = materialize(state)
        differences = []
        if request.recorded_system is not None:
            rebuilt = {"system": request.recorded_system, **rebuilt}
            differences = _system_differences(request.request.get("system"), request.recorded_system)
        differences += _differences(request.request.get("messages", []), rebuilt.get("messages", []))
        yield SentComparison(request, rebuilt, tuple(differences))


def _blocks(message: dict[str, Any]) -> list[str]:
    """Each content block of ``message`` as canonical JSON, without cache markers."""
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        return []
    out = []
    for block in blocks:
        if isinstance(block, dict):
            block = {k: v for k, v in block.items() if k != "cache_control"}
        out.append(json.dumps(block, sort_keys=True, ensure_ascii=False))
    return out


def _describe(side: str, role: str, index: int, block: str) -> str:
    loaded = json.loads(block)
    text = loaded.get("text") if isinstance(loaded, dict) else None
    kind = loaded.get("type") if isinstance(loaded, dict) else "block"
    if isinstance(text, str):
        what = "system reminder" if text.lstrip().startswith("<system-reminder>") else "text"
        preview = " ".join(text.split())[:80]
        return f"{side} only: {role} message {index}: {what}: {preview}"
    return f"{side} only: {role} message {index}: {kind} block"


def _system_differences(sent: object, recorded: list[dict[str, Any]]) -> list[str]:
    """Blocks of the system prompt one side has and the other lacks, compared by text."""

    def texts(system: object) -> list[str]:
        blocks = [{"type": "text", "text": system}] if isinstance(system, str) else system
        if not isinstance(blocks, list):
            return []
        return [str(b.get("text")) if isinstance(b, dict) else json.dumps(b) for b in blocks]

    a, b = texts(sent), texts(recorded)
    out: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag != "equal":
            out += [f"sent only: system prompt block {i + 1}: {_preview(a[i])}" for i in range(i1, i2)]
            out += [f"rebuilt only: system prompt block {j + 1}: {_preview(b[j])}" for j in range(j1, j2)]
    return out


def _preview(text: str) -> str:
    return " ".join(text.split())[:80]


def _differences(sent: list[dict[str, Any]], rebuilt: list[dict[str, Any]]) -> list[str]:
    """Blocks one side has and the other lacks, message by message (a multiset difference)."""

    def flat(messages: list[dict[str, Any]]) -> list[tuple[str, int, str]]:
        return [
            (str(m.get("role")), i, block)
            for i, m in enumerate(messages, start=1)
            if isinstance(m, dict)
            for block in _blocks(m)
        ]

    a, b = flat(sent), flat(rebuilt)
    matcher = difflib.SequenceMatcher(
        a=[(r, x) for r, _, x in a], b=[(r, x) for r, _, x in b], autojunk=False
    )
    out: list[str] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        out += [_describe("sent", role, index, block) for role, index, block in a[i1:i2]]
        out += [_describe("rebuilt", role, index, block) for role, index, block in b[j1:j2]]
    return out
