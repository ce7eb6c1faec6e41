"""The compaction lab: `compare_compactions` and `sessionstore compare` re-run a compaction at a
past point with other summarizers, prompts or models, and record the tries in a fork only."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import anthropic
import pytest

import sessionstore
from sessionstore import MessageAppended, Session, SessionConfig, SessionStore
from sessionstore.cli import main
from sessionstore.errors import CompactionDisabledError, ValidationError
from sessionstore.events import CompactionExperiment, SessionMemoryUpdated
from sessionstore.pipeline import (
    AnthropicSummarizer,
    CompactionVariant,
    OfflineSummarizer,
    compact,
    compare_compactions,
)
from sessionstore.pipeline._replaced_facts import ReplacedFact, facts_kept, replaced_facts
from sessionstore.projections import WindowConfig

from ._claude_code_corpus import corpus_file
from .messages_api import MessagesAPIServer, prompt_too_long, text_message

CONFIG = SessionConfig(snapshot_every=0)
PARSER = "/home/u/proj/src/parse.py"
TASK = "Handle empty input in the tokenizer"
ERROR = "E   ZeroDivisionError: division by zero"


def _turn(n: int) -> list[MessageAppended]:
    """A prompt, a call of Read, Bash and TodoWrite, their results (the Bash one an error), an answer."""
    calls = [
        {"type": "tool_use", "id": f"r{n}", "name": "Read", "input": {"file_path": PARSER}},
        {
            "type": "tool_use",
            "id": f"b{n}",
            "name": "Bash",
            "input": {"command": "pytest tests/test_parse.py"},
        },
        {
            "type": "tool_use",
            "id": f"t{n}",
            "name": "TodoWrite",
            "input": {
                "todos": [
                    {"content": TASK, "status": "pending"},
                    {"content": "Write the changelog", "status": "completed"},
                ]
            },
        },
    ]
    results: list[dict[str, Any]] = [
        {"type": "tool_result", "tool_use_id": f"r{n}", "content": "def parse(text): ...\n" * 40},
        {"type": "tool_result", "tool_use_id": f"b{n}", "content": f"{ERROR}\nFAILED", "is_error": True},
        {"type": "tool_result", "tool_use_id": f"t{n}", "content": "Todos updated"},
    ]
    return [
        MessageAppended(role="user", content=f"Fix the parser, step {n}", message_uuid=f"p{n}"),
        MessageAppended(role="assistant", content=calls, api_message_id=f"m{n}", message_uuid=f"c{n}"),
        MessageAppended(role="user", content=results, message_uuid=f"res{n}"),
        MessageAppended(
            role="assistant", content=f"Step {n} looked at.", api_message_id=f"n{n}", message_uuid=f"a{n}"
        ),
    ]


def _session(store: SessionStore, turns: int = 3, config: SessionConfig = CONFIG) -> Session:
    session = Session.create(store, model="claude-opus-5-5", config=config)
    for n in range(turns):
        session.append(_turn(n))
    return session


def _experiments(store: SessionStore, fork_id: str) -> list[CompactionExperiment]:
    return [
        e.event for e in store.visible_log(fork_id).read(1, None) if isinstance(e.event, CompactionExperiment)
    ]


class TestCompareCompactions:
    def test_rerunning_a_compaction_reproduces_it_and_writes_only_to_a_fork(
        self, store: SessionStore
    ) -> None:
        """On every backend: the offline summarizer re-run at its own compaction gives the
        recorded summary and sizes; the session is untouched; the fork holds the tries."""
        session = _session(store)
        before_compaction = session.request_bytes()
        compacted = compact(session, OfflineSummarizer())
        session.append(_turn(9))
        boundary_seq = session.last_seq - len(_turn(9))
        seq, request = session.last_seq, session.request_bytes()

        comparison = compare_compactions(
            session, compacted.event_id, [CompactionVariant(OfflineSummarizer()), CompactionVariant(None)]
        )

        recorded, offline, memory = comparison.trials
        assert (recorded.label, offline.label, memory.label) == ("recorded", "offline", "session_memory")
        assert offline.summary == recorded.summary
        assert (offline.tokens_before, offline.tokens_after) == (
            compacted.tokens_before,
            compacted.tokens_after,
        )
        assert (recorded.tokens_before, recorded.tokens_after) == (
            offline.tokens_before,
            offline.tokens_after,
        )
        assert [(f.kind, f.name, f.kept) for f in offline.facts] == [
            ("file", PARSER, True),
            ("error", ERROR, True),
            ("task", TASK, True),
        ]
        assert not memory.ok
        assert memory.error == "no usable session memory at this point"
        assert comparison.at_seq == boundary_seq - 1
        resumed = Session(store, session.id, CONFIG)
        assert (resumed.last_seq, resumed.request_bytes()) == (seq, request)
        info = store.get_session(comparison.fork_id)
        assert (info.parent_session_id, info.fork_seq) == (session.id, boundary_seq - 1)
        assert _experiments(store, comparison.fork_id) == list(comparison.trials)
        assert Session(store, comparison.fork_id, CONFIG).request_bytes() == before_compaction

    def test_a_partial_compaction_is_cut_where_it_was(self) -> None:
        """A compaction up to a message keeps what followed verbatim; the re-run keeps the same."""
        store = sessionstore.open_store(":memory:")
        session = _session(store, turns=4)
        compacted = compact(session, OfflineSummarizer(), up_to_uuid="a1")

        recorded, offline = compare_compactions(
            session, compacted.event_id, [CompactionVariant(OfflineSummarizer())]
        ).trials

        assert offline.kept_from_seq == recorded.kept_from_seq > 0
        assert offline.kept_messages == recorded.kept_messages == 8
        assert offline.summary == recorded.summary

    def test_any_point_compacts_right_after_it_and_instructions_vary_the_prompt(self) -> None:
        store = sessionstore.open_store(":memory:")
        session = _session(store, turns=3)
        at = next(e for e in session.transcript if e.payload.get("message_uuid") == "a1")

        comparison = compare_compactions(
            session,
            at.event_id,
            [
                CompactionVariant(OfflineSummarizer()),
                CompactionVariant(OfflineSummarizer(), instructions="name every file"),
            ],
        )

        plain, instructed = comparison.trials
        assert comparison.at_seq == at.seq
        assert comparison.at_event_id is None
        assert "step 2" not in plain.summary  # the turn after the point is not in the fork
        assert "name every file" in instructed.summary
        assert instructed.custom_instructions == "name every file"
        assert compare_compactions(session, at.seq, [CompactionVariant(OfflineSummarizer())]).trials[
            0
        ].summary == (plain.summary)

    def test_the_session_memory_is_tried_alone(self) -> None:
        """A usable memory compacts with no model call and keeps the newest messages verbatim."""
        store = sessionstore.open_store(":memory:")
        session = _session(store, turns=8)
        covered = next(e.seq for e in session.transcript if e.payload.get("message_uuid") == "a3")
        session.append(
            [
                SessionMemoryUpdated(
                    memory=f"# Notes\nThe parser at {PARSER} divides by zero.",
                    last_summarized_seq=covered,
                    tokens_at_extraction=5_000,
                )
            ]
        )
        for n in range(10, 12):
            session.append(_turn(n))

        (memory,) = compare_compactions(session, session.last_seq, [CompactionVariant(None)]).trials

        assert memory.ok and memory.strategy == "session_memory" and memory.summarizer == "session_memory"
        assert memory.kept_from_seq > 0 and memory.kept_messages > 0  # the tail stays verbatim
        assert memory.usage == {}
        facts = {(f.kind, f.name): f for f in memory.facts}
        assert facts["file", PARSER].in_summary
        assert not facts["error", ERROR].in_summary and not facts["task", TASK].in_summary

    @pytest.mark.parametrize("at", ["no-such-event", "0", "999"])
    def test_a_point_outside_the_session_is_refused_and_nothing_is_forked(self, at: str) -> None:
        store = sessionstore.open_store(":memory:")
        session = _session(store, turns=1)

        with pytest.raises(ValidationError) as caught:
            compare_compactions(session, at, [CompactionVariant(OfflineSummarizer())])

        assert caught.value.field == "at"
        assert [s.id for s in store.list_sessions()] == [session.id]

    def test_no_variant_or_compaction_switched_off_is_refused_before_any_fork(self) -> None:
        store = sessionstore.open_store(":memory:")
        off = SessionConfig(snapshot_every=0, window=WindowConfig(disable_compaction=True))
        session = _session(store, turns=1, config=off)

        with pytest.raises(ValidationError, match="at least one summarizer"):
            compare_compactions(session, 3, [])
        with pytest.raises(CompactionDisabledError):
            compare_compactions(session, 3, [CompactionVariant(OfflineSummarizer())])
        assert [s.id for s in store.list_sessions()] == [session.id]

    def test_a_summarizer_that_raises_unexpectedly_is_a_failed_try(self) -> None:
        """A summarizer's own bug (not a SummaryFailedError) is that try's result: the other tries
        run and the fork records them all, so no empty fork is left behind."""

        class Broken:
            name = "broken"

            def summarize(self, request: Any) -> Any:
                raise RuntimeError("client misconfigured")

        store = sessionstore.open_store(":memory:")
        session = _session(store)

        result = compare_compactions(
            session, session.last_seq, [CompactionVariant(Broken()), CompactionVariant(OfflineSummarizer())]
        )

        assert [(t.ok, t.error) for t in result.trials] == [
            (False, "RuntimeError: client misconfigured"),
            (True, None),
        ]
        assert [e.ok for e in _experiments(store, result.fork_id)] == [False, True]


class TestRealCompaction:
    def test_claude_codes_own_summary_is_measured_beside_the_offline_one(self) -> None:
        """The corpus's real compaction of a 155k-token review session: Claude Code's summary
        names 7 of the 12 files the replaced messages read or edited (two only by a file name
        another of them shares, which does not count) and 1 of the 2 errors; the offline
        summarizer lists them all."""
        from sessionstore.claude_code import import_claude_code

        store = sessionstore.open_store(":memory:")
        imported = import_claude_code(store, [corpus_file("entireio__cli__98-78b713483d-0-full.jsonl")])
        session = Session(store, imported.sessions[0].session_id)
        boundary = next(e for e in session.transcript if e.type == "compact_boundary")

        recorded, offline = compare_compactions(
            session, boundary.event_id, [CompactionVariant(OfflineSummarizer())]
        ).trials

        def kept(trial: CompactionExperiment, kind: str) -> tuple[int, int]:
            facts = [f for f in trial.facts if f.kind == kind]
            return sum(f.kept for f in facts), len(facts)

        assert recorded.tokens_before > 150_000
        assert (kept(recorded, "file"), kept(recorded, "error")) == ((7, 12), (1, 2))
        assert (kept(offline, "file"), kept(offline, "error")) == ((12, 12), (2, 2))
        lost = {"/".join(f.name.split("/")[-2:]) for f in recorded.facts if f.kind == "file" and not f.kept}
        assert "session/state.go" in lost and "cli/cleanup.go" in lost


class TestAnthropicSummarizer:
    def test_each_model_is_asked_and_a_failure_is_a_result(self, messages_api: MessagesAPIServer) -> None:
        """Against the local Messages API: the variant's model is sent, its usage recorded; a
        summary naming only the file keeps the file and drops the error and the task; a
        rejected request is a failed try beside the others."""
        client = anthropic.Anthropic(api_key="k", base_url=messages_api.url, max_retries=0)
        summarizer = AnthropicSummarizer(client, "claude-opus-5-5")
        store = sessionstore.open_store(":memory:")
        session = _session(store, turns=2)
        messages_api.queue += [
            text_message("<analysis>x</analysis><summary>Worked on src/parse.py.</summary>"),
            (400, {"type": "error", "error": {"type": "invalid_request_error", "message": "bad model"}}),
        ]

        fine, failed = compare_compactions(
            session,
            session.last_seq,
            [
                CompactionVariant(summarizer, model="claude-haiku-4-5"),
                CompactionVariant(summarizer, model="claude-nope"),
            ],
        ).trials

        sent = [r["body"] for r in messages_api.requests if r["path"] == "/v1/messages"]
        assert [body["model"] for body in sent] == ["claude-haiku-4-5", "claude-nope"]
        assert fine.ok and fine.summary == "Worked on src/parse.py."
        assert fine.usage["input_tokens"] == 1000 and fine.usage["output_tokens"] == 200
        assert [(f.kind, f.in_summary) for f in fine.facts] == [
            ("file", True),
            ("error", False),
            ("task", False),
        ]
        assert fine.label == "anthropic:claude-haiku-4-5"
        assert not failed.ok and "bad model" in (failed.error or "")


class TestReplacedFacts:
    def test_what_is_extracted_from_calls_and_results(self) -> None:
        """Files from tool inputs (not Grep's folder), error results, the latest todo list, and
        tasks created and not completed."""
        messages: list[dict[str, Any]] = [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "1", "name": "Grep", "input": {"pattern": "x", "path": "src"}},
                    {"type": "tool_use", "id": "2", "name": "Read", "input": {"file_path": "src/a.py"}},
                    {"type": "tool_use", "id": "3", "name": "Edit", "input": {"file_path": "src/a.py"}},
                    {
                        "type": "tool_use",
                        "id": "4",
                        "name": "TodoWrite",
                        "input": {"todos": [{"content": "old", "status": "pending"}]},
                    },
                    {
                        "type": "tool_use",
                        "id": "5",
                        "name": "TodoWrite",
                        "input": {"todos": [{"content": "new", "status": "in_progress"}]},
                    },
                    {"type": "tool_use", "id": "6", "name": "TaskCreate", "input": {"subject": "Ship WP1"}},
                    {"type": "tool_use", "id": "7", "name": "TaskCreate", "input": {"subject": "Ship WP2"}},
                    {
                        "type": "tool_use",
                        "id": "8",
                        "name": "TaskUpdate",
                        "input": {"taskId": "1", "status": "completed"},
                    },
                    {"type": "tool_use", "id": "9", "name": "Bash", "input": {"command": "make"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "6",
                        "content": "Task #1 created successfully: Ship WP1",
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "7",
                        "content": "Task #2 created successfully: Ship WP2",
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "9",
                        "content": [
                            {"type": "text", "text": "<tool_use_error>\nmake: *** No rule</tool_use_error>"}
                        ],
                        "is_error": True,
                    },
                ],
            },
        ]

        facts = replaced_facts(messages)

        assert facts == [
            ReplacedFact("file", "src/a.py", "edited"),
            ReplacedFact("error", "make: *** No rule", "Bash make"),
            ReplacedFact("task", "new", "in_progress"),
            ReplacedFact("task", "Ship WP2", "pending"),
        ]

    @pytest.mark.parametrize(
        ("fact", "summary", "mentioned"),
        [
            (ReplacedFact("file", "/home/u/p/src/app.py"), "Edited /home/u/p/src/app.py.", True),
            (ReplacedFact("file", "/home/u/p/src/app.py"), "Edited src/app.py:12 today", True),
            (ReplacedFact("file", "/home/u/p/src/app.py"), "Edited app.py", True),
            (ReplacedFact("file", "/home/u/p/src/app.py"), "Edited myapp.py and app.pyc", False),
            (ReplacedFact("file", "/home/u/p/src/app.py"), "Looked in src/", False),
            (ReplacedFact("error", "KeyError: 'user'"), "fixed the KeyError", True),
            (ReplacedFact("error", "KeyError: 'user'"), "fixed the missing user key", False),
            (ReplacedFact("error", "make: *** No rule to make target"), "no rule for the make target", True),
            (
                ReplacedFact("task", "Handle empty input in the tokenizer"),
                "Next: the tokenizer's empty input",
                True,
            ),
            (ReplacedFact("task", "Handle empty input in the tokenizer"), "Next: release", False),
        ],
    )
    def test_what_counts_as_a_mention(self, fact: ReplacedFact, summary: str, mentioned: bool) -> None:
        assert facts_kept([fact], summary)[0].in_summary is mentioned

    def test_a_file_name_two_files_share_needs_more_of_the_path(self) -> None:
        facts = [ReplacedFact("file", "src/a/util.py"), ReplacedFact("file", "src/b/util.py")]

        kept = facts_kept(facts, "changed util.py and b/util.py")

        assert [f.in_summary for f in kept] == [False, True]

    def test_a_file_restored_after_the_summary_is_kept(self) -> None:
        (kept,) = facts_kept([ReplacedFact("file", "/home/u/p/src/app.py")], "nothing", ["src/app.py"])

        assert (kept.in_summary, kept.restored, kept.kept) == (False, True, True)


def _database(tmp_path: Path) -> tuple[str, Session]:
    db = str(tmp_path / "s.db")
    assert main(["db", "upgrade", "--db", db], out=io.StringIO()) == 0
    return db, _session(sessionstore.open_store(db))


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), out=out)
    return status, out.getvalue()


class TestCommand:
    def test_the_table_the_json_and_the_fork(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """`compare` prints each try and each fact; `--json` is the comparison; the tries are
        the fork's events; the session gets nothing."""
        monkeypatch.setenv("COLUMNS", "200")
        db, session = _database(tmp_path)
        compacted = compact(session, OfflineSummarizer())
        seq = session.last_seq

        status, table = _cli(
            "compare",
            session.id,
            "--at",
            compacted.event_id,
            "--summarizers",
            "offline,memory",
            "--fork-id",
            "lab",
            "--db",
            db,
        )
        _, as_json = _cli(
            "compare",
            session.id,
            "--at",
            compacted.event_id,
            "--instructions",
            "one",
            "--instructions",
            "two",
            "--json",
            "--db",
            db,
        )
        _, events = _cli("events", "lab", "--type", "compaction_experiment", "--json", "--db", db)
        _, with_summaries = _cli("compare", session.id, "--at", "5", "--summaries", "--db", db)

        assert status == 0
        assert "recorded" in table and "offline" in table and "failed: no usable session memory" in table
        assert PARSER in table and "ZeroDivisionError" in table and TASK in table
        assert "Recorded in fork lab" in table
        comparison = json.loads(as_json)
        assert [t["label"] for t in comparison["trials"]] == ["recorded", "offline (one)", "offline (two)"]
        assert all(f["kept"] for t in comparison["trials"] for f in t["facts"])
        assert [json.loads(line)["payload"]["label"] for line in events.splitlines()] == [
            "recorded",
            "offline",
            "memory",
        ]
        assert "--- offline ---" in with_summaries and "1. Primary request and intent:" in with_summaries
        session.refresh()
        assert session.last_seq == seq

    def test_anthropic_with_a_model_against_the_local_server(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, messages_api: MessagesAPIServer
    ) -> None:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", messages_api.url)
        db, session = _database(tmp_path)
        messages_api.queue.append(text_message(f"<summary>{TASK}; saw {ERROR.split()[1]}</summary>"))

        status, out = _cli(
            "compare",
            session.id,
            "--at",
            str(session.last_seq),
            "--summarizers",
            "anthropic:claude-haiku-4-5",
            "--json",
            "--db",
            db,
        )

        (trial,) = json.loads(out)["trials"]
        assert status == 0
        assert messages_api.requests[-1]["body"]["model"] == "claude-haiku-4-5"
        assert trial["usage"]["output_tokens"] == 200
        assert {f["kind"]: f["kept"] for f in trial["facts"]} == {"file": False, "error": True, "task": True}

    def test_a_prompt_too_long_is_retried_as_a_compaction_would(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, messages_api: MessagesAPIServer
    ) -> None:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", messages_api.url)
        db, session = _database(tmp_path)
        messages_api.queue += [prompt_too_long(210_000), text_message("<summary>short</summary>")]

        status, out = _cli(
            "compare", session.id, "--at", "5", "--summarizers", "anthropic", "--json", "--db", db
        )

        (trial,) = json.loads(out)["trials"]
        assert status == 0 and trial["ok"] and trial["summary"] == "short"

    @pytest.mark.parametrize(
        ("summarizers", "problem"),
        [
            ("gpt", "unknown summarizer 'gpt'"),
            ("offline:claude-haiku-4-5", "offline asks no model"),
            (",", "names no summarizer"),
        ],
    )
    def test_bad_summarizers_are_one_line_errors(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], summarizers: str, problem: str
    ) -> None:
        db, session = _database(tmp_path)

        status = main(["compare", session.id, "--at", "3", "--summarizers", summarizers, "--db", db])

        assert status == 1
        assert problem in capsys.readouterr().err
        assert [s.id for s in sessionstore.open_store(db).list_sessions()] == [session.id]
