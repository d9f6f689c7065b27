"""Server-layer defects an operator would hit: per-client limits behind a trusted proxy, key comparison,
and a reply that begins while the drain is closing its session."""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from bargein.config import Settings
from bargein.metrics.aggregate import WorkerBoard, WorkerFigures, merged_exposition
from bargein.server import auth
from bargein.server.drain import Drain
from bargein.session.outbound import Outbound, OutboundClosed, Outgoing
from tests.server.test_hostile_connections import _closed, fake_engines
from tests.support.server import free_port, running_server

KEY = "sk-test"


def _first(url: str, forwarded_for: str) -> tuple[str, Any]:
    """The first event one connection gets, and (for a refused one) its close code."""
    headers = {"Authorization": f"Bearer {KEY}", "X-Forwarded-For": forwarded_for}
    ws = connect(url, additional_headers=headers)
    event = json.loads(ws.recv(timeout=5))
    if event["type"] == "error":
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=5)
        return event["error"]["code"], ws.close_code
    return event["type"], ws


def test_behind_a_trusted_proxy_the_session_cap_is_per_forwarded_client() -> None:
    # every session arrives from the proxy's address: counted by it, the 3rd user of the whole server is refused
    settings = Settings(port=free_port(), api_keys=[KEY], forwarded_allow_ips="127.0.0.1", max_connections_per_client=2)
    with running_server(fake_engines(), settings) as host:
        url = f"ws://{host}/v1/realtime"
        opened = [_first(url, f"203.0.113.{n}") for n in range(1, 5)]
        assert [kind for kind, _ in opened] == ["session.created"] * 4
        assert _first(url, "203.0.113.1")[0] == "session.created"  # its 2nd
        assert _first(url, "203.0.113.1") == ("too_many_sessions", 1008)  # its 3rd: the cap still holds per client
        for _, ws in opened:
            ws.close()


def test_without_a_trusted_proxy_a_forged_forwarded_for_does_not_lift_the_cap() -> None:
    settings = Settings(port=free_port(), api_keys=[KEY], max_connections_per_client=2)
    with running_server(fake_engines(), settings) as host:
        url = f"ws://{host}/v1/realtime"
        opened = [_first(url, f"203.0.113.{n}") for n in range(1, 3)]
        assert [kind for kind, _ in opened] == ["session.created"] * 2
        assert _first(url, "203.0.113.9") == ("too_many_sessions", 1008)
        for _, ws in opened:
            ws.close()


def test_every_api_key_is_compared_whichever_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    # stopping at the first match tells by the time taken which key (its position) a client holds
    calls: list[bytes] = []
    original = hmac.compare_digest

    def counting(a: Any, b: Any) -> bool:
        calls.append(b)
        return original(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", counting)

    class _Handshake:
        def __init__(self) -> None:
            self.scope = {"type": "websocket", "headers": [], "subprotocols": [], "client": ("203.0.113.9", 1)}
            self.headers = {"authorization": "Bearer first"}

    decision = auth.authorize(_Handshake(), Settings(api_keys=["first", "second", "third"]))  # type: ignore[arg-type]
    assert decision.allowed
    assert len(calls) == 3


class _Machine:
    active_response_id: str | None = None


class _Session:
    """A session whose turn ends just as the drain tells it: its reply begins after the shutdown error."""

    def __init__(self) -> None:
        self.machine = _Machine()
        self.outbound = Outbound()
        self.sent: list[str] = []

    @property
    def replying(self) -> bool:
        return self.machine.active_response_id is not None

    @property
    def owes_reply(self) -> bool:
        return self.replying

    def begin_reply(self) -> None:
        self.machine.active_response_id = "resp_1"
        self.outbound.put(Outgoing({"type": "response.created", "response": {"id": "resp_1"}}))

    async def handle_message(self, raw: str) -> None:
        if json.loads(raw)["type"] == "response.cancel" and self.machine.active_response_id:
            self.machine.active_response_id = None
            self.outbound.put(Outgoing({"type": "response.done", "response": {"status": "cancelled"}}))

    async def write(self, ws: _Socket) -> None:
        """The connection's writer: what leaves before the close frame reaches the client."""
        while True:
            try:
                item = await self.outbound.get()
            except OutboundClosed:
                return
            if ws.closed:
                return
            self.sent.append(item.event["type"])
            if item.event["type"] == "error":
                self.begin_reply()


class _Socket:
    def __init__(self) -> None:
        self.closed = False
        self.scope: dict[str, Any] = {}

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed = True


async def test_a_reply_that_begins_while_the_drain_closes_its_session_gets_its_response_done() -> None:
    session, ws = _Session(), _Socket()

    class _Registry:
        def __init__(self) -> None:
            self.live = {session}
            self.sockets = {session: ws}

    writer = asyncio.create_task(session.write(ws))
    await Drain(_Registry(), 0.0).run()  # type: ignore[arg-type]
    writer.cancel()
    assert session.sent[0] == "error"
    assert "response.created" in session.sent, "the reply began before the close"
    assert session.sent[-1] == "response.done", f"cut without its response.done: {session.sent}"


def test_a_trusted_proxy_is_not_held_to_the_per_address_handshake_cap() -> None:
    # a reconnect storm through the proxy: its handshakes are every user's, only the timeout applies to them
    settings = Settings(port=free_port(), api_keys=[KEY], forwarded_allow_ips="127.0.0.3/32", handshake_timeout_s=1.0,
                        max_connections_per_client=2)
    with running_server(fake_engines(), settings) as host:
        address, port = host.split(":")
        proxied = [_half_open(address, int(port), "127.0.0.3") for _ in range(5)]
        other = [_half_open(address, int(port), "127.0.0.4") for _ in range(5)]
        time.sleep(0.3)
        assert sum(map(_closed, proxied)) == 0
        assert sum(map(_closed, other)) == 3  # anyone else still is
        time.sleep(1.5)
        assert sum(map(_closed, proxied)) == 5  # and the proxy to the timeout
        for sock in proxied + other:
            sock.close()


def _half_open(address: str, port: int, source: str) -> socket.socket:
    sock = socket.create_connection((address, port), source_address=(source, 0))
    sock.sendall(b"GET /v1/realtime HTTP/1.1\r\nHost: x\r\n")  # and never the end of the headers
    return sock


def _figures(pid: int, turns: float, sessions: float) -> WorkerFigures:
    registry = CollectorRegistry()
    Counter("bargein_turns", "", ["status"], registry=registry).labels("completed").inc(turns)
    Gauge("bargein_sessions", "", registry=registry).set(sessions)
    return WorkerFigures(pid, generate_latest(registry).decode(), {"sessions": sessions})


def _scrape(board: WorkerBoard, own: WorkerFigures) -> str:
    return merged_exposition(board.gather(own), retired=board.retired()).decode()


def test_a_dead_or_retired_workers_counts_stay_in_the_totals(tmp_path: Path) -> None:
    # the totals falling when a worker dies reads as a counter reset: rate() counts the survivors' totals again
    board = WorkerBoard(str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    board.publish(_figures(dead.pid, 5, 2))
    me = _figures(os.getpid(), 3, 1)
    for _ in range(2):  # folded in once, not once a scrape
        text = _scrape(board, me)
        assert 'bargein_turns_total{status="completed"} 8.0' in text
        assert "bargein_sessions 1.0" in text, "a gone worker's gauges are not counted"
        assert "bargein_workers 1.0" in text
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        board.publish(_figures(sibling.pid, 4, 1))
        assert 'bargein_turns_total{status="completed"} 12.0' in _scrape(board, me)
        board.withdraw(sibling.pid)  # a rolling restart retires it cleanly
        assert 'bargein_turns_total{status="completed"} 12.0' in _scrape(board, me)
    finally:
        sibling.kill()
        sibling.wait()
