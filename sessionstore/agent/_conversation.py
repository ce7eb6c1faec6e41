"""The agent-loop helper: the pipeline before every call, recording after it, recovery in between.

An agent service keeps no message list: it asks the session for the next request and hands back
what the model said. ``Conversation`` (``anthropic.Anthropic``) and ``AsyncConversation``
(``anthropic.AsyncAnthropic``) are parallel types over the same steps:

    prepare (run the pipeline, record ContextServed) -> call (streaming or not)
    -> record (assistant message, usage, server-side edits) -> tool results -> loop

A user of the raw SDK can use just ``prepare`` and ``record`` around their own call.

Reactive recovery (SPEC 6): a prompt-too-long error is withheld from the caller; staged collapses
are drained and the call retried; otherwise one reactive compaction per turn and a retry (a
sub-agent compacts its own log, never its parent's); otherwise the error is raised, once, saying
what was tried, and stop hooks do not run. Token-budget continuation
(SPEC 7) and sub-agents (child sessions linked to the parent's tool call) live here too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from .._telemetry import SpanHandle, model_call_span
from ..errors import ConcurrencyError, PromptTooLongError, ValidationError
from ..events import (
    BudgetDecision,
    ContentBlock,
    Event,
    MessageAppended,
    ReactiveRecovery,
    SubagentFinished,
    SubagentStarted,
    UsageRecorded,
    parse_event,
)
from ..pipeline import (
    CONTEXT_MANAGEMENT_BETA,
    CollapseConfig,
    OfflineSummarizer,
    Pipeline,
    PreparedRequest,
    Summarizer,
    check_spawn,
    drain_collapses,
    record_applied_edits,
)
from ..pipeline._summarizers import parse_prompt_too_long
from ..projections import Session
from ..projections._session import check_session
from ..store import run_in_store

if TYPE_CHECKING:  # importing sessionstore does not load the SDK
    import anthropic  # noqa: F401 - named in the loops' base classes as strings

__all__ = [
    "AsyncConversation",
    "BudgetDecision",
    "Conversation",
    "ReactiveRecovery",
    "TokenBudget",
    "budget_decision",
    "finish_subagent",
    "is_prompt_too_long",
    "spawn_subagent",
]

#: SPEC 7: continue below 90% of the budget; 3 continuations under 500 tokens is diminishing.
COMPLETION_THRESHOLD = 0.9
DIMINISHING_CONTINUATIONS = 3
DIMINISHING_DELTA_TOKENS = 500


def is_prompt_too_long(error: BaseException) -> bool:
    """True for the API's prompt-too-long refusal (HTTP 400) or a 413 request-too-large."""
    status = getattr(error, "status_code", None)
    return (status == 400 and "prompt is too long" in str(error).lower()) or status == 413


# --- token budget (SPEC 7) --------------------------------------------------------------------


@dataclass(frozen=True)
class TokenBudget:
    """A caller's output-token budget for one turn (``None`` total means no budget)."""

    total: int | None = None


@dataclass
class _BudgetTracker:
    """Output tokens of one turn: every response counts, the tool-calling ones too."""

    turn_tokens: int = 0
    continuations: int = 0
    #: Output tokens since the last budget decision (all responses in between).
    since_decision: int = 0
    #: What each decision found new since the one before, oldest first.
    deltas: list[int] = field(default_factory=list)

    def count(self, response: Any) -> None:
        output = int(response.usage.output_tokens)
        self.turn_tokens += output
        self.since_decision += output

    def close_delta(self) -> None:
        self.deltas.append(self.since_decision)
        self.since_decision = 0


def budget_decision(
    budget: int | None, turn_tokens: int, continuations: int, deltas: Sequence[int], *, subagent: bool
) -> tuple[Literal["continue", "stop"], str]:
    """Continue (with a nudge) or stop, per SPEC 7.

    Args:
        budget: the turn's output-token budget, or None for no budget.
        turn_tokens: output tokens produced this turn so far.
        continuations: nudges sent this turn so far.
        deltas: output tokens produced between consecutive decisions this turn, oldest first
            (a decision's delta counts every response since the previous one).
        subagent: sub-agents always stop.
    """
    if subagent:
        return "stop", "sub-agents do not continue"
    if budget is None:
        return "stop", "no budget"
    recent = list(deltas[-2:])
    if (
        continuations >= DIMINISHING_CONTINUATIONS
        and len(recent) == 2
        and all(d < DIMINISHING_DELTA_TOKENS for d in recent)
    ):
        return "stop", "diminishing returns"
    if turn_tokens < budget * COMPLETION_THRESHOLD:
        return "continue", "below 90% of the budget"
    return "stop", "budget reached"


def _nudge(turn_tokens: int, budget: int) -> str:
    return f"Keep going: {turn_tokens:,} of {budget:,} output tokens used this turn."


# --- recording ---------------------------------------------------------------------------------


def _blocks(response: Any) -> list[ContentBlock]:
    """The response's content blocks as JSON (unset optional fields left out)."""
    return [block.model_dump(mode="json", exclude_none=True) for block in response.content]


def _response_events(response: Any, clock: Callable[[], datetime]) -> list[Event]:
    usage = response.usage
    return [
        MessageAppended(
            role="assistant",
            content=_blocks(response),
            api_message_id=response.id,
            stop_reason=response.stop_reason,
            timestamp=clock(),
        ),
        UsageRecorded(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_creation_input_tokens=usage.cache_creation_input_tokens or 0,
            cache_read_input_tokens=usage.cache_read_input_tokens or 0,
            api_message_id=response.id,
            model=response.model,
        ),
    ]


# --- request parameters ------------------------------------------------------------------------

#: Request keys the loop and the pipeline write themselves; a caller's extra body never sets them.
_OWNED_KEYS = frozenset(
    {"model", "max_tokens", "system", "tools", "messages", "context_management", "stream", "betas"}
)


def _body_options(
    max_tokens: int, named: Mapping[str, Any], extra_body: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The caller's request parameters, sent in the body of every call.

    They travel as the SDK's ``extra_body`` rather than as keyword arguments so that every
    SDK version sends them, including ones that do not name a parameter (``temperature`` is
    not a keyword of every ``messages.create``).

    Raises:
        ValidationError: a value the API would refuse, or an extra body key that the
            pipeline (system, tools, messages ...) or a named parameter already sets.
    """
    options = {key: value for key, value in named.items() if value is not None}
    thinking = options.get("thinking") or {}
    budget = thinking.get("budget_tokens")
    if thinking.get("type") == "enabled" and isinstance(budget, int) and budget >= max_tokens:
        msg = f"thinking.budget_tokens ({budget}) must be below max_tokens ({max_tokens})"
        raise ValidationError(msg, field="thinking")
    temperature = options.get("temperature")
    if temperature is not None and not 0 <= temperature <= 1:
        msg = f"temperature must be between 0 and 1, got {temperature!r}"
        raise ValidationError(msg, field="temperature")
    for key in extra_body or {}:
        if key in _OWNED_KEYS or key in named:
            owner = "the session's pipeline or the loop" if key in _OWNED_KEYS else f"the {key}= argument"
            msg = f"extra_body may not set {key!r}: {owner} sets it"
            raise ValidationError(msg, field="extra_body")
    return {**options, **(extra_body or {})}


def _split_betas(headers: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The caller's ``anthropic-beta`` values, and the other headers.

    On the beta endpoint the SDK writes that header from ``betas``; a caller's header would
    replace the pipeline's beta, so its values join ``betas`` instead.
    """
    betas: list[str] = []
    rest: dict[str, str] = {}
    for name, value in headers.items():
        if name.lower() == "anthropic-beta":
            betas += [beta.strip() for beta in value.split(",") if beta.strip()]
        else:
            rest[name] = value
    return betas, rest


ToolRunner = Callable[[dict[str, Any]], str | list[ContentBlock]]
AsyncToolRunner = Callable[[dict[str, Any]], Awaitable[str | list[ContentBlock]]]
StopHook = Callable[[Session], None]
#: The SDK client a loop calls (``anthropic.Anthropic`` or ``anthropic.AsyncAnthropic``).
Client = TypeVar("Client")
_R = TypeVar("_R")


@dataclass
class _Shared:
    """What the sync and async helpers share: the session, pipeline and loop settings."""

    session: Session
    model: str
    max_tokens: int
    pipeline: Pipeline
    summarizer: Summarizer
    stream: bool
    on_conflict: Literal["raise", "reload"]
    stop_hooks: Sequence[StopHook]
    budget: TokenBudget
    clock: Callable[[], datetime]
    #: The caller's request parameters (thinking, temperature ...), sent with every call.
    body_options: dict[str, Any] = field(default_factory=dict)
    #: Extra HTTP headers sent with every call.
    headers: dict[str, str] = field(default_factory=dict)
    #: At most one reactive compaction per turn (a turn ends when the model stops or the user speaks).
    compacted_this_turn: bool = False

    def prepare(self) -> PreparedRequest:
        """Run the pipeline; on a conflict with another writer, reload and retry once if configured."""
        try:
            return self.pipeline.prepare(self.session)
        except ConcurrencyError:
            if self.on_conflict != "reload":
                raise
            self.session.refresh()
            return self.pipeline.prepare(self.session)

    def append(self, events: Sequence[Event]) -> None:
        """Append after what the session has seen; on a conflict reload and retry, or raise."""
        try:
            self.session.append(events)
        except ConcurrencyError:
            if self.on_conflict != "reload":
                raise
            self.session.refresh()
            self.session.append(events)

    def params(self, prepared: PreparedRequest) -> dict[str, Any]:
        params: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens, **prepared.request}
        if self.body_options:
            params["extra_body"] = dict(self.body_options)
        headers = dict(self.headers)
        if prepared.beta:
            caller_betas, headers = _split_betas(headers)
            pipeline_betas = list(prepared.betas) or [CONTEXT_MANAGEMENT_BETA]
            params["betas"] = [*pipeline_betas, *(b for b in caller_betas if b not in pipeline_betas)]
        if headers:
            params["extra_headers"] = headers
        return params

    def call_span(self, prepared: PreparedRequest) -> contextlib.AbstractContextManager[SpanHandle]:
        """The GenAI span of one model call of the loop (see ``sessionstore._telemetry``)."""
        return model_call_span(
            model=self.model,
            purpose="agent",
            max_tokens=self.max_tokens,
            stream=self.stream,
            attributes={
                "gen_ai.conversation.id": self.session.id,
                "sessionstore.session_id": self.session.id,
                "sessionstore.request.fingerprint": prepared.fingerprint or None,
                "sessionstore.served_event_id": prepared.served_event_id,
                "sessionstore.tokens.used": prepared.tokens.used,
            },
        )

    def record(self, response: Any) -> None:
        self.append(_response_events(response, self.clock))
        if getattr(response, "context_management", None) is not None:
            record_applied_edits(self.session, response)

    def recover(self, error: BaseException) -> str | None:
        """One recovery step after a prompt-too-long: None when the call should be retried,
        else why the error surfaces (recorded as a ``surfaced`` step).

        Drain first; then one reactive compaction per turn, of this session only: a sub-agent
        compacts its own log and never touches its parent's.
        """
        session = self.session
        before = session.used_tokens()
        drained = drain_collapses(session)
        if drained.event_ids:
            self.append(
                [
                    ReactiveRecovery(
                        step="drain",
                        error=str(error),
                        tokens_before=before,
                        tokens_after=session.used_tokens(),
                    )
                ]
            )
            return None
        why = self.compact_to_recover(error, before)
        if why is None:
            return None
        self.append(
            [ReactiveRecovery(step="surfaced", error=str(error), tokens_before=before, tokens_after=before)]
        )
        return why

    def compact_to_recover(self, error: BaseException, before: int) -> str | None:
        """The turn's one reactive compaction: None when it worked, else why there was none."""
        if self.compacted_this_turn:
            return "still too long after a reactive compaction (one per turn)"
        report = self.pipeline.reactive_compact(self.session, self.summarizer)
        if report is None:
            return "too long, and compaction is disabled for this session, so nothing was recovered"
        self.compacted_this_turn = True
        self.append(
            [
                ReactiveRecovery(
                    step="reactive_compact",
                    error=str(error),
                    tokens_before=before,
                    tokens_after=report.tokens_after,
                )
            ]
        )
        return None if report.ok else f"too long, and the reactive compaction failed ({report.reason})"

    def pending_tool_calls(self) -> list[ContentBlock]:
        """The latest answer's tool_use blocks that have no recorded result, in call order."""
        state = self.session.api_state
        open_ids = set(state.open_tool_ids)
        if not open_ids:
            return []
        answer = state.messages[state.last_assistant_index]
        return [b for b in answer["content"] if b.get("type") == "tool_use" and b.get("id") in open_ids]

    def calls_to_run(self, ids: Sequence[str] | None) -> list[ContentBlock]:
        """The pending calls with these ids (all pending calls for None).

        Raises:
            ValidationError: an id that is not a pending tool call; nothing is run.
        """
        pending = self.pending_tool_calls()
        if ids is None:
            return pending
        by_id = {str(use["id"]): use for use in pending}
        unknown = [tool_id for tool_id in ids if tool_id not in by_id]
        if unknown:
            msg = f"not pending tool calls of session {self.session.id!r}: {', '.join(unknown)}"
            raise ValidationError(msg, field="ids")
        return [by_id[tool_id] for tool_id in ids]

    def append_results(self, results: list[ContentBlock]) -> None:
        if results:
            self.append([MessageAppended(role="user", content=results, timestamp=self.clock())])

    def after_turn(self, tracker: _BudgetTracker) -> str | None:
        """The nudge to send when the budget says continue, else None (and stop hooks run).

        ``tracker`` has counted every response of the turn so far (``_BudgetTracker.count``).
        """
        tracker.close_delta()
        subagent = self.session.api_state.query_source != "main"
        action, reason = budget_decision(
            self.budget.total, tracker.turn_tokens, tracker.continuations, tracker.deltas, subagent=subagent
        )
        if self.budget.total is not None or subagent:
            self.append(
                [
                    BudgetDecision(
                        action=action,
                        reason=reason,
                        turn_tokens=tracker.turn_tokens,
                        budget=self.budget.total,
                        continuations=tracker.continuations,
                    )
                ]
            )
        if action == "continue" and self.budget.total is not None:
            tracker.continuations += 1
            return _nudge(tracker.turn_tokens, self.budget.total)
        self.compacted_this_turn = False
        for hook in self.stop_hooks:
            hook(self.session)
        return None


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _result(use: dict[str, Any], content: str | list[ContentBlock]) -> ContentBlock:
    return {"type": "tool_result", "tool_use_id": use["id"], "content": content}


def _failed_result(use: dict[str, Any], error: Exception) -> ContentBlock:
    """A failing tool is reported to the model as an error result, not raised."""
    return {**_result(use, f"{type(error).__name__}: {error}"), "is_error": True}


def _tool_results(uses: Sequence[dict[str, Any]], runner: ToolRunner) -> list[ContentBlock]:
    results: list[ContentBlock] = []
    for use in uses:
        try:
            results.append(_result(use, runner(use)))
        except Exception as e:
            results.append(_failed_result(use, e))
    return results


async def _tool_results_async(uses: Sequence[dict[str, Any]], runner: AsyncToolRunner) -> list[ContentBlock]:
    results: list[ContentBlock] = []
    for use in uses:
        try:
            results.append(_result(use, await runner(use)))
        except Exception as e:
            results.append(_failed_result(use, e))
    return results


def _tool_uses(response: Any) -> list[dict[str, Any]]:
    return [b for b in _blocks(response) if b.get("type") == "tool_use"]


def _surface(error: BaseException, why: str) -> PromptTooLongError:
    return PromptTooLongError(f"request {why}: {error}", gap=parse_prompt_too_long(str(error)))


class _Loop(Generic[Client]):
    """What the sync and async loops share: their settings, the session and the call parameters."""

    def __init__(
        self,
        session: Session,
        client: Client,
        *,
        model: str,
        max_tokens: int = 4096,
        pipeline: Pipeline | None = None,
        summarizer: Summarizer | None = None,
        stream: bool = False,
        on_conflict: Literal["raise", "reload"] = "raise",
        stop_hooks: Sequence[StopHook] = (),
        budget: TokenBudget | None = None,
        clock: Callable[[], datetime] | None = None,
        thinking: Mapping[str, Any] | None = None,
        temperature: float | None = None,
        tool_choice: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        stop_sequences: Sequence[str] | None = None,
        service_tier: str | None = None,
        extra_headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        check_session("session", session)
        named = {
            "thinking": thinking,
            "temperature": temperature,
            "tool_choice": tool_choice,
            "metadata": metadata,
            "stop_sequences": stop_sequences,
            "service_tier": service_tier,
        }
        self.client = client
        self._shared = _Shared(
            session,
            model,
            max_tokens,
            pipeline or Pipeline(),
            summarizer or OfflineSummarizer(),
            stream,
            on_conflict,
            stop_hooks,
            budget or TokenBudget(),
            clock or _utcnow,
            _body_options(max_tokens, named, extra_body),
            dict(extra_headers or {}),
        )

    @property
    def session(self) -> Session:
        """The session this conversation drives."""
        return self._shared.session

    def pending_tool_calls(self) -> list[ContentBlock]:
        """Tool calls of the latest answer with no recorded result, as tool_use blocks.

        After a process died between recording an answer and recording its tools' results,
        these are the calls it never finished. Run them with ``run_pending_tools``; a call
        left pending is answered in the next request with an error result saying it was
        interrupted (``INTERRUPTED_TOOL_RESULT``), and is pending no more once the model
        answers again.
        """
        return self._shared.pending_tool_calls()

    def params(self, prepared: PreparedRequest) -> dict[str, Any]:
        """Keyword arguments for ``client.messages.create`` (or ``client.beta.messages.create``).

        The request, ``model``, ``max_tokens``, ``betas`` when the request needs the beta
        endpoint, and the caller's parameters (``extra_body``) and headers (``extra_headers``).
        """
        return self._shared.params(prepared)


# --- sync --------------------------------------------------------------------------------------


class Conversation(_Loop["anthropic.Anthropic"]):
    """Drive one session with ``anthropic.Anthropic``: prepare, call, record, loop.

    Args:
        session: the live session to drive.
        client: an ``anthropic.Anthropic`` client.
        model / max_tokens: sent with every request.
        pipeline: the stages before every call (default ``Pipeline()``).
        summarizer: for reactive compaction (default: offline).
        stream: call through the streaming API.
        on_conflict: when another process appended first: ``"reload"`` and retry, or ``"raise"``.
        stop_hooks: called with the session when a turn ends normally (never after a surfaced error).
        budget: the output-token budget per turn for continuation (SPEC 7).
        thinking / temperature / tool_choice / metadata / stop_sequences / service_tier:
            Messages API parameters sent with every call (``None``: not sent).
        extra_headers: HTTP headers sent with every call (an ``anthropic-beta`` header joins
            the pipeline's betas on the beta endpoint).
        extra_body: any other request body field (``top_k``, ``output_config`` ...).

    Raises:
        ValidationError: a parameter the API would refuse (a thinking budget not below
            ``max_tokens``, a temperature outside 0..1), or ``extra_body`` setting a key the
            pipeline or a named parameter owns.
    """

    def user(self, content: str | list[ContentBlock]) -> None:
        """Append a user message (a new turn begins)."""
        self._shared.compacted_this_turn = False
        self._shared.append([MessageAppended(role="user", content=content, timestamp=self._shared.clock())])

    def prepare(self) -> PreparedRequest:
        """Run the pipeline and return the request (recorded as ContextServed)."""
        return self._shared.prepare()

    def record(self, response: Any) -> None:
        """Record a response: the assistant message, its usage and any server-side edits."""
        self._shared.record(response)

    def _call(self, prepared: PreparedRequest) -> Any:
        params = self.params(prepared)
        api = self.client.beta.messages if prepared.beta else self.client.messages
        with self._shared.call_span(prepared) as call:
            if self._shared.stream:
                with api.stream(**params) as stream:
                    response = stream.get_final_message()
            else:
                response = api.create(**params)
            call.record_response(response)
        return response

    def step(self) -> Any:
        """One model call with reactive recovery; the response is recorded and returned.

        Raises:
            PromptTooLongError: still too long after draining and one reactive compaction.
        """
        while True:
            prepared = self.prepare()
            try:
                response = self._call(prepared)
            except Exception as e:
                if not is_prompt_too_long(e):
                    raise
                why = self._shared.recover(e)
                if why is not None:
                    raise _surface(e, why) from e
                continue
            self.record(response)
            return response

    def run_pending_tools(
        self, tool_runner: ToolRunner, *, ids: Sequence[str] | None = None
    ) -> list[ContentBlock]:
        """Run pending tool calls (all, or those with ``ids``) and record their results.

        Returns the tool_result blocks appended, as one user message (none when nothing is
        pending). A failing tool becomes an error result, as in ``run()``.

        Raises:
            ValidationError: an id that is not pending; nothing was run or written.
        """
        results = _tool_results(self._shared.calls_to_run(ids), tool_runner)
        self._shared.append_results(results)
        return results

    def run(self, tool_runner: ToolRunner | None = None, *, max_steps: int = 50) -> Any:
        """Call, run tools, and continue until the model stops (or the budget says stop)."""
        tracker = _BudgetTracker()
        response = None
        for _ in range(max_steps):
            response = self.step()
            tracker.count(response)
            uses = _tool_uses(response)
            if uses and tool_runner is not None:
                self._shared.append([MessageAppended(role="user", content=_tool_results(uses, tool_runner))])
                continue
            nudge = self._shared.after_turn(tracker)
            if nudge is None:
                return response
            self._shared.append([MessageAppended(role="user", content=nudge, timestamp=self._shared.clock())])
        return response


# --- async -------------------------------------------------------------------------------------


class AsyncConversation(_Loop["anthropic.AsyncAnthropic"]):
    """The same loop over ``anthropic.AsyncAnthropic``.

    Give it a session of an ``AsyncSessionStore`` (``await Session.aload(store, id)``): its
    database I/O is then awaited on the event loop, the CPU work (folding events, running the
    stages, tokenizing) runs on the loop between awaits, and only summarizer model calls go to a
    worker thread. A session of a sync store still works: its database work runs in a worker
    thread (``asyncio.to_thread``), as it always did.
    """

    async def _db(self, fn: Callable[..., _R], *args: Any) -> _R:
        """``fn(*args)``: sync code that may touch the session's store (see the class docstring)."""
        return await run_in_store(self._shared.session.store, fn, *args)

    async def user(self, content: str | list[ContentBlock]) -> None:
        """Append a user message (a new turn begins)."""
        self._shared.compacted_this_turn = False
        event = MessageAppended(role="user", content=content, timestamp=self._shared.clock())
        await self._db(self._shared.append, [event])

    async def prepare(self) -> PreparedRequest:
        """Run the pipeline and return the request (recorded as ContextServed)."""
        return await self._db(self._shared.prepare)

    async def record(self, response: Any) -> None:
        """Record a response: the assistant message, its usage and any server-side edits."""
        await self._db(self._shared.record, response)

    async def _call(self, prepared: PreparedRequest) -> Any:
        params = self.params(prepared)
        api = self.client.beta.messages if prepared.beta else self.client.messages
        with self._shared.call_span(prepared) as call:
            if self._shared.stream:
                async with api.stream(**params) as stream:
                    response = await stream.get_final_message()
            else:
                response = await api.create(**params)
            call.record_response(response)
        return response

    async def step(self) -> Any:
        """One model call with reactive recovery (see ``Conversation.step``)."""
        while True:
            prepared = await self.prepare()
            try:
                response = await self._call(prepared)
            except Exception as e:
                if not is_prompt_too_long(e):
                    raise
                why = await self._db(self._shared.recover, e)
                if why is not None:
                    raise _surface(e, why) from e
                continue
            await self.record(response)
            return response

    async def run_pending_tools(
        self, tool_runner: AsyncToolRunner, *, ids: Sequence[str] | None = None
    ) -> list[ContentBlock]:
        """Run pending tool calls (awaited) and record their results (see ``Conversation``)."""
        results = await _tool_results_async(self._shared.calls_to_run(ids), tool_runner)
        await self._db(self._shared.append_results, results)
        return results

    async def run(self, tool_runner: AsyncToolRunner | None = None, *, max_steps: int = 50) -> Any:
        """Call, run tools (awaited), and continue until the model stops."""
        tracker = _BudgetTracker()
        response = None
        for _ in range(max_steps):
            response = await self.step()
            tracker.count(response)
            uses = _tool_uses(response)
            if uses and tool_runner is not None:
                results = await _tool_results_async(uses, tool_runner)
                await self._db(self._shared.append, [MessageAppended(role="user", content=results)])
                continue
            nudge = await self._db(self._shared.after_turn, tracker)
            if nudge is None:
                return response
            nudge_event = MessageAppended(role="user", content=nudge, timestamp=self._shared.clock())
            await self._db(self._shared.append, [nudge_event])
        return response


# --- sub-agents --------------------------------------------------------------------------------


def spawn_subagent(
    parent: Session,
    tool_use_id: str,
    *,
    agent_type: str | None = None,
    model: str | None = None,
    system: str | list[ContentBlock] | None = None,
    tools: Sequence[dict[str, Any]] | None = None,
    collapse: CollapseConfig | None = None,
    session_id: str | None = None,
    background: bool = False,
) -> Session:
    """A child session for one tool call of ``parent``, linked both ways.

    The child gets the parent's system prompt and tool definitions unless it is given its
    own: a child that calls a tool must send tool definitions (the API refuses tool_use and
    tool_result blocks in a request without ``tools``).

    Sub-agents never auto-compact, never run time-based or server-side micro-compaction, and
    never touch the parent's state (their query source is ``subagent``). After a prompt-too-long
    a sub-agent's loop compacts the child's own log (reactive recovery), as any session's does.

    The parent's log knows the sub-agent runs until the tool call's result arrives (its
    answer), or, with ``background=True`` (the result only acknowledges the launch), until
    ``finish_subagent``. A compaction of the parent tells the model again about each sub-agent
    still running (docs/compaction.md).

    Args:
        system: the child's system prompt (default: the parent's).
        tools: the child's tool definitions (default: the parent's; ``()`` for none).
        background: the sub-agent runs on after the tool call is answered.

    Raises:
        SubagentSpawnRefusedError: collapse is enabled and the parent is at 95% of its window.
    """
    check_session("parent", parent)
    check_spawn(parent, collapse or CollapseConfig(enabled=True))
    child_system = parent.api_state.system if system is None else system
    child_tools = parent.api_state.tools if tools is None else tools
    # Dicts the store validates with the create, and the parent's event checked before it: a
    # bad argument is a ValidationError naming its field, and no child is left behind.
    events: list[dict[str, Any]] = [
        {
            "type": "session_started",
            "model": model or parent.api_state.model,
            "query_source": "subagent",
            "parent_session_id": parent.id,
            "parent_tool_use_id": tool_use_id,
        }
    ]
    if child_system is not None or child_tools:
        events.append({"type": "context_configured", "system": child_system, "tools": child_tools})
    parse_event(
        {
            "type": "subagent_started",
            "child_session_id": "",
            "parent_tool_use_id": tool_use_id,
            "agent_type": agent_type,
            "background": background,
        }
    )
    child = parent.store.create_session(
        session_id,
        parent_session_id=parent.id,
        metadata={"agent_type": agent_type} if agent_type else None,
        events=events,
    )
    started = SubagentStarted(
        child_session_id=child.id,
        parent_tool_use_id=tool_use_id,
        agent_type=agent_type,
        background=background,
    )
    parent.append([started])
    return Session(parent.store, child.id, parent.config)


def finish_subagent(
    parent: Session, child_session_id: str, status: Literal["completed", "failed", "stopped"] = "completed"
) -> SubagentFinished:
    """Record in ``parent`` that a sub-agent's result was delivered: it no longer runs.

    Needed for a ``background`` sub-agent (deliver its result as a message, then call this);
    any other finishes when its tool call's result arrives, and this is then harmless.

    Raises:
        ValidationError: ``parent`` started no sub-agent with that session id.
    """
    check_session("parent", parent)
    started = any(
        entry.type == "subagent_started" and entry.child_session_id == child_session_id
        for entry in parent.transcript_state.entries
    )
    if not started:
        msg = f"session {parent.id!r} started no sub-agent {child_session_id!r}"
        raise ValidationError(msg, field="child_session_id")
    finished = SubagentFinished(child_session_id=child_session_id, status=status)
    parent.append([finished])
    return finished
