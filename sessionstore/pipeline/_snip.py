"""Stage 2, snip (SPEC 5.2): drop the oldest API rounds from the request."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from ..errors import ValidationError
from ..events import SnipApplied
from ..projections import Session
from ..projections._api_context import committed_spans, freed_per_message, leading_results
from ..projections._session import check_session
from ..store._contract import check_int
from ._stage import StageReport, record_events

__all__ = ["SnipConfig", "SnipStage", "snip", "snip_stage"]


@dataclass(frozen=True)
class SnipConfig:
    """Snip (SPEC 5.2): drop the oldest API rounds from the request.

    Off by default. When on, fires once "used" reaches ``trigger_percent`` of the effective
    window and removes the oldest rounds until it is at or below ``target_percent``, always
    keeping the newest ``keep_recent_rounds`` rounds.
    """

    enabled: bool = False
    trigger_percent: float = 85.0
    target_percent: float = 60.0
    keep_recent_rounds: int = 4


def _round_boundaries(session: Session) -> list[tuple[int, int]]:
    """(message index, rounds before it) for every place a snip may cut.

    A cut lands on a user message that holds something besides tool results (a prompt); the
    results that open it answer calls in the snipped span, so the request drops them with the
    span and starts with the prompt. Never on the last message: results still arriving are
    merged into it. Never inside a committed collapse: the model sees its summary, not the
    prompts within it, and half a collapsed span cannot be shown again.
    """
    state = session.api_state
    collapsed = committed_spans(state)
    cuts = []
    rounds = 0
    start = state.first_visible
    for index in range(start, len(state.messages) - 1):
        message = state.messages[index]
        if message["role"] == "assistant":
            rounds += 1
        elif (
            index > start
            and rounds
            and leading_results(message["content"]) < len(message["content"])
            and not any(first < index < end for first, end, _ in collapsed)
        ):
            cuts.append((index, rounds))
    return cuts


def _cut_candidates(session: Session, cuts: list[tuple[int, int]]) -> Iterator[SnipApplied]:
    """A SnipApplied for each cut, oldest first, with running totals of what it frees."""
    state = session.api_state
    start = state.first_visible
    tokens_freed_before, blocks_freed_before = freed_per_message(state)
    tokens = 0.0
    blocks = 0
    position = start
    for index, rounds in cuts:
        for message in range(position, index):
            tokens += state.message_tokens[message] - tokens_freed_before.get(message, 0.0)
            blocks += len(state.messages[message]["content"]) - blocks_freed_before.get(message, 0)
        position = index
        yield SnipApplied(
            keep_from_seq=state.message_first_seq[index],
            rounds_removed=rounds,
            messages_removed=index - start,
            tokens_freed=max(0, round(tokens)),
            blocks_removed=blocks,
        )


def snip(session: Session, rounds: int) -> StageReport:
    """Snip the ``rounds`` oldest API rounds now (or as many as can be cut cleanly).

    Raises:
        ValidationError: ``rounds`` < 1, or no clean cut exists.
    """
    check_session("session", session)
    if check_int("rounds", rounds) < 1:
        msg = f"rounds must be >= 1, got {rounds}"
        raise ValidationError(msg, field="rounds")
    cuts = _round_boundaries(session)
    if not cuts:
        msg = f"session {session.id!r} has no earlier API round that can be snipped cleanly"
        raise ValidationError(msg, field="rounds")
    wanted = next((i + 1 for i, (_, r) in enumerate(cuts) if r >= rounds), len(cuts))
    event = list(_cut_candidates(session, cuts[:wanted]))[-1]
    session.append([event])
    return StageReport("snip", event.tokens_freed, (str(event.event_id),))


def snip_stage(session: Session, config: SnipConfig) -> SnipApplied | None:
    """Decide whether and where to snip (SPEC 5.2): the smallest cut that reaches the target."""
    state = session.token_state()
    effective = state.window.effective_window
    if state.used < effective * config.trigger_percent / 100:
        return None
    api = session.api_state
    total_rounds = sum(1 for m in api.messages[api.first_visible :] if m["role"] == "assistant")
    allowed = [(i, r) for i, r in _round_boundaries(session) if total_rounds - r >= config.keep_recent_rounds]
    target = effective * config.target_percent / 100
    chosen = None
    for chosen in _cut_candidates(session, allowed):
        if state.used - session.estimate(chosen.tokens_freed, chosen.blocks_removed) <= target:
            break
    return chosen


@dataclass(frozen=True)
class SnipStage:
    """Snip as a pipeline ``Stage``: appends the ``SnipApplied`` that ``snip_stage`` decides."""

    config: SnipConfig = field(default_factory=SnipConfig)
    name: str = field(default="snip", init=False)

    def run(self, session: Session, now: datetime) -> StageReport | None:
        """Snip when the trigger is reached; None when switched off (the default)."""
        if not self.config.enabled:
            return None
        snipped = snip_stage(session, self.config)
        return record_events(session, self.name, [snipped] if snipped else [])
