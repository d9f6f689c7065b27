"""The server an attack of ``bench.robustness.abuse`` aims at, what the attack found, and how an attacker connects:
from 127.0.0.2, still loopback (so local-only mode lets it in) but not the honest session's address."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

ATTACKER = "127.0.0.2"


@dataclass
class Target:
    """The server under attack."""

    host_port: str
    outside_ip: str | None
    """A non-loopback address of this machine the server also listens on (None: not reachable so)."""
    idle_timeout_s: float
    handshake_timeout_s: float
    per_client: int
    duration_s: float
    events_per_s: float = 200.0
    event_burst: int = 200
    """The server's ``--event-burst``: events it serves at once before the rate holds them back."""
    webrtc_connect_timeout_s: float = 15.0
    """How long an answered WebRTC call may take to connect before the server reaps it."""
    offer_refill_s: float = 0.0
    """How long the server's offer rate takes to refill an address's burst (an attack that needs the whole burst
    waits this long first, so the attack before it does not leave it rate-limited)."""


@dataclass
class Outcome:
    """What an attack found: did the defence hold, and what happened."""

    held: bool
    note: str


Attack = Callable[[Target], Awaitable[Outcome]]
"""One attack: run it against the target, say whether the defence held."""


def attack_url(target: Target) -> str:
    """The Realtime URL of the server under attack."""
    return f"ws://{target.host_port}/v1/realtime?model=abuse"


async def open_as_attacker(target: Target, *, max_queue: int | None = 64, **kwargs: Any) -> ClientConnection:
    """A session opened from the attacker's address, with no limit on what it may receive."""
    ws = await connect(attack_url(target), local_addr=(ATTACKER, 0), max_size=None, max_queue=max_queue,
                       open_timeout=10, **kwargs)
    return ws


async def next_event_of(ws: ClientConnection, kind: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """The next event of type ``kind``, skipping the others; TimeoutError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        event = json.loads(await asyncio.wait_for(ws.recv(), max(0.01, deadline - time.monotonic())))
        if event["type"] == kind:
            return event  # type: ignore[no-any-return]
