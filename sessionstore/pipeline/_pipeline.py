"""The context-management pipeline, run before every model call, in SPEC section 5's fixed order.

    tool-result budget -> snip -> micro-compact -> (collapse) -> (auto-compact) -> blocking limit

Each stage reads the live session's projection, decides, and appends the events that record
what it did in one transaction (so the view changes only through the log, and every change can
be audited and reverted). Each stage is switchable and reports the tokens it freed. Collapse and
auto-compact slot in between micro-compact and the blocking limit when they exist; today the
pipeline runs the stages below and says so in ``STAGE_ORDER``.

``Pipeline.prepare(session)`` runs the stages, refuses a request still at the blocking limit
(``BlockingLimitError``), records ``ContextServed`` for the request it hands out, and returns it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..errors import BlockingLimitError
from ..events._base import Event
from ..events._context import ContextServed
from ..projections._session import Session
from ..projections._window import TokenState
from ._budget import BudgetConfig, budget_stage
from ._collapse import CollapseConfig, collapse_stage
from ._compaction import (
    CompactConfig,
    CompactReport,
    autocompact_stage,
    compact_session,
    maybe_extract_memory,
)
from ._microcompact import CONTEXT_MANAGEMENT_BETA, MicrocompactConfig, microcompact_stage, server_side_edits
from ._snip import SnipConfig, snip_stage
from ._stage import StageReport
from ._summarizers import OfflineSummarizer, Summarizer

__all__ = [
    "COMPACTION_BETA",
    "STAGE_ORDER",
    "Pipeline",
    "PipelineConfig",
    "PreparedRequest",
    "ServerCompactionConfig",
]

#: The fixed order of SPEC section 5.
STAGE_ORDER = ("tool_result_budget", "snip", "microcompact", "collapse", "auto_compact", "blocking_limit")
#: The beta that enables the Messages API's own compaction (``compact_20260112``).
COMPACTION_BETA = "compact-2026-01-12"


@dataclass(frozen=True)
class ServerCompactionConfig:
    """The Messages API's own compaction (``compact_20260112``), opt-in.

    When on, every request asks the server to compact once its input passes
    ``trigger_tokens``; the response then opens with a ``compaction`` block, recorded verbatim
    with the message, and the API view sends it in place of everything before it.
    """

    enabled: bool = False
    trigger_tokens: int = 150_000
    instructions: str | None = None
    pause_after_compaction: bool = False


@dataclass(frozen=True)
class PipelineConfig:
    """Switches and parameters of every stage."""

    budget: BudgetConfig = field(default_factory=BudgetConfig)
    snip: SnipConfig = field(default_factory=SnipConfig)
    microcompact: MicrocompactConfig = field(default_factory=MicrocompactConfig)
    collapse: CollapseConfig = field(default_factory=CollapseConfig)
    #: Auto-compact runs unless disabled here or by the window's switches (WindowConfig).
    auto_compact: bool = True
    compact: CompactConfig = field(default_factory=CompactConfig)
    server_compaction: ServerCompactionConfig = field(default_factory=ServerCompactionConfig)
    blocking_limit: bool = True


@dataclass(frozen=True)
class PreparedRequest:
    """A request ready for ``client.messages.create(model=..., max_tokens=..., **request)``.

    ``beta`` is True when the request carries ``context_management`` and must go through
    ``client.beta.messages.create(betas=[CONTEXT_MANAGEMENT_BETA], ...)``.
    """

    request: dict[str, Any]
    tokens: TokenState
    reports: tuple[StageReport, ...]
    served_event_id: str
    beta: bool = False
    #: The beta headers the request needs (``client.beta.messages.create(betas=...)``).
    betas: tuple[str, ...] = ()


# --- the pipeline ------------------------------------------------------------------------------


_VIEW_KEYS = frozenset({"system", "tools", "messages"})


def _served_event(session: Session, request: dict[str, Any], used: int) -> ContextServed:
    state = session.api_state
    start = state.first_visible
    unreplaced = [
        tool_use_id
        for tool_use_id, index in state.fresh_results.items()
        if index >= start and tool_use_id not in state.replaced
    ]
    return ContextServed(
        fingerprint=session.fingerprint(request),
        through_seq=session.last_seq,
        token_count=used,
        unreplaced_tool_results=unreplaced,
        model=state.model,
        cache_control=session.config.cache_control,
        extra={key: value for key, value in request.items() if key not in _VIEW_KEYS},
    )


class Pipeline:
    """Runs the no-model stages before a call and records the request it hands out."""

    def __init__(
        self,
        config: PipelineConfig | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
        summarizer: Summarizer | None = None,
    ) -> None:
        self.config = config or PipelineConfig()
        self.clock = clock or (lambda: datetime.now(UTC))
        self.summarizer: Summarizer = summarizer or OfflineSummarizer()

    def reactive_compact(
        self, session: Session, summarizer: Summarizer | None = None
    ) -> CompactReport | None:
        """Compact after a prompt-too-long, exactly as auto-compact would (same config and hooks).

        Returns None, recording nothing, when the session disables all compaction (the caller
        then surfaces the error).

        Args:
            summarizer: the summarizer to use (default: the pipeline's).
        """
        if session.config.window.disable_compaction:
            return None
        return compact_session(
            session, summarizer or self.summarizer, self.config.compact, trigger="reactive"
        )

    def _run_stage(self, session: Session, name: str, events: list[Event]) -> StageReport:
        if not events:
            return StageReport(name)
        session.append(events)
        freed = sum(int(getattr(e, "tokens_freed", 0)) for e in events)
        return StageReport(name, freed, tuple(str(e.event_id) for e in events))

    def prepare(self, session: Session) -> PreparedRequest:
        """Run every enabled stage in order, then hand out (and record) the request.

        Raises:
            BlockingLimitError: the context is still at or above the blocking limit.
        """
        config = self.config
        reports: list[StageReport] = []
        if config.budget.enabled:
            reports.append(
                self._run_stage(session, "tool_result_budget", list(budget_stage(session, config.budget)))
            )
        if config.snip.enabled:
            snipped = snip_stage(session, config.snip)
            reports.append(self._run_stage(session, "snip", [snipped] if snipped else []))
        cleared = microcompact_stage(session, config.microcompact, self.clock())
        reports.append(self._run_stage(session, "microcompact", [cleared] if cleared else []))
        if config.collapse.enabled:
            before = session.used_tokens()
            collapsed = collapse_stage(session, config.collapse, self.summarizer)
            freed = max(0, before - session.used_tokens())
            reports.append(StageReport("collapse", freed, tuple(collapsed)))
        if config.auto_compact and session.api_state.query_source == "main":
            # Collapse never uses the memory, and with all compaction off nothing would.
            compaction_on = not session.config.window.disable_compaction
            if config.compact.session_memory and not config.collapse.enabled and compaction_on:
                maybe_extract_memory(session, self.summarizer, config.compact)
            # "used" already excludes what snip freed after the last usage, so nothing to subtract.
            compacted = autocompact_stage(
                session, self.summarizer, config.compact, collapse_enabled=config.collapse.enabled
            )
            if compacted is not None:
                freed = max(0, compacted.tokens_before - compacted.tokens_after)
                note = "" if compacted.ok else f"failed: {compacted.reason}"
                reports.append(StageReport("auto_compact", freed, (compacted.event_id,), note))
        tokens = session.token_state()
        if tokens.at_blocking_limit and config.collapse.enabled and config.auto_compact:
            # Collapse keeps auto-compact away, but a context its summaries filled would be stuck
            # for good: at the blocking limit, compact as the last resort.
            rescue = autocompact_stage(session, self.summarizer, config.compact, collapse_enabled=False)
            if rescue is not None:
                note = "collapse at the blocking limit" + ("" if rescue.ok else f"; failed: {rescue.reason}")
                freed = max(0, rescue.tokens_before - rescue.tokens_after)
                reports.append(StageReport("auto_compact", freed, (rescue.event_id,), note))
                tokens = session.token_state()
        if config.blocking_limit and tokens.at_blocking_limit:
            raise BlockingLimitError(tokens.used, tokens.window.blocking_limit, reports)
        request = session.request()
        edits: list[dict[str, Any]] = []
        betas: list[str] = []
        mc = config.microcompact
        if cleared is None and mc.server_side and session.api_state.query_source == "main":
            edits += server_side_edits(mc)["edits"]
            betas.append(CONTEXT_MANAGEMENT_BETA)
        sc = config.server_compaction
        if sc.enabled and session.api_state.query_source == "main":
            edit: dict[str, Any] = {
                "type": "compact_20260112",
                "trigger": {"type": "input_tokens", "value": sc.trigger_tokens},
                "pause_after_compaction": sc.pause_after_compaction,
            }
            if sc.instructions:
                edit["instructions"] = sc.instructions
            edits.append(edit)
            betas.append(COMPACTION_BETA)
        if edits:
            request["context_management"] = {"edits": edits}
        beta = bool(betas)
        served = _served_event(session, request, tokens.used)
        session.append([served])
        return PreparedRequest(request, tokens, tuple(reports), str(served.event_id), beta, tuple(betas))
