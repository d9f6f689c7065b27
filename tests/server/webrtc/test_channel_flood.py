"""A data channel kept over the event rate is counted at the door (before any parsing) and the call's reader is told
to end it; an honest caller at the rate is never marked."""

from __future__ import annotations

import asyncio

from bargein.server.limits import EventRateLimiter
from bargein.server.webrtc.media import Inbox

FLOOD = '{"type":"session.update","session":{}}'


def _inbox(now: list[float]) -> Inbox:
    return Inbox(1024 * 1024, EventRateLimiter(100.0, 100, sustain_s=10.0, clock=lambda: now[0]))


async def test_a_flood_at_the_door_marks_the_channel_and_the_reader_gets_none() -> None:
    now = [0.0]
    inbox = _inbox(now)
    arrived = 0
    while not inbox.flooded and now[0] < 5.0:  # 2,000 messages a second, twenty times the rate
        inbox.put(FLOOD)
        arrived += 1
        now[0] += 0.0005
    assert inbox.flooded, "the flood was never marked"
    assert now[0] < 1.0, "marked once its backlog would take the tolerance (10 s) to serve, not after 10 s"
    assert await asyncio.wait_for(inbox.get(), 1.0) is None, "the reader ends the call, skipping what is queued"
    queued = len(inbox.messages)
    inbox.put(FLOOD)
    assert len(inbox.messages) == queued, "nothing more is queued once flooding"


async def test_an_honest_caller_at_the_rate_is_never_marked() -> None:
    now = [0.0]
    inbox = _inbox(now)
    for _ in range(150):  # a burst half again its 100, then 80 a second for ten seconds
        inbox.put(FLOOD)
    for _ in range(800):
        now[0] += 0.0125
        inbox.put(FLOOD)
        await inbox.get()
    assert not inbox.flooded
