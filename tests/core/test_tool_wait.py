"""The duplex machine's wait for a client function's output: its own phase, no idle prompt while the client
owes an output, speech during the wait handled as a turn, and the wait ending on the output or the timeout."""

from __future__ import annotations

import asyncio
import json

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.session import core as dx
from bargein.session.realtime_session import RealtimeSession
from tests.session.test_session_tools import WEATHER
from tests.support.timelines import NO_CLASSIFIER, Timeline, of

IDLE = dx.TurnSettings(idle_timeout_ms=6_000, listening=dx.Listening(classify=False))


def reply_with_a_call(line: Timeline) -> str:
    [start] = of(line.feed(dx.ClientResponseCreate(None, None)), dx.StartReply)
    line.feed(dx.ToolWait(owed=True))  # the reply's function_call went out
    line.feed(dx.ReplyFinished(start.response_id))
    return start.response_id


def test_a_call_left_open_is_its_own_phase_and_never_an_idle_prompt() -> None:
    line = Timeline(IDLE)
    reply_with_a_call(line)
    assert line.machine.phase is dx.Phase.AWAITING_TOOL
    assert not of(line.actions, dx.ArmIdleTimer)
    line.feed(dx.IdleTimerFired(60_000))  # a stale timer from before: still no idle reply
    assert not of(line.actions, dx.StartReply)[1:]
    settled = line.feed(dx.ToolWait(owed=False))  # answered, or timed out
    assert line.machine.phase is dx.Phase.LISTENING
    assert of(settled, dx.ArmIdleTimer) == [dx.ArmIdleTimer(6_000)]


def test_speech_during_the_wait_is_a_turn_and_the_wait_outlives_it() -> None:
    line = Timeline(NO_CLASSIFIER)
    reply_with_a_call(line)
    line.speech(600)
    assert line.machine.phase is dx.Phase.USER_SPEAKING
    turn = line.silence(800)
    [reply] = of(turn, dx.StartReply)  # the user's new question is answered while the call is still owed
    line.feed(dx.ReplyFinished(reply.response_id))
    assert line.machine.phase is dx.Phase.AWAITING_TOOL
    line.feed(dx.ToolWait(owed=False))
    assert line.machine.phase is dx.Phase.LISTENING


async def test_the_session_waits_for_the_output_and_then_listens() -> None:
    llm = FakeLanguageModel(calls={"weather": ("get_weather", '{"city": "Paris"}')})
    session = RealtimeSession(Engines(FakeVad(), FakeRecognizer(), llm, FakeSynthesizer()))
    session.start()

    async def send(**event: object) -> None:
        await session.handle_message(json.dumps(event))

    async def until(kind: str) -> dict[str, object]:
        while True:
            item = await asyncio.wait_for(session.outbound.get(), 10)
            if item.event["type"] == kind:
                return item.event

    await send(type="session.update", session={"tools": [WEATHER], "output_modalities": ["text"]})
    await send(type="conversation.item.create", item={"type": "message", "role": "user",
                                                      "content": [{"type": "input_text", "text": "weather?"}]})
    await send(type="response.create")
    done = await until("response.done")
    assert session.machine.phase is dx.Phase.AWAITING_TOOL
    call_id = done["response"]["output"][-1]["call_id"]  # type: ignore[index]
    await send(type="conversation.item.create", item={"type": "function_call_output", "call_id": call_id,
                                                      "output": "sunny"})
    assert session.machine.phase is dx.Phase.LISTENING
    session.replies.pending.timeout_s = 0.05  # and a call nobody answers ends the wait by itself
    await send(type="conversation.item.create", item={"type": "message", "role": "user",
                                                      "content": [{"type": "input_text", "text": "weather again"}]})
    await send(type="response.create")
    await until("response.done")
    assert session.machine.phase is dx.Phase.AWAITING_TOOL
    await until("conversation.item.added")  # the timeout's output item
    assert session.machine.phase is dx.Phase.LISTENING
    await session.close()
