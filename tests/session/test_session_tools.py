"""Function calling in a session (fake engines, no socket): client tools round trip, built-in tools run by
the server, bad tool input, unanswered calls, item retrieval and transcription-only sessions.
Every server event is validated against the official GA types."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from bargein.engines.base import Engines, SpeechRecognizer
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.engines.think.tool_calls import offered_tools, resolve_call
from bargein.session.realtime_session import RealtimeSession
from bargein.session.tool_use import MAX_SERVER_ROUNDS
from bargein.tools.registry import ToolRegistry, default_registry
from bargein.values import CancelToken, ChatMessage, GenerationOptions, ReplyPiece
from tests.support.realtime_client import validate_server_event

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


class Harness:
    """A session with a drain of its outbound queue that validates every event."""

    def __init__(self, llm: FakeLanguageModel, builtins: ToolRegistry | None = None) -> None:
        engines = Engines(FakeVad(), FakeRecognizer(("hello",)), llm, FakeSynthesizer())
        self.session = RealtimeSession(engines, builtin_tools=builtins)
        self.events: list[dict[str, Any]] = []
        self.session.start()

    async def send(self, **event: Any) -> None:
        await self.session.handle_message(json.dumps(event))

    async def say(self, text: str) -> None:
        await self.send(type="conversation.item.create", item={
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})

    async def until(self, kind: str, timeout: float = 10.0) -> dict[str, Any]:
        async def pump() -> dict[str, Any]:
            while True:
                item = await self.session.outbound.get()
                self.session.on_sent(item)
                validate_server_event(item.event)
                self.events.append(item.event)
                if item.event["type"] == kind:
                    return item.event
        return await asyncio.wait_for(pump(), timeout)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]


async def test_client_tool_call_round_trip() -> None:
    llm = FakeLanguageModel(calls={"weather": ("get_weather", '{"city": "Paris"}')})
    h = Harness(llm, builtins=default_registry())
    await h.send(type="session.update", session={"tools": [WEATHER], "output_modalities": ["text"]})
    await h.say("what is the weather in paris")
    await h.send(type="response.create")
    done = await h.until("response.done")
    call = done["response"]["output"][-1]
    assert call["type"] == "function_call" and call["name"] == "get_weather"
    assert json.loads(call["arguments"]) == {"city": "Paris"}
    deltas = [e for e in h.of("response.function_call_arguments.delta") if e["call_id"] == call["call_id"]]
    assert "".join(e["delta"] for e in deltas) == call["arguments"]
    assert h.of("response.function_call_arguments.done")[-1]["arguments"] == call["arguments"]
    # the client's own tools replace the built-in ones
    assert [t["name"] for t in llm.seen_options[-1].tools] == ["get_weather"]

    await h.send(type="conversation.item.create", item={
        "type": "function_call_output", "call_id": call["call_id"], "output": "sunny, 24 degrees"})
    await h.send(type="response.create")
    answer = await h.until("response.done")
    text = answer["response"]["output"][0]["content"][0]["text"]
    assert text == "The tool said: sunny, 24 degrees."
    assert call["call_id"] not in h.session.replies.pending
    tool_messages = [m for m in llm.seen[-1] if m.role == "tool"]
    assert tool_messages and tool_messages[0].tool_call_id == call["call_id"]
    await h.session.close()


class SaysThenCalls(FakeLanguageModel):
    """Says it will look, then calls the client's ``get_weather``."""

    async def stream_reply(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                           options: GenerationOptions | None = None) -> AsyncIterator[ReplyPiece]:
        yield "Let me look that up."
        yield resolve_call('{"city": "Oslo"}', offered_tools(options or GenerationOptions()), name="get_weather")


async def test_a_response_that_only_calls_a_tool_has_no_message_item_and_one_that_speaks_first_keeps_it() -> None:
    """As on OpenAI's Realtime API, a response's items are those the model produced: a call alone opens no empty
    assistant message (not in the events, the ``response.done`` or the history); words then a call keep both, the
    message first."""
    for modality in ("text", "audio"):
        for llm, expected in ((FakeLanguageModel(calls={"weather": ("get_weather", '{"city": "Paris"}')}),
                               ["function_call"]), (SaysThenCalls(), ["message", "function_call"])):
            h = Harness(llm)
            await h.send(type="session.update", session={"tools": [WEATHER], "output_modalities": [modality]})
            await h.say("weather please")
            await h.send(type="response.create")
            done = (await h.until("response.done"))["response"]
            assert [item["type"] for item in done["output"]] == expected, modality
            for kind in ("response.output_item.added", "response.output_item.done"):  # the message is done last
                assert sorted((e["output_index"], e["item"]["type"]) for e in h.of(kind)) == \
                    list(enumerate(expected)), (modality, kind)
            added = [e for e in h.of("conversation.item.added") if e["item"].get("role") != "user"]
            assert [e["item"]["type"] for e in added] == expected
            assert sorted(e["item"]["type"] for e in h.of("conversation.item.done")
                          if e["item"].get("role") != "user") == sorted(expected)
            user = next(item.id for item in h.session.conversation if item.role == "user")
            assert [e["previous_item_id"] for e in added] == [user, *(e["item"]["id"] for e in added[:-1])]
            assert [item.type for item in h.session.conversation] == ["message", *expected]
            assert bool(h.of("response.content_part.added")) == (expected[0] == "message")
            await h.session.close()


async def test_builtin_tools_run_on_the_server_and_the_client_hears_the_answer() -> None:
    llm = FakeLanguageModel(calls={"calculate": ("calculate", '{"expression": "17 * 23"}')})
    h = Harness(llm, builtins=default_registry())
    await h.send(type="session.update", session={"output_modalities": ["text"]})
    await h.say("calculate seventeen times twenty three")
    await h.send(type="response.create")
    done = await h.until("response.done")
    assert [item["type"] for item in done["response"]["output"]] == ["message"]
    assert done["response"]["output"][0]["content"][0]["text"] == "The tool said: 17 * 23 = 391."
    assert not h.of("response.function_call_arguments.done")
    [used] = h.of("bargein.tool.call")  # only clients that opt in see this event
    assert used["name"] == "calculate" and used["ok"] and used["output"] == "17 * 23 = 391"
    await h.session.close()


async def test_builtin_tools_are_off_when_the_server_disables_them_or_tool_choice_is_none() -> None:
    llm = FakeLanguageModel(calls={"calculate": ("calculate", '{"expression": "1+1"}')})
    h = Harness(llm, builtins=None)
    await h.send(type="session.update", session={"output_modalities": ["text"]})
    await h.say("calculate one plus one")
    await h.send(type="response.create")
    done = await h.until("response.done")
    assert done["response"]["output"][0]["content"][0]["text"].startswith("You said:")
    h2 = Harness(llm, builtins=default_registry())
    await h2.send(type="session.update", session={"output_modalities": ["text"], "tool_choice": "none"})
    await h2.say("calculate one plus one")
    await h2.send(type="response.create")
    assert (await h2.until("response.done"))["response"]["output"][0]["content"][0]["text"].startswith("You said:")
    await h.session.close()
    await h2.session.close()


async def test_bad_tool_input_gets_clear_errors_and_the_session_goes_on() -> None:
    h = Harness(FakeLanguageModel(calls={"weather": ("get_weather", '{"city": 12}')}))
    await h.send(type="session.update", session={"tools": [{"type": "function", "name": "bad name!"}]})
    error = await h.until("error")
    assert error["error"]["param"].startswith("session.tools") and "name" in error["error"]["message"]
    await h.send(type="conversation.item.create", item={
        "type": "function_call_output", "call_id": "call_nobody", "output": "x"}, event_id="evt_7")
    error = await h.until("error")
    assert "call_nobody" in error["error"]["message"] and error["error"]["event_id"] == "evt_7"
    await h.send(type="response.create", response={"tools": [WEATHER], "tool_choice": {
        "type": "function", "name": "other"}})
    error = await h.until("error")
    assert error["error"]["param"] == "response.tool_choice.name"
    await h.send(type="session.update", session={"tools": [WEATHER], "output_modalities": ["text"]})
    updated = await h.until("session.updated")
    assert updated["session"]["tools"] == [WEATHER]
    await h.send(type="conversation.item.retrieve", item_id="item_missing")
    assert (await h.until("error"))["error"]["code"] == "item_not_found"
    await h.session.close()


async def test_a_model_call_that_cannot_be_mended_is_refused_visibly() -> None:
    schema = {**WEATHER, "parameters": {"type": "object", "properties": {"city": {"type": "string",
              "enum": ["Paris"]}}, "required": ["city"]}}
    llm = FakeLanguageModel(calls={"weather": ("get_weather", '{"city": "Atlantis"}')})
    h = Harness(llm)
    await h.send(type="session.update", session={"tools": [schema], "output_modalities": ["text"]})
    await h.say("weather in atlantis")
    await h.send(type="response.create")
    done = await h.until("response.done")
    [error] = h.of("error")
    assert error["error"]["code"] == "invalid_tool_call" and "Atlantis" in error["error"]["message"]
    assert [item["type"] for item in done["response"]["output"]] == ["message"]
    assert not h.session.replies.pending._timers
    await h.say("hello again")
    await h.send(type="response.create")
    assert (await h.until("response.done"))["response"]["status"] == "completed"
    await h.session.close()


async def test_an_unanswered_call_is_closed_after_the_timeout_and_items_can_be_retrieved() -> None:
    llm = FakeLanguageModel(calls={"weather": ("get_weather", '{"city": "Paris"}')})
    h = Harness(llm)
    h.session.replies.pending.timeout_s = 0.05
    await h.send(type="session.update", session={"tools": [WEATHER], "output_modalities": ["text"]})
    await h.say("weather please")
    await h.send(type="response.create")
    call = (await h.until("response.done"))["response"]["output"][-1]
    added = await h.until("conversation.item.added")
    assert added["item"]["type"] == "function_call_output" and added["item"]["call_id"] == call["call_id"]
    assert "did not answer" in added["item"]["output"]
    await h.send(type="conversation.item.create", item={
        "type": "function_call_output", "call_id": call["call_id"], "output": "late"})
    assert "already has an output" in (await h.until("error"))["error"]["message"]
    await h.send(type="conversation.item.retrieve", item_id=call["id"])
    retrieved = await h.until("conversation.item.retrieved")
    assert retrieved["item"]["type"] == "function_call" and retrieved["item"]["call_id"] == call["call_id"]
    await h.session.close()


async def test_transcription_sessions_never_answer() -> None:
    h = Harness(FakeLanguageModel())
    await h.send(type="session.update", session={"type": "transcription"})
    updated = await h.until("session.updated")
    assert updated["session"]["type"] == "transcription"
    await h.send(type="response.create")
    assert "transcription session" in (await h.until("error"))["error"]["message"]
    assert h.session.machine.settings.create_response is False
    await h.session.close()


async def test_out_of_band_response_uses_its_own_input_and_stays_out_of_the_conversation() -> None:
    llm = FakeLanguageModel()
    h = Harness(llm)
    await h.send(type="session.update", session={"output_modalities": ["text"]})
    await h.say("first thing")
    added = await h.until("conversation.item.added")
    await h.say("second thing")
    await h.until("conversation.item.done")
    items_before = len(h.session.conversation)
    await h.send(type="response.create", response={
        "conversation": "none", "metadata": {"purpose": "summary"},
        "input": [{"type": "item_reference", "id": added["item"]["id"]},
                  {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "sum it up"}]}]})
    done = await h.until("response.done")
    assert done["response"]["metadata"] == {"purpose": "summary"}
    assert done["response"]["output"][0]["content"][0]["text"] == "You said: sum it up."
    assert [m.content for m in llm.seen[-1] if m.role == "user"] == ["first thing", "sum it up"]
    assert len(h.session.conversation) == items_before
    await h.send(type="response.create", response={"input": [{"type": "item_reference", "id": "item_gone"}]})
    assert (await h.until("error"))["error"]["code"] == "item_not_found"
    await h.session.close()


class SureRecognizer(SpeechRecognizer):
    """Hears every clip as two words, each with the recogniser's confidence."""

    async def transcribe(self, audio: Any, *, language: str | None = None, prompt: str | None = None) -> Any:
        from bargein.values import Transcript, WordTiming

        return Transcript("hello there", words=(WordTiming("hello", 0, 300, 0.9), WordTiming("there", 300, 600, 0.5)))


async def test_transcription_logprobs_only_when_included() -> None:
    import base64
    import math

    for include in (None, ["item.input_audio_transcription.logprobs"]):
        session = RealtimeSession(Engines(FakeVad(), SureRecognizer(), FakeLanguageModel(), FakeSynthesizer()))
        h = Harness.__new__(Harness)
        h.session, h.events = session, []
        session.start()
        await h.send(type="session.update", session={"include": include, "output_modalities": ["text"]})
        audio = base64.b64encode(bytes(4_800)).decode()
        await h.send(type="conversation.item.create", item={"type": "message", "role": "user", "content": [
            {"type": "input_audio", "audio": audio}]})
        completed = await h.until("conversation.item.input_audio_transcription.completed")
        if include is None:
            assert "logprobs" not in completed
        else:
            assert [p["token"] for p in completed["logprobs"]] == ["hello", "there"]
            assert completed["logprobs"][1]["logprob"] == math.log(0.5)
        await session.close()


async def test_a_required_builtin_call_is_made_once_and_then_answered() -> None:
    llm = FakeLanguageModel(calls={"sum": ("calculate", '{"expression": "2+2"}')})
    h = Harness(llm, builtins=default_registry())
    await h.send(type="session.update", session={"output_modalities": ["text"], "tool_choice": "required"})
    await h.say("sum two and two")
    await h.send(type="response.create")
    done = await h.until("response.done")
    assert done["response"]["output"][0]["content"][0]["text"] == "The tool said: 2+2 = 4."
    assert [o.tool_choice for o in llm.seen_options] == ["required", "auto"]
    await h.session.close()


async def test_a_builtin_call_that_rests_on_nothing_the_user_said_is_not_run_and_the_model_answers_in_words() -> None:
    llm = FakeLanguageModel(calls={"green": ("get_current_time", '{"place": "Tokyo"}')})
    h = Harness(llm, builtins=default_registry())
    await h.send(type="session.update", session={"output_modalities": ["text"]})
    await h.say("my favourite colour is green")
    await h.send(type="response.create")
    done = await h.until("response.done")
    assert [item["type"] for item in done["response"]["output"]] == ["message"]
    assert done["response"]["output"][0]["content"][0]["text"] == "You said: my favourite colour is green."
    assert not h.of("bargein.tool.call"), "the call was not run"
    assert len(llm.seen) == 2 and llm.seen_options[1].tools == llm.seen_options[0].tools, \
        "asked once with tools, then again for words with the same tools in the prompt (its cached prefix)"
    assert llm.seen[1][:-1] == llm.seen[0] and llm.seen[1][-1].role == "system"
    await h.say("what time is it in tokyo, where the tea is green")  # the same call, now resting on "tokyo"
    await h.send(type="response.create")
    await h.until("response.done")
    assert [e["name"] for e in h.of("bargein.tool.call")] == ["get_current_time"]
    await h.session.close()


async def test_clearing_the_input_buffer_is_acknowledged() -> None:
    h = Harness(FakeLanguageModel())
    import base64

    await h.send(type="input_audio_buffer.append", audio=base64.b64encode(bytes(9_600)).decode())
    await h.send(type="input_audio_buffer.clear", event_id="evt_clear")
    await h.until("input_audio_buffer.cleared")
    await h.send(type="input_audio_buffer.commit")
    assert (await h.until("error"))["error"]["code"] == "input_audio_buffer_commit_empty"
    await h.session.close()


async def test_a_call_whose_arguments_no_parser_can_read_is_refused_and_the_session_goes_on() -> None:
    huge = '{"city": ' + "1" * 5_000 + "}"  # past Python's integer digit limit: json.loads raises ValueError
    llm = FakeLanguageModel(calls={"weather": ("get_weather", huge)})
    h = Harness(llm)
    await h.send(type="session.update", session={"tools": [WEATHER], "output_modalities": ["text"]})
    await h.say("weather in a very long place")
    await h.send(type="response.create")
    done = await h.until("response.done")
    assert done["response"]["status"] == "completed"
    [error] = h.of("error")
    assert error["error"]["code"] == "invalid_tool_call"
    assert len(error["error"]["message"]) < 1_000
    await h.session.close()


class CallingForever(FakeLanguageModel):
    """Calls ``calculate`` whenever it is offered tools, however many results it has seen."""

    async def stream_reply(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                           options: GenerationOptions | None = None) -> AsyncIterator[ReplyPiece]:
        options = options or GenerationOptions()
        self.seen_options.append(options)
        tools = offered_tools(options)
        if tools:
            yield resolve_call('{"expression": "2+2"}', tools, name="calculate")
            return
        async for piece in super().stream_reply(messages, cancel=cancel, options=options):
            yield piece


async def test_a_model_that_keeps_calling_builtins_is_stopped_and_still_answers_in_words() -> None:
    llm = CallingForever()
    h = Harness(llm, builtins=default_registry())
    await h.send(type="session.update", session={"output_modalities": ["text"]})
    await h.say("what is 2+2")
    await h.send(type="response.create")
    done = await h.until("response.done")
    assert done["response"]["output"][0]["content"][0]["text"], "the reply must end in words, not silence"
    assert len(h.of("bargein.tool.call")) == MAX_SERVER_ROUNDS
    assert [len(o.tools) > 0 for o in llm.seen_options] == [True] * MAX_SERVER_ROUNDS, \
        "the last round offers no tools"
    assert sum(m.role == "tool" for m in llm.seen[-1]) == MAX_SERVER_ROUNDS, "it answers with every result"
    await h.session.close()


async def test_a_client_function_call_reusing_a_call_id_is_refused() -> None:
    h = Harness(FakeLanguageModel())
    call = {"type": "function_call", "call_id": "call_same", "name": "get_weather", "arguments": "{}"}
    await h.send(type="conversation.item.create", item=call)
    await h.until("conversation.item.done")
    await h.send(type="conversation.item.create", item=call, event_id="evt_dup")
    await h.send(type="conversation.item.retrieve", item_id="item_missing")  # a marker: everything before is in
    await h.until("error")
    errors = h.of("error")
    assert any(e["error"].get("event_id") == "evt_dup" for e in errors), "the second call_id must be refused"
    await h.session.close()
