"""A local HTTP server speaking the subset of Anthropic's Messages API the tests use.

The real ``anthropic`` SDK talks to it over loopback; nothing is mocked inside the SDK.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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


class MessagesAPIServer:
    """Serves ``POST /v1/messages`` (non-streaming) and ``/v1/messages/count_tokens``; records requests."""

    def __init__(self, count_tokens_result: int = 1234) -> None:
        self.count_tokens_result = count_tokens_result
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
                server.requests.append({"path": path, "body": body, "headers": dict(self.headers)})
                if path == "/v1/messages/count_tokens":
                    self._reply(200, {"input_tokens": server.count_tokens_result})
                elif path == "/v1/messages":
                    with server._lock:
                        if server.responder is not None:
                            status, payload = server.responder(body)
                        elif server.queue:
                            status, payload = server.queue.pop(0)
                        else:
                            status, payload = 200, server.next_message
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
