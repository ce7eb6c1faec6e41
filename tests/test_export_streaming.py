"""Export streams from the log: any line order gives the same bytes, and a failed write changes nothing."""

from __future__ import annotations

import io
import json
import math
import os
import random
import shutil
import sqlite3
import stat
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sessionstore
from sessionstore import DataCorruptionError, MessageAppended, Session, SessionStore
from sessionstore.claude_code import (
    _export,
    export_claude_code,
    import_claude_code,
    iter_claude_code,
    write_claude_code,
    write_claude_code_file,
)
from sessionstore.claude_code._export import _dump as export_dump
from sessionstore.claude_code._export import _dump_as_javascript
from sessionstore.cli import main
from sessionstore.errors import PathRefusedError

from .test_tamper import _recompute_chain

SESSION = "3b7e9c1d-4a2f-4e6b-8d0c-5f1a2b3c4d5e"


def _line(index: int, parent: int | None) -> dict[str, Any]:
    """Message ``index`` (user when even) answering message ``parent``, keys in Claude Code's order."""
    user = index % 2 == 0
    text = f"message {index} é ✓"
    message: dict[str, Any] = (
        {"role": "user", "content": text}
        if user
        else {
            "model": "claude-sonnet-4-5",
            "id": f"msg_{index}",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 0.5 + index},
        }
    )
    return {
        "parentUuid": None if parent is None else f"m-{parent}",
        "isSidechain": False,
        "userType": "external",
        "cwd": "/home/dev/proj",
        "sessionId": SESSION,
        "version": "2.1.0",
        "gitBranch": "main",
        "type": "user" if user else "assistant",
        "message": message,
        "uuid": f"m-{index}",
        "timestamp": f"2026-01-13T08:{index // 60:02d}:{index % 60:02d}.000Z",
    }


def _dump(entry: dict[str, Any]) -> str:
    return json.dumps(entry, separators=(",", ":"), ensure_ascii=False)


@st.composite
def _transcripts(draw: st.DrawFn) -> str:
    """A branching conversation written in any line order, with blank lines and glued objects."""
    count = draw(st.integers(1, 14))
    parents = [None, *(draw(st.integers(0, i - 1)) for i in range(1, count))]
    order = draw(st.permutations(range(count)))
    lines = [_dump(_line(i, parents[i])) for i in order]
    # Blank lines keep their numbers (trailing ones have none to keep: a file ends at its last line).
    for at in sorted(draw(st.lists(st.integers(0, len(lines) - 1), max_size=3)), reverse=True):
        lines.insert(at, "")
    glued = draw(st.lists(st.integers(0, len(lines) - 1), max_size=2, unique=True))
    for at in glued:
        if lines[at]:
            lines[at] += '{"type":"summary","summary":"a title","leafUuid":"m-0"}'
    return "\n".join(lines) + "\n"


#: What may wait in memory: all of it, nothing (every line read early is read again), a little.
_HOLDS = [_export.HOLD_CHARS, 0, 600]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_transcripts(), hold=st.sampled_from(_HOLDS))
def test_any_line_order_exports_byte_for_byte(
    text: str, hold: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """However the log orders a transcript's lines (parents first), and however little may wait
    in memory, each line goes back to its number."""
    folder = tmp_path_factory.mktemp("transcript")
    source = folder / f"{SESSION}.jsonl"
    source.write_text(text, encoding="utf-8")
    with sessionstore.open_store(":memory:") as store, pytest.MonkeyPatch.context() as patch:
        patch.setattr(_export, "HOLD_CHARS", hold)
        import_claude_code(store, [source])

        streamed = "".join(line + "\n" for line in iter_claude_code(store, SESSION))
        exported = write_claude_code_file(store, SESSION, folder / "out.jsonl")

        assert streamed == text
        assert export_claude_code(store, SESSION) == text.split("\n")[:-1]
        assert (folder / "out.jsonl").read_bytes() == text.encode()
        assert exported.lines == text.count("\n")
        assert sorted(p.name for p in folder.iterdir()) == sorted([source.name, "out.jsonl"])  # no temporary


def _line_order_in_the_log(store: SessionStore) -> list[int]:
    return [
        r.payload_dict()["line"] for r in store.read(SESSION) if r.type in ("imported_entry", "opaque_entry")
    ]


@pytest.mark.parametrize("hold", _HOLDS)
def test_a_transcript_written_children_first_spans_pages_and_comes_back_in_file_order(
    hold: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chain of 700 lines in reverse file order: the log holds them last line first (the
    worst case for streaming: every line waits for line 1, in memory or to be read again); the
    export is still exact."""
    monkeypatch.setattr(_export, "HOLD_CHARS", hold)
    count = 700
    text = "".join(_dump(_line(i, i - 1 if i else None)) + "\n" for i in reversed(range(count)))
    source = tmp_path / f"{SESSION}.jsonl"
    source.write_text(text, encoding="utf-8")
    with sessionstore.open_store(":memory:") as store:
        import_claude_code(store, [source])

        assert _line_order_in_the_log(store) == list(range(count, 0, -1))
        assert "".join(line + "\n" for line in iter_claude_code(store, SESSION)) == text


def _tampered_native_session(db: Path) -> None:
    """A native session of 600 messages whose message at seq 590 no longer decodes."""
    with sessionstore.open_store(db, migrate=True) as store:
        session = Session.create(store, "s-1", model="claude-sonnet-4-5")
        session.append(
            [
                MessageAppended(role="user" if i % 2 == 0 else "assistant", content=f"turn {i}")
                for i in range(600)
            ]
        )
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DROP TRIGGER events_append_only_update")
        conn.execute("UPDATE events SET payload = '{{{' WHERE session_id = 's-1' AND seq = 590")
    conn.close()


def test_a_write_that_fails_part_way_leaves_every_target_as_it_was(tmp_path: Path) -> None:
    """An event that fails to decode half way through: the existing file keeps its bytes, no
    temporary file or new folder is left behind."""
    db = tmp_path / "t.db"
    _tampered_native_session(db)
    target = tmp_path / "files" / "s-1.jsonl"
    target.parent.mkdir()
    target.write_bytes(b"the old export\n")

    with sessionstore.open_store(db) as store:
        with pytest.raises(DataCorruptionError, match="seq 590"):
            write_claude_code_file(store, "s-1", target, overwrite=True)
        with pytest.raises(DataCorruptionError, match="seq 590"):
            write_claude_code(store, "s-1", tmp_path / "project" / "nested", overwrite=True)
        with pytest.raises(DataCorruptionError, match="seq 590"):
            write_claude_code(store, "s-1", target.parent, overwrite=True)

    assert target.read_bytes() == b"the old export\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["s-1.jsonl"]
    assert not (tmp_path / "project").exists()


def _stored_counts(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT count(*) FROM token_counts").fetchone()[0])
    finally:
        conn.close()


def test_the_cli_export_counts_no_tokens(tmp_path: Path) -> None:
    """Exporting copies events out: the counts an import deferred stay for a reader that needs them."""
    db = tmp_path / "c.db"
    text = "".join(_dump(_line(i, i - 1 if i else None)) + "\n" for i in range(40))
    source = tmp_path / f"{SESSION}.jsonl"
    source.write_text(text, encoding="utf-8")
    out = io.StringIO()
    assert main(["db", "upgrade", "--db", str(db)], out=out) == 0
    assert main(["import", "--db", str(db), str(source)], out=out) == 0
    before = _stored_counts(db)

    assert main(["export", "--db", str(db), SESSION, "-o", str(tmp_path / "out.jsonl")], out=out) == 0
    assert main(["export", "--db", str(db), SESSION], out=out) == 0
    assert _stored_counts(db) == before
    assert (tmp_path / "out.jsonl").read_text(encoding="utf-8") == text
    with sessionstore.open_store(db) as store:  # any other reader counts them
        store.read(SESSION)
    assert _stored_counts(db) > before


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(["1.0,", "2e-05", "NaN", "Infinity", "x 3.0]", "é✓"])
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


@given(value=st.dictionaries(st.text(max_size=4), _JSON, max_size=5))
def test_every_line_is_written_as_javascript_writes_it(value: dict[str, Any]) -> None:
    """The fast path (the C encoder, when its text holds no float JavaScript writes otherwise)
    gives the same text as the slow path; the table below holds the slow path to node's output."""
    assert export_dump(value) == _dump_as_javascript(value)


#: What node's JSON.stringify wrote for 835 doubles (by their bits) and 59 strings (by their code
#: points). The fixture's ``json`` fields and ``node`` are filled in from its inputs by this program:
#:   node -e "$FILL" tests/fixtures/json-stringify.json
#: where FILL is _FILL_WITH_NODE (test_the_stringify_table_is_what_node_writes runs it again).
_FILL_WITH_NODE = (
    'const fs=require("fs"),p=process.argv[1],f=JSON.parse(fs.readFileSync(p,"utf8"));'
    "f.node=process.version;"
    'for(const n of f.numbers)n.json=JSON.stringify(Buffer.from(n.bits,"hex").readDoubleBE(0));'
    "for(const s of f.strings)s.json=JSON.stringify(String.fromCodePoint(...s.code_points));"
    'const rows=k=>"[\\n"+f[k].map(r=>" "+JSON.stringify(r)).join(",\\n")+"\\n]";'
    'fs.writeFileSync(p,"{\\"generated_by\\":"+JSON.stringify(f.generated_by)+",\\n\\"node\\":"'
    '+JSON.stringify(f.node)+",\\n\\"numbers\\":"+rows("numbers")+",\\n\\"strings\\":"+rows("strings")+"}\\n")'
)
_STRINGIFY_PATH = Path(__file__).parent / "fixtures" / "json-stringify.json"
_STRINGIFY = json.loads(_STRINGIFY_PATH.read_text(encoding="utf-8"))


def _double(row: dict[str, Any]) -> float:
    return float(struct.unpack(">d", bytes.fromhex(row["bits"]))[0])


def _text(row: dict[str, Any]) -> str:
    return "".join(map(chr, row["code_points"]))


def _storable(text: str) -> bool:
    """False for a lone surrogate, which appends and imports refuse (no line can hold one)."""
    return not any(0xD800 <= ord(c) <= 0xDFFF for c in text)


_FINITE = [row for row in _STRINGIFY["numbers"] if math.isfinite(_double(row))]
_STRINGS = [pytest.param(row, id=row["note"]) for row in _STRINGIFY["strings"] if _storable(_text(row))]


def test_the_stringify_table_names_each_double_three_ways_alike() -> None:
    """Each row's bits, float.hex() and repr() are one double, and node's text reads back as it
    (a mistyped row would test nothing)."""
    for row in _STRINGIFY["numbers"]:
        value = _double(row)
        if not math.isfinite(value):  # JSON has no NaN or infinity: JSON.stringify writes null
            assert row["repr"] in ("nan", "inf", "-inf")
            assert row["json"] == "null"
            continue
        assert struct.pack(">d", float.fromhex(row["hex"])).hex() == row["bits"]
        assert struct.pack(">d", float(row["repr"])).hex() == row["bits"]
        assert float(row["json"]) == value  # -0.0 is written 0


class TestNumbersAsJSONStringify:
    """Export writes every double as node's JSON.stringify did (tests/fixtures/json-stringify.json)."""

    def test_a_float_is_written_as_node_wrote_it(self) -> None:
        """Alone, in an array and as an object's value: the fast path and the slow path alike.
        (One test over the 835 rows, not 835 tests: the table is checked in a few milliseconds.)"""
        written = {}
        for row in _STRINGIFY["numbers"]:
            value = _double(row)
            written[row["repr"]] = (
                _export._js_number(value),
                export_dump(value),
                export_dump([value, "x", value]),
                export_dump({"cost": value}),
            )

        assert written == {
            row["repr"]: (
                row["json"],
                row["json"],
                f'[{row["json"]},"x",{row["json"]}]',
                f'{{"cost":{row["json"]}}}',
            )
            for row in _STRINGIFY["numbers"]
        }

    def test_a_number_node_wrote_comes_back_as_it_was(self) -> None:
        """A number as it stands in a transcript (an int to Python when node wrote no point or
        exponent: ``2``, ``123456789012345680000``) is written back unchanged."""
        written = {row["json"]: export_dump({"n": json.loads(row["json"])}) for row in _FINITE}

        assert written == {row["json"]: f'{{"n":{row["json"]}}}' for row in _FINITE}

    def test_a_native_message_writes_its_floats_as_node(self) -> None:
        """Floats appended from Python (a tool's input) reach the exported line as JSON.stringify
        writes them: ``2`` for 2.0, ``1e-7``, ``1e+21``, ``0.00006``."""
        values = [_double(row) for row in _FINITE]
        call = {"type": "tool_use", "id": "toolu_1", "name": "Calc", "input": {"values": values}}
        with sessionstore.open_store(":memory:") as store:
            session = Session.create(store, "s-1", model="claude-sonnet-4-5")
            session.append([MessageAppended(role="assistant", content=[call])])

            [line] = [line for line in export_claude_code(store, "s-1") if "toolu_1" in line]

        assert '"input":{"values":[' + ",".join(row["json"] for row in _FINITE) + "]}" in line

    def test_a_transcript_line_of_every_number_exports_byte_for_byte(self, tmp_path: Path) -> None:
        """A line holding every finite number of the table as node wrote it, imported and exported."""
        numbers = ",".join(row["json"] for row in _FINITE)
        line = f'{{"type":"cost-state","sessionId":"{SESSION}","values":[{numbers}]}}'
        source = tmp_path / f"{SESSION}.jsonl"
        source.write_text(line + "\n", encoding="utf-8")
        with sessionstore.open_store(":memory:") as store:
            import_claude_code(store, [source])

            assert export_claude_code(store, SESSION) == [line]


class TestStringsAsJSONStringify:
    """Export escapes strings as JSON.stringify: only ``"``, ``\\`` and U+0000-U+001F (``\\n``,
    ``\\u001b``); U+2028, U+2029, DEL, a BOM and astral characters are written as they are."""

    @pytest.mark.parametrize("row", _STRINGS)
    def test_a_string_is_written_as_node_wrote_it(self, row: dict[str, Any]) -> None:
        text, expected = _text(row), row["json"]

        assert export_dump(text) == expected
        assert export_dump({text: [text, 2.5e-7]}) == f"{{{expected}:[{expected},2.5e-7]}}"
        assert export_dump(json.loads(expected)) == expected

    def test_a_transcript_line_of_every_string_exports_byte_for_byte(self, tmp_path: Path) -> None:
        strings = [row["json"] for row in _STRINGIFY["strings"] if _storable(_text(row))]
        line = f'{{"type":"cost-state","sessionId":"{SESSION}","values":[{",".join(strings)}]}}'
        source = tmp_path / f"{SESSION}.jsonl"
        source.write_bytes(line.encode() + b"\n")
        with sessionstore.open_store(":memory:") as store:
            import_claude_code(store, [source])

            assert export_claude_code(store, SESSION) == [line]

    def test_a_lone_surrogate_never_reaches_the_exporter(self, tmp_path: Path) -> None:
        """JSON.stringify writes a lone surrogate as ``\\ud800``; Python would write the character,
        which no UTF-8 file can hold. Neither an append nor an import lets one into the log."""
        lone = [row for row in _STRINGIFY["strings"] if not _storable(_text(row))]
        assert len(lone) == 4
        with sessionstore.open_store(":memory:") as store:
            session = Session.create(store, "s-1", model="claude-sonnet-4-5")
            for row in lone:
                with pytest.raises(sessionstore.ValidationError, match="lone surrogate"):
                    session.append([MessageAppended(role="user", content=_text(row))])
                source = tmp_path / f"{SESSION}.jsonl"
                source.write_text(f'{{"type":"cost-state","sessionId":"{SESSION}","x":{row["json"]}}}\n')
                with pytest.raises(sessionstore.ValidationError, match="lone surrogate"):
                    import_claude_code(store, [source])

            assert store.list_sessions() == [store.get_session("s-1")]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_stringify_table_is_what_node_writes(tmp_path: Path) -> None:
    """node run again fills in the same ``json`` fields, and agrees with the exporter on 20,000
    more doubles (random bits, seeded) than the table holds."""
    node = shutil.which("node")
    assert node is not None
    copy = tmp_path / "json-stringify.json"
    shutil.copyfile(_STRINGIFY_PATH, copy)
    subprocess.run([node, "-e", _FILL_WITH_NODE, str(copy)], check=True, timeout=60)
    again = json.loads(copy.read_text(encoding="utf-8"))
    rng = random.Random(20260114)
    bits = [f"{rng.getrandbits(64):016x}" for _ in range(20_000)]
    program = (
        'const l=require("fs").readFileSync(0,"utf8").split("\\n");'
        'process.stdout.write(l.map(b=>JSON.stringify(Buffer.from(b,"hex").readDoubleBE(0))).join("\\n"))'
    )
    written = subprocess.run(
        [node, "-e", program], input="\n".join(bits), capture_output=True, text=True, check=True, timeout=60
    ).stdout.split("\n")

    assert again["numbers"] == _STRINGIFY["numbers"]
    assert again["strings"] == _STRINGIFY["strings"]
    if again["node"] == _STRINGIFY["node"]:
        assert copy.read_bytes() == _STRINGIFY_PATH.read_bytes()
    assert [_export._js_number(_double({"bits": b})) for b in bits] == written


def test_export_to_a_fifo_or_symlink_is_refused_not_replaced(tmp_path: Path) -> None:
    """``-o`` renames a temporary file over its target: a FIFO or a symlink (``/dev/stdout``'s)
    would be replaced, not written through, so it is refused and left as it is."""
    db = tmp_path / "t.db"
    with sessionstore.open_store(db, migrate=True) as store:
        session = Session.create(store, "s-1", model="claude-sonnet-4-5")
        session.append([MessageAppended(role="user", content="hi")])
    fifo, link = tmp_path / "pipe", tmp_path / "link.jsonl"
    os.mkfifo(fifo)
    (tmp_path / "real.jsonl").write_bytes(b"kept\n")
    link.symlink_to(tmp_path / "real.jsonl")
    with sessionstore.open_store(db) as store:
        for target in (fifo, link):
            with pytest.raises(PathRefusedError, match="not a regular file"):
                write_claude_code_file(store, "s-1", target, overwrite=True)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert link.is_symlink() and (tmp_path / "real.jsonl").read_bytes() == b"kept\n"


def test_standard_output_cut_by_an_error_says_how_many_lines_it_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "t.db"
    _tampered_native_session(db)
    # The chain recomputed over the edit: the command line's read checks pass, so the event
    # fails only when it is decoded, after 588 lines went out.
    with sessionstore.open_store(db) as store:
        _recompute_chain(store, "s-1", 590)
    out = io.StringIO()
    assert main(["export", "--db", str(db), "s-1"], out=out) == 3
    assert len(out.getvalue().splitlines()) == 588
    assert "standard output holds only the first 588 lines" in capsys.readouterr().err


def test_an_altered_line_number_is_corruption_not_a_disk_of_empty_lines(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    source = tmp_path / f"{SESSION}.jsonl"
    lines = "".join(_dump(_line(i, i - 1 if i else None)) + "\n" for i in range(5))
    source.write_text(lines, encoding="utf-8")
    with sessionstore.open_store(db, migrate=True) as store:
        sessionstore.import_claude_code(store, [source])
        entry = next(e for e in store.read(SESSION) if e.type == "imported_entry" and '"line":3' in e.payload)
    altered = entry.payload.replace('"line":3', '"line":1000000000000')
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DROP TRIGGER events_append_only_update")
        conn.execute(
            "UPDATE events SET payload = ?, payload_packed = NULL WHERE event_id = ?",
            (altered, entry.event_id),
        )
    conn.close()
    with (
        sessionstore.open_store(db) as store,
        pytest.raises(DataCorruptionError, match="line number 1000000000000 is not a line"),
    ):
        write_claude_code_file(store, SESSION, tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()
