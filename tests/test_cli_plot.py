"""`sessionstore plot` and `context --breakdown`: the token gauge and the /context table."""

from __future__ import annotations

import io
import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

import sessionstore
from sessionstore.audit import token_timeline
from sessionstore.cli import main
from sessionstore.cli._plot import STAGE_LETTERS, sparkline

from .test_audit import _scripted


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


@pytest.fixture
def scripted(tmp_path: Path) -> tuple[str, str]:
    """(database, session id) of a session through persist, micro-compact, collapse and compaction."""
    db = str(tmp_path / "plot.db")
    _run("db", "upgrade", "--db", db)
    with sessionstore.open_store(db) as store:
        session_id = _scripted(store).id
    return db, session_id


class TestPlot:
    def test_the_sparkline_has_a_bar_per_turn_and_marks_the_stages(self, scripted: tuple[str, str]) -> None:
        """Without -o: ten bars, the compaction's C under turn 10, p under turn 2, and a legend."""
        db, sid = scripted

        code, out = _run("plot", sid, "--db", db)

        lines = out.splitlines()
        bars, marks = lines[1], lines[2]
        indent = bars.index(" ") + 1
        assert code == 0
        assert len(bars) - indent == 10
        assert marks[indent + 1] == "p" and marks[indent + 9] == "C"
        assert any(line.startswith("stages: ") and "C compaction" in line for line in lines)
        assert lines[-1].startswith("turn 10: ")

    def test_more_turns_than_columns_are_grouped(self, scripted: tuple[str, str]) -> None:
        """On a narrow terminal each column is several turns, and the output says how many."""
        db, sid = scripted
        with sessionstore.open_store(db) as store:
            timeline = token_timeline(store, sid)
        label = len(f"{timeline.window.effective_window:,} ")

        lines = sparkline(timeline, width=label + 1 + 5)  # five columns for ten turns

        assert len(lines[1]) == label + 5
        assert any(line.startswith("one column per 2 turns") for line in lines)

    def test_json_is_the_timeline(self, scripted: tuple[str, str]) -> None:
        """`plot --json` prints token_timeline's dict."""
        db, sid = scripted

        data = json.loads(_run("plot", sid, "--db", db, "--json")[1])

        assert [t["turn"] for t in data["turns"]] == list(range(1, 11))
        assert data["turns"][9]["stages"][-1]["kind"] == "compact_boundary"

    @pytest.mark.parametrize(("name", "magic"), [("gauge.png", b"\x89PNG"), ("gauge.svg", b"<?xml")])
    def test_an_image_file_with_matplotlib(
        self, scripted: tuple[str, str], tmp_path: Path, name: str, magic: bytes
    ) -> None:
        """-o FILE writes the image in the format its name ends with."""
        db, sid = scripted
        target = tmp_path / name

        code, out = _run("plot", sid, "--db", db, "-o", str(target))

        assert code == 0
        assert target.read_bytes().startswith(magic)
        assert out == f"{target}: 10 turns of {sid}\n"

    def test_an_unknown_image_format_is_refused(
        self, scripted: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """-o gauge.txt: exit 1, one line naming the file, nothing written."""
        db, sid = scripted
        target = tmp_path / "gauge.txt"

        code, _ = _run("plot", sid, "--db", db, "-o", str(target))

        assert code == 1
        assert "gauge.txt" in capsys.readouterr().err
        assert not target.exists()

    def test_a_disk_that_fills_up_leaves_the_old_image_whole(
        self, scripted: tuple[str, str], tmp_path: Path
    ) -> None:
        """A write that fails partway (here the file size limit, as a full disk would): one line
        naming the file, exit 1, and the file as it was, with no temp beside it (savefig left a
        truncated image in place of the old one)."""
        db, sid = scripted
        _run("plot", sid, "--db", db, "--json")  # stores the token counts: the database is not written
        folder = tmp_path / "images"
        folder.mkdir()
        target = folder / "gauge.svg"  # about 40 kB: past the limit
        target.write_text("the previous image")

        def limit() -> None:  # above SQLite's 32 kB shared-memory file, below the image
            resource.setrlimit(resource.RLIMIT_FSIZE, (36_000, 36_000))

        done = subprocess.run(
            [sys.executable, "-m", "sessionstore", "plot", sid, "--db", db, "-o", str(target)],
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=limit,
        )

        assert done.returncode == 1
        assert done.stderr == f"sessionstore: {target}: File too large\n"
        assert target.read_text() == "the previous image"
        assert [p.name for p in folder.iterdir()] == ["gauge.svg"]

    def test_without_matplotlib_the_image_needs_the_extra(
        self, scripted: tuple[str, str], tmp_path: Path
    ) -> None:
        """Where matplotlib cannot be imported, -o says which extra to install; the sparkline works."""
        db, sid = scripted
        probe = (
            "import sys\n"
            "sys.modules['matplotlib'] = None  # as on an install without the plot extra\n"
            "from sessionstore.cli import main\n"
            f"print('text', main(['plot', {sid!r}, '--db', {db!r}]))\n"
            f"print('image', main(['plot', {sid!r}, '--db', {db!r}, '-o', {str(tmp_path / 'g.png')!r}]))\n"
        )
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)

        assert "text 0" in done.stdout and "image 1" in done.stdout
        assert "pip install 'sessionstore[plot]'" in done.stderr
        assert not (tmp_path / "g.png").exists()

    def test_every_stage_kind_has_a_letter(self) -> None:
        """Each context stage the timeline marks has its own letter in the sparkline."""
        from sessionstore.audit._tokens import STAGE_KINDS

        letters = [letter for letter, _ in STAGE_LETTERS.values()]

        assert set(STAGE_LETTERS) == STAGE_KINDS
        assert len(set(letters)) == len(letters)


class TestContextBreakdown:
    def test_the_table_lists_every_category_and_the_free_space(self, scripted: tuple[str, str]) -> None:
        """`context --breakdown`: a row per category, then used, free, the buffer and the reserve."""
        db, sid = scripted

        code, out = _run("context", sid, "--db", db, "--breakdown")

        assert code == 0
        for row in (
            "system",
            "tools",
            "messages",
            "tool results",
            "summaries",
            "used",
            "free",
            "auto-compact buffer",
        ):
            assert f"│ {row} " in out, row
        assert "% left before auto-compact" in out

    def test_json_is_the_breakdown(self, scripted: tuple[str, str]) -> None:
        """`context --breakdown --json` prints context_breakdown's dict."""
        db, sid = scripted

        data = json.loads(_run("context", sid, "--db", db, "--breakdown", "--json")[1])

        assert [row["category"] for row in data["rows"]] == [
            "system",
            "tools",
            "messages",
            "tool results",
            "summaries",
        ]
        assert data["free"] == data["window"]["effective_window"] - data["used"]
