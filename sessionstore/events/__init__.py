"""The event catalogue: the base event, its registry, and every event type the log holds.

Importing this package registers every event type (each module below registers its classes as
it is defined), so any log decodes without importing the layers that write those events.
"""

from __future__ import annotations

from ._adk import (
    AdkEventRecorded,
    AdkSessionCreated,
    AdkStateChanged,
)
from ._agent import (
    BudgetDecision,
    ReactiveRecovery,
)
from ._base import (
    AnyEvent,
    ContentBlock,
    ContextConfigured,
    Event,
    MessageAppended,
    QuerySource,
    SessionStarted,
    SubagentStarted,
    UsageRecorded,
    load_json,
    parse_event,
    register_event,
    register_upcaster,
)
from ._context import (
    CollapseCommitted,
    CollapseStaged,
    CompactBoundary,
    CompactFailed,
    CompactionPreparationDiscarded,
    CompactionPrepared,
    ContextEditReverted,
    ContextServed,
    MicrocompactApplied,
    PlanUpdated,
    PreservedSegment,
    ServerEditsApplied,
    SessionMemoryUpdated,
    SkillInvoked,
    SnipApplied,
    ToolResultPersisted,
)
from ._experiments import (
    CompactionExperiment,
    ReplacedFactKept,
)
from ._files import (
    ConversationRewound,
    FileBackedUp,
    FileHistorySnapshot,
    FileRead,
    FilesRewindFailed,
    FilesRewindStarted,
    FilesRewound,
)
from ._langgraph import (
    LangGraphChannelValue,
    LangGraphCheckpointSaved,
    LangGraphValue,
    LangGraphWrite,
    LangGraphWritesSaved,
)
from ._mirror import TranscriptLinesMirrored
from ._openai_agents import (
    OpenAIAgentsItemPopped,
    OpenAIAgentsItemsAdded,
    OpenAIAgentsRemovalReverted,
    OpenAIAgentsSessionCleared,
)
from ._post_compact import (
    ListingDelta,
    ListingKind,
    SubagentFinished,
    SubagentStatusRestored,
    line_uuid,
)
from ._source import (
    FileHistoryRecorded,
    ImportedEntry,
    OpaqueEntry,
)

__all__ = [
    "AdkEventRecorded",
    "AdkSessionCreated",
    "AdkStateChanged",
    "AnyEvent",
    "BudgetDecision",
    "CollapseCommitted",
    "CollapseStaged",
    "CompactBoundary",
    "CompactFailed",
    "CompactionExperiment",
    "CompactionPreparationDiscarded",
    "CompactionPrepared",
    "ContentBlock",
    "ContextConfigured",
    "ContextEditReverted",
    "ContextServed",
    "ConversationRewound",
    "Event",
    "FileBackedUp",
    "FileHistoryRecorded",
    "FileHistorySnapshot",
    "FileRead",
    "FilesRewindFailed",
    "FilesRewindStarted",
    "FilesRewound",
    "ImportedEntry",
    "LangGraphChannelValue",
    "LangGraphCheckpointSaved",
    "LangGraphValue",
    "LangGraphWrite",
    "LangGraphWritesSaved",
    "ListingDelta",
    "ListingKind",
    "MessageAppended",
    "MicrocompactApplied",
    "OpaqueEntry",
    "OpenAIAgentsItemPopped",
    "OpenAIAgentsItemsAdded",
    "OpenAIAgentsRemovalReverted",
    "OpenAIAgentsSessionCleared",
    "PlanUpdated",
    "PreservedSegment",
    "QuerySource",
    "ReactiveRecovery",
    "ReplacedFactKept",
    "ServerEditsApplied",
    "SessionMemoryUpdated",
    "SessionStarted",
    "SkillInvoked",
    "SnipApplied",
    "SubagentFinished",
    "SubagentStarted",
    "SubagentStatusRestored",
    "ToolResultPersisted",
    "TranscriptLinesMirrored",
    "UsageRecorded",
    "line_uuid",
    "load_json",
    "parse_event",
    "register_event",
    "register_upcaster",
]
