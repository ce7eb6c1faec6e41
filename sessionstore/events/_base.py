"""Event models: versioned Pydantic v2 models, one class per event ``type``.

An event is what a caller appends; the store adds the envelope (session, seq, global
position, hash chain, timestamps). The payload stored for an event is its JSON without
``event_id`` and ``type`` (both are columns), produced by ``model_dump_json`` so the bytes
are deterministic for equal events.

Versioning: every class carries ``SCHEMA_VERSION``. When a model changes shape, bump it and
register an upcaster from the old version (``register_upcaster``); stored events are
upcast step by step on read, never rewritten.
"""

from __future__ import annotations

import functools
import json
import math
import re
import sys
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal, TypeVar
from uuid import UUID, uuid4

import pydantic
import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt

from ..errors import UnknownEventTypeError, ValidationError

__all__ = [
    "AnyEvent",
    "ContentBlock",
    "ContextConfigured",
    "Event",
    "MessageAppended",
    "QuerySource",
    "SessionStarted",
    "SubagentStarted",
    "UsageRecorded",
    "decode_event",
    "encode_event",
    "event_class",
    "json_problem",
    "load_json",
    "nested_deeper_than",
    "parse_event",
    "register_event",
    "register_upcaster",
]

QuerySource = Literal["main", "subagent", "compact", "session_memory"]

# Anthropic content blocks are kept as the JSON the API uses; only the ``type`` key is
# required here. Projections interpret the blocks; the log keeps them verbatim.
ContentBlock = dict[str, Any]


class Event(BaseModel):
    """Base of every event.

    ``event_id`` is chosen by the client (a fresh uuid4 by default) and is the key of
    idempotent appends: retrying the same event object after a lost acknowledgement
    writes nothing and returns the original positions.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    SCHEMA_VERSION: ClassVar[int] = 1

    event_id: UUID = Field(default_factory=uuid4)
    type: str

    def countable_text(self) -> list[str] | None:
        """Text whose tokens count towards the context, or None if the event has none."""
        return None


class SessionStarted(Event):
    """The first event of a session: model limits and where the session came from."""

    type: Literal["session_started"] = "session_started"
    model: str | None = None
    context_window: PositiveInt | None = None
    max_output_tokens: PositiveInt | None = None
    query_source: QuerySource = "main"
    parent_session_id: str | None = None
    fork_seq: NonNegativeInt | None = None
    parent_tool_use_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


#: Every content block type the Messages API takes or returns in a message (the SDK's
#: ``ContentBlockParam`` and ``ContentBlock`` unions, beta ones included;
#: ``tests/test_bad_input.py`` keeps this in step with the installed ``anthropic``). An append
#: with any other type is refused: the API would refuse the request it ends up in.
CONTENT_BLOCK_TYPES: frozenset[str] = frozenset(
    {
        "advisor_tool_result",
        "bash_code_execution_tool_result",
        "code_execution_tool_result",
        "compaction",
        "container_upload",
        "document",
        "fallback",
        "image",
        "mcp_tool_listing",
        "mcp_tool_result",
        "mcp_tool_use",
        "redacted_thinking",
        "search_result",
        "server_tool_use",
        "text",
        "text_editor_code_execution_tool_result",
        "thinking",
        "tool_addition",
        "tool_removal",
        "tool_result",
        "tool_search_tool_result",
        "tool_use",
        "web_fetch_tool_result",
        "web_search_tool_result",
    }
)

#: The longest id a message may carry (``message_uuid``, ``parent_uuid``, ``api_message_id``):
#: Claude Code's are 36 characters, the API's about 30.
MAX_ID_LENGTH = 256
#: The largest token count (or other count) an event stores: a signed 64-bit column's.
INT64_MAX = 2**63 - 1

#: The validation context ``decode_event`` passes: the event was stored, checked when appended.
_STORED = {"sessionstore_stored": True}


def _appending(info: pydantic.ValidationInfo) -> bool:
    """False while ``decode_event`` rebuilds a stored event: the checks that came after it was
    written do not make an event already in the log unreadable (it reads back as stored)."""
    return info.context is not _STORED


def _refuse_bytes(value: object) -> object:
    """Bytes are not text: pydantic would decode them, so what reads back is not what was given."""
    if isinstance(value, bytes | bytearray | memoryview):
        msg = f"{type(value).__name__} is not text: decode it to a str, or give a list of content blocks"
        raise ValueError(msg)
    return value


def _check_blocks(
    content: str | list[ContentBlock], info: pydantic.ValidationInfo
) -> str | list[ContentBlock]:
    if isinstance(content, list):
        for i, block in enumerate(content):
            kind = block.get("type")
            if not isinstance(kind, str):
                msg = f"content block {i} needs a string 'type'"
                raise ValueError(msg)
            if kind not in CONTENT_BLOCK_TYPES and _appending(info):
                shown = repr(kind) if len(kind) <= 64 else f"{kind[:64]!r}... ({len(kind)} characters)"
                msg = (
                    f"content block {i} has type {shown}, which the Messages API does not take "
                    f"(known: {', '.join(sorted(CONTENT_BLOCK_TYPES))})"
                )
                raise ValueError(msg)
    return content


def _check_id(value: str | None, info: pydantic.ValidationInfo) -> str | None:
    if value is not None and len(value) > MAX_ID_LENGTH and _appending(info):
        msg = f"an id of at most {MAX_ID_LENGTH} characters, got {len(value)}"
        raise ValueError(msg)
    return value


def _check_count(value: object, info: pydantic.ValidationInfo) -> object:
    """A count is an int, not a bool (pydantic would store True as 1), and fits the store's column."""
    if _appending(info):
        if isinstance(value, bool):
            msg = f"an integer count, not the bool {value}"
            raise ValueError(msg)
        if isinstance(value, int) and value > INT64_MAX:
            msg = f"at most {INT64_MAX} (a 64-bit integer), got one of {len(str(value))} digits"
            raise ValueError(msg)
    return value


#: A message's id: at most ``MAX_ID_LENGTH`` characters.
MessageId = Annotated[str, pydantic.AfterValidator(_check_id)]
#: A token count: an int (not a bool) from 0 to ``INT64_MAX``.
TokenCount = Annotated[NonNegativeInt, pydantic.BeforeValidator(_check_count)]


def _block_text(block: ContentBlock) -> Iterable[str]:
    kind = block.get("type")
    if kind == "text":
        yield str(block.get("text", ""))
    elif kind == "thinking":
        yield str(block.get("thinking", ""))
    elif kind == "tool_use":
        yield str(block.get("name", ""))
        yield json.dumps(block.get("input", {}), ensure_ascii=False, separators=(",", ":"))
    elif kind == "tool_result":
        inner = block.get("content", "")
        if isinstance(inner, str):
            yield inner
        elif isinstance(inner, list):
            for sub in inner:
                if isinstance(sub, dict):
                    yield from _block_text(sub)


class MessageAppended(Event):
    """One message (or one streamed chunk of an assistant message) of the conversation."""

    type: Literal["message_appended"] = "message_appended"
    message_uuid: MessageId = Field(default_factory=lambda: str(uuid4()))
    parent_uuid: MessageId | None = None
    role: Literal["user", "assistant"]
    content: Annotated[
        str | list[ContentBlock],
        pydantic.BeforeValidator(_refuse_bytes),
        pydantic.AfterValidator(_check_blocks),
    ]
    #: The API response id: streamed chunks of one API round share it.
    api_message_id: MessageId | None = None
    is_meta: bool = False
    is_sidechain: bool = False
    stop_reason: str | None = None
    timestamp: datetime | None = None

    def countable_text(self) -> list[str]:
        """Every text the model reads in this message: text, thinking, tool calls, results."""
        if isinstance(self.content, str):
            return [self.content]
        return [text for block in self.content for text in _block_text(block)]


class UsageRecorded(Event):
    """Token usage reported by the API for one response; anchors the token estimate."""

    type: Literal["usage_recorded"] = "usage_recorded"
    input_tokens: TokenCount
    output_tokens: TokenCount
    cache_creation_input_tokens: TokenCount = 0
    cache_read_input_tokens: TokenCount = 0
    api_message_id: MessageId | None = None
    model: str | None = None

    @property
    def total_tokens(self) -> int:
        """Input + cache creation + cache read + output: the context the response used."""
        return (
            self.input_tokens
            + self.cache_creation_input_tokens
            + self.cache_read_input_tokens
            + self.output_tokens
        )


class ContextConfigured(Event):
    """The system prompt and tool definitions sent with every request from here on.

    The latest one wins. Both count towards the context: their tokens are stored with it.
    """

    type: Literal["context_configured"] = "context_configured"
    system: Annotated[str | list[ContentBlock] | None, pydantic.BeforeValidator(_refuse_bytes)] = None
    tools: list[dict[str, Any]] = Field(default_factory=list)

    def countable_text(self) -> list[str]:
        """The system text and each tool definition as compact JSON."""
        texts: list[str] = []
        if isinstance(self.system, str):
            texts.append(self.system)
        elif self.system:
            texts.extend(text for block in self.system for text in _block_text(block))
        texts.extend(json.dumps(tool, ensure_ascii=False, separators=(",", ":")) for tool in self.tools)
        return texts


class SubagentStarted(Event):
    """A sub-agent (child session) was started from this session, for one tool call.

    The child's own log holds its conversation; the parent's transcript links to it here.
    """

    type: Literal["subagent_started"] = "subagent_started"
    child_session_id: str
    parent_tool_use_id: str | None = None
    agent_type: str | None = None
    #: True: the spawning tool call's result only acknowledges the launch; the sub-agent runs
    #: on until a ``SubagentFinished`` (False: until that result arrives).
    background: bool = False


AnyEvent = Annotated[
    SessionStarted | MessageAppended | UsageRecorded | ContextConfigured | SubagentStarted,
    Field(discriminator="type"),
]

#: Deepest nesting of arrays and objects an event field or session metadata may hold. The JSON
#: serializer gives up near 250 levels (counted from the event); transcripts stay under 20.
MAX_JSON_DEPTH = 200

_SURROGATE = re.compile("[\ud800-\udfff]")
#: A scan of JSON text for its depth: a whole string (skipped, escapes included), or a bracket.
_JSON_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def nested_deeper_than(text: str, depth: int) -> bool:
    """True when the JSON ``text`` nests arrays and objects more than ``depth`` deep.

    Iterative, for a reader whose ``json.loads`` raised RecursionError: a payload or metadata
    deeper than any append accepts is an altered row; one within it means the caller's own stack
    was deep, which is not the row's fault.
    """
    level = 0
    for match in _JSON_STRING_OR_BRACKET.finditer(text):
        char = match.group()
        if char in "[{":
            level += 1
            if level > depth:
                return True
        elif char in "]}":
            level -= 1
    return False


@functools.cache
def _int_bound(max_digits: int) -> int:
    return int(10**max_digits)


def _int_problem(value: int) -> str | None:
    """Integers Python's ``json`` would refuse to read back (``sys.int_info`` digit limit)."""
    max_digits = sys.get_int_max_str_digits()
    if max_digits and abs(value) >= _int_bound(max_digits):
        return f"an integer longer than {max_digits} digits"
    return None


def _surrogate_problem(text: str) -> str | None:
    if not text.isascii() and _SURROGATE.search(text):
        return "a lone surrogate (text that is not valid Unicode)"
    return None


def _scalar_problem(value: object, *, strict: bool, strings: bool) -> str | None:
    """What is wrong with a value that is not an array or object, or None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        return _surrogate_problem(value) if strings else None
    if isinstance(value, int):
        return _int_problem(value)
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{value} (JSON has no NaN or infinity)"
    if isinstance(value, bytes | bytearray | memoryview):  # no event field is typed bytes
        return f"{type(value).__name__}, which JSON has not (decode it to a str, or store it as a blob)"
    if strict:
        return f"a {type(value).__name__}, which is not JSON"
    return None  # a typed event field (a datetime, a UUID): its model serializes it


def _dotted(path: tuple[str, ...]) -> str:
    """``content.0.input`` (a deep path keeps its first and last parts)."""
    if len(path) > 8:
        path = (*path[:4], "...", *path[-3:])
    return ".".join(path) or "value"


_PLAIN_SCALARS = frozenset({str, int, float, bool, type(None)})
#: Leaves that are always storable, recognised by exact type without a call: most of an event's
#: fields (ids, flags, unset options, timestamps). Datetimes and UUIDs only when not ``strict``
#: (a typed field's model serializes them); strict JSON has neither.
_FINE_LEAVES = frozenset({bool, type(None)})
_FINE_TYPED_LEAVES = _FINE_LEAVES | {datetime, UUID}


def _is_container(value: object) -> bool:
    """An array, object or model to walk into (exact types first: the walk is on the append
    path, and ``isinstance`` against a pydantic model class is slow)."""
    kind = type(value)
    if kind is dict or kind is list:
        return True
    return kind not in _PLAIN_SCALARS and isinstance(value, dict | list | tuple | BaseModel)


def _key_problem(key: object) -> str | None:
    if not isinstance(key, str):
        return f"a key {key!r} that is not a string"
    if _surrogate_problem(key):
        return f"a key with a lone surrogate {key!r}"
    return None


def json_problem(
    value: object, *, strict: bool = True, strings: bool = True, max_depth: int = MAX_JSON_DEPTH
) -> str | None:
    """Why ``value`` cannot be stored as JSON that reads back equal, or None when it can.

    Refused: lone surrogates (in keys, and in strings unless ``strings`` is False because the
    caller's serializer refuses them anyway: scanning long text costs), NaN and infinities
    (stored, they would turn into ``null``), integers too long to read back, non-string keys,
    nesting deeper than ``max_depth``, and (``strict``) values that are not JSON at all.
    Pydantic models are walked field by field. Iterative, so a value nested 100,000 deep is
    refused, not a RecursionError.

    Returns:
        ``"<path>: <problem>"``, the path in dotted form (``content.0.input``).
    """
    if not _is_container(value):
        problem = _scalar_problem(value, strict=strict, strings=strings)
        return None if problem is None else f"value: {problem}"
    # Each entry: (container, depth, where) with where = (parent's where, key) or None for the
    # root; the dotted path is spelled out only for a problem. Plain strings, dicts and lists are
    # recognised by exact type first: this walk runs over every event appended.
    containers: list[tuple[object, int, _Where]] = [(value, 0, None)]
    fine_leaves = _FINE_LEAVES if strict else _FINE_TYPED_LEAVES
    while containers:
        item, depth, where = containers.pop()
        if depth >= max_depth:
            return f"{_dotted(_path(where))}: nested deeper than {max_depth} levels"
        children: Iterable[tuple[object, object]]
        if isinstance(item, list | tuple):
            children = enumerate(item)
        elif isinstance(item, dict):
            for key in item:
                if type(key) is str and key.isascii():
                    continue
                problem = _key_problem(key)
                if problem is not None:
                    return f"{_dotted(_path(where))}: {problem}"
            children = item.items()
        else:  # a model's fields (extra="forbid": its __dict__ holds only those, named in Python)
            children = vars(item).items()
        for key, child in children:
            kind = type(child)
            if kind in fine_leaves:
                continue
            if isinstance(child, str):
                problem = _surrogate_problem(child) if strings and not child.isascii() else None
                if problem is not None:
                    return f"{_dotted((*_path(where), str(key)))}: {problem}"
                continue
            if kind is dict or kind is list or (kind not in _PLAIN_SCALARS and _is_container(child)):
                containers.append((child, depth + 1, (where, str(key))))
                continue
            problem = _scalar_problem(child, strict=strict, strings=strings)
            if problem is not None:
                return f"{_dotted((*_path(where), str(key)))}: {problem}"
    return None


def _shown_key(key: str) -> str:
    return repr(key) if len(key) <= 64 else f"{key[:64]!r}... ({len(key)} characters)"


def load_json(text: str | bytes, *, where: str) -> Any:
    """``json.loads(text)``, refusing an object that holds a key twice.

    ``json.loads`` keeps the last value of a repeated key and drops the others without a word,
    so what was sent and what is stored would differ; the command line's ``append`` and the HTTP
    API read their JSON through this instead.

    Args:
        where: what holds the text, for the message (``"stdin line 3"``, ``"the request body"``).

    Raises:
        ValidationError: a key repeated in one object; names it and ``where`` (``field`` is the key).
        ValueError: the text is not JSON (``json.JSONDecodeError``), or an integer in it is too long.
        RecursionError: nested too deeply for the parser.
    """

    def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        loaded = dict(pairs)
        if len(loaded) == len(pairs):
            return loaded
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                msg = f"{where}: the key {_shown_key(key)} occurs twice in one JSON object (each key once)"
                raise ValidationError(msg, field=key[:64])
            seen.add(key)
        return loaded  # not reached: a dict shorter than its pairs repeats a key

    return json.loads(text, object_pairs_hook=unique_keys)


#: Where a container sits in the value ``json_problem`` walks: (its parent's, its key), or None.
_Where = tuple[Any, str] | None


def _path(where: _Where) -> tuple[str, ...]:
    """The keys leading to ``where``, from the root."""
    keys: list[str] = []
    while where is not None:
        where, key = where
        keys.append(key)
    return tuple(reversed(keys))


_EVENT_TYPES: dict[str, type[Event]] = {}
_UPCASTERS: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {}

EventT = TypeVar("EventT", bound=Event)


def register_event(cls: type[EventT]) -> type[EventT]:
    """Make an event class known to the store (usable as a class decorator).

    Raises:
        ValueError: the class has no literal ``type`` default, or the type is taken.
    """
    type_name = cls.model_fields["type"].default
    if not isinstance(type_name, str):
        msg = f"{cls.__name__} needs a literal default for 'type'"
        raise ValueError(msg)
    existing = _EVENT_TYPES.get(type_name)
    if existing is not None and existing is not cls:
        msg = f"event type {type_name!r} is already registered by {existing.__name__}"
        raise ValueError(msg)
    _EVENT_TYPES[type_name] = cls
    return cls


def register_upcaster(
    type_name: str, from_version: int
) -> Callable[[Callable[[dict[str, Any]], dict[str, Any]]], Callable[[dict[str, Any]], dict[str, Any]]]:
    """Register ``fn(payload) -> payload`` turning version ``from_version`` into the next one."""

    def decorator(
        fn: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> Callable[[dict[str, Any]], dict[str, Any]]:
        _UPCASTERS[(type_name, from_version)] = fn
        return fn

    return decorator


for _cls in (SessionStarted, MessageAppended, UsageRecorded, ContextConfigured, SubagentStarted):
    register_event(_cls)


def event_class(type_name: str) -> type[Event]:
    """The registered class for ``type_name``.

    Raises:
        UnknownEventTypeError: no such type is registered.
    """
    try:
        return _EVENT_TYPES[type_name]
    except KeyError:
        known = ", ".join(sorted(_EVENT_TYPES))
        msg = f"unknown event type {type_name!r} (known: {known})"
        raise UnknownEventTypeError(msg) from None


def _first_error(exc: pydantic.ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    field = ".".join(str(part) for part in err["loc"]) or "<event>"
    return field, err["msg"]


def parse_event(
    data: Event | dict[str, Any], *, index: int | None = None, check_json: bool = True
) -> Event:
    """Validate a dict (or pass through an event) into a registered event model.

    ``check_json=False`` skips the walk over every value for what JSON cannot read back equal
    (``json_problem``): for values decoded from JSON text by a decoder that refuses NaN,
    infinities and over-long integers, and checked for depth, as the importer's are.

    Raises:
        ValidationError: names the batch index, the event type and the first bad field.
    """
    if isinstance(data, Event):
        event_class(data.type)
        return _checked_json(data, index) if check_json else data
    if not isinstance(data, dict):
        msg = f"event{_at(index)} must be an Event or a dict, not {type(data).__name__}"
        raise ValidationError(msg, index=index)
    type_name = data.get("type")
    if not isinstance(type_name, str):
        msg = f"event{_at(index)} has no string field 'type'"
        raise ValidationError(msg, index=index, field="type")
    try:
        cls = event_class(type_name)
    except UnknownEventTypeError as e:
        raise ValidationError(f"event{_at(index)}: {e}", index=index, field="type") from None
    try:
        event = cls.model_validate(data)
    except pydantic.ValidationError as e:
        field, problem = _first_error(e)
        msg = f"event{_at(index)} of type {type_name!r}: field {field!r}: {problem}"
        raise ValidationError(msg, index=index, event_type=type_name, field=field) from e
    except RecursionError:  # a value nested thousands deep, in validation itself
        msg = f"event{_at(index)} of type {type_name!r}: nested too deeply"
        raise ValidationError(msg, index=index, event_type=type_name) from None
    return _checked_json(event, index) if check_json else event


def _checked_json(event: Event, index: int | None) -> Event:
    """``event``, if every field is JSON that reads back equal (see ``json_problem``).

    Raises:
        ValidationError: names the field, e.g. a NaN, a lone surrogate or nesting too deep.
    """
    problem = json_problem(event, strict=False, strings=False)  # encode_event finds those
    if problem is not None:
        raise _unstorable(event, index, problem)
    return event


def _unstorable(event: Event, index: int | None, problem: str) -> ValidationError:
    field = problem.split(":", 1)[0]
    msg = f"event{_at(index)} of type {event.type!r}: field {problem}"
    return ValidationError(msg, index=index, event_type=event.type, field=field)


def _at(index: int | None) -> str:
    return "" if index is None else f" #{index}"


def encode_event(event: Event, *, index: int | None = None) -> str:
    """The payload text stored for ``event``: its JSON without ``event_id`` and ``type``.

    Raises:
        ValidationError: the event cannot be serialized, e.g. text with a lone surrogate; names
            the field (and ``index``, the event's place in its batch).
    """
    try:
        return event.model_dump_json(exclude={"event_id", "type"})
    except pydantic_core.PydanticSerializationError as e:
        problem = json_problem(event, strict=False) or f"value: {e}"
        raise _unstorable(event, index, problem) from None


def decode_event(type_name: str, schema_version: int, payload: str, event_id: str) -> Event:
    """Rebuild an event from its stored columns, upcasting older schema versions.

    Raises:
        UnknownEventTypeError: the type is not registered, the stored version is newer
            than this code, or an upcaster is missing.
    """
    cls = event_class(type_name)
    current = cls.SCHEMA_VERSION
    if schema_version == current:
        # The id is a column, not part of the payload: splice it in so the model is built once.
        if payload.startswith("{") and payload != "{}":
            return cls.model_validate_json(f'{{"event_id":"{event_id}",{payload[1:]}', context=_STORED)
        event = cls.model_validate_json(payload, context=_STORED)
    elif schema_version < current:
        data = json.loads(payload)
        for version in range(schema_version, current):
            upcast = _UPCASTERS.get((type_name, version))
            if upcast is None:
                msg = f"no upcaster for {type_name!r} from schema version {version} to {version + 1}"
                raise UnknownEventTypeError(msg)
            data = upcast(data)
        event = cls.model_validate(data, context=_STORED)
    else:
        msg = (
            f"event type {type_name!r} has schema version {schema_version}, newer than this "
            f"sessionstore understands ({current}): upgrade sessionstore"
        )
        raise UnknownEventTypeError(msg)
    return event.model_copy(update={"event_id": UUID(event_id)})
