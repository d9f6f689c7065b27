"""Connections that misbehave, against a real uvicorn server: each attack of issue 12, with its bound asserted."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidMessage, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.protocol.client_events import parse_client_event
from bargein.protocol.errors import ProtocolError
from bargein.protocol.server_events import error_event
from bargein.server.limits import EventRateLimiter
from tests.support.server import free_port, running_server


def fake_engines() -> Engines:
    return Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer())


def next_of(ws: ClientConnection, kind: str, timeout: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        event: dict[str, Any] = json.loads(ws.recv(timeout=max(0.01, deadline - time.monotonic())))
        if event["type"] == kind:
            return event


def test_half_open_handshakes_are_closed_and_capped_per_address() -> None:
    settings = Settings(port=free_port(), handshake_timeout_s=1.0, max_connections_per_client=4)
    with running_server(fake_engines(), settings) as host:
        address, port = host.split(":")
        sockets = []
        for _ in range(12):
            sock = socket.create_connection((address, int(port)), source_address=("127.0.0.2", 0))
            sock.sendall(b"GET /v1/realtime HTTP/1.1\r\nHost: x\r\n")  # and never the end of the headers
            sockets.append(sock)
        time.sleep(0.3)
        closed_at_once = sum(_closed(sock) for sock in sockets)
        # another address is not affected, and neither is /healthz
        assert httpx.get(f"http://{host}/healthz", timeout=5).status_code == 200
        time.sleep(1.5)
        closed_later = sum(_closed(sock) for sock in sockets)
        for sock in sockets:
            sock.close()
    assert closed_at_once == 8  # over the 4 young connections allowed per address
    assert closed_later == 12  # the 4 admitted ones hit the 1 s handshake timeout


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(0.01)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_sessions_per_client_address_are_capped() -> None:
    with running_server(fake_engines(), Settings(port=free_port(), max_connections_per_client=3)) as host:
        url = f"ws://{host}/v1/realtime"
        opened = [connect(url) for _ in range(3)]
        for ws in opened:
            assert json.loads(ws.recv(timeout=5))["type"] == "session.created"
        with connect(url) as refused:
            error = json.loads(refused.recv(timeout=5))
            assert error["type"] == "error" and error["error"]["code"] == "too_many_sessions"
            with pytest.raises(ConnectionClosed):
                refused.recv(timeout=5)
            assert refused.close_code == 1008
        opened.pop().close()
        time.sleep(0.2)
        with connect(url) as again:  # a slot freed is a slot again
            assert json.loads(again.recv(timeout=5))["type"] == "session.created"
        for ws in opened:
            ws.close()


def test_a_silent_client_is_told_and_closed_after_the_idle_timeout() -> None:
    with running_server(fake_engines(), Settings(port=free_port(), idle_timeout_s=0.5)) as host, \
            connect(f"ws://{host}/v1/realtime") as ws:
        next_of(ws, "session.created")
        began = time.monotonic()
        error = next_of(ws, "error", 5)
        assert error["error"]["code"] == "session_idle"
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=5)
        assert ws.close_code == 1001 and time.monotonic() - began < 3


def test_a_client_that_keeps_talking_is_not_idle_but_still_meets_the_session_limit() -> None:
    with running_server(fake_engines(), Settings(port=free_port(), idle_timeout_s=0.6, max_session_s=1.5)) as host, \
            connect(f"ws://{host}/v1/realtime") as ws:
        next_of(ws, "session.created")
        codes = []
        began = time.monotonic()
        try:
            while time.monotonic() - began < 5:
                ws.send('{"type":"session.update","session":{}}')
                event = json.loads(ws.recv(timeout=1))
                if event["type"] == "error":
                    codes.append(event["error"]["code"])
                time.sleep(0.2)
        except ConnectionClosed:  # a send after the close: what was received is still there to read
            with pytest.raises(ConnectionClosed):
                while True:
                    event = json.loads(ws.recv(timeout=1))
                    if event["type"] == "error":
                        codes.append(event["error"]["code"])
        assert codes == ["session_expired"] and ws.close_code == 1001
        assert 1.4 < time.monotonic() - began < 3


def test_an_event_flood_is_held_to_the_rate_told_and_closed() -> None:
    settings = Settings(port=free_port(), events_per_s=50, event_burst=10, rate_limit_sustain_s=1.0)
    with running_server(fake_engines(), settings) as host, connect(f"ws://{host}/v1/realtime") as ws:
        next_of(ws, "session.created")
        began = time.monotonic()
        for _ in range(150):  # three seconds' worth of the rate, sent at once
            ws.send('{"type":"session.update","session":{}}')
        answered, codes = 0, []
        with pytest.raises(ConnectionClosed):
            while True:
                event = json.loads(ws.recv(timeout=10))
                answered += event["type"] == "session.updated"
                if event["type"] == "error":
                    codes.append(event["error"]["code"])
        took = time.monotonic() - began
    assert ws.close_code == 1008 and "rate_limit_exceeded" in codes
    assert answered <= 10 + 50 * took + 1  # never more than the burst plus the rate


def test_the_limiter_delays_bursts_and_closes_only_sustained_excess() -> None:
    now = [0.0]
    limiter = EventRateLimiter(100, 10, sustain_s=2.0, clock=lambda: now[0])
    assert all(limiter.admit(0).wait_s == 0 for _ in range(9))
    first_over = limiter.admit(0)
    assert first_over.wait_s == 0 and not first_over.tell  # the tenth still fits the burst
    over = limiter.admit(100)
    assert over.wait_s > 0 and over.tell and not over.close
    now[0] += over.wait_s
    big = limiter.admit(8 << 20)  # an 8 MiB message costs 513 events
    assert big.wait_s == pytest.approx(513 / 100, rel=0.01) and not big.tell
    for _ in range(300):  # keep sending back to back, waiting as told
        now[0] += limiter.admit(100).wait_s
        if limiter.admit(100).close:
            break
    assert now[0] > 1.5 and limiter.admit(100).close
    now[0] += 60  # a long pause: the slate is clean
    assert limiter.admit(100).wait_s == 0


def test_a_client_that_does_not_read_is_cut_off_and_its_memory_released() -> None:
    settings = Settings(port=free_port(), events_per_s=200, event_burst=200, rate_limit_sustain_s=1.0)
    with running_server(fake_engines(), settings) as host:
        ws = connect(f"ws://{host}/v1/realtime", max_queue=1)  # reads nothing once one event waits
        payload = json.dumps({"type": "nope", "event_id": "x" * 60_000})
        began = time.monotonic()
        with pytest.raises((ConnectionClosed, OSError)):
            while time.monotonic() - began < 20:
                ws.send(payload)
        assert time.monotonic() - began < 10
        time.sleep(0.5)
        assert httpx.get(f"http://{host}/healthz").json()["sessions"] == 0


def test_the_writer_dying_ends_the_session(monkeypatch: pytest.MonkeyPatch) -> None:
    from bargein.server import realtime_ws

    async def broken_write(self: Any) -> None:
        raise RuntimeError("the writer broke")

    monkeypatch.setattr(realtime_ws.RealtimeConnection, "_write", broken_write)
    with running_server(fake_engines()) as host, connect(f"ws://{host}/v1/realtime") as ws:
        error = json.loads(ws.recv(timeout=5))
        assert error["type"] == "error" and error["error"]["code"] == "server_error"
        assert "broke" not in error["error"]["message"]  # details go to the log
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=5)
        assert ws.close_code == 1011
        time.sleep(0.2)
        assert httpx.get(f"http://{host}/healthz").json()["sessions"] == 0


def test_a_300_deep_tools_update_is_refused_and_later_updates_still_work() -> None:
    nested: dict[str, Any] = {}
    for _ in range(300):
        nested = {"a": nested}
    with running_server(fake_engines()) as host, connect(f"ws://{host}/v1/realtime") as ws:
        next_of(ws, "session.created")
        ws.send(json.dumps({"type": "session.update", "event_id": "deep", "session": {"tools": [nested]}}))
        error = next_of(ws, "error")
        assert error["error"]["code"] == "invalid_event" and error["error"]["event_id"] == "deep"
        ws.send(json.dumps({"type": "session.update", "session": {"tools": [{"type": "function", "name": "f"}],
                                                                  "instructions": "Be brief."}}))
        updated = next_of(ws, "session.updated")
        assert updated["session"]["instructions"] == "Be brief." and len(updated["session"]["tools"]) == 1


def test_echoed_ids_and_error_messages_are_bounded() -> None:
    with pytest.raises(ProtocolError) as refused:
        parse_client_event(json.dumps({"type": "nope", "event_id": "x" * 60_000}))
    event = error_event(refused.value)
    assert event["error"]["event_id"] is None and len(json.dumps(event)) < 1_000
    long_message = error_event(ProtocolError("m" * 10_000, code="c" * 1_000, param="p" * 1_000, event_id="e1"))
    assert len(json.dumps(long_message)) < 1_000 and long_message["error"]["event_id"] == "e1"
    with pytest.raises(ProtocolError, match="deep"):
        parse_client_event("[" * 200_000)  # the JSON parser's own recursion is caught too
    with pytest.raises(ProtocolError, match="values"):
        parse_client_event(json.dumps({"type": "session.update", "session": {"tools": [[0] * 60_000]}}))


def test_handshakes_from_other_addresses_are_not_refused_while_one_is_flooding() -> None:
    settings = Settings(port=free_port(), handshake_timeout_s=5.0, max_connections_per_client=2)
    with running_server(fake_engines(), settings) as host:
        address, port = host.split(":")
        hogs = [socket.create_connection((address, int(port)), source_address=("127.0.0.2", 0)) for _ in range(5)]
        with pytest.raises((InvalidStatus, InvalidMessage, ConnectionClosed, OSError)), \
                connect(f"ws://{host}/v1/realtime", source_address=("127.0.0.2", 0)):  # type: ignore[call-arg]
            pass
        with connect(f"ws://{host}/v1/realtime") as ws:  # from 127.0.0.1
            assert json.loads(ws.recv(timeout=5))["type"] == "session.created"
        for sock in hogs:
            sock.close()


def _raw_websocket(host: str) -> socket.socket:
    """A WebSocket to ``/v1/realtime`` over a plain socket with a tiny receive buffer, never read after the upgrade."""
    address, port = host.split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((address, int(port)))
    sock.sendall((f"GET /v1/realtime HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    reply = b""
    while b"\r\n\r\n" not in reply:
        reply += sock.recv(1)
    assert b" 101 " in reply.split(b"\r\n")[0]
    return sock


def test_pings_from_a_client_that_never_reads_do_not_pile_up_pongs() -> None:
    from bargein.server import serving

    with running_server(fake_engines(), Settings(port=free_port())) as host:
        sock = _raw_websocket(host)
        sock.settimeout(30)
        ping = bytes([0x89, 0x80 | 125]) + b"\0\0\0\0" + b"p" * 125  # masked with zeros: the payload as is
        for _ in range(160):  # 20 MiB of pings: as many bytes of pongs, were each one written
            sock.sendall(ping * 1000)
        peak = 0
        for _ in range(30):  # the server parses the pings over the next moments; watch its output meanwhile
            transports = list(serving._OPEN_WEBSOCKETS.values())
            peak = max([peak, *(transport.get_write_buffer_size() for transport in transports)])
            time.sleep(0.1)
        sock.close()
    assert peak <= serving.MAX_PONG_BACKLOG_BYTES + 64 * 1024
