"""Stage 1, the tool-result budget (SPEC 5.1): persist oversized results, keep a preview."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .._paths import name_problem
from ..events import ToolResultPersisted
from ..projections import Session
from ._stage import StageReport, record_events
from ._tool_results import result_block, result_text, result_tokens

__all__ = ["BudgetConfig", "BudgetStage", "budget_stage", "persisted_preview"]


@dataclass(frozen=True)
class BudgetConfig:
    """Tool-result budget (SPEC 5.1).

    Args:
        per_result_chars: a result above ``min(tool maximum, this)`` characters is persisted.
        per_message_chars: results in one API-level user message may total at most this.
        preview_chars: length of the preview kept in the context (cut at a newline).
        tool_max_chars: per-tool maxima; Read's is infinite (re-reading a persisted file from
            a file is a pointless loop). Unlisted tools use ``per_result_chars``.
        materialize_root: also write ``<root>/<session>/tool-results/<tool_use_id>.txt``
            (exclusive create) for agents whose Read tool needs a path. A ``tool_use_id``
            that is not a plain file name (``../x``) gets no file: the blob alone holds it.
    """

    enabled: bool = True
    per_result_chars: int = 50_000
    per_message_chars: int = 200_000
    preview_chars: int = 2_000
    tool_max_chars: Mapping[str, float] = field(default_factory=lambda: {"Read": math.inf})
    materialize_root: Path | None = None

    def threshold(self, tool_name: str | None) -> float:
        """``min(tool maximum, per_result_chars)`` — infinite for tools never persisted."""
        tool_max = self.tool_max_chars.get(tool_name or "", self.per_result_chars)
        return math.inf if math.isinf(tool_max) else min(tool_max, self.per_result_chars)


def _chars(block: Mapping[str, Any]) -> int:
    content = block.get("content", "")
    if isinstance(content, str):
        return len(content)
    return len(json.dumps(content, ensure_ascii=False))


def persisted_preview(text: str, location: str, preview_chars: int = 2_000) -> str:
    """The string that replaces a persisted result: a preview cut at a newline, and where the rest is.

    The preview holds at most ``preview_chars`` characters of ``text``, cut after the last
    newline in that prefix when there is one in its second half (so lines stay whole).
    """
    head = text[:preview_chars]
    if len(text) > preview_chars:
        cut = head.rfind("\n")
        if cut >= preview_chars // 2:
            head = head[: cut + 1]
    size = len(text.encode())
    shown = f"{size / 1024:.0f} KB" if size >= 1024 else f"{size} bytes"
    more = "" if len(head) == len(text) else "...\n"
    return (
        f"<persisted-output>\nOutput too large ({shown}). Full output saved to: {location}\n\n"
        f"Preview (first {len(head)} characters):\n{head}{'' if head.endswith(chr(10)) else chr(10)}{more}"
        "</persisted-output>"
    )


def _materialize(root: Path, session_id: str, tool_use_id: str, data: bytes) -> Path:
    """Write the full output once (O_EXCL): a replay finds the file and leaves it as it is."""
    folder = root / session_id / "tool-results"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{tool_use_id}.txt"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return path
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return path


def _persist(
    session: Session, config: BudgetConfig, tool_use_id: str, text: str, reason: str
) -> ToolResultPersisted:
    data = text.encode()
    blob = session.store.put_blob(data, session_id=session.id)
    location = f"sessionstore blob {blob.sha256}"
    # The id is whatever the log holds: only a plain file name may become a path under the root.
    if config.materialize_root is not None and name_problem(f"{tool_use_id}.txt") is None:
        location = str(_materialize(config.materialize_root, session.id, tool_use_id, data))
    preview = persisted_preview(text, location, config.preview_chars)
    return ToolResultPersisted(
        tool_use_id=tool_use_id,
        tool_name=session.api_state.tool_names.get(tool_use_id),
        blob_sha256=blob.sha256,
        original_chars=len(text),
        preview=preview,
        reason=reason,  # type: ignore[arg-type]
        location=location,
        tokens_freed=max(0, result_tokens(session, tool_use_id, text) - session.count_text(preview)),
    )


def budget_stage(session: Session, config: BudgetConfig) -> list[ToolResultPersisted]:
    """Decide which fresh results to persist (SPEC 5.1). Appends nothing itself."""
    state = session.api_state
    by_message: dict[int, list[str]] = {}
    for tool_use_id, index in state.fresh_results.items():
        if index >= state.first_visible:
            by_message.setdefault(index, []).append(tool_use_id)
    decided: list[ToolResultPersisted] = []
    for index, fresh_ids in sorted(by_message.items()):
        sizes = {
            b["tool_use_id"]: _chars(b)
            for b in state.messages[index]["content"]
            if b.get("type") == "tool_result"
        }
        candidates: dict[str, str] = {}
        for tool_use_id in fresh_ids:
            text = result_text(result_block(session, tool_use_id))
            if text is not None and not math.isinf(config.threshold(state.tool_names.get(tool_use_id))):
                candidates[tool_use_id] = text
        for tool_use_id, text in list(candidates.items()):
            if len(text) > config.threshold(state.tool_names.get(tool_use_id)):
                event = _persist(session, config, tool_use_id, text, "size")
                decided.append(event)
                sizes[tool_use_id] = len(event.preview)
                del candidates[tool_use_id]
        # Largest fresh results first until the message fits its aggregate budget.
        for tool_use_id, text in sorted(candidates.items(), key=lambda item: (-len(item[1]), item[0])):
            if sum(sizes.values()) <= config.per_message_chars:
                break
            event = _persist(session, config, tool_use_id, text, "aggregate")
            decided.append(event)
            sizes[tool_use_id] = len(event.preview)
    return decided


@dataclass(frozen=True)
class BudgetStage:
    """The tool-result budget as a pipeline ``Stage``: persists what ``budget_stage`` decides."""

    config: BudgetConfig = field(default_factory=BudgetConfig)
    name: str = field(default="tool_result_budget", init=False)

    def run(self, session: Session, now: datetime) -> StageReport | None:
        """Persist the fresh results over budget in one transaction; None when switched off."""
        if not self.config.enabled:
            return None
        return record_events(session, self.name, budget_stage(session, self.config))
