"""The context-management pipeline, run before every model call, in SPEC section 5's fixed order.

    tool-result budget -> snip -> micro-compact -> (collapse) -> (auto-compact) -> blocking limit

Each stage is a ``Stage`` (see ``_stage.py``): it owns its config, reads the live session's
projection, decides, and appends the events that record what it did (so the view changes only
through the log, and every change can be audited and reverted), then reports the tokens it
freed. ``configured_stages`` builds the stages a ``PipelineConfig`` describes, in the order
``STAGE_ORDER`` names (derived from it); ``Pipeline(stages=...)`` runs a list of your own.

``Pipeline.prepare(session)`` runs the stages in order, refuses a request still at the blocking
limit (``BlockingLimitError``), records ``ContextServed`` for the request it hands out, and
returns it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .._telemetry import Attribute, span
from ..errors import BlockingLimitError, ValidationError
from ..events import ContextServed
from ..projections import Session, TokenState
from ..store import run_in_store
from ._budget import BudgetConfig, BudgetStage
from ._collapse import CollapseConfig, CollapseStage
from ._compaction import AutoCompactStage, CompactConfig, CompactReport, compact_session
from ._microcompact import CONTEXT_MANAGEMENT_BETA, MicrocompactConfig, MicrocompactStage, server_side_edits
from ._observed import end_stage, stage_span
from ._snip import SnipConfig, SnipStage
from ._stage import Stage, StageReport
from ._summarizers import OfflineSummarizer, Summarizer

__all__ = [
    "COMPACTION_BETA",
    "STAGE_ORDER",
    "Pipeline",
    "PipelineConfig",
    "PreparedRequest",
    "ServerCompactionConfig",
    "configured_stages",
]

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

    def __post_init__(self) -> None:
        """Raises:
        ValidationError: a stage's config of another type (it failed with AttributeError in the
            first turn), or a switch that is not a bool ("false" would be truthy).
        """
        kinds: dict[str, type] = {
            "budget": BudgetConfig,
            "snip": SnipConfig,
            "microcompact": MicrocompactConfig,
            "collapse": CollapseConfig,
            "auto_compact": bool,
            "compact": CompactConfig,
            "server_compaction": ServerCompactionConfig,
            "blocking_limit": bool,
        }
        for name, kind in kinds.items():
            value = getattr(self, name)
            if not isinstance(value, kind):
                msg = f"PipelineConfig.{name} must be a {kind.__name__}, not {type(value).__name__}"
                raise ValidationError(msg, field=name)


def configured_stages(config: PipelineConfig, summarizer: Summarizer) -> tuple[Stage, ...]:
    """The stages ``config`` describes, in SPEC section 5's order (a new stage is a line here).

    Every stage is built; one its config switches off stands aside when run.
    """
    return (
        BudgetStage(config.budget),
        SnipStage(config.snip),
        MicrocompactStage(config.microcompact),
        CollapseStage(config.collapse, summarizer),
        AutoCompactStage(
            config.compact,
            summarizer,
            enabled=config.auto_compact,
            collapse_enabled=config.collapse.enabled,
        ),
    )


#: The fixed order of SPEC section 5: the configured stages' names, then the blocking limit.
STAGE_ORDER = (
    *(stage.name for stage in configured_stages(PipelineConfig(), OfflineSummarizer())),
    "blocking_limit",
)


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
    #: SHA-256 of the request's canonical bytes, as its ``ContextServed`` event records it.
    fingerprint: str = ""


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
    """Runs its stages in order before a call and records the request it hands out.

    Args:
        config: the stages' switches and parameters, and what ``prepare`` adds after them (the
            blocking limit, server-side edits and compaction).
        clock: "now" for the stages (read once per ``prepare``); default the wall clock (UTC).
        summarizer: the model calls of collapse and compaction (default: offline).
        stages: run these instead of the ones ``config`` describes (``configured_stages``).
    """

    def __init__(
        self,
        config: PipelineConfig | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
        summarizer: Summarizer | None = None,
        stages: Sequence[Stage] | None = None,
    ) -> None:
        # Checked here: a config of another type failed with AttributeError in the first prepare.
        if config is not None and not isinstance(config, PipelineConfig):
            msg = f"config must be a PipelineConfig, not {type(config).__name__}"
            raise ValidationError(msg, field="config")
        if clock is not None and not callable(clock):
            raise ValidationError(f"clock must be callable, not {type(clock).__name__}", field="clock")
        self.config = config or PipelineConfig()
        self.clock = clock or (lambda: datetime.now(UTC))
        self.summarizer: Summarizer = summarizer or OfflineSummarizer()
        self._stages = None if stages is None else tuple(stages)

    @property
    def stages(self) -> tuple[Stage, ...]:
        """The stages ``prepare`` runs, in order: the ones given, else those of the config."""
        if self._stages is not None:
            return self._stages
        return configured_stages(self.config, self.summarizer)

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

    def prepare(self, session: Session) -> PreparedRequest:
        """Run every stage in order, then hand out (and record) the request.

        Raises:
            BlockingLimitError: the context is still at or above the blocking limit.
        """
        now = self.clock()
        reports: list[StageReport] = []
        first: dict[str, Attribute] = {
            "sessionstore.session_id": session.id,
            "sessionstore.tokens.before": session.used_tokens(),
        }
        with span("sessionstore.prepare", first) as current:
            for stage in self.stages:
                with stage_span(session, stage.name) as stage_handle:
                    before = session.used_tokens()
                    report = stage.run(session, now)
                    end_stage(stage_handle, session, stage.name, before, report)
                if report is not None:
                    reports.append(report)
            tokens = session.token_state()
            if self.config.blocking_limit and tokens.at_blocking_limit:
                raise BlockingLimitError(tokens.used, tokens.window.blocking_limit, reports)
            request = session.request()
            edits, betas = self._server_edits(session, reports)
            if edits:
                request["context_management"] = {"edits": edits}
            served = _served_event(session, request, tokens.used)
            session.append([served])
            current.set(
                {
                    "sessionstore.tokens.after": tokens.used,
                    "sessionstore.tokens.freed": sum(r.tokens_freed for r in reports),
                    "sessionstore.context_window": tokens.window.window,
                    "sessionstore.request.fingerprint": served.fingerprint,
                    "sessionstore.served_event_id": str(served.event_id),
                    "sessionstore.server_edits": len(edits),
                }
            )
        return PreparedRequest(
            request,
            tokens,
            tuple(reports),
            str(served.event_id),
            bool(betas),
            tuple(betas),
            served.fingerprint,
        )

    async def aprepare(self, session: Session) -> PreparedRequest:
        """``prepare`` for asyncio. For a session of an ``AsyncSessionStore`` (``Session.aload``)
        the stages run on the event loop and their database I/O is awaited, summarizer calls
        run in a worker thread; a sync store's session is prepared in a worker thread.
        """
        return await run_in_store(session.store, self.prepare, session)

    def _server_edits(
        self, session: Session, reports: Sequence[StageReport]
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """The edits the request asks the server to make, with the betas they need (main thread only)."""
        edits: list[dict[str, Any]] = []
        betas: list[str] = []
        if session.api_state.query_source != "main":
            return edits, betas
        mc = self.config.microcompact
        cleared_locally = any(r.event_ids for r in reports if r.stage == MicrocompactStage.name)
        if mc.server_side and not cleared_locally:
            edits += server_side_edits(mc)["edits"]
            betas.append(CONTEXT_MANAGEMENT_BETA)
        sc = self.config.server_compaction
        if sc.enabled:
            edit: dict[str, Any] = {
                "type": "compact_20260112",
                "trigger": {"type": "input_tokens", "value": sc.trigger_tokens},
                "pause_after_compaction": sc.pause_after_compaction,
            }
            if sc.instructions:
                edit["instructions"] = sc.instructions
            edits.append(edit)
            betas.append(COMPACTION_BETA)
        return edits, betas
