"""Graceful drain: a real ``bargein serve`` process, a real SIGTERM, a live reply streaming meanwhile."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.server.app import create_app
from bench.robustness.drain import drain_timeline
from tests.server.test_hostile_connections import _raw_websocket
from tests.support import server as support


async def test_sigterm_drains_live_replies_then_closes_with_1001() -> None:
    timeline = await drain_timeline(drain_s=30, reply_chars=150)  # about 9 s of audio

    assert timeline.health_503_at is not None and timeline.health_body["draining"] is True
    assert timeline.refused_event is not None and timeline.refused_event["type"] == "error"
    assert timeline.refused_event["error"]["code"] == "server_unavailable"
    assert timeline.refused_code == 1013
    types = [event["type"] for _, event in timeline.events]
    done = timeline.first("response.done")
    assert done is not None and done[1]["response"]["status"] == "completed", "the live reply finished"
    assert types.count("response.output_audio.delta") > 5, "its audio kept streaming after the signal"
    final_at, final = timeline.events[-1]
    assert final["type"] == "error" and final["error"]["code"] == "server_shutting_down"
    assert "shutting down" in final["error"]["message"]
    assert done[0] <= final_at
    assert timeline.close_code == 1001
    assert timeline.exit_code == 0


async def test_drain_deadline_cuts_a_reply_that_runs_too_long() -> None:
    timeline = await drain_timeline(drain_s=1.0, reply_chars=300)  # about 18 s of audio

    done = timeline.first("response.done")
    assert done is not None and done[1]["response"]["status"] == "cancelled", "cut at the deadline"
    final_at, final = timeline.events[-1]
    types = [event["type"] for _, event in timeline.events]
    after_cut = types[types.index("response.done") + 1:]
    assert "response.output_audio.delta" not in after_cut, "no audio after the cut"
    assert final["type"] == "error" and final["error"]["code"] == "server_shutting_down"
    assert final_at >= 1.0, "the reply had its deadline"
    assert timeline.close_code == 1001
    assert timeline.exit_code == 0


async def test_with_workers_each_worker_drains_its_own_sessions() -> None:
    timeline = await drain_timeline(drain_s=30, reply_chars=150, workers=2)

    done = timeline.first("response.done")
    assert done is not None and done[1]["response"]["status"] == "completed", "the live reply finished"
    final_at, final = timeline.events[-1]
    assert final["type"] == "error" and final["error"]["code"] == "server_shutting_down"
    assert done[0] <= final_at
    assert timeline.close_code == 1001
    # the supervisor raises the shared draining flag before it signals any worker: whichever worker the kernel
    # hands the late client to refuses it
    assert timeline.refused_event is not None and timeline.refused_event["error"]["code"] == "server_unavailable"
    assert timeline.refused_code == 1013
    assert timeline.exit_code == 0


def test_a_rolling_restart_raises_no_draining_flag() -> None:
    """SIGHUP replaces the workers one at a time: the new ones serve, none refuses as if draining."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    import httpx
    from websockets.sync.client import connect

    from tests.support.server import free_port

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "bargein", "serve", "--engines", "instant", "--workers", "2",
                               "--port", str(port), "--log-level", "warning"],
                              env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)

    def workers() -> set[str]:
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
        except httpx.HTTPError:
            return set()
        return {line.split('"')[1] for line in text.splitlines() if line.startswith("bargein_worker_sessions{")}

    try:
        deadline = time.monotonic() + 90
        while len(before := workers()) < 2 and time.monotonic() < deadline:
            time.sleep(0.3)
        assert len(before) == 2
        server.send_signal(signal.SIGHUP)
        after: set[str] = set()
        while time.monotonic() < deadline + 60 and not (len(after) == 2 and not after & before):
            time.sleep(0.3)
            after = workers()
        assert len(after) == 2 and not after & before, (before, after)
        assert all(httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200 for _ in range(10))
        with connect(f"ws://127.0.0.1:{port}/v1/realtime") as ws:
            assert json.loads(ws.recv(timeout=10))["type"] == "session.created"
    finally:
        server.terminate()
        server.wait(timeout=30)


async def test_the_drain_stops_accepting_then_lets_open_connections_end_before_uvicorn_closes_them() -> None:
    """uvicorn's shutdown closes every open WebSocket with 1012: a refusal still being said (error event, then
    1013) must end first. A worker with nothing to drain got there within ms, its listener still open."""
    import asyncio
    from types import SimpleNamespace

    from bargein.server.drain import settle_connections

    class Listener:
        closed_at: float | None = None

        def close(self) -> None:
            self.closed_at = loop.time()

    loop = asyncio.get_running_loop()
    listener = Listener()
    refusal = object()
    server = SimpleNamespace(servers=[listener], server_state=SimpleNamespace(connections={refusal}))
    loop.call_later(0.15, server.server_state.connections.discard, refusal)
    started = loop.time()
    await settle_connections(server, limit_s=1.0)
    assert listener.closed_at is not None and listener.closed_at - started < 0.05, "no new connection lands here"
    assert 0.14 <= loop.time() - started < 0.5, "the refusal ended before the server went on to exit"
    server.server_state.connections.add(object())  # a client that never closes: bounded
    started = loop.time()
    await settle_connections(server, limit_s=0.2)
    assert 0.19 <= loop.time() - started < 0.5
    hurry = asyncio.Event()
    loop.call_later(0.05, hurry.set)  # a second signal
    started = loop.time()
    await settle_connections(server, limit_s=5.0, hurry=hurry)
    assert loop.time() - started < 0.5



def _fake_engines() -> Engines:
    return Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer())


async def test_a_drain_that_begins_while_a_connection_is_accepted_refuses_it() -> None:
    """The signal may land while the server writes the upgrade: the drain has then already listed the sessions
    it will tell, so one admitted after that would get uvicorn's bare 1012 instead of a refusal."""
    app = create_app(Settings(), _fake_engines())
    state = app.state.bargein
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await inbox.put({"type": "websocket.connect"})
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return await inbox.get()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "websocket.accept":
            state.drain.signalled = True  # SIGTERM, while the handshake's answer is being written
            await asyncio.sleep(0)
        elif message["type"] in ("websocket.send", "websocket.close"):
            await inbox.put({"type": "websocket.disconnect", "code": 1000})

    scope = {"type": "websocket", "asgi": {"version": "3.0"}, "scheme": "ws", "path": "/v1/realtime",
             "raw_path": b"/v1/realtime", "query_string": b"", "headers": [(b"host", b"127.0.0.1:8000")],
             "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8000), "subprotocols": [], "root_path": "",
             "state": {}}
    await asyncio.wait_for(app(scope, receive, send), 10)
    said = [json.loads(message["text"]) for message in sent if message["type"] == "websocket.send"]
    assert said and said[0]["type"] == "error" and said[0]["error"]["code"] == "server_unavailable", said[:1]
    assert "shutting down" in said[0]["error"]["message"]
    assert [message.get("code") for message in sent if message["type"] == "websocket.close"] == [1013]


def test_a_client_that_never_reads_does_not_hold_up_the_drain(monkeypatch: pytest.MonkeyPatch) -> None:
    """The drain closes each session; a client that reads nothing (its socket's buffers full, the server's
    writes paused) must not keep the close, and so the whole shutdown, waiting on it."""
    apps: list[FastAPI] = []
    original = support.create_app

    def capture(*args: Any, **kwargs: Any) -> FastAPI:
        apps.append(original(*args, **kwargs))
        return apps[-1]

    monkeypatch.setattr(support, "create_app", capture)
    settings = Settings(port=support.free_port(), events_per_s=100_000, event_burst=100_000, drain_s=0.0,
                        idle_timeout_s=0, max_loop_lag_ms=60_000)
    with support.running_server(_fake_engines(), settings) as host:
        state = apps[0].state.bargein
        hog = _raw_websocket(host)
        hog.settimeout(30)
        update = json.dumps({"type": "session.update", "session": {"instructions": "x" * 60_000}}).encode()
        frame = bytes([0x81, 0x80 | 127]) + len(update).to_bytes(8, "big") + b"\0\0\0\0" + update
        hog.sendall(frame * 200)  # each answered by a session.updated that echoes it: 12 MB it never reads
        for _ in range(300):  # until the server's writes to it wait
            if httpx.get(f"http://{host}/healthz").json()["load"]["queue_depths"].get("outbound", 0.0) > 16:
                break
            time.sleep(0.1)
        assert state.drain.loop is not None
        drained = asyncio.run_coroutine_threadsafe(state.drain.run(), state.drain.loop)
        try:
            drained.result(timeout=20)  # FLUSH_S, then as long again for the close: seconds; unbounded, minutes
        finally:
            state.drain.hurry.set()
        for _ in range(100):  # its connection dropped, the session ends
            if not state.registry.live:
                break
            time.sleep(0.1)
        hog.close()
    assert "closed 1 session(s)" in state.drain.timeline[-1][1]
    assert not state.registry.live
