"""ADK's ``Runner`` on ``SessionStoreSessionService``: a multi-turn conversation with a tool call.

The model is a ``BaseLlm`` of the test's own that answers from a script (no network) and keeps
every ``LlmRequest`` it is sent, so the test sees exactly what ADK rebuilt from the stored session.
"""

from __future__ import annotations

import asyncio
import io
import warnings
from collections.abc import AsyncGenerator
from typing import Any

import pytest

pytest.importorskip("google.adk")

with warnings.catch_warnings():
    # google-adk 2.7 deprecates a config class of its own while llm_agent is imported.
    warnings.filterwarnings("ignore", "BaseAgentConfig is deprecated", DeprecationWarning)
    from google.adk.agents.llm_agent import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types
from pydantic import Field

import sessionstore
from sessionstore.audit import audit, verify_session
from sessionstore.bridges.adk import SessionStoreSessionService, session_store_id
from sessionstore.cli import main
from sessionstore.projections import Session as StoreSession

from .conftest import Backend

# google-adk 2.7 warns that features of its own it uses are experimental: not the bridge's to fix.
pytestmark = pytest.mark.filterwarnings(r"ignore:\[EXPERIMENTAL\] feature:UserWarning")

APP = "weather_app"


class ScriptedLlm(BaseLlm):
    """Answers each request with the next scripted response; records the requests."""

    script: list[LlmResponse] = Field(default_factory=list)
    requests: list[LlmRequest] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request.model_copy(deep=True))
        yield self.script.pop(0)


def get_weather(city: str) -> dict[str, Any]:
    """The weather in ``city``."""
    return {"city": city, "forecast": "sunny", "celsius": 21}


def _model_says(*parts: types.Part) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=list(parts)))


def _user(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


def _texts(request: LlmRequest) -> list[str]:
    """Each content of the request, as role: text / call / response."""
    shown = []
    for content in request.contents:
        for part in content.parts or []:
            if part.text:
                shown.append(f"{content.role}: {part.text}")
            elif part.function_call:
                shown.append(f"{content.role}: call {part.function_call.name}({part.function_call.args})")
            elif part.function_response:
                shown.append(f"{content.role}: response {part.function_response.response}")
    return shown


def test_a_runner_conversation_is_stored_and_resumed(shared_backend: Backend) -> None:
    """Turn 1 calls a tool; turn 2, on a new service and runner over the same database, is sent the
    whole first turn; the stored log verifies, and the store's audit and CLI read it."""
    llm = ScriptedLlm(
        model="scripted",
        script=[
            _model_says(
                types.Part(function_call=types.FunctionCall(name="get_weather", args={"city": "Paris"}))
            ),
            _model_says(types.Part(text="It is sunny in Paris, 21 degrees.")),
            _model_says(types.Part(text="Tomorrow looks the same.")),
        ],
    )
    agent = LlmAgent(name="weather", model=llm, instruction="Answer about the weather.", tools=[get_weather])

    async def turn(session_id: str, text: str, *, create: bool) -> list[Any]:
        store = await sessionstore.open_async_store(shared_backend.url, migrate=True, token_counter=None)
        try:
            service = SessionStoreSessionService(store)
            if create:
                await service.create_session(app_name=APP, user_id="ada", session_id=session_id)
            runner = Runner(app_name=APP, agent=agent, session_service=service)
            return [
                e
                async for e in runner.run_async(user_id="ada", session_id=session_id, new_message=_user(text))
            ]
        finally:
            await store.close()

    async def conversation() -> tuple[list[Any], list[Any], Any]:
        first = await turn("chat-1", "What is the weather in Paris?", create=True)
        second = await turn("chat-1", "And tomorrow?", create=False)
        store = await sessionstore.open_async_store(shared_backend.url, token_counter=None)
        try:
            service = SessionStoreSessionService(store)
            stored = await service.get_session(app_name=APP, user_id="ada", session_id="chat-1")
            sid = session_store_id(APP, "ada", "chat-1")
            verified = await store.run_sync(verify_session, sid)
            report, transcript = await store.run_sync(
                lambda sync_store: (
                    audit(StoreSession(sync_store, sid)),
                    [e.type for e in StoreSession(sync_store, sid).transcript],
                )
            )
            return first + second, [stored, verified, report], transcript
        finally:
            await store.close()

    events, (stored, verified, report), transcript = asyncio.run(conversation())
    out = io.StringIO()
    status = main(["events", "--db", shared_backend.url, session_store_id(APP, "ada", "chat-1")], out=out)

    assert [
        r.model_dump(exclude_none=True)["contents"][-1]["parts"][0].get("text") for r in llm.requests
    ] == [
        "What is the weather in Paris?",
        None,  # the tool's response
        "And tomorrow?",
    ]
    assert _texts(llm.requests[2]) == [
        "user: What is the weather in Paris?",
        "model: call get_weather({'city': 'Paris'})",
        "user: response {'city': 'Paris', 'forecast': 'sunny', 'celsius': 21}",
        "model: It is sunny in Paris, 21 degrees.",
        "user: And tomorrow?",
    ]
    assert len(stored.events) == 6  # two user messages, call, tool response, two answers
    assert [e.id for e in events] == [e.id for e in stored.events if e.author != "user"]
    assert verified.ok
    assert verified.chain.events_checked == 7
    assert report.entries == []  # no context operations: ADK builds its own requests
    assert transcript == ["adk_session_created"] + ["adk_event_recorded"] * 6
    assert status == 0
    assert out.getvalue().count("adk_event_recorded") == 6
