"""The token gauge's geometry: each turn's used tokens as an SVG polyline, the window's lines,
and a marker wherever a stage fired. Numbers only; the template draws them (escaped)."""

from __future__ import annotations

from dataclasses import dataclass

from ..audit import TokenTimeline, TurnTokens

__all__ = ["Gauge", "GaugeLine", "GaugeMarker", "gauge"]

WIDTH, HEIGHT = 960, 240
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 28

#: The stages a marker shows, by audit kind, with their labels: those that free room in the
#: request (session-memory updates and reverts are in the timeline below the gauge).
MARKED = {
    "tool_result_persisted": "budget",
    "snip_applied": "snip",
    "microcompact_applied": "micro-compact",
    "server_edits_applied": "server edits",
    "collapse_staged": "collapse staged",
    "collapse_committed": "collapse",
    "compact_boundary": "compaction",
    "compact_failed": "compaction failed",
}


@dataclass(frozen=True)
class GaugeLine:
    """A horizontal line across the gauge: the effective window, auto-compact, blocking."""

    name: str
    tokens: int
    y: float


@dataclass(frozen=True)
class GaugeMarker:
    """A stage that fired before ``turn``'s request, drawn on that turn's point (``y``), the
    turn's later stages stacked above its first."""

    turn: int
    kind: str
    label: str
    event_id: str
    tokens_freed: int | None
    reverted: bool
    x: float
    y: float


@dataclass(frozen=True)
class Gauge:
    """Everything the template needs to draw the gauge."""

    width: int
    height: int
    points: str
    lines: list[GaugeLine]
    markers: list[GaugeMarker]
    turns: list[TurnTokens]
    x_ticks: list[tuple[int, float]]


def gauge(timeline: TokenTimeline) -> Gauge:
    """Scale ``timeline`` to the gauge: y from 0 to the window (or the largest count above it)."""
    window, turns = timeline.window, timeline.turns
    top = max([window.window, *(t.used for t in turns)])
    span_x = WIDTH - LEFT - RIGHT
    span_y = HEIGHT - TOP - BOTTOM

    def x(turn: int) -> float:
        return round(LEFT + (turn - 1) * span_x / max(1, len(turns) - 1), 1)

    def y(tokens: int) -> float:
        return round(TOP + span_y * (1 - tokens / top), 1)

    lines = [
        GaugeLine("effective window", window.effective_window, y(window.effective_window)),
        GaugeLine("auto-compact", window.autocompact_threshold, y(window.autocompact_threshold)),
        GaugeLine("blocking", window.blocking_limit, y(window.blocking_limit)),
    ]
    markers = [
        GaugeMarker(
            t.turn,
            stage.kind,
            MARKED[stage.kind],
            stage.event_id,
            stage.tokens_freed,
            stage.reverted_by is not None,
            x(t.turn),
            y(t.used) - 10 * index,
        )
        for t in turns
        for index, stage in enumerate(s for s in t.stages if s.kind in MARKED)
    ]
    step = max(1, len(turns) // 12)
    ticks = [(t.turn, x(t.turn)) for t in turns if (t.turn - 1) % step == 0]
    points = " ".join(f"{x(t.turn)},{y(t.used)}" for t in turns)
    return Gauge(WIDTH, HEIGHT, points, lines, markers, turns, ticks)
