"""Graceful drain: a real ``bargein serve`` process, a real SIGTERM, a live reply streaming meanwhile."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.support.server import free_port

ROOT = Path(__file__).resolve().parent.parent
LONG_TEXT = "please read this sentence back to me slowly " * 3  # the fake TTS speaks 60 ms a character


@contextmanager
def server_process(drain_s: float) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``bargein serve --engines fake`` in its own process; yields it and ``host:port`` once ready."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "bargein", "serve", "--engines", "fake", "--port", str(port),
                                "--drain-s", str(drain_s), "--log-level", "warning"], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    host = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://{host}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
        yield process, host
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


async def start_long_reply(ws: Any) -> None:
    assert json.loads(await ws.recv())["type"] == "session.created"
    await ws.send(json.dumps({"type": "session.update", "session": {
        "type": "realtime", "audio": {"input": {"turn_detection": None}}}}))
    await ws.send(json.dumps({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": LONG_TEXT}]}}))
    await ws.send(json.dumps({"type": "response.create"}))
    while json.loads(await ws.recv())["type"] != "response.output_audio.delta":
        pass


async def read_until_closed(ws: Any, started: float) -> tuple[list[tuple[float, dict[str, Any]]], int | None]:
    events: list[tuple[float, dict[str, Any]]] = []
    try:
        while True:
            events.append((time.monotonic() - started, json.loads(await ws.recv())))
    except ConnectionClosed as closed:
        return events, closed.rcvd.code if closed.rcvd else None


async def test_sigterm_drains_live_replies_then_closes_with_1001() -> None:
    with server_process(drain_s=30) as (process, host):
        async with connect(f"ws://{host}/v1/realtime") as ws:
            await start_long_reply(ws)
            signalled = time.monotonic()
            process.send_signal(signal.SIGTERM)
            reading = asyncio.create_task(read_until_closed(ws, signalled))
            async with httpx.AsyncClient() as http:
                for _ in range(50):
                    health = await http.get(f"http://{host}/healthz")
                    if health.status_code == 503:
                        break
                    await asyncio.sleep(0.05)
            assert health.status_code == 503 and health.json()["draining"] is True
            async with connect(f"ws://{host}/v1/realtime") as late:
                refused = json.loads(await late.recv())
                assert refused["type"] == "error" and refused["error"]["code"] == "server_unavailable"
                _, late_code = await read_until_closed(late, signalled)
            assert late_code == 1013
            events, code = await reading
        exit_code = await asyncio.to_thread(process.wait, 30)
        exited = time.monotonic() - signalled

    types = [event["type"] for _, event in events]
    done = next(event for _, event in events if event["type"] == "response.done")
    assert done["response"]["status"] == "completed", "the live reply finished"
    assert types.count("response.output_audio.delta") > 5, "its audio kept streaming after the signal"
    final_at, final = events[-1]
    assert final["type"] == "error" and final["error"]["code"] == "server_shutting_down"
    assert "shutting down" in final["error"]["message"]
    assert types.index("response.done") < len(types) - 1
    assert code == 1001
    assert exit_code == 0
    assert final_at < 30 and exited < 30


async def test_drain_deadline_cuts_a_reply_that_runs_too_long() -> None:
    with server_process(drain_s=1.0) as (process, host):
        async with connect(f"ws://{host}/v1/realtime") as ws:
            await start_long_reply(ws)
            signalled = time.monotonic()
            process.send_signal(signal.SIGTERM)
            events, code = await read_until_closed(ws, signalled)
        exit_code = await asyncio.to_thread(process.wait, 30)

    types = [event["type"] for _, event in events]
    assert "response.done" not in types, "the reply (about 8 s of audio) cannot finish in 1 s"
    final_at, final = events[-1]
    assert final["type"] == "error" and final["error"]["code"] == "server_shutting_down"
    assert code == 1001
    assert 0.9 <= final_at < 5.0
    assert exit_code == 0
