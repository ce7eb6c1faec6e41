"""The context-management pipeline: budget, snip, micro-compact, collapse, compaction, and reverts."""

from __future__ import annotations

from ._budget import BudgetConfig, BudgetStage, persisted_preview
from ._collapse import (
    CollapseConfig,
    CollapseReport,
    CollapseStage,
    check_spawn,
    collapse,
    commit_collapse,
    drain_collapses,
    stage_collapse,
)
from ._compact_prompt import (
    SUMMARY_SECTIONS,
    compact_prompt,
    format_summary,
)
from ._compaction import (
    AutoCompactStage,
    CompactConfig,
    CompactHooks,
    CompactPreview,
    CompactReport,
    breaker_open,
    compact,
    compact_preview,
    maybe_extract_memory,
    memory_extraction_due,
    memory_growth_interval,
    prepare_compaction,
    shell_pre_compact_hook,
    shell_text_hook,
)
from ._compare import CompactionComparison, CompactionVariant, compare_compactions
from ._listings import announce_listings, listings
from ._microcompact import (
    COMPACTABLE_TOOLS,
    CONTEXT_MANAGEMENT_BETA,
    MicrocompactConfig,
    MicrocompactStage,
    microcompact,
    record_applied_edits,
)
from ._pipeline import (
    COMPACTION_BETA,
    STAGE_ORDER,
    Pipeline,
    PipelineConfig,
    PreparedRequest,
    ServerCompactionConfig,
    configured_stages,
)
from ._post_compact import RunningSubagent, running_subagents
from ._precompute import BackgroundPreparer
from ._revert import revert, revert_and_recompact
from ._snip import SnipConfig, SnipStage, snip
from ._stage import Stage, StageReport, record_events
from ._summarizers import (
    AnthropicSummarizer,
    OfflineSummarizer,
    Summarizer,
    Summary,
    SummaryRequest,
    default_summarizer,
)

__all__ = [
    "AnthropicSummarizer",
    "AutoCompactStage",
    "BackgroundPreparer",
    "BudgetConfig",
    "BudgetStage",
    "COMPACTABLE_TOOLS",
    "COMPACTION_BETA",
    "CONTEXT_MANAGEMENT_BETA",
    "CollapseConfig",
    "CollapseReport",
    "CollapseStage",
    "CompactConfig",
    "CompactHooks",
    "CompactPreview",
    "CompactReport",
    "CompactionComparison",
    "CompactionVariant",
    "MicrocompactConfig",
    "MicrocompactStage",
    "OfflineSummarizer",
    "Pipeline",
    "PipelineConfig",
    "PreparedRequest",
    "RunningSubagent",
    "STAGE_ORDER",
    "SUMMARY_SECTIONS",
    "ServerCompactionConfig",
    "SnipConfig",
    "SnipStage",
    "Stage",
    "StageReport",
    "Summarizer",
    "Summary",
    "SummaryRequest",
    "announce_listings",
    "breaker_open",
    "check_spawn",
    "collapse",
    "commit_collapse",
    "compact",
    "compact_preview",
    "compact_prompt",
    "compare_compactions",
    "configured_stages",
    "default_summarizer",
    "drain_collapses",
    "format_summary",
    "listings",
    "maybe_extract_memory",
    "memory_extraction_due",
    "memory_growth_interval",
    "microcompact",
    "persisted_preview",
    "prepare_compaction",
    "record_applied_edits",
    "record_events",
    "revert",
    "revert_and_recompact",
    "running_subagents",
    "shell_pre_compact_hook",
    "shell_text_hook",
    "snip",
    "stage_collapse",
]
