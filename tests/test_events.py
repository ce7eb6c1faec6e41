"""Event models: validation, deterministic payloads, upcasting, and store round trips."""

from __future__ import annotations

import itertools
from typing import Any, ClassVar, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sessionstore
from sessionstore import Event, MessageAppended, ValidationError
from sessionstore.errors import UnknownEventTypeError
from sessionstore.events._base import decode_event, encode_event, register_event, register_upcaster

from .strategies import examples, message_events


class TestParse:
    def test_dict_is_validated_into_its_model(self) -> None:
        """parse_event picks the model by 'type'."""
        raw = {"type": "usage_recorded", "input_tokens": 5, "output_tokens": 1}
        event = sessionstore.events.parse_event(raw)

        assert isinstance(event, sessionstore.UsageRecorded)
        assert event.total_tokens == 6

    def test_error_names_the_nested_field(self) -> None:
        """A bad nested value is reported by its dotted path."""
        with pytest.raises(ValidationError) as caught:
            sessionstore.events.parse_event({"type": "session_started", "context_window": -5})

        assert caught.value.field == "context_window"

    def test_extra_fields_are_refused(self) -> None:
        """A misspelt field is an error, not silently dropped."""
        with pytest.raises(ValidationError, match="contxt"):
            sessionstore.events.parse_event(
                {"type": "usage_recorded", "input_tokens": 1, "output_tokens": 1, "contxt": 1}
            )


class TestPayload:
    def test_payload_excludes_envelope_fields_and_is_deterministic(self) -> None:
        """Equal events give identical bytes; event_id and type live in their own columns."""
        a = MessageAppended(role="user", content="x", message_uuid="m1")
        b = MessageAppended(role="user", content="x", message_uuid="m1")

        assert encode_event(a) == encode_event(b)
        assert "event_id" not in encode_event(a)
        assert '"type"' not in encode_event(a)

    @given(event=message_events())
    def test_encode_decode_round_trips(self, event: MessageAppended) -> None:
        """Any message survives encode -> decode unchanged, id included."""
        decoded = decode_event(event.type, event.SCHEMA_VERSION, encode_event(event), str(event.event_id))

        assert decoded == event


@register_event
class _NoteV2(Event):
    """A test-only event at schema version 2: version 1 had 'body' instead of 'text' and no 'lang'."""

    SCHEMA_VERSION: ClassVar[int] = 2
    type: Literal["test_note"] = "test_note"
    text: str
    lang: str


@register_upcaster("test_note", 1)
def _note_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    return {"text": payload["body"], "lang": "en"}


class TestUpcasting:
    def test_old_payload_is_upcast_on_read(self) -> None:
        """A version-1 payload reads as the current model."""
        event = decode_event("test_note", 1, '{"body":"hello"}', "00000000-0000-4000-8000-000000000001")

        assert event == _NoteV2(event_id=event.event_id, text="hello", lang="en")

    def test_newer_version_than_the_code_is_refused(self) -> None:
        """An event written by a newer sessionstore says to upgrade."""
        with pytest.raises(UnknownEventTypeError, match="upgrade sessionstore"):
            decode_event("test_note", 3, "{}", "00000000-0000-4000-8000-000000000001")

    def test_missing_upcaster_is_named(self) -> None:
        """A gap in the upcaster chain is an explicit error."""
        with pytest.raises(UnknownEventTypeError, match="no upcaster for 'session_started'"):
            decode_event("session_started", 0, "{}", "00000000-0000-4000-8000-000000000001")

    def test_unknown_stored_type_is_refused_on_decode(self) -> None:
        """Reading a type this version does not know is an explicit error."""
        with pytest.raises(UnknownEventTypeError, match="future_thing"):
            decode_event("future_thing", 1, "{}", "00000000-0000-4000-8000-000000000001")

    def test_type_names_cannot_be_registered_twice(self) -> None:
        """Two classes cannot claim one type."""

        class Clash(Event):
            type: Literal["test_note"] = "test_note"

        with pytest.raises(ValueError, match="already registered"):
            register_event(Clash)


@settings(
    max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batches=st.lists(st.lists(message_events(), min_size=0, max_size=4), min_size=1, max_size=5))
def test_append_then_read_round_trips_with_increasing_positions(batches: list[list[MessageAppended]]) -> None:
    """For any sequence of batches: events read back equal, seqs are 1..n, positions strictly increase."""
    with sessionstore.open_store(":memory:", token_counter=None) as store:
        sid = store.create_session().id
        appended: list[MessageAppended] = []
        for batch in batches:
            store.append(sid, batch, expected_seq=len(appended))
            appended.extend(batch)
        recorded = store.read(sid, verify=True)

    assert [r.event for r in recorded] == appended
    assert [r.seq for r in recorded] == list(range(1, len(appended) + 1))
    positions = [r.position for r in recorded]
    assert all(a < b for a, b in itertools.pairwise(positions))
