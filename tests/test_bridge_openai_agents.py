"""``SessionStoreSession`` on its own: the SDK's ``Session`` behaviours, and what the store adds.

``TestSQLiteSessionBehaviours`` reproduces, on this session, each behaviour the SDK's suite
checks of its own ``SQLiteSession`` (openai-agents-python tests/memory/test_session.py). Not
reproduced, because the store has no such thing: ``close`` (the session does not own the store)
and rows of invalid JSON (the store refuses them on write; ``verify`` finds a row altered later).
Every test runs on SQLite and PostgreSQL, with the async and the sync store.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import SessionSettings

from sessionstore.audit import audit
from sessionstore.bridges.openai_agents import SessionStoreSession, agents_session_id, fold_items
from sessionstore.errors import SessionErasedError, ValidationError
from sessionstore.store import AsyncSessionStore

from ._openai_agents import AnyStore, Stores
from .conftest import SHARED_BACKENDS, _make_backend


@pytest.fixture(params=SHARED_BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    yield from _make_backend(request.param, tmp_path)


@pytest.fixture(params=["async", "sync"])
def stores(request: pytest.FixtureRequest, database: Any) -> Stores:
    return Stores(database, request.param)


def _said(*texts: str, role: str = "user") -> list[Any]:
    return [{"role": role, "content": text} for text in texts]


def _contents(items: list[Any]) -> list[Any]:
    return [item.get("content") for item in items]


async def _on_store(store: AnyStore, fn: Any) -> Any:
    """``fn(sync_store)`` on either kind of store."""
    if isinstance(store, AsyncSessionStore):
        return await store.run_sync(fn)
    return fn(store)


class TestSQLiteSessionBehaviours:
    def test_added_items_come_back_and_clear_removes_them(self, stores: Stores) -> None:
        async def body(store: AnyStore) -> Any:
            session = SessionStoreSession("direct", store)
            await session.add_items([*_said("Hello"), *_said("Hi there!", role="assistant")])
            before = await session.get_items()
            await session.clear_session()
            return before, await session.get_items()

        before, after = stores.run(body)

        assert [(i["role"], i["content"]) for i in before] == [("user", "Hello"), ("assistant", "Hi there!")]
        assert after == []

    def test_pop_item_returns_the_newest_until_none_are_left(self, stores: Stores) -> None:
        async def body(store: AnyStore) -> Any:
            session = SessionStoreSession("pop", store)
            empty = await session.pop_item()
            await session.add_items(_said("Hello", "Hi there!", "How are you?"))
            popped = [await session.pop_item() for _ in range(4)]
            return empty, popped, await session.get_items()

        empty, popped, left = stores.run(body)

        assert empty is None
        assert _contents(popped[:3]) == ["How are you?", "Hi there!", "Hello"]
        assert popped[3] is None
        assert left == []

    def test_pop_item_leaves_other_sessions_alone(self, stores: Stores) -> None:
        async def body(store: AnyStore) -> Any:
            one, two = SessionStoreSession("session_1", store), SessionStoreSession("session_2", store)
            await one.add_items(_said("Session 1 message"))
            await two.add_items(_said("Session 2 message 1", "Session 2 message 2"))
            popped = await two.pop_item()
            return popped, await one.get_items(), await two.get_items()

        popped, one, two = stores.run(body)

        assert popped["content"] == "Session 2 message 2"
        assert _contents(one) == ["Session 1 message"]
        assert _contents(two) == ["Session 2 message 1"]

    @pytest.mark.parametrize(
        ("limit", "expected"),
        [
            (None, ["M1", "R1", "M2", "R2", "M3", "R3"]),
            (2, ["M3", "R3"]),
            (4, ["M2", "R2", "M3", "R3"]),
            (10, ["M1", "R1", "M2", "R2", "M3", "R3"]),
            (0, []),
        ],
    )
    def test_get_items_with_a_limit_returns_the_newest_in_order(
        self, stores: Stores, limit: int | None, expected: list[str]
    ) -> None:
        async def body(store: AnyStore) -> Any:
            session = SessionStoreSession("limit", store)
            await session.add_items(_said("M1", "R1", "M2", "R2", "M3", "R3"))
            return await session.get_items(limit=limit)

        assert _contents(stores.run(body)) == expected

    def test_unicode_and_sql_like_text_round_trip(self, stores: Stores) -> None:
        texts = [
            "こんにちは",
            "😊👍",
            "Привет",
            "O'Reilly",
            "DROP TABLE sessions;",
            '"SELECT * FROM users WHERE name = "admin";"',
            "Robert'); DROP TABLE students;--",
        ]

        async def body(store: AnyStore) -> Any:
            session = SessionStoreSession("unicode'; DROP TABLE events;--", store)
            await session.add_items(_said(*texts))
            return await session.get_items()

        assert _contents(stores.run(body)) == texts

    def test_concurrent_adds_all_arrive(self, stores: Stores) -> None:
        """Ten concurrent add_items on one session object: every item is stored once."""

        async def body(store: AnyStore) -> Any:
            session = SessionStoreSession("concurrent", store)
            await asyncio.gather(*(session.add_items(_said(f"Message {i}")) for i in range(10)))
            return await SessionStoreSession("concurrent", store).get_items()

        assert sorted(_contents(stores.run(body))) == sorted(f"Message {i}" for i in range(10))

    def test_adds_from_threads_with_their_own_loops_all_arrive(self, database: Any) -> None:
        """As the SDK's test does: one session object used from five threads, each its own loop."""
        stores = Stores(database, "sync")

        async def body(store: AnyStore) -> Any:
            session = SessionStoreSession("threads", store)

            def add(i: int) -> None:
                asyncio.run(session.add_items(_said(f"Message {i}")))

            with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
                list(pool.map(add, range(10)))
            return await session.get_items()

        assert sorted(_contents(stores.run(body))) == sorted(f"Message {i}" for i in range(10))

    def test_a_failed_add_items_stores_nothing_and_the_session_stays_usable(self, stores: Stores) -> None:
        async def body(store: AnyStore) -> Any:
            session = SessionStoreSession("rollback", store)
            with pytest.raises(ValidationError, match=r"item 1 cannot be stored as JSON"):
                # An item no type allows: its content is no JSON value.
                await session.add_items([*_said("fine"), {"role": "user", "content": object()}])  # type: ignore[list-item, misc]
            await session.add_items(_said("after failure"))
            return await session.get_items()

        assert _contents(stores.run(body)) == ["after failure"]

    def test_session_settings_default_to_no_limit(self, stores: Stores) -> None:
        async def body(store: AnyStore) -> Any:
            return SessionStoreSession("defaults", store).session_settings

        settings = stores.run(body)

        assert isinstance(settings, SessionSettings)
        assert settings.limit is None

    def test_session_settings_from_the_constructor_and_from_a_dict(self, stores: Stores) -> None:
        async def body(store: AnyStore) -> Any:
            given = SessionStoreSession("given", store, session_settings=SessionSettings(limit=5))
            from_dict = SessionStoreSession("dict", store, session_settings={"limit": 0})
            return given.session_settings, from_dict.session_settings

        given, from_dict = stores.run(body)

        assert given.limit == 5
        assert isinstance(from_dict, SessionSettings)
        assert from_dict.limit == 0

    def test_unknown_session_settings_are_refused(self, stores: Stores) -> None:
        async def body(store: AnyStore) -> None:
            SessionStoreSession("bad", store, session_settings={"limitt": 1})

        with pytest.raises(ValidationError, match="unknown session settings: limitt"):
            stores.run(body)

    def test_the_settings_limit_applies_and_an_explicit_limit_wins(self, stores: Stores) -> None:
        async def body(store: AnyStore) -> Any:
            session = SessionStoreSession("settings", store, session_settings=SessionSettings(limit=3))
            await session.add_items(_said(*(f"Message {i}" for i in range(10))))
            return await session.get_items(), await session.get_items(limit=2)

        by_settings, explicit = stores.run(body)

        assert _contents(by_settings) == ["Message 7", "Message 8", "Message 9"]
        assert _contents(explicit) == ["Message 8", "Message 9"]


class TestTheLog:
    def test_pop_and_clear_are_events_the_audit_lists(self, stores: Stores) -> None:
        async def body(store: AnyStore) -> Any:
            session = SessionStoreSession("audited", store)
            await session.add_items(_said("a", "b", "c"))
            await session.pop_item()
            await session.clear_session()
            sid = session.store_session_id
            return await _on_store(store, lambda s: ([e.type for e in s.read(sid)], audit(s, sid)))

        types, report = stores.run(body)

        assert types == [
            "openai_agents_items_added",
            "openai_agents_item_popped",
            "openai_agents_session_cleared",
        ]
        assert [e.kind for e in report.entries] == [
            "openai_agents_item_popped",
            "openai_agents_session_cleared",
        ]

    def test_reverting_a_pop_brings_the_item_back_in_its_place(self, stores: Stores) -> None:
        async def body(store: AnyStore) -> Any:
            session = SessionStoreSession("revert-pop", store)
            await session.add_items(_said("a", "b"))
            await session.pop_item()
            await session.add_items(_said("c"))
            (removal,) = await session.removals()
            revert_id = await session.revert(removal.event_id)
            sid = session.store_session_id
            report = await _on_store(store, lambda s: audit(s, sid))
            return removal, revert_id, await session.get_items(), (await session.removals())[0], report

        removal, revert_id, items, after, report = stores.run(body)

        assert (removal.kind, _contents(removal.items), removal.reverted_by) == ("pop", ["b"], None)
        assert _contents(items) == ["a", "b", "c"]
        assert after.reverted_by == revert_id
        assert report.entries[0].reverted_by == revert_id

    def test_reverting_a_clear_brings_back_what_it_removed(self, stores: Stores) -> None:
        async def body(store: AnyStore) -> Any:
            session = SessionStoreSession("revert-clear", store)
            await session.add_items(_said("a", "b", "c"))
            await session.pop_item()  # c
            await session.clear_session()  # a, b
            await session.add_items(_said("d"))
            clear = (await session.removals())[1]
            await session.revert(clear.event_id)
            return clear, await session.get_items()

        clear, items = stores.run(body)

        assert (clear.kind, _contents(clear.items)) == ("clear", ["a", "b"])
        assert _contents(items) == ["a", "b", "d"]  # c stays popped

    def test_a_revert_of_something_else_or_twice_is_refused(self, stores: Stores) -> None:
        async def body(store: AnyStore) -> None:
            session = SessionStoreSession("revert-bad", store)
            await session.add_items(_said("a"))
            await session.pop_item()
            (removal,) = await session.removals()
            await session.revert(removal.event_id)
            with pytest.raises(ValidationError, match="already reverted"):
                await session.revert(removal.event_id)
            with pytest.raises(ValidationError, match="is not a pop_item or clear_session"):
                await session.revert("00000000-0000-4000-8000-000000000000")

        stores.run(body)

    def test_the_item_list_is_a_fold_of_the_log_alone(self, stores: Stores) -> None:
        """A fresh session object, and fold_items over the raw events, see what the writer sees."""

        async def body(store: AnyStore) -> Any:
            writer = SessionStoreSession("folded", store)
            await writer.add_items(_said("a", "b", "c"))
            await writer.pop_item()
            await writer.add_items(_said("d"))
            (pop,) = await writer.removals()
            await writer.clear_session()
            await writer.revert(pop.event_id)  # c is back, but the clear removed it too
            sid = writer.store_session_id
            events = await _on_store(store, lambda s: s.read(sid))
            return (
                await writer.get_items(),
                await SessionStoreSession("folded", store).get_items(),
                fold_items(events),
            )

        mine, fresh, folded = stores.run(body)

        assert mine == fresh == folded == []

    def test_concurrent_pops_remove_different_items(self, stores: Stores) -> None:
        async def body(store: AnyStore) -> Any:
            await SessionStoreSession("pops", store).add_items(_said(*(str(i) for i in range(6))))
            sessions = [SessionStoreSession("pops", store) for _ in range(4)]
            popped = await asyncio.gather(*(s.pop_item() for s in sessions))
            return popped, await sessions[0].get_items()

        popped, left = stores.run(body)

        assert sorted(_contents(popped)) == ["2", "3", "4", "5"]
        assert _contents(left) == ["0", "1"]

    def test_verify_and_erase_with_a_receipt(self, stores: Stores) -> None:
        async def body(store: AnyStore) -> Any:
            session = SessionStoreSession("erase-me", store)
            await session.add_items(_said("secret"))
            await session.pop_item()
            verified = await _on_store(store, lambda s: s.verify(session.store_session_id))
            receipts = await session.erase(reason="customer asked")
            with pytest.raises(SessionErasedError):
                await session.get_items()
            with pytest.raises(SessionErasedError):
                await SessionStoreSession("erase-me", store).add_items(_said("again"))
            return verified, receipts, await session.erase()

        verified, receipts, again = stores.run(body)

        assert (verified.ok, verified.events_checked) == (True, 2)
        assert (receipts[0].reason, receipts[0].event_count) == ("customer asked", 2)
        assert again == receipts

    def test_an_empty_session_is_not_created(self, stores: Stores) -> None:
        async def body(store: AnyStore) -> Any:
            session = SessionStoreSession("empty", store)
            await session.add_items([])
            await session.clear_session()
            return await session.get_items(), await session.pop_item(), await session.erase()

        assert stores.run(body) == ([], None, [])

    def test_tenant_and_user_make_it_a_tenants_session(self, stores: Stores) -> None:
        async def body(store: AnyStore) -> Any:
            session = SessionStoreSession("chat-1", store, tenant="acme", user="ada")
            await session.add_items(_said("hi"))
            info = await _on_store(store, lambda s: s.get_session(session.store_session_id))
            other = await SessionStoreSession("chat-1", store).get_items()
            return session.store_session_id, info, other

        sid, info, other = stores.run(body)

        assert sid == agents_session_id("chat-1", "acme", "ada")
        assert (info.tenant, info.user, info.external_id) == ("acme", "ada", "chat-1")
        assert other == []  # the same SDK id without the tenant is another session


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.get_items(limit=-1), "limit must be None or an int >= 0"),
        (lambda s: s.add_items(["not a dict"]), "item 0 is a str, not a dict"),
        (lambda s: s.add_items({"role": "user"}), "add_items takes a list of items"),
    ],
)
def test_bad_input_is_a_validation_error(stores: Stores, call: Any, message: str) -> None:
    async def body(store: AnyStore) -> None:
        with pytest.raises(ValidationError, match=message):
            await call(SessionStoreSession("bad-input", store))

    stores.run(body)


def test_bad_names_are_refused(stores: Stores) -> None:
    async def body(store: AnyStore) -> None:
        with pytest.raises(ValidationError, match="session_id"):
            SessionStoreSession("a\nb", store)
        with pytest.raises(ValidationError, match="tenant and user together"):
            SessionStoreSession("a", store, tenant="acme")
        with pytest.raises(ValidationError, match="store must be"):
            SessionStoreSession("a", "sqlite://")  # type: ignore[arg-type]

    stores.run(body)
