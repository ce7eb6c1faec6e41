"""The Google ADK bridge: ``SessionStoreSessionService`` on SQLite and PostgreSQL.

Each behaviour ADK's own session-service tests hold its services to (google/adk-python,
tests/unittests/sessions/test_session_service.py: the contract tests every backend runs, and the
stale-writer tests of ``DatabaseSessionService``) has a test here, written for this service, plus
what the bridge adds: one transaction per event, verify, erasure with receipts, and a
multi-turn ``Runner`` with a scripted model (tests/test_bridge_adk_runner.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError as AdkSessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.session import Session
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types

import sessionstore
from sessionstore.bridges.adk import (
    SessionStoreSessionService,
    app_stream_id,
    session_store_id,
    user_stream_id,
)
from sessionstore.errors import SessionErasedError, ValidationError
from sessionstore.store import LocalKeyProvider

from .conftest import Backend

Body = Callable[[SessionStoreSessionService], Awaitable[None]]
# google-adk 2.7 warns that features of its own it uses are experimental: not the bridge's to fix.
pytestmark = pytest.mark.filterwarnings(r"ignore:\[EXPERIMENTAL\] feature:UserWarning")

APP = "my_app"


def _run(backend: Backend, body: Body) -> None:
    """Run ``body`` with a service on a fresh async store of ``backend``."""

    async def main() -> None:
        store = await sessionstore.open_async_store(backend.url, migrate=True, token_counter=None)
        try:
            await body(SessionStoreSessionService(store))
        finally:
            await store.close()

    asyncio.run(main())


@pytest.fixture
def run(shared_backend: Backend) -> Callable[[Body], None]:
    """``run(body)``: the test's body on SQLite (a file) and on PostgreSQL."""
    return lambda body: _run(shared_backend, body)


def _delta(**state: Any) -> EventActions:
    return EventActions(state_delta=state)


def _state_event(invocation: str, delta: dict[str, Any], **kwargs: Any) -> Event:
    return Event(invocation_id=invocation, author="user", actions=EventActions(state_delta=delta), **kwargs)


class TestCreateGetDelete:
    def test_get_of_a_session_that_does_not_exist_is_none(self, run: Callable[[Body], None]) -> None:
        """ADK: test_get_empty_session."""

        async def body(service: SessionStoreSessionService) -> None:
            assert await service.get_session(app_name=APP, user_id="u", session_id="123") is None

        run(body)

    def test_create_get_delete_round_trip(self, run: Callable[[Body], None]) -> None:
        """ADK: test_create_get_session. Created, read back equal, deleted, then gone."""

        async def body(service: SessionStoreSessionService) -> None:
            session = await service.create_session(app_name=APP, user_id="u", state={"key": "value"})
            got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
            await service.delete_session(app_name=APP, user_id="u", session_id=session.id)
            gone = await service.get_session(app_name=APP, user_id="u", session_id=session.id)

            assert (session.app_name, session.user_id, session.state) == (APP, "u", {"key": "value"})
            assert session.id
            assert session.last_update_time <= time.time()
            assert got == session
            assert gone is None

        run(body)

    def test_an_existing_id_is_refused(self, run: Callable[[Body], None]) -> None:
        """ADK: test_create_session_with_existing_id_raises_error (and the padded duplicate)."""

        async def body(service: SessionStoreSessionService) -> None:
            await service.create_session(
                app_name=APP, user_id="u", session_id="s", state={"keep": "original"}
            )
            with pytest.raises(AlreadyExistsError):
                await service.create_session(app_name=APP, user_id="u", session_id="s")
            with pytest.raises(AlreadyExistsError):
                await service.create_session(app_name=APP, user_id="u", session_id="  s  ")
            kept = await service.get_session(app_name=APP, user_id="u", session_id="s")

            assert kept is not None
            assert kept.state == {"keep": "original"}

        run(body)

    def test_a_blank_id_gets_a_generated_one_and_padding_is_stripped(
        self, run: Callable[[Body], None]
    ) -> None:
        """ADK: test_create_session_with_blank_id_generates_one, test_padded_session_id_reads_and_deletes."""

        async def body(service: SessionStoreSessionService) -> None:
            blank = await service.create_session(app_name=APP, user_id="u", session_id="   ")
            padded = await service.create_session(app_name=APP, user_id="u", session_id="  p  ")
            read = await service.get_session(app_name=APP, user_id="u", session_id=" p ")
            await service.delete_session(app_name=APP, user_id="u", session_id=" p")

            assert blank.id.strip() == blank.id != ""
            assert padded.id == "p"
            assert read is not None
            assert await service.get_session(app_name=APP, user_id="u", session_id="p") is None

        run(body)

    def test_concurrent_creates_of_one_id_leave_one_session(self, run: Callable[[Body], None]) -> None:
        """ADK: test_create_session_concurrent_same_id_raises_already_exists_error."""

        async def body(service: SessionStoreSessionService) -> None:
            await service.create_session(app_name=APP, user_id="u", session_id="warmup")
            for i in range(3):
                sid = f"race-{i}"
                results = await asyncio.gather(
                    service.create_session(app_name=APP, user_id="u", session_id=sid),
                    service.create_session(app_name=APP, user_id="u", session_id=sid),
                    return_exceptions=True,
                )
                errors = [r for r in results if isinstance(r, BaseException)]
                made = [r for r in results if isinstance(r, Session)]

                assert len(made) == 1
                assert len(errors) == 1
                assert isinstance(errors[0], AlreadyExistsError)
                assert sid in str(errors[0])

        run(body)

    def test_the_same_session_id_for_two_users_is_two_sessions(self, run: Callable[[Body], None]) -> None:
        """ADK: test_get_session_respects_user_id."""

        async def body(service: SessionStoreSessionService) -> None:
            first = await service.create_session(app_name=APP, user_id="u1", session_id="s1")
            await service.append_event(first, Event(invocation_id="inv1", author="user"))
            await service.create_session(app_name=APP, user_id="u2", session_id="s1")
            second = await service.get_session(app_name=APP, user_id="u2", session_id="s1")

            assert second is not None
            assert second.user_id == "u2"
            assert second.events == []

        run(body)

    def test_a_name_the_store_cannot_hold_is_a_validation_error(self, run: Callable[[Body], None]) -> None:
        """An app name with a control character is refused, naming the argument; nothing is stored."""

        async def body(service: SessionStoreSessionService) -> None:
            with pytest.raises(ValidationError, match="app_name"):
                await service.create_session(app_name="bad\napp", user_id="u")

            assert (await service.list_sessions(app_name="bad app")).sessions == []

        run(body)


class TestListSessions:
    def test_lists_a_users_sessions_with_their_state(self, run: Callable[[Body], None]) -> None:
        """ADK: test_create_and_list_sessions."""

        async def body(service: SessionStoreSessionService) -> None:
            ids = [f"session{i}" for i in range(5)]
            for sid in ids:
                await service.create_session(
                    app_name=APP, user_id="u", session_id=sid, state={"key": "v" + sid}
                )
            listed = (await service.list_sessions(app_name=APP, user_id="u")).sessions

            assert {s.id for s in listed} == set(ids)
            assert all(s.state == {"key": "v" + s.id} for s in listed)
            assert all(s.events == [] for s in listed)

        run(body)

    def test_least_recently_updated_comes_first(self, run: Callable[[Body], None]) -> None:
        """ADK: test_list_sessions_ordered_by_last_update_time."""

        async def body(service: SessionStoreSessionService) -> None:
            for sid in ("a", "b", "c"):
                await service.create_session(app_name=APP, user_id="u", session_id=sid)
            a = await service.get_session(app_name=APP, user_id="u", session_id="a")
            assert a is not None
            await service.append_event(a, Event(invocation_id="i", author="user", timestamp=time.time() + 1))

            assert [s.id for s in (await service.list_sessions(app_name=APP, user_id="u")).sessions] == [
                "b",
                "c",
                "a",
            ]

        run(body)

    def test_without_a_user_every_users_sessions_are_listed(self, run: Callable[[Body], None]) -> None:
        """ADK: test_list_sessions_all_users. The state streams are not listed as sessions."""

        async def body(service: SessionStoreSessionService) -> None:
            for user, sid in (("u1", "s1a"), ("u1", "s1b"), ("u2", "s2a")):
                await service.create_session(app_name=APP, user_id=user, session_id=sid, state={"key": sid})
            await service.create_session(app_name="other", user_id="u1", session_id="elsewhere")
            u1 = (await service.list_sessions(app_name=APP, user_id="u1")).sessions
            u2 = (await service.list_sessions(app_name=APP, user_id="u2")).sessions
            everyone = (await service.list_sessions(app_name=APP)).sessions

            assert sorted(s.id for s in u1) == ["s1a", "s1b"]
            assert [s.id for s in u2] == ["s2a"]
            assert sorted(s.id for s in everyone) == ["s1a", "s1b", "s2a"]
            assert all(s.state == {"key": s.id} for s in everyone)

        run(body)


class TestState:
    def test_app_state_is_shared_by_every_user_of_the_app(self, run: Callable[[Body], None]) -> None:
        """ADK: test_app_state_is_shared_by_all_users_of_app."""

        async def body(service: SessionStoreSessionService) -> None:
            s1 = await service.create_session(
                app_name=APP, user_id="u1", session_id="s1", state={"app:k1": "v1"}
            )
            await service.append_event(s1, _state_event("inv1", {"app:k2": "v2"}))
            s2 = await service.create_session(app_name=APP, user_id="u2", session_id="s2")
            again = await service.get_session(app_name=APP, user_id="u1", session_id="s1")
            other_app = await service.create_session(app_name="other", user_id="u1")

            assert s2.state == {"app:k1": "v1", "app:k2": "v2"}
            assert again is not None
            assert again.state == {"app:k1": "v1", "app:k2": "v2"}
            assert other_app.state == {}

        run(body)

    def test_user_state_is_shared_only_by_the_users_sessions(self, run: Callable[[Body], None]) -> None:
        """ADK: test_user_state_is_shared_only_by_user_sessions."""

        async def body(service: SessionStoreSessionService) -> None:
            s1 = await service.create_session(
                app_name=APP, user_id="u1", session_id="s1", state={"user:k1": "v1"}
            )
            await service.append_event(s1, _state_event("inv1", {"user:k2": "v2"}))
            s1b = await service.create_session(app_name=APP, user_id="u1", session_id="s1b")
            s2 = await service.create_session(app_name=APP, user_id="u2", session_id="s2")

            assert s1b.state == {"user:k1": "v1", "user:k2": "v2"}
            assert s2.state == {}

        run(body)

    def test_session_state_is_not_shared(self, run: Callable[[Body], None]) -> None:
        """ADK: test_session_state_is_not_shared, test_session_state (mixed scopes in one delta)."""

        async def body(service: SessionStoreSessionService) -> None:
            s1 = await service.create_session(
                app_name=APP, user_id="u1", session_id="s1", state={"sk1": "v1"}
            )
            delta = {"app:key": "a", "user:key1": "u", "temp:key": "t", "sk2": "v2"}
            await service.append_event(s1, _state_event("inv1", delta))
            got = await service.get_session(app_name=APP, user_id="u1", session_id="s1")
            s1b = await service.create_session(app_name=APP, user_id="u1", session_id="s1b")

            assert got is not None
            assert got.state == {"sk1": "v1", "sk2": "v2", "app:key": "a", "user:key1": "u"}
            assert s1.state == {"sk1": "v1", "sk2": "v2", "app:key": "a", "user:key1": "u", "temp:key": "t"}
            assert s1b.state == {"app:key": "a", "user:key1": "u"}

        run(body)

    def test_a_dict_value_replaces_the_stored_one(self, run: Callable[[Body], None]) -> None:
        """ADK: test_dict_valued_state_delta_replaces_stored_value and its app: twin."""

        async def body(service: SessionStoreSessionService) -> None:
            state = {"profile": {"name": "ada", "role": "admin"}, "app:cfg": {"name": "ada", "role": "x"}}
            s1 = await service.create_session(app_name=APP, user_id="u1", session_id="s1", state=state)
            await service.append_event(
                s1, _state_event("inv1", {"profile": {"name": "bob"}, "app:cfg": {"n": 2}})
            )
            got = await service.get_session(app_name=APP, user_id="u1", session_id="s1")
            s2 = await service.create_session(app_name=APP, user_id="u2", session_id="s2")

            assert got is not None
            assert got.state["profile"] == s1.state["profile"] == {"name": "bob"}
            assert s2.state["app:cfg"] == s1.state["app:cfg"] == {"n": 2}

        run(body)

    def test_a_none_value_is_stored_not_dropped(self, run: Callable[[Body], None]) -> None:
        """ADK: test_none_valued_state_delta_is_stored_not_dropped and its user: twin."""

        async def body(service: SessionStoreSessionService) -> None:
            state = {"flag": True, "user:pref": "dark"}
            s1 = await service.create_session(app_name=APP, user_id="u1", session_id="s1", state=state)
            await service.append_event(s1, _state_event("inv1", {"flag": None, "user:pref": None}))
            got = await service.get_session(app_name=APP, user_id="u1", session_id="s1")
            s1b = await service.create_session(app_name=APP, user_id="u1", session_id="s1b")

            assert got is not None
            assert got.state == {"flag": None, "user:pref": None}
            assert s1b.state == {"user:pref": None}

        run(body)

    def test_a_boolean_survives_an_unrelated_delta(self, run: Callable[[Body], None]) -> None:
        """ADK: test_boolean_state_survives_unrelated_state_delta."""

        async def body(service: SessionStoreSessionService) -> None:
            s1 = await service.create_session(
                app_name=APP, user_id="u1", session_id="s1", state={"flag": False}
            )
            await service.append_event(s1, _state_event("inv1", {"new_flag": True}))
            got = await service.get_session(app_name=APP, user_id="u1", session_id="s1")

            assert got is not None
            assert got.state["flag"] is False
            assert got.state["new_flag"] is True

        run(body)

    def test_temp_state_reaches_the_session_object_but_is_never_stored(
        self, run: Callable[[Body], None]
    ) -> None:
        """ADK: test_temp_state_is_not_persisted_in_state_or_events and
        test_temp_state_visible_across_sequential_events."""

        async def body(service: SessionStoreSessionService) -> None:
            session = await service.create_session(app_name=APP, user_id="u1", session_id="s1")
            first = _state_event("inv1", {"temp:k1": "v1", "sk": "v2"})
            await service.append_event(session, first)
            second = _state_event("inv1", {"temp:out": "from agent 1"})
            await service.append_event(session, second)
            got = await service.get_session(app_name=APP, user_id="u1", session_id="s1")

            assert session.state["temp:k1"] == "v1"
            assert session.state["temp:out"] == "from agent 1"
            assert first.actions.state_delta == {"sk": "v2"}
            assert second.actions.state_delta == {}
            assert got is not None
            assert got.state == {"sk": "v2"}
            assert [e.actions.state_delta for e in got.events] == [{"sk": "v2"}, {}]

        run(body)

    def test_a_value_json_cannot_hold_is_stored_as_its_text(self, run: Callable[[Body], None]) -> None:
        """ADK: test_append_event_with_non_serializable_state_delta."""

        async def body(service: SessionStoreSessionService) -> None:
            session = await service.create_session(app_name=APP, user_id="u")
            await service.append_event(session, _state_event("inv", {"callback": lambda: 1, "ok": 2}))
            got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)

            assert got is not None
            assert len(got.events) == 1
            assert got.state["ok"] == 2
            assert isinstance(got.state["callback"], str)

        run(body)

    def test_initial_app_and_user_state_go_to_their_scopes(self, run: Callable[[Body], None]) -> None:
        """``create_session`` state with app:/user:/temp: keys: scoped, shared, temp dropped."""

        async def body(service: SessionStoreSessionService) -> None:
            state = {"app:a": "av", "user:u": "uv", "sk": "sv", "temp:t": "tv"}
            made = await service.create_session(app_name=APP, user_id="u1", session_id="s1", state=state)
            later = await service.create_session(app_name=APP, user_id="u1", session_id="s2")

            assert made.state == {"app:a": "av", "user:u": "uv", "sk": "sv"}
            assert later.state == {"app:a": "av", "user:u": "uv"}

        run(body)


class TestUserState:
    def test_get_user_state(self, run: Callable[[Body], None]) -> None:
        """ADK: the test_get_user_state_* tests: empty, written, latest, per user, per app."""

        async def body(service: SessionStoreSessionService) -> None:
            empty = await service.get_user_state(app_name=APP, user_id="u1")
            session = await service.create_session(app_name=APP, user_id="u1")
            await service.append_event(
                session, _state_event("i", {"user:profile": {"name": "Alice"}, "sk": 1})
            )
            await service.append_event(session, _state_event("i", {"user:counter": 1}))
            await service.append_event(session, _state_event("i", {"user:counter": 2}))

            assert empty == {}
            assert await service.get_user_state(app_name=APP, user_id="u1") == {
                "profile": {"name": "Alice"},
                "counter": 2,
            }
            assert await service.get_user_state(app_name=APP, user_id="u2") == {}
            assert await service.get_user_state(app_name="other_app", user_id="u1") == {}

        run(body)


class TestAppendEvent:
    def test_bytes_round_trip(self, run: Callable[[Body], None]) -> None:
        """ADK: test_append_event_bytes (inline data and grounding metadata's blob)."""

        async def body(service: SessionStoreSessionService) -> None:
            session = await service.create_session(app_name=APP, user_id="u")
            content = types.Content(
                role="user", parts=[types.Part.from_bytes(data=b"test_image_data", mime_type="image/png")]
            )
            grounding = types.GroundingMetadata(
                search_entry_point=types.SearchEntryPoint(sdk_blob=b"test_sdk_blob")
            )
            event = Event(invocation_id="inv", author="user", content=content, grounding_metadata=grounding)
            await service.append_event(session, event)
            got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)

            assert got is not None
            assert got.events[0].content == content
            assert got.events[0].grounding_metadata == grounding

        run(body)

    def test_every_event_field_round_trips(self, run: Callable[[Body], None]) -> None:
        """ADK: test_append_event_complete and test_append_event_with_requested_tool_confirmations."""

        async def body(service: SessionStoreSessionService) -> None:
            session = await service.create_session(app_name=APP, user_id="u")
            event = Event(
                invocation_id="invocation",
                author="user",
                content=types.Content(role="user", parts=[types.Part(text="test_text")]),
                turn_complete=True,
                partial=False,
                actions=EventActions(
                    artifact_delta={"file": 0},
                    transfer_to_agent="agent",
                    escalate=True,
                    requested_tool_confirmations={
                        "tool_call_1": ToolConfirmation(
                            hint="hint", confirmed=False, payload={"id": "album_1"}
                        )
                    },
                ),
                long_running_tool_ids={"tool1"},
                error_code="error_code",
                error_message="error_message",
                interrupted=True,
                grounding_metadata=types.GroundingMetadata(web_search_queries=["query1"]),
                usage_metadata=types.GenerateContentResponseUsageMetadata(
                    prompt_token_count=1, candidates_token_count=1, total_token_count=2
                ),
                citation_metadata=types.CitationMetadata(),
                custom_metadata={"custom_key": "custom_value"},
                timestamp=1700000000.123,
                input_transcription=types.Transcription(text="in", finished=True),
                output_transcription=types.Transcription(text="out", finished=True),
            )
            await service.append_event(session, event)
            got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)

            assert got == session
            assert got.events[0].actions.requested_tool_confirmations["tool_call_1"].payload == {
                "id": "album_1"
            }

        run(body)

    def test_last_update_time_is_the_last_events_timestamp(self, run: Callable[[Body], None]) -> None:
        """ADK: test_session_last_update_time_updates_on_event."""

        async def body(service: SessionStoreSessionService) -> None:
            session = await service.create_session(app_name=APP, user_id="u")
            created = session.last_update_time
            await service.append_event(
                session, Event(invocation_id="i", author="user", timestamp=created + 10)
            )
            got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)

            assert session.last_update_time == created + 10
            assert got is not None
            assert got.last_update_time == created + 10

        run(body)

    def test_timestamps_read_back_exactly_and_in_append_order(self, run: Callable[[Body], None]) -> None:
        """ADK: test_get_session_keeps_exact_epoch_across_a_repeated_local_hour. Events sharing a
        timestamp come back in the order they were appended (ADK's database service sorts such a
        tie by event id instead; docs/bridges/adk.md)."""

        async def body(service: SessionStoreSessionService) -> None:
            session = await service.create_session(app_name=APP, user_id="u")
            for epoch in (1730613600.0, 1730615400.0):
                await service.append_event(session, Event(author="user", timestamp=epoch))
            for event_id in ("event_z", "event_a"):
                await service.append_event(session, Event(author="user", id=event_id, timestamp=100.0))
            got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)

            assert got is not None
            assert [e.timestamp for e in got.events] == [1730613600.0, 1730615400.0, 100.0, 100.0]
            assert [e.id for e in got.events[2:]] == ["event_z", "event_a"]

        run(body)

    def test_partial_events_are_not_stored(self, run: Callable[[Body], None]) -> None:
        """ADK: test_partial_events_are_not_persisted."""

        async def body(service: SessionStoreSessionService) -> None:
            session = await service.create_session(app_name=APP, user_id="u")
            await service.append_event(session, Event(author="user", partial=True))
            got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)

            assert session.events == []
            assert got is not None
            assert got.events == []

        run(body)

    def test_appending_to_a_deleted_or_unknown_session_raises_session_not_found(
        self, run: Callable[[Body], None]
    ) -> None:
        """ADK: test_append_event_to_deleted_session_raises_session_not_found and the unknown twin."""

        async def body(service: SessionStoreSessionService) -> None:
            session = await service.create_session(app_name=APP, user_id="u")
            await service.delete_session(app_name=APP, user_id="u", session_id=session.id)
            with pytest.raises(AdkSessionNotFoundError):
                await service.append_event(session, Event(invocation_id="inv1", author="user"))
            with pytest.raises(AdkSessionNotFoundError):
                await service.append_event(
                    Session(app_name=APP, user_id="u", id="never_created"), Event(author="user")
                )

        run(body)

    def test_a_redelivered_event_is_stored_and_applied_once(self, run: Callable[[Body], None]) -> None:
        """ADK: test_append_event_is_idempotent_for_same_event_id (same object, and an equal copy)."""

        async def body(service: SessionStoreSessionService) -> None:
            session = await service.create_session(app_name=APP, user_id="u", session_id="dup")
            event = _state_event("inv", {"counter": 1, "user:seen": 1})
            await service.append_event(session, event)
            await service.append_event(session, event)
            await service.append_event(session, event.model_copy(deep=True))
            got = await service.get_session(app_name=APP, user_id="u", session_id="dup")
            user_stream = await service.store.read(user_stream_id(APP, "u"))

            assert got is not None
            assert [e.id for e in got.events] == [event.id]
            assert len(session.events) == 1
            assert [e.type for e in user_stream] == ["adk_state_changed"]

        run(body)


class TestStaleSessions:
    def test_a_stale_session_object_is_refused(self, run: Callable[[Body], None]) -> None:
        """ADK: test_append_event_to_stale_session. Two session objects; the older one loses."""

        async def body(service: SessionStoreSessionService) -> None:
            now = time.time()
            original = await service.create_session(app_name=APP, user_id="u")
            await service.append_event(original, _state_event("inv1", {"sk1": "v1"}, timestamp=now + 1))
            updated = await service.get_session(app_name=APP, user_id="u", session_id=original.id)
            assert updated is not None
            await service.append_event(updated, _state_event("inv2", {"sk2": "v2"}, timestamp=now + 2))
            with pytest.raises(StaleSessionError, match="modified in storage"):
                await service.append_event(original, _state_event("inv3", {"sk3": "v3"}, timestamp=now + 3))
            final = await service.get_session(app_name=APP, user_id="u", session_id=original.id)

            assert original.last_update_time < updated.last_update_time
            assert final is not None
            assert [e.invocation_id for e in final.events] == ["inv1", "inv2"]
            assert final.state == {"sk1": "v1", "sk2": "v2"}
            assert len(original.events) == 1

        run(body)

    def test_a_stale_session_writes_no_app_or_user_state(self, run: Callable[[Body], None]) -> None:
        """The refused event's app: and user: changes are not stored either (one transaction)."""

        async def body(service: SessionStoreSessionService) -> None:
            first = await service.create_session(app_name=APP, user_id="u", session_id="s")
            second = first.model_copy(deep=True)
            await service.append_event(first, Event(author="user"))
            with pytest.raises(StaleSessionError):
                await service.append_event(second, _state_event("late", {"app:k": 1, "user:k": 2}))

            assert await service.store.read(app_stream_id(APP)) == []
            assert await service.get_user_state(app_name=APP, user_id="u") == {}

        run(body)

    def test_concurrent_writers_of_one_revision_one_wins(self, run: Callable[[Body], None]) -> None:
        """ADK: test_append_event_concurrent_stale_sessions_reject_stale_writer."""

        async def body(service: SessionStoreSessionService) -> None:
            session = await service.create_session(app_name=APP, user_id="u")
            rounds = 4
            for i in range(rounds):
                latest = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
                assert latest is not None
                one, two = latest.model_copy(deep=True), latest.model_copy(deep=True)
                results = await asyncio.gather(
                    service.append_event(one, _state_event(f"inv{i}-1", {f"sk{i}-1": 1})),
                    service.append_event(two, _state_event(f"inv{i}-2", {f"sk{i}-2": 2})),
                    return_exceptions=True,
                )
                errors = [r for r in results if isinstance(r, BaseException)]

                assert len(errors) == 1
                assert isinstance(errors[0], StaleSessionError)
            final = await service.get_session(app_name=APP, user_id="u", session_id=session.id)

            assert final is not None
            assert len(final.events) == rounds
            assert len(final.state) == rounds

        run(body)

    def test_two_services_on_one_database_see_each_others_writes_as_newer(
        self, shared_backend: Backend
    ) -> None:
        """Two processes' services: a session object loaded by one is stale after the other appends."""

        async def main() -> None:
            a_store = await sessionstore.open_async_store(
                shared_backend.url, migrate=True, token_counter=None
            )
            b_store = await sessionstore.open_async_store(shared_backend.url, token_counter=None)
            try:
                a, b = SessionStoreSessionService(a_store), SessionStoreSessionService(b_store)
                session = await a.create_session(app_name=APP, user_id="u", session_id="s")
                other = await b.get_session(app_name=APP, user_id="u", session_id="s")
                assert other is not None
                await b.append_event(other, Event(author="user"))
                with pytest.raises(StaleSessionError):
                    await a.append_event(session, Event(author="user"))
                fresh = await a.get_session(app_name=APP, user_id="u", session_id="s")
                assert fresh is not None
                await a.append_event(fresh, Event(author="user"))

                assert len(fresh.events) == 2
            finally:
                await a_store.close()
                await b_store.close()

        asyncio.run(main())

    def test_a_session_object_without_a_marker_is_checked_by_its_last_event(
        self, run: Callable[[Body], None]
    ) -> None:
        """ADK: test_append_event_allows_markerless_current_session. A session object this service
        did not load (no revision marker) may append while its last event is the stored last."""

        async def body(service: SessionStoreSessionService) -> None:
            session = await service.create_session(app_name=APP, user_id="u", session_id="s")
            await service.append_event(session, Event(invocation_id="inv1", author="user"))
            current = Session(app_name=APP, user_id="u", id="s", events=list(session.events))
            await service.append_event(current, Event(invocation_id="inv2", author="user"))
            behind = Session(app_name=APP, user_id="u", id="s", events=list(session.events))
            with pytest.raises(StaleSessionError):
                await service.append_event(behind, Event(invocation_id="inv3", author="user"))
            got = await service.get_session(app_name=APP, user_id="u", session_id="s")

            assert got is not None
            assert [e.invocation_id for e in got.events] == ["inv1", "inv2"]

        run(body)


class TestGetSessionConfig:
    def test_recent_events_and_after_timestamp(self, run: Callable[[Body], None]) -> None:
        """ADK: test_get_session_with_config (0, the last 3, after a timestamp, both)."""

        async def body(service: SessionStoreSessionService) -> None:
            base = int(time.time())
            session = await service.create_session(app_name=APP, user_id="u")
            for i in range(1, 6):
                await service.append_event(session, Event(author="user", timestamp=base + i))

            async def stamps(**config: Any) -> list[float]:
                got = await service.get_session(
                    app_name=APP, user_id="u", session_id=session.id, config=GetSessionConfig(**config)
                )
                assert got is not None
                return [e.timestamp for e in got.events]

            assert len(await stamps()) == 5
            assert await stamps(num_recent_events=0) == []
            assert await stamps(num_recent_events=3) == [base + 3, base + 4, base + 5]
            assert await stamps(after_timestamp=base + 4) == [base + 4, base + 5]
            assert await stamps(after_timestamp=base + 50) == []
            assert await stamps(after_timestamp=base + 4, num_recent_events=3) == [base + 4, base + 5]

        run(body)

    def test_the_state_is_the_whole_logs_even_for_recent_events(self, run: Callable[[Body], None]) -> None:
        """Filtering events never filters state: state is the fold of the whole log."""

        async def body(service: SessionStoreSessionService) -> None:
            session = await service.create_session(app_name=APP, user_id="u")
            await service.append_event(session, _state_event("i", {"early": 1}))
            await service.append_event(session, _state_event("i", {"late": 2}))
            got = await service.get_session(
                app_name=APP, user_id="u", session_id=session.id, config=GetSessionConfig(num_recent_events=1)
            )

            assert got is not None
            assert got.state == {"early": 1, "late": 2}
            assert len(got.events) == 1

        run(body)


class TestTheStoreUnderneath:
    def test_every_event_and_state_change_is_in_a_verified_log(self, run: Callable[[Body], None]) -> None:
        """The session's log and both state streams verify; each holds what was appended."""

        async def body(service: SessionStoreSessionService) -> None:
            session = await service.create_session(app_name=APP, user_id="u", session_id="s", state={"k": 0})
            await service.append_event(session, _state_event("inv", {"k": 1, "app:a": 2, "user:b": 3}))
            store = service.store
            sid = session_store_id(APP, "u", "s")
            info = await store.get_session(sid)
            reports = [await store.verify(s) for s in (sid, app_stream_id(APP), user_stream_id(APP, "u"))]

            assert (info.tenant, info.user, info.external_id) == (APP, "u", "s")
            assert [e.type for e in await store.read(sid)] == ["adk_session_created", "adk_event_recorded"]
            assert [r.ok for r in reports] == [True, True, True]
            assert [r.events_checked for r in reports] == [2, 1, 1]

        run(body)

    def test_delete_erases_with_a_receipt_and_nothing_is_readable(self, run: Callable[[Body], None]) -> None:
        """delete_session is erasure: the log is gone, verify shows the receipt, the id stays used."""

        async def body(service: SessionStoreSessionService) -> None:
            session = await service.create_session(app_name=APP, user_id="u", session_id="s")
            await service.append_event(session, _state_event("inv", {"secret": "s3cret", "user:kept": 1}))
            receipts = await service.erase_session(
                app_name=APP, user_id="u", session_id="s", reason="user asked to be forgotten"
            )
            again = await service.erase_session(app_name=APP, user_id="u", session_id="s")
            sid = session_store_id(APP, "u", "s")
            with pytest.raises(SessionErasedError):
                await service.store.read(sid)
            payloads = [e.payload for e in await service.store.read_all(0, 1000) if e.session_id == sid]
            report = await service.store.verify(sid)
            with pytest.raises(AlreadyExistsError, match="deleted"):
                await service.create_session(app_name=APP, user_id="u", session_id="s")

            assert [r.session_id for r in receipts] == [sid]
            assert receipts[0].reason == "user asked to be forgotten"
            assert receipts[0].event_count == 2
            assert again == receipts
            assert payloads == []
            assert report.ok
            assert report.erasure == receipts[0]
            assert await service.get_session(app_name=APP, user_id="u", session_id="s") is None
            assert await service.get_user_state(app_name=APP, user_id="u") == {"kept": 1}

        run(body)

    def test_erase_user_erases_their_sessions_and_user_state(self, run: Callable[[Body], None]) -> None:
        """erase_user: every session of the user and the user-state stream; others untouched."""

        async def body(service: SessionStoreSessionService) -> None:
            for sid in ("a", "b"):
                await service.create_session(app_name=APP, user_id="u1", session_id=sid, state={"user:x": 1})
            await service.create_session(app_name=APP, user_id="u2", session_id="c", state={"user:x": 2})
            receipts = await service.erase_user(app_name=APP, user_id="u1")

            assert sorted(r.session_id for r in receipts) == sorted(
                [
                    session_store_id(APP, "u1", "a"),
                    session_store_id(APP, "u1", "b"),
                    user_stream_id(APP, "u1"),
                ]
            )
            assert (await service.list_sessions(app_name=APP, user_id="u1")).sessions == []
            assert await service.get_user_state(app_name=APP, user_id="u1") == {}
            assert await service.get_user_state(app_name=APP, user_id="u2") == {"x": 2}

        run(body)

    def test_a_user_erased_can_come_back_with_new_user_state(self, run: Callable[[Body], None]) -> None:
        """After erase_user, the same user id starts afresh: new sessions and user: state work, none
        of the erased state shows, and the new state stream verifies."""

        async def body(service: SessionStoreSessionService) -> None:
            await service.create_session(app_name=APP, user_id="u", session_id="old", state={"user:x": 1})
            await service.erase_user(app_name=APP, user_id="u")
            back = await service.create_session(
                app_name=APP, user_id="u", session_id="new", state={"user:y": 2}
            )
            created_with = dict(back.state)
            await service.append_event(back, _state_event("inv", {"user:z": 3}))
            other = SessionStoreSessionService(service.store)  # another process: nothing cached

            assert created_with == {"user:y": 2}
            assert await other.get_user_state(app_name=APP, user_id="u") == {"y": 2, "z": 3}
            assert (await service.store.verify(user_stream_id(APP, "u", 1))).events_checked == 2

        run(body)

    def test_a_user_erased_by_another_process_is_seen_as_erased(self, run: Callable[[Body], None]) -> None:
        """A service that used a user's state stream before another service erased the user writes
        and reads the user's new state stream afterwards, not the erased one."""

        async def body(service: SessionStoreSessionService) -> None:
            session = await service.create_session(
                app_name=APP, user_id="u", session_id="s", state={"user:x": 1}
            )
            other = SessionStoreSessionService(service.store)
            await other.erase_user(app_name=APP, user_id="u")
            back = await service.create_session(
                app_name=APP, user_id="u", session_id="t", state={"user:z": 3}
            )
            with pytest.raises(AdkSessionNotFoundError):
                await service.append_event(session, _state_event("inv", {"user:y": 2}))
            await other.erase_user(app_name=APP, user_id="u")
            after = await service.get_user_state(app_name=APP, user_id="u")

            assert back.state == {"user:z": 3}
            assert after == {}

        run(body)

    def test_state_stays_right_when_the_caches_are_full(
        self, run: Callable[[Body], None], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With room for two entries per cache, three users' and two apps' state still reads right."""
        monkeypatch.setattr("sessionstore.bridges.adk._service._CACHED", 2)

        async def body(service: SessionStoreSessionService) -> None:
            for round_ in range(2):
                for app in ("a1", "a2"):
                    for user in ("u1", "u2", "u3"):
                        session = await service.create_session(
                            app_name=app,
                            user_id=user,
                            state={"app:n": round_, "user:who": f"{app}/{user}/{round_}"},
                        )
                        await service.append_event(session, _state_event("i", {"user:seen": round_}))
            states = [
                await service.get_user_state(app_name=app, user_id=user)
                for app in ("a1", "a2")
                for user in ("u1", "u2", "u3")
            ]
            listed = (await service.list_sessions(app_name="a2", user_id="u3")).sessions

            assert states == [
                {"who": f"{app}/{user}/1", "seen": 1} for app in ("a1", "a2") for user in ("u1", "u2", "u3")
            ]
            assert [s.state for s in listed] == [{"app:n": 1, "user:who": "a2/u3/1", "user:seen": 1}] * 2
            assert len(service._folded) <= 2

        run(body)

    def test_an_encrypted_store_shreds_a_deleted_session(self, shared_backend: Backend) -> None:
        """In an encrypting store the session's events are sealed; delete destroys its key: the
        ciphertext stays and still verifies against the receipt, and nothing decrypts it."""

        async def main() -> None:
            store = await sessionstore.open_async_store(
                shared_backend.url, migrate=True, token_counter=None, encryption=LocalKeyProvider(bytes(32))
            )
            try:
                service = SessionStoreSessionService(store)
                session = await service.create_session(app_name=APP, user_id="u", session_id="s")
                await service.append_event(session, _state_event("inv", {"secret": "s3cret"}))
                sid = session_store_id(APP, "u", "s")
                stored = await store.read_stored(sid)
                sealed = [e.stored_payload or e.payload for e in stored]
                hashes = [e.hash for e in stored]
                await service.delete_session(app_name=APP, user_id="u", session_id="s")
                left = await store.read_stored(sid)
                report = await store.verify(sid)
                with pytest.raises(SessionErasedError):
                    await store.read(sid)

                assert len(sealed) == 2
                assert all("s3cret" not in p for p in sealed)
                assert [e.hash for e in left] == hashes
                assert report.ok
                assert report.erasure is not None
                assert report.erasure.method == "shredded"
                assert await service.get_session(app_name=APP, user_id="u", session_id="s") is None
            finally:
                await store.close()

        asyncio.run(main())

    def test_two_services_create_the_first_sessions_of_a_user_at_once(self, shared_backend: Backend) -> None:
        """Two processes' services racing to make a new app's and user's state streams both succeed."""

        async def main() -> None:
            stores = [
                await sessionstore.open_async_store(shared_backend.url, migrate=True, token_counter=None)
                for _ in range(2)
            ]
            try:
                a, b = (SessionStoreSessionService(s) for s in stores)
                made = await asyncio.gather(
                    a.create_session(app_name="new_app", user_id="u", session_id="x", state={"user:k": 1}),
                    b.create_session(app_name="new_app", user_id="u", session_id="y", state={"app:k": 2}),
                )
                listed = (await a.list_sessions(app_name="new_app", user_id="u")).sessions

                assert [s.id for s in made] == ["x", "y"]
                assert sorted(s.id for s in listed) == ["x", "y"]
                assert all(s.state == {"user:k": 1, "app:k": 2} for s in listed)
            finally:
                for store in stores:
                    await store.close()

        asyncio.run(main())

    def test_the_service_needs_an_async_store(self, tmp_path: Any) -> None:
        """A sync store is refused with a clear error (ADK's service is async)."""
        store = sessionstore.open_store(tmp_path / "s.db", migrate=True)
        try:
            with pytest.raises(ValidationError, match="open_async_store"):
                SessionStoreSessionService(store)  # type: ignore[arg-type]
        finally:
            store.close()
