"""The agent loop over the anthropic SDK: Conversation, AsyncConversation, token budget, sub-agents."""

from __future__ import annotations

from ._conversation import (
    AsyncConversation,
    BudgetDecision,
    Conversation,
    ReactiveRecovery,
    TokenBudget,
    budget_decision,
    finish_subagent,
    spawn_subagent,
)

__all__ = [
    "AsyncConversation",
    "BudgetDecision",
    "Conversation",
    "ReactiveRecovery",
    "TokenBudget",
    "budget_decision",
    "finish_subagent",
    "spawn_subagent",
]
