"""Print branch coverage per layer of sessionstore and fail below each layer's floor.

``python3 .ci/coverage_layers.py [DATAFILE]`` reads the coverage data the test run wrote
(``.coverage``, from ``pytest --cov``) and prints, for each layer (the first folder under
sessionstore/; the modules at its top are ``(package)``), statements, branches and the
percentage coverage.py reports (statements and branches together). The floors below are what
the suite measured when they were set (the lower of two CI runs, 2026-12), less a point for
the paths concurrency tests take differently from run to run (up to 0.6 seen), rounded down to
a half: a change that leaves more of a layer untested fails CI; raise a floor when a
layer's tests grow. A layer with no measured statements fails too (the data is not this tree's).

Only this process's tracing is counted: the command line run in subprocesses (``sessionstore
...`` in the CLI tests) is measured where the same code is called in-process.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import coverage

#: The lowest coverage (percent) each layer may fall to.
FLOORS = {
    "(package)": 94.0,
    "_telemetry": 94.5,
    "agent": 91.0,
    "audit": 92.5,
    # Lower since the Agent SDK store's resilience suite: its writers and killed appends run in
    # child processes, which coverage does not trace (91.6% measured).
    "bridges": 90.5,
    "checkpoints": 94.0,
    "claude_code": 92.5,
    "cli": 85.5,
    "events": 96.0,
    "pipeline": 94.0,
    "projections": 94.5,
    # Lower since the server's limits: the serve command's own process (signals, shutdown, slow
    # clients against uvicorn) is tested from outside, untraced (90.9% before tests/test_serve_server.py).
    "serve": 93.0,
    "store": 93.0,
}
#: The lowest coverage of the whole package.
TOTAL_FLOOR = 92.5


def _layer(path: Path, package: Path) -> str:
    parts = path.relative_to(package).parts
    return parts[0] if len(parts) > 1 else "(package)"


def main(datafile: str = ".coverage") -> int:
    package = Path(__file__).resolve().parent.parent / "sessionstore"
    data = coverage.Coverage(data_file=datafile)
    data.load()
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "coverage.json"
        data.json_report(outfile=str(report))
        files = json.loads(report.read_text())["files"]
    # [statements, missed statements, branches, missed branches] per layer.
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for measured, measures in files.items():
        path = Path(measured).resolve()
        if package not in path.parents:
            continue
        summary = measures["summary"]
        layer = counts[_layer(path, package)]
        layer[0] += summary["num_statements"]
        layer[1] += summary["missing_lines"]
        layer[2] += summary.get("num_branches", 0)
        layer[3] += summary.get("missing_branches", 0)
    failed = []
    print(f"{'layer':<14} {'stmts':>7} {'miss':>6} {'branch':>7} {'bmiss':>6} {'cover':>7} {'floor':>6}")
    total = [0, 0, 0, 0]
    for name in sorted(set(counts) | set(FLOORS)):
        stmts, miss, branches, bmiss = counts.get(name, [0, 0, 0, 0])
        total = [a + b for a, b in zip(total, (stmts, miss, branches, bmiss), strict=True)]
        percent = _percent(stmts, miss, branches, bmiss)
        floor = FLOORS.get(name)
        if floor is None or percent < floor or stmts == 0:
            failed.append(name)
        shown = "-" if floor is None else f"{floor:.1f}"
        print(f"{name:<14} {stmts:>7} {miss:>6} {branches:>7} {bmiss:>6} {percent:>6.1f}% {shown:>6}")
    percent = _percent(*total)
    stmts, miss, branches, bmiss = total
    print(f"{'total':<14} {stmts:>7} {miss:>6} {branches:>7} {bmiss:>6} {percent:>6.1f}% {TOTAL_FLOOR:>6.1f}")
    if percent < TOTAL_FLOOR:
        failed.append("total")
    if failed:
        print(f"[coverage] below the floor (or a layer without one): {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _percent(stmts: int, miss: int, branches: int, bmiss: int) -> float:
    """coverage.py's own figure: covered statements and branches over all of them."""
    whole = stmts + branches
    return 100.0 if whole == 0 else 100.0 * (whole - miss - bmiss) / whole


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
