"""Post-compact restore: files, skills and the plan within their budgets."""

from __future__ import annotations

import pytest

import sessionstore
from sessionstore import MessageAppended, Session, SessionConfig
from sessionstore._compaction import compact
from sessionstore._restore import Candidate, select_attachments, truncate_head
from sessionstore._summarizers import OfflineSummarizer


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
    """With a 50,000 budget, a file that would overflow it is skipped."""
    files = [Candidate("file", f"f{i}", _words(5_000)) for i in range(4)]
    big = _files(*([5_000] * 3))

    chosen = select_attachments(files + big, [], None, visible_paths=set(), count=count)

    assert sum(c["tokens"] for c in chosen) <= 50_000
    assert len(chosen) == 5


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
            sessionstore.FileRead(path="src/handler.py", blob_sha256=blob.sha256, size=29),
        ]
    )

    report = compact(session, OfflineSummarizer())
    texts = [b["text"] for b in session.request()["messages"][0]["content"]]

    assert report.ok
    assert any(t.startswith("[Restored after compaction: src/handler.py]\ndef handler()") for t in texts)
    sessionstore.validate_request(session.request())


def test_compaction_restores_skills_newest_first_and_the_plan() -> None:
    """Skills invoked and the current plan come back after the summary."""
    from sessionstore._context_events import PlanUpdated, SkillInvoked

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
