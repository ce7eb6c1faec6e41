"""Events the agent loop records: a recovery step after a prompt-too-long refusal, and each
decision to continue or stop against the caller's output-token budget."""

from __future__ import annotations

from typing import Literal

from pydantic import NonNegativeInt

from ._base import Event, register_event

__all__ = ["BudgetDecision", "ReactiveRecovery"]


@register_event
class ReactiveRecovery(Event):
    """One step of recovery after the API refused a request as too long."""

    type: Literal["reactive_recovery"] = "reactive_recovery"
    step: Literal["drain", "reactive_compact", "surfaced"]
    error: str
    tokens_before: NonNegativeInt
    tokens_after: NonNegativeInt


@register_event
class BudgetDecision(Event):
    """Whether the loop continued after a turn, against the caller's output-token budget."""

    type: Literal["budget_decision"] = "budget_decision"
    action: Literal["continue", "stop"]
    reason: str
    turn_tokens: NonNegativeInt
    budget: NonNegativeInt | None
    continuations: NonNegativeInt
