"""The drain waits for the answer owed to a turn the user had just ended when the signal came, not only for a
reply already streaming: the duplex machine says what it owes, the drain reads it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from bargein.server.drain import Drain
from bargein.session import core as dx
from bargein.session.core.machine import DuplexMachine
from tests.support.timelines import Timeline, of


def _turn_just_ended(settings: dx.TurnSettings | None = None) -> tuple[Timeline, str]:
    """The user spoke a turn and its endpoint committed it: it is being recognised and judged."""
    t = Timeline(settings or dx.TurnSettings())
    t.speech(640)
    return t, of(t.silence(544), dx.CommitBuffer)[0].item_id


def test_a_turn_being_judged_is_owed_a_reply_before_any_reply_starts() -> None:
    t, item_id = _turn_just_ended()
    assert t.machine.active_response_id is None and t.machine.owes_reply
    started = of(t.feed(dx.SegmentClassified(item_id, "query")), dx.StartReply)
    assert started and t.machine.owes_reply
    t.feed(dx.ReplyFinished(started[0].response_id))
    assert not t.machine.owes_reply


def test_a_turn_judged_noise_owes_nothing() -> None:
    t, item_id = _turn_just_ended()
    t.feed(dx.SegmentClassified(item_id, "noise"))
    assert not t.machine.owes_reply and not of(t.actions, dx.StartReply)


def test_a_turn_the_client_answers_itself_owes_no_automatic_reply() -> None:
    """With ``create_response`` off the client decides whether to answer: nothing for the drain to wait on."""
    t, _ = _turn_just_ended(dx.TurnSettings(create_response=False))
    assert not t.machine.owes_reply


class _Outbound(list[Any]):
    """A session's outbound queue that its writer has always emptied: what was put is kept, nothing is pending."""

    def put(self, item: Any) -> None:
        self.append(item)

    def __len__(self) -> int:
        return 0


class _Session:
    """What the drain touches of a session: what it owes (read from its machine) and its outbound queue."""

    def __init__(self, machine: DuplexMachine) -> None:
        self.machine = machine
        self.outbound = _Outbound()

    @property
    def replying(self) -> bool:
        return self.machine.active_response_id is not None

    @property
    def owes_reply(self) -> bool:
        return self.machine.owes_reply


async def test_the_drain_waits_for_the_answer_to_a_turn_that_had_just_ended() -> None:
    t, item_id = _turn_just_ended()
    session = _Session(t.machine)
    drain = Drain(SimpleNamespace(live={session}, sockets={}), drain_s=10.0)

    async def judged_then_answered() -> None:
        await asyncio.sleep(0.3)  # recognition and the verdict
        started = of(t.feed(dx.SegmentClassified(item_id, "query")), dx.StartReply)[0]
        await asyncio.sleep(0.3)  # the reply streams
        t.feed(dx.ReplyFinished(started.response_id))

    await asyncio.gather(drain.run(), judged_then_answered())
    waited_s, what = drain.timeline[1]
    assert what == "replies finished" and waited_s >= 0.6, drain.timeline
    assert [event.event["error"]["code"] for event in session.outbound] == ["server_shutting_down"]


class _Socket:
    """A WebSocket that records when it was closed, against what the session had sent by then."""

    def __init__(self, session: _Session) -> None:
        self.session = session
        self.sent_at_close: list[str] | None = None
        self.scope: dict[str, Any] = {}

    async def close(self, code: int, reason: str) -> None:
        self.sent_at_close = [item.event["type"] for item in self.session.outbound]


class _CancellingSession(_Session):
    """A session whose client's ``response.cancel`` the drain sends is carried out by the machine."""

    async def handle_message(self, text: str) -> None:
        if (response_id := self.machine.active_response_id) is not None:
            self.machine.feed(dx.ClientResponseCancel(response_id, None))
            self.outbound.put(SimpleNamespace(event={"type": "response.done", "response": {"id": response_id}}))


async def test_a_reply_begun_just_before_the_close_frame_is_cut_before_it() -> None:
    """A turn judged while the session's last events were leaving starts a reply in the drain's final moments: the
    reply is cancelled, its ``response.done`` out, before the close frame; never a reply left without an end."""
    t, item_id = _turn_just_ended()
    t.feed(dx.SegmentClassified(item_id, "noise"))  # nothing owed: the drain closes at once
    session = _CancellingSession(t.machine)
    socket = _Socket(session)
    drain = Drain(SimpleNamespace(live={session}, sockets={session: socket}), drain_s=10.0)

    async def a_turn_judged_meanwhile() -> None:
        await asyncio.sleep(0.03)  # during the wait for the writer's last send
        t.speech(640)
        late = of(t.silence(544), dx.CommitBuffer)[0].item_id
        assert of(t.feed(dx.SegmentClassified(late, "query")), dx.StartReply)

    await asyncio.gather(drain.run(), a_turn_judged_meanwhile())
    assert socket.sent_at_close == ["error", "response.done"], socket.sent_at_close
    assert t.machine.active_response_id is None
