"""Client events at the protocol's edges, against the real server over a real WebSocket (fake engines).

Each case is input a real or hostile Realtime client can send that used to slip past the boundary: a number
Python cannot read (answered as a server failure), JSON's non-standard constants or an unpaired surrogate
(accepted, after which every reply of the session failed in the engine), a ``max_output_tokens`` outside
1..4096 (ignored or handed to the model), an assistant's ``input_text`` (accepted, then left out of what the
model reads), and a multi-byte message over the size limit (measured in characters, not bytes). The last two
drive a session directly: a refused function call output used to count as the call's answer, and a refused
session.update used to switch the input format all the same.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect
from websockets.sync.connection import Connection

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.engines.think.openai_llm import OpenAICompatibleLanguageModel
from bargein.session.core import vocabulary as v
from bargein.session.realtime_session import RealtimeSession
from bargein.weights import WeightError
from tests.support.realtime_client import validate_server_event
from tests.support.server import running_server

UNLIMITED = Settings(events_per_s=1e6, event_burst=10**6)
MANUAL_TURNS: dict[str, Any] = {"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}


def user_text(text: str) -> dict[str, Any]:
    """A ``conversation.item.create`` of typed user text."""
    return {"type": "conversation.item.create",
            "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}


def recv(ws: Connection, timeout: float = 10.0) -> dict[str, Any]:
    """The next server event, strictly parsed (no ``NaN``) and checked against the GA server event union."""
    def refuse(constant: str) -> Any:
        raise AssertionError(f"the server sent the non-JSON constant {constant}")
    reply: dict[str, Any] = json.loads(ws.recv(timeout=timeout), parse_constant=refuse)
    validate_server_event(reply)
    return reply


def until(ws: Connection, kind: str, timeout: float = 10.0) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Events up to the first of type ``kind`` (or an ``error``): that event, and every one before it."""
    seen: list[dict[str, Any]] = []
    while True:
        reply = recv(ws, timeout)
        if reply["type"] in (kind, "error"):
            return reply, seen
        seen.append(reply)


def expect_error(ws: Connection, message: str | dict[str, Any], code: str) -> dict[str, Any]:
    """Send ``message``; the next event must be an ``error`` with ``code`` that echoes the event_id, if any."""
    ws.send(message if isinstance(message, str) else json.dumps(message))
    reply = recv(ws)
    assert reply["type"] == "error", f"expected an error, got {str(reply)[:300]}"
    assert reply["error"]["type"] == "invalid_request_error", reply
    assert reply["error"]["code"] == code, reply
    if isinstance(message, dict) and "event_id" in message:
        assert reply["error"]["event_id"] == message["event_id"]
    return reply


def assert_alive(ws: Connection) -> None:
    ws.send(json.dumps({"type": "session.update", "session": {"instructions": "still here"}}))
    reply = recv(ws)
    assert reply["type"] == "session.updated" and reply["session"]["instructions"] == "still here"


@pytest.fixture(scope="module")
def llm() -> FakeLanguageModel:
    return FakeLanguageModel()


@pytest.fixture(scope="module")
def connection(llm: FakeLanguageModel) -> Iterator[Connection]:
    engines = Engines(FakeVad(), FakeRecognizer(), llm, FakeSynthesizer())
    with running_server(engines, UNLIMITED) as host, connect(f"ws://{host}/v1/realtime", max_size=None) as ws:
        assert recv(ws)["type"] == "session.created"
        ws.send(json.dumps(MANUAL_TURNS))
        assert recv(ws)["type"] == "session.updated"
        yield ws


# --- JSON that is not JSON, or not text ----------------------------------------------------------------


def test_an_integer_too_long_to_read_is_invalid_json_not_a_server_failure(connection: Connection) -> None:
    reply = expect_error(connection, '{"type": "input_audio_buffer.clear", "event_id": "n", "n": 1' + "0" * 5000
                         + "}", "invalid_json")
    assert reply["error"]["event_id"] == "n"
    assert len(reply["error"]["message"]) < 200
    assert_alive(connection)


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_numbers_json_cannot_hold_are_refused(connection: Connection, number: str) -> None:
    raw = '{"type": "session.update", "event_id": "c", "session": {"tracing": {"group_id": ' + number + "}}}"
    reply = expect_error(connection, raw, "invalid_json")
    assert reply["error"]["event_id"] == "c"
    assert number in reply["error"]["message"]
    assert_alive(connection)


def _mock_openai_llm(requests: list[dict[str, Any]]) -> OpenAICompatibleLanguageModel:
    """An OpenAI-compatible engine whose server answers every request with one word (and records it)."""
    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(json.loads(request.content))
        body = 'data: {"choices":[{"delta":{"content":"Fine."}}]}\n\ndata: [DONE]\n\n'
        return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})
    return OpenAICompatibleLanguageModel("http://llm.test/v1", "some-model",
                                         client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))


POISON = {
    "nan in a tool schema": ('{"type": "session.update", "event_id": "p", "session": {"tools": [{"type": "function", '
                             '"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "number", '
                             '"maximum": NaN}}}}]}}', "invalid_json"),
    "unpaired surrogate in user text": (json.dumps({**user_text("half a pair: \ud800"), "event_id": "p"}),
                                        "invalid_value"),
}


@pytest.mark.parametrize("name", list(POISON))
def test_input_no_engine_can_send_is_refused_and_later_replies_still_work(name: str) -> None:
    """Accepted, these poisoned the session: every later reply failed to encode its request to the model."""
    raw, code = POISON[name]
    requests: list[dict[str, Any]] = []
    engines = Engines(FakeVad(), FakeRecognizer(), _mock_openai_llm(requests), FakeSynthesizer())
    with running_server(engines, UNLIMITED) as host, connect(f"ws://{host}/v1/realtime", max_size=None) as ws:
        assert recv(ws)["type"] == "session.created"
        ws.send(json.dumps({**MANUAL_TURNS, "session": {**MANUAL_TURNS["session"], "output_modalities": ["text"]}}))
        assert recv(ws)["type"] == "session.updated"
        reply = expect_error(ws, raw, code)
        assert reply["error"]["event_id"] == "p"
        for turn in range(2):
            ws.send(json.dumps(user_text(f"question {turn}")))
            ws.send(json.dumps({"type": "response.create"}))
            done, seen = until(ws, "response.done")
            assert done["type"] == "response.done", done
            assert done["response"]["status"] == "completed", done["response"]
            assert not [e for e in seen if e["type"] == "error"]
        assert requests[-1]["messages"][-1] == {"role": "user", "content": "question 1"}


def test_a_multibyte_message_over_the_byte_limit_is_refused_unread() -> None:
    engines = Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer())
    settings = Settings(events_per_s=1e6, event_burst=10**6, max_message_bytes=64 * 1024)
    with running_server(engines, settings) as host, connect(f"ws://{host}/v1/realtime", max_size=None) as ws:
        assert recv(ws)["type"] == "session.created"
        # 40,000 characters, 120,000 bytes of UTF-8: over the 64 KiB limit
        reply = expect_error(ws, json.dumps({"type": "session.update", "session": {"instructions": "中" * 40_000}},
                                            ensure_ascii=False), "message_too_large")
        assert "120" in reply["error"]["message"]
        assert_alive(ws)


# --- field values ----------------------------------------------------------------------------------------


def _spoken_reply(ws: Connection) -> str:
    """Ask for a spoken reply to a typed turn; the id of its assistant item."""
    ws.send(json.dumps(user_text("hello")))
    ws.send(json.dumps({"type": "response.create"}))
    done, _ = until(ws, "response.done")
    assert done["type"] == "response.done" and done["response"]["status"] == "completed", done
    item_id: str = done["response"]["output"][0]["id"]
    return item_id


def test_truncate_past_any_64_bit_length_is_refused_and_a_long_one_still_clamps(connection: Connection) -> None:
    item_id = _spoken_reply(connection)
    raw = json.dumps({"type": "conversation.item.truncate", "event_id": "far", "item_id": item_id,
                      "content_index": 0, "audio_end_ms": 10**400})
    reply = expect_error(connection, raw, "invalid_value")
    assert reply["error"]["param"] == "audio_end_ms"
    connection.send(json.dumps({"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0,
                                "audio_end_ms": 10**15}))
    truncated = recv(connection)
    assert truncated["type"] == "conversation.item.truncated"
    assert 0 < truncated["audio_end_ms"] < 10**15  # clamped to the audio sent


@pytest.mark.parametrize("tokens", [0, -5, 4097])
def test_max_output_tokens_outside_1_to_4096_is_refused(connection: Connection, tokens: int) -> None:
    reply = expect_error(connection, {"type": "response.create", "event_id": f"m{tokens}",
                                      "response": {"max_output_tokens": tokens}}, "invalid_value")
    assert reply["error"]["param"].startswith("response.max_output_tokens")
    expect_error(connection, {"type": "session.update", "event_id": f"s{tokens}",
                              "session": {"max_output_tokens": tokens}}, "invalid_value")
    assert_alive(connection)


def test_max_output_tokens_in_range_reaches_the_model(connection: Connection, llm: FakeLanguageModel) -> None:
    connection.send(json.dumps(user_text("hello")))
    connection.send(json.dumps({"type": "response.create", "response": {"max_output_tokens": 7}}))
    done, _ = until(connection, "response.done")
    assert done["type"] == "response.done"
    assert llm.seen_options[-1].max_tokens == 7


def test_an_assistant_message_sent_as_input_text_is_kept_for_the_model(connection: Connection,
                                                                          llm: FakeLanguageModel) -> None:
    """Pipecat adds assistant messages with ``input_text`` content; the model must read them."""
    said = "I already told you the code is 4711."
    connection.send(json.dumps({"type": "conversation.item.create", "item": {
        "type": "message", "role": "assistant", "content": [{"type": "input_text", "text": said}]}}))
    added = recv(connection)
    assert added["type"] == "conversation.item.added"
    assert added["item"]["content"] == [{"type": "output_text", "text": said}]
    connection.send(json.dumps(user_text("what was the code?")))
    connection.send(json.dumps({"type": "response.create"}))
    done, _ = until(connection, "response.done")
    assert done["type"] == "response.done"
    prompt = [(m.role, m.content) for m in llm.seen[-1]]
    assert ("assistant", said) in prompt, prompt


CLIP = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"  # 30 bytes of pcm16 silence
PIXEL = "data:image/png;base64,iVBORw0KGgo="


@pytest.mark.parametrize(("role", "part"), [
    ("assistant", {"type": "input_audio", "audio": CLIP}),
    ("assistant", {"type": "input_audio", "transcript": "spoken words"}),
    ("assistant", {"type": "input_image", "image_url": PIXEL}),
    ("system", {"type": "input_image", "image_url": PIXEL}),
], ids=["assistant audio", "assistant transcript", "assistant image", "system image"])
def test_content_the_conversation_would_drop_for_a_role_is_refused(connection: Connection, role: str,
                                                                     part: dict[str, Any]) -> None:
    reply = expect_error(connection, {"type": "conversation.item.create", "event_id": "r",
                                      "item": {"type": "message", "role": role, "content": [part]}}, "invalid_value")
    assert role in reply["error"]["message"]
    assert_alive(connection)


# --- session-layer defects (bargein/session/*, fixed there) ----------------------------------------------


class _Session:
    """A session without a socket, its outbound queue drained and validated."""

    def __init__(self, llm: FakeLanguageModel) -> None:
        self.session = RealtimeSession(Engines(FakeVad(), FakeRecognizer(), llm, FakeSynthesizer()))
        self.session.start()

    async def send(self, event: dict[str, Any]) -> dict[str, Any]:
        """Handle one event; the first event it queued."""
        await self.session.handle_message(json.dumps(event))
        return await self.next()

    async def next(self) -> dict[str, Any]:
        item = await asyncio.wait_for(self.session.outbound.get(), 10)
        self.session.on_sent(item)
        validate_server_event(item.event)
        return item.event

    async def until(self, kind: str) -> dict[str, Any]:
        while (event := await self.next())["type"] != kind:
            pass
        return event


async def _weather_call_owed(h: _Session) -> tuple[str, str]:
    """The model calls the client's weather tool; the call's item id and call id, its output owed."""
    weather = {"type": "function", "name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
    await h.send({"type": "session.update", "session": {"tools": [weather], "output_modalities": ["text"],
                                                         "audio": {"input": {"turn_detection": None}}}})
    await h.send(user_text("what is the weather in paris"))
    await h.session.handle_message(json.dumps({"type": "response.create"}))
    done = await h.until("response.done")
    call = done["response"]["output"][-1]
    assert call["call_id"] in h.session.replies.pending
    return call["id"], call["call_id"]


async def test_a_refused_function_call_output_leaves_the_call_waiting_for_its_output() -> None:
    h = _Session(FakeLanguageModel(calls={"weather": ("get_weather", '{"city": "Paris"}')}))
    try:
        _, call_id = await _weather_call_owed(h)
        await h.session.handle_message(json.dumps({
            "type": "conversation.item.create", "event_id": "out", "previous_item_id": "nope",
            "item": {"type": "function_call_output", "call_id": call_id, "output": "sunny"}}))
        refused = await h.until("error")
        assert refused["error"]["code"] == "item_not_found" and refused["error"]["event_id"] == "out"
        # nothing was added: the call is still owed (and still closed as unanswered when its time runs out)
        assert call_id in h.session.replies.pending
    finally:
        await h.session.close()


async def test_a_deleted_function_call_is_no_longer_waited_for() -> None:
    """The client deletes the call instead of answering it: no output can name it any more, so the session stops
    waiting on the client at once (not when the call's 60 s run out)."""
    h = _Session(FakeLanguageModel(calls={"weather": ("get_weather", '{"city": "Paris"}')}))
    try:
        item_id, call_id = await _weather_call_owed(h)
        assert h.session.machine.phase == v.Phase.AWAITING_TOOL
        await h.session.handle_message(json.dumps({"type": "conversation.item.delete", "item_id": item_id}))
        assert (await h.until("conversation.item.deleted"))["item_id"] == item_id
        assert call_id not in h.session.replies.pending
        assert h.session.machine.phase == v.Phase.LISTENING
    finally:
        await h.session.close()


async def test_a_refused_session_update_leaves_the_input_format_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(*_args: Any) -> Any:
        raise WeightError("RNNoise is not installed")
    monkeypatch.setattr("bargein.session.audio_input.NoiseSuppressor", missing)
    h = _Session(FakeLanguageModel())
    try:
        await h.next()  # session.created
        refused = await h.send({"type": "session.update", "event_id": "nr", "session": {"audio": {"input": {
            "format": {"type": "audio/pcmu"}, "noise_reduction": {"type": "near_field"}}}}})
        assert refused["type"] == "error" and refused["error"]["param"] == "session.audio.input.noise_reduction"
        assert h.session.config.audio.input.format.type == "audio/pcm"
        assert h.session.audio_in.wire_format.type == "audio/pcm"
        # the session still reads pcm16: three bytes are not whole samples
        odd = await h.send({"type": "input_audio_buffer.append", "event_id": "odd", "audio": "AAAA"})
        assert odd["type"] == "error" and odd["error"]["code"] == "invalid_audio"
    finally:
        await h.session.close()


async def test_an_unexpected_failure_names_the_event_it_met_and_the_session_goes_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    h = _Session(FakeLanguageModel())
    try:
        await h.next()  # session.created
        def broken(*_args: Any, **_kwargs: Any) -> Any:
            raise RuntimeError("a bug")
        monkeypatch.setattr(h.session.conversation, "get", broken)
        failed = await h.send({"type": "conversation.item.retrieve", "event_id": "evt_9", "item_id": "item_1"})
        assert failed["type"] == "error" and failed["error"]["type"] == "server_error"
        assert failed["error"]["event_id"] == "evt_9"
        monkeypatch.undo()
        assert (await h.send(user_text("still there?")))["type"] == "conversation.item.added"
    finally:
        await h.session.close()


async def test_an_input_item_deleted_before_the_reply_reads_it_is_named_not_blamed_on_an_engine() -> None:
    h = _Session(FakeLanguageModel())
    try:
        await h.send({"type": "session.update", "session": {"output_modalities": ["text"],
                                                             "audio": {"input": {"turn_detection": None}}}})
        await h.session.handle_message(json.dumps(user_text("remember this")))
        item_id = (await h.until("conversation.item.added"))["item"]["id"]
        await h.session.handle_message(json.dumps({"type": "response.create", "response": {
            "conversation": "none", "input": [{"type": "item_reference", "id": item_id}]}}))
        await h.session.handle_message(json.dumps({"type": "conversation.item.delete", "item_id": item_id}))
        failed = await h.until("error")
        assert failed["error"]["code"] == "item_not_found" and item_id in failed["error"]["message"]
        assert (await h.until("response.done"))["response"]["status"] == "failed"
    finally:
        await h.session.close()
