"""A local HTTP server speaking the subset of Anthropic's Messages API the tests use.

The real ``anthropic`` SDK talks to it over loopback; nothing is mocked inside the SDK.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sessionstore.store import TiktokenCounter

#: An answer of the server: (HTTP status, JSON body).
Reply = tuple[int, dict[str, Any]]

#: Tool definitions for the tools the tests' assistant messages call. A request holding
#: tool_use or tool_result blocks must define tools, or the API refuses it.
READ_TOOL: dict[str, Any] = {
    "name": "Read",
    "description": "Read a file.",
    "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}},
}
BASH_TOOL: dict[str, Any] = {
    "name": "Bash",
    "description": "Run a shell command.",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
}


def with_tool_definitions(request: dict[str, Any]) -> dict[str, Any]:
    """The request with a definition for each tool its messages call, if it defines no tools.

    The API refuses tool_use and tool_result blocks in a request without ``tools``. Sessions
    built from generated event logs define none, and Claude Code transcripts do not record
    Claude Code's tool definitions: an agent resuming such a session configures its own
    (``ContextConfigured``). The rest of the request is left as it is, for validate_request.
    """
    if request.get("tools"):
        return request
    names = sorted(
        {
            str(block.get("name"))
            for message in request.get("messages", [])
            if isinstance(message.get("content"), list)
            for block in message["content"]
            if block.get("type") == "tool_use"
        }
    )
    # Results whose calls were snipped or compacted away still need some definition.
    tools = [{"name": name, "input_schema": {"type": "object"}} for name in names] or [READ_TOOL]
    return {**request, "tools": tools}


#: Shortest prefix the API caches (Claude Opus and Sonnet models; Haiku models need 2,048).
MIN_CACHEABLE_TOKENS = 1_024
#: How many content blocks before a breakpoint the API checks for an earlier cache entry.
CACHE_LOOKBACK_BLOCKS = 20
#: The API's limit on ``cache_control`` breakpoints in one request.
MAX_CACHE_BREAKPOINTS = 4


class TooManyBreakpointsError(ValueError):
    """A request with more ``cache_control`` breakpoints than the API accepts."""


@dataclass(frozen=True)
class _Unit:
    """One piece of a request's prompt in the order the API renders it (tools, system, messages)."""

    key: bytes
    tokens: int
    #: A content block (a tool, a system block, a message block): where the look-back stops.
    block: bool
    breakpoint: bool


def _without_marker(block: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def _canonical(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


class PromptCache:
    """Prompt-cache accounting as the Messages API documents it, for the usage of a response.

    The prompt is rendered tools, then system, then messages, as content blocks. A block
    carrying ``cache_control`` is a breakpoint (a top-level ``cache_control`` puts one on the
    last block); at most 4. A request reads the longest cached prefix found at a breakpoint or
    at one of the 20 block boundaries before it, and writes an entry for every breakpoint
    whose prefix has at least ``minimum`` tokens. An entry's key is the exact prefix up to its
    breakpoint: the model, every block before it (without the ``cache_control`` markers, which
    do not change what is cached), and, for a breakpoint in the messages, the request's
    ``tool_choice`` and ``thinking``, whose changes invalidate the messages' cache but not the
    tools' and system's. Entries never expire (no TTL: the tests do not wait).

    Usage: ``cache_read_input_tokens`` = the prefix read; ``cache_creation_input_tokens`` = from
    there to the last breakpoint written; ``input_tokens`` = the rest. Tokens are cl100k counts
    of each block's canonical JSON: a stand-in for the API's tokenizer, consistent across
    requests, which is all the accounting needs.
    """

    def __init__(
        self, minimum: int = MIN_CACHEABLE_TOKENS, count_text: Callable[[str], int] | None = None
    ) -> None:
        self.minimum = minimum
        self.count_text = count_text or TiktokenCounter().count_text
        #: Keys (SHA-256 of the prefix) of the entries written so far.
        self.entries: set[str] = set()
        #: Tokens of each block seen (a conversation resends its blocks with every request).
        self._counted: dict[bytes, int] = {}

    def _units(self, body: dict[str, Any]) -> Iterator[_Unit]:
        def unit(block: dict[str, Any], where: object, *, last: bool = False) -> _Unit:
            text = _canonical(_without_marker(block))
            tokens = self._counted.get(text)
            if tokens is None:
                tokens = self._counted[text] = self.count_text(text.decode())
            return _Unit(
                _canonical(where) + b"\n" + text,
                tokens,
                block=True,
                breakpoint="cache_control" in block or last,
            )

        for tool in body.get("tools") or []:
            yield unit(tool, "tool")
        system = body.get("system") or []
        for block in [{"type": "text", "text": system}] if isinstance(system, str) else system:
            yield unit(block, "system")
        settings = {"tool_choice": body.get("tool_choice"), "thinking": body.get("thinking")}
        yield _Unit(_canonical(["messages", settings]), 0, block=False, breakpoint=False)
        messages = body.get("messages") or []
        automatic = bool(body.get("cache_control"))
        for index, message in enumerate(messages):
            content = message.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
            for at, block in enumerate(blocks):
                final = automatic and index == len(messages) - 1 and at == len(blocks) - 1
                yield unit(block, ["message", index, message.get("role")], last=final)

    def account(self, body: dict[str, Any]) -> dict[str, int]:
        """The request's input usage; records the entries it writes.

        Raises:
            TooManyBreakpointsError: more than 4 breakpoints (the API answers 400).
        """
        digest = hashlib.sha256(_canonical(["model", body.get("model")]))
        keys: list[str] = []
        prefix: list[int] = []  # tokens up to and including each unit
        blocks: list[int] = []  # unit index of each content block
        breakpoints: list[int] = []
        total = 0
        for index, piece in enumerate(self._units(body)):
            digest.update(hashlib.sha256(piece.key).digest())
            keys.append(digest.copy().hexdigest())
            total += piece.tokens
            prefix.append(total)
            if piece.block:
                blocks.append(index)
            if piece.breakpoint:
                breakpoints.append(index)
        if len(breakpoints) > MAX_CACHE_BREAKPOINTS:
            msg = (
                f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
                f"Found {len(breakpoints)}."
            )
            raise TooManyBreakpointsError(msg)
        read = -1
        for point in breakpoints:
            at = blocks.index(point)
            for candidate in reversed(blocks[max(0, at - CACHE_LOOKBACK_BLOCKS) : at + 1]):
                if keys[candidate] in self.entries:
                    read = max(read, candidate)
                    break
        written = [p for p in breakpoints if prefix[p] >= self.minimum]
        self.entries.update(keys[p] for p in written)
        cache_read = prefix[read] if read >= 0 else 0
        end = max((p for p in written if p > read), default=read)
        creation = prefix[end] - cache_read if end > read else 0
        return {
            "input_tokens": total - cache_read - creation,
            "cache_creation_input_tokens": creation,
            "cache_read_input_tokens": cache_read,
        }


class MessagesAPIServer:
    """Serves ``POST /v1/messages`` (non-streaming) and ``/v1/messages/count_tokens``; records requests.

    Args:
        prompt_cache: account prompt caching (``PromptCache``): a successful answer's usage
            then reports the request's own input, cache-creation and cache-read tokens (its
            output tokens stay the queued answer's), and each recorded request keeps that
            usage under ``"usage"``. Off by default: answers carry their queued usage as is.
        latency: seconds each ``POST /v1/messages`` waits before answering (a model's time).
    """

    def __init__(
        self, count_tokens_result: int = 1234, *, prompt_cache: bool = False, latency: float = 0.0
    ) -> None:
        self.count_tokens_result = count_tokens_result
        self.prompt_cache = PromptCache() if prompt_cache else None
        self.latency = latency
        self.requests: list[dict[str, Any]] = []
        #: Queued answers for ``POST /v1/messages``: (status, body), used first-in first-out;
        #: when empty, ``next_message`` is served.
        self.queue: list[tuple[int, dict[str, Any]]] = []
        #: Answers ``POST /v1/messages`` from the request body when set (before the queue): for
        #: a client whose calls may come in either order (Claude Code's background sub-agents).
        self.responder: Callable[[dict[str, Any]], Reply] | None = None
        #: What ``POST /v1/messages`` answers when nothing is queued (a Message JSON).
        self.next_message: dict[str, Any] = {
            "id": "msg_local_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1},
        }
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                path = self.path.split("?", 1)[0]
                entry = {"path": path, "body": body, "headers": dict(self.headers)}
                server.requests.append(entry)
                if path == "/v1/messages/count_tokens":
                    self._reply(200, {"input_tokens": server.count_tokens_result})
                elif path == "/v1/messages":
                    if server.latency:
                        time.sleep(server.latency)
                    with server._lock:
                        if server.responder is not None:
                            status, payload = server.responder(body)
                        elif server.queue:
                            status, payload = server.queue.pop(0)
                        else:
                            status, payload = 200, server.next_message
                        if server.prompt_cache is not None and status == 200:
                            status, payload = server._accounted(body, payload, entry)
                    if body.get("stream") and status == 200:
                        self._stream(payload)
                    else:
                        self._reply(status, payload)
                else:
                    error = {"type": "not_found_error", "message": f"no route {path}"}
                    self._reply(404, {"type": "error", "error": error})

            def _reply(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("request-id", "req_test")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, message: dict[str, Any]) -> None:
                """The message as the API's server-sent events (what the SDK's stream reads)."""
                start = {**message, "content": [], "stop_reason": None}
                events: list[tuple[str, dict[str, Any]]] = [
                    ("message_start", {"type": "message_start", "message": start})
                ]
                for index, block in enumerate(message["content"]):
                    opening: dict[str, Any]
                    if block["type"] == "text":
                        opening = {"type": "text", "text": ""}
                        delta = {"type": "text_delta", "text": block["text"]}
                    else:
                        opening = {**block, "input": {}}
                        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
                    events += [
                        (
                            "content_block_start",
                            {"type": "content_block_start", "index": index, "content_block": opening},
                        ),
                        (
                            "content_block_delta",
                            {"type": "content_block_delta", "index": index, "delta": delta},
                        ),
                        ("content_block_stop", {"type": "content_block_stop", "index": index}),
                    ]
                delta_usage = {"output_tokens": message["usage"]["output_tokens"]}
                stop = {"stop_reason": message["stop_reason"], "stop_sequence": None}
                events += [
                    ("message_delta", {"type": "message_delta", "delta": stop, "usage": delta_usage}),
                    ("message_stop", {"type": "message_stop"}),
                ]
                data = "".join(
                    f"event: {name}\ndata: {json.dumps(payload)}\n\n" for name, payload in events
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("request-id", "req_stream")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                """Keep test output quiet."""

        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def _accounted(self, body: dict[str, Any], payload: dict[str, Any], entry: dict[str, Any]) -> Reply:
        """The answer with the request's prompt-cache usage, or the API's 400 for it."""
        assert self.prompt_cache is not None
        try:
            usage = self.prompt_cache.account(body)
        except TooManyBreakpointsError as e:
            error = {"type": "invalid_request_error", "message": str(e)}
            return 400, {"type": "error", "error": error, "request_id": "req_cache"}
        entry["usage"] = usage
        return 200, {**payload, "usage": {**payload["usage"], **usage}}

    def __enter__(self) -> MessagesAPIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def prompt_too_long(actual: int, maximum: int = 200_000) -> tuple[int, dict[str, Any]]:
    """The API's prompt-too-long error, as it sends it (HTTP 400)."""
    message = f"prompt is too long: {actual} tokens > {maximum} maximum"
    return 400, {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": message},
        "request_id": "req_t",
    }


def text_message(text: str, message_id: str = "msg_summary") -> tuple[int, dict[str, Any]]:
    """A successful assistant text answer."""
    return 200, {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": "claude-opus-5-5",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1000, "output_tokens": 200},
    }


def tool_use_message(
    tool_id: str, name: str, tool_input: dict[str, Any], message_id: str
) -> tuple[int, dict[str, Any]]:
    """An assistant answer that calls one tool."""
    return 200, {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": "claude-opus-5-5",
        "content": [
            {"type": "text", "text": f"Calling {name}."},
            {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 500, "output_tokens": 40},
    }
