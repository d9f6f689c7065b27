"""Typed turns over a raw WebSocket: open a manual-turn session, ask, read until ``response.done``."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from websockets.asyncio.client import ClientConnection, connect


async def open_session(host: str, *, manual: bool = True) -> ClientConnection:
    """A session on ``host``; ``manual`` turns off turn detection (the client creates responses)."""
    ws = await connect(f"ws://{host}/v1/realtime")
    assert json.loads(await ws.recv())["type"] == "session.created"
    if manual:
        await ws.send(json.dumps({"type": "session.update", "session": {
            "type": "realtime", "audio": {"input": {"turn_detection": None}}}}))
        assert json.loads(await ws.recv())["type"] == "session.updated"
    return ws


async def events_until_done(ws: ClientConnection, timeout: float = 15.0) -> list[dict[str, Any]]:
    """Every event up to and including the next ``response.done``."""
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while True:
        event = json.loads(await asyncio.wait_for(ws.recv(), max(0.1, deadline - time.monotonic())))
        events.append(event)
        if event["type"] == "response.done":
            return events


async def text_turn(ws: ClientConnection, text: str, timeout: float = 15.0) -> list[dict[str, Any]]:
    """Say ``text`` as a user message, ask for a response, and return its events."""
    await ws.send(json.dumps({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}))
    await ws.send(json.dumps({"type": "response.create"}))
    return await events_until_done(ws, timeout)


def spoken(events: list[dict[str, Any]]) -> str:
    """The transcript of the response that ``events`` ends with ('' if it has no output)."""
    done = events[-1]["response"]
    return str(done["output"][0]["content"][0]["transcript"]) if done["output"] else ""
