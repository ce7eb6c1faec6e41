"""Post-compact restore: files, skills and the plan within their budgets."""

from __future__ import annotations

from pathlib import Path

import pytest

import sessionstore
from sessionstore import MessageAppended, Session, SessionConfig
from sessionstore.pipeline._compaction import compact
from sessionstore.pipeline._restore import Candidate, normalize_path, select_attachments, truncate_head
from sessionstore.pipeline._summarizers import OfflineSummarizer


def _words(n: int) -> str:
    """Exactly ``n`` tokens with the counter below (one per word)."""
    return " ".join(f"w{i}" for i in range(n))


def count(text: str) -> int:
    return len(text.split())


def _files(*sizes: int) -> list[Candidate]:
    return [Candidate("file", f"src/f{i}.py", _words(size)) for i, size in enumerate(sizes)]


@pytest.mark.parametrize(
    ("sizes", "expected_names", "expected_tokens"),
    [
        ((100, 200), ["src/f0.py", "src/f1.py"], [100, 200]),
        ((6_000,), ["src/f0.py"], [5_000]),  # each file keeps its head, at most 5,000 tokens
        ((10, 10, 10, 10, 10, 10, 10), [f"src/f{i}.py" for i in range(5)], [10] * 5),  # 5 files at most
        ((5_000,) * 5, [f"src/f{i}.py" for i in range(5)], [5_000] * 5),  # 25,000 <= 50,000 in all
    ],
)
def test_file_budgets(sizes: tuple[int, ...], expected_names: list[str], expected_tokens: list[int]) -> None:
    """Most recent first, at most 5 files, 5,000 tokens each (head kept), 50,000 in all."""
    chosen = select_attachments(_files(*sizes), [], None, visible_paths=set(), count=count)

    assert [c["name"] for c in chosen] == expected_names
    assert [c["tokens"] for c in chosen] == expected_tokens


def test_total_file_budget_skips_what_does_not_fit() -> None:
    """A file that would take the restored files past their total is skipped; a later, smaller
    one still fits. (With the default 5 x 5,000 per-file caps the 50,000 total cannot bind, so
    the per-file cap is raised here.)"""
    sizes = (20_000, 20_000, 20_000, 8_000)
    files = [Candidate("file", f"f{i}", _words(n)) for i, n in enumerate(sizes)]

    chosen = select_attachments(files, [], None, visible_paths=set(), count=count, max_tokens_per_file=25_000)

    assert [c["name"] for c in chosen] == ["f0", "f1", "f3"]
    assert sum(c["tokens"] for c in chosen) == 48_000


def test_visible_plan_and_memory_files_are_skipped() -> None:
    """Files the kept messages show, plan files and memory files are not restored."""
    files = [
        Candidate("file", "src/seen.py", "x"),
        Candidate("file", "CLAUDE.md", "memory"),
        Candidate("file", "docs/plans/next.md", "plan"),
        Candidate("file", "src/new.py", "y"),
    ]

    chosen = select_attachments(files, [], None, visible_paths={"src/seen.py"}, count=count)

    assert [c["name"] for c in chosen] == ["src/new.py"]


def test_skills_newest_first_with_truncation_note_and_plan_in_full() -> None:
    """Skills: 5,000 each with a note when cut, 25,000 in all; the plan is never cut."""
    skills = [Candidate("skill", f"s{i}", _words(6_000)) for i in range(7)]
    plan = Candidate("plan", "plan", _words(9_000))

    chosen = select_attachments([], skills, plan, visible_paths=set(), count=count)

    restored_skills = [c for c in chosen if c["kind"] == "skill"]
    assert [c["name"] for c in restored_skills] == ["s0", "s1", "s2", "s3"]
    assert all(c["truncated"] and "truncated to fit" in c["text"] for c in restored_skills)
    assert chosen[-1]["kind"] == "plan"
    assert chosen[-1]["tokens"] == 9_000


def test_truncate_keeps_the_head_and_prefers_a_line_end() -> None:
    """The cut keeps the start of the text and ends at a newline when one is close."""
    text = "\n".join(_words(50) for _ in range(10))

    cut, truncated = truncate_head(text, 120, count)

    assert truncated
    assert text.startswith(cut)
    assert count(cut) <= 120
    assert text[len(cut)] == "\n"


def test_compaction_restores_recently_read_files() -> None:
    """After a compaction, files read earlier come back after the summary; visible ones do not."""
    store = sessionstore.open_store(":memory:")
    session = Session.create(store, model="claude-opus-5-5", config=SessionConfig(snapshot_every=0))
    blob = store.put_blob(b"def handler():\n    return 42\n")
    session.append(
        [
            MessageAppended(role="user", content="read the handler"),
            MessageAppended(role="assistant", content="done reading"),
            sessionstore.events.FileRead(path="src/handler.py", blob_sha256=blob.sha256, size=29),
        ]
    )

    report = compact(session, OfflineSummarizer())
    texts = [b["text"] for b in session.request()["messages"][0]["content"]]

    assert report.ok
    assert any(t.startswith("[Restored after compaction: src/handler.py]\ndef handler()") for t in texts)
    sessionstore.validate_request(session.request())


def test_compaction_restores_skills_newest_first_and_the_plan() -> None:
    """Skills invoked and the current plan come back after the summary."""
    from sessionstore.events._context import PlanUpdated, SkillInvoked

    store = sessionstore.open_store(":memory:")
    session = Session.create(store, model="claude-opus-5-5", config=SessionConfig(snapshot_every=0))
    session.append(
        [
            MessageAppended(role="user", content="ship the release"),
            SkillInvoked(name="release", content="1. bump the version\n2. tag"),
            SkillInvoked(name="changelog", content="Write one line per change."),
            PlanUpdated(plan="- bump\n- tag\n- announce"),
            MessageAppended(role="assistant", content="on it"),
        ]
    )

    compact(session, OfflineSummarizer())
    texts = [b["text"] for b in session.request()["messages"][0]["content"]]

    assert texts[1].startswith("[Skill changelog]")
    assert texts[2].startswith("[Skill release]")
    assert texts[3] == "[Current plan]\n- bump\n- tag\n- announce"
    sessionstore.validate_request(session.request())


def _read_turns(session: Session, path: str) -> None:
    """An old turn, then a turn whose Read call names ``path`` (the kept tail of a compact up to a0)."""
    call = {"type": "tool_use", "id": "toolu_r", "name": "Read", "input": {"file_path": path}}
    session.append(
        [
            MessageAppended(role="user", content="old question", message_uuid="p0"),
            MessageAppended(role="assistant", content="old answer", message_uuid="a0"),
            MessageAppended(role="user", content="read the handler", message_uuid="p1"),
            MessageAppended(role="assistant", content=[call], api_message_id="m1"),
            MessageAppended(
                role="user", content=[{"type": "tool_result", "tool_use_id": "toolu_r", "content": "42"}]
            ),
            MessageAppended(role="assistant", content="it returns 42", api_message_id="m2"),
        ]
    )


@pytest.mark.parametrize("checkpoint", [True, False], ids=["root-recorded", "no-root-recorded"])
def test_a_file_read_in_the_kept_messages_is_not_restored_again(tmp_path: Path, checkpoint: bool) -> None:
    """The kept Read call names the absolute path, the FileRead the root-relative one: same file."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "handler.py").write_text("def handler():\n    return 42\n")
    (tmp_path / "src" / "other.py").write_text("OTHER = 1\n")
    store = sessionstore.open_store(":memory:")
    session = Session.create(store, model="claude-opus-5-5", config=SessionConfig(snapshot_every=0))
    history = sessionstore.FileHistory(session, tmp_path)
    if checkpoint:
        session.append([MessageAppended(role="user", content="start", message_uuid="u0")])
        history.snapshot_turn("u0")
    _read_turns(session, f"{tmp_path}/./src//handler.py")
    history.record_read(tmp_path / "src" / "other.py")
    history.record_read(tmp_path / "src" / "handler.py", tool_use_id="toolu_r")

    report = compact(session, OfflineSummarizer(), up_to_uuid="a0")
    boundary = next(e for e in session.transcript if e.type == "compact_boundary").payload

    assert report.ok
    assert [a["name"] for a in boundary["attachments"]] == ["src/other.py"]


def test_normalize_path_maps_absolute_paths_inside_the_root_to_the_stored_form(tmp_path: Path) -> None:
    assert normalize_path(f"{tmp_path}/src/../src/a.py", str(tmp_path)) == "src/a.py"
    assert normalize_path("./src//a.py") == "src/a.py"
    assert normalize_path("/elsewhere/src/a.py", str(tmp_path)) == "/elsewhere/src/a.py"
