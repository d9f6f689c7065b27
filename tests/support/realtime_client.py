"""The official ``openai`` client as the protocol peer: stream audio in real time, collect raw events."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from openai import AsyncOpenAI
from openai.types.realtime.realtime_server_event import RealtimeServerEvent
from pydantic import TypeAdapter

from testdata.speech import chunks_20ms

SERVER_EVENT = TypeAdapter(RealtimeServerEvent)


@dataclass
class Received:
    """A server event and when it arrived (monotonic seconds)."""

    event: dict[str, Any]
    at: float


@dataclass
class EventLog:
    """Every event received on a connection, in order."""

    events: list[Received] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def of(self, type_: str) -> list[dict[str, Any]]:
        """Events of one type."""
        return [r.event for r in self.events if r.event["type"] == type_]

    def types(self) -> list[str]:
        """Event types in arrival order."""
        return [r.event["type"] for r in self.events]

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 30.0) -> dict[str, Any]:
        """The first event (already received or future) matching ``predicate``."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for received in self.events[seen:]:
                if predicate(received.event):
                    return received.event
            seen = len(self.events)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no matching event; got {self.types()[-30:]}")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)


def validate_server_event(event: dict[str, Any]) -> None:
    """Every non-``bargein.`` event must be a valid ``RealtimeServerEvent``."""
    if not event["type"].startswith("bargein."):
        SERVER_EVENT.validate_python(event)


async def collect(connection: Any, log: EventLog) -> None:
    """Read raw events until the connection closes."""
    try:
        while True:
            raw = await connection.recv_bytes()
            log.events.append(Received(json.loads(raw), time.monotonic()))
            log.changed.set()
    except Exception:
        log.changed.set()


async def stream_realtime(connection: Any, pcm: bytes, *, stop: Callable[[], bool] | None = None) -> float:
    """Send ``pcm`` as 20 ms appends paced at real time; returns the monotonic time the last one left."""
    start = time.monotonic()
    for index, chunk in enumerate(chunks_20ms(pcm)):
        if stop is not None and stop():
            break
        await connection.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())
        delay = start + (index + 1) * 0.02 - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
    return time.monotonic()


BARGEIN_EVENTS = {"bargein_events": "1"}
"""The connection query that asks the server for its ``bargein.*`` events too."""


def openai_client(host_port: str, api_key: str = "sk-local") -> AsyncOpenAI:
    """An ``AsyncOpenAI`` pointed at a bargein server."""
    return AsyncOpenAI(api_key=api_key, websocket_base_url=f"ws://{host_port}/v1", max_retries=0)


def assert_spoken_reply(log: EventLog) -> None:
    """The replies' audio deltas in ``log`` make a spoken answer: over half a second, and not silence."""
    import numpy as np

    pcm = b"".join(base64.b64decode(d["delta"]) for d in log.of("response.output_audio.delta"))
    audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768
    assert len(audio) / 24_000 > 0.5, "a spoken answer lasts more than half a second"
    assert float(np.sqrt(np.mean(audio**2))) > 0.01, "and it is not silence"
