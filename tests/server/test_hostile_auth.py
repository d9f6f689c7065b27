"""Browser-safe authentication: origins, DNS rebinding, forwarded headers, loopback, empty keys, API docs."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from pydantic import ValidationError
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from bargein.cli import main as cli_main
from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.server.app import create_app
from bargein.server.auth import host_allowed, is_loopback, origin_allowed
from tests.support.server import running_server


def fake_engines() -> Engines:
    return Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer())


def scope(host: str = "127.0.0.1:8000", origin: str | None = None, client: str = "127.0.0.1",
          scheme: str = "ws") -> dict[str, Any]:
    headers = [(b"host", host.encode())] + ([(b"origin", origin.encode())] if origin else [])
    return {"type": "websocket", "scheme": scheme, "headers": headers, "client": (client, 5000)}


def test_loopback_is_decided_from_addresses_only() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("127.3.2.1")
    for name in ("localhost", "testclient", None, "", "10.0.0.1", "evil.example"):
        assert not is_loopback(name)


def test_origins_the_own_one_loopback_pages_in_local_mode_and_the_allow_list() -> None:
    local = Settings()
    assert origin_allowed(scope(), local)  # no Origin: not a browser page
    assert origin_allowed(scope(origin="http://127.0.0.1:8000"), local)
    assert origin_allowed(scope(origin="http://localhost:5173"), local)  # a local dev page, local-only mode
    assert not origin_allowed(scope(origin="http://evil.example"), local)
    assert not origin_allowed(scope(origin="null"), local)
    keyed = Settings(api_keys=["k"], allow_origins=["https://app.example"])
    assert origin_allowed(scope("voice.example", origin="https://voice.example", scheme="wss"), keyed)
    assert origin_allowed(scope("voice.example", origin="https://app.example", scheme="wss"), keyed)
    assert not origin_allowed(scope("voice.example", origin="http://localhost:5173", scheme="wss"), keyed)
    assert not origin_allowed(scope("voice.example", origin="http://voice.example", scheme="wss"), keyed)
    assert origin_allowed(scope(origin="http://anything.example"), Settings(allow_origins=["*"]))


def test_local_only_mode_wants_a_host_header_that_names_this_machine() -> None:
    local = Settings()
    for host in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000", "localhost"):
        assert host_allowed(scope(host), local), host
    for host in ("evil.example:8000", "127.0.0.1.evil.example", "user@127.0.0.1"):
        assert not host_allowed(scope(host), local), host
    assert host_allowed(scope("voice.example"), Settings(api_keys=["k"]))  # keys guard a keyed server


def test_a_cross_origin_page_and_a_rebound_name_are_refused_before_the_upgrade() -> None:
    with running_server(fake_engines()) as host:
        url = f"ws://{host}/v1/realtime"
        port = host.split(":")[1]
        with connect(url, origin=f"http://{host}") as ws:  # type: ignore[arg-type]
            assert json.loads(ws.recv(timeout=5))["type"] == "session.created"
        for headers, origin in (({}, "http://evil.example"),
                                ({"Host": f"evil.example:{port}"}, f"http://evil.example:{port}")):
            with pytest.raises(InvalidStatus) as refused, connect(url, origin=origin,  # type: ignore[arg-type]
                                                                  additional_headers=headers):
                pass
            assert refused.value.response.status_code == 403


async def _call(app: Any, path: str, client: str, headers: dict[str, str]) -> tuple[str, Any]:
    """One websocket handshake through the ASGI app, returning what it answered first."""
    sent: list[dict[str, Any]] = []
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await inbox.put({"type": "websocket.connect"})
    raw_headers = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    ws_scope = {"type": "websocket", "asgi": {"version": "3.0"}, "scheme": "ws", "path": path,
                "raw_path": path.encode(), "query_string": b"", "headers": raw_headers, "client": (client, 40000),
                "server": ("0.0.0.0", 8000), "subprotocols": [], "root_path": "", "state": {}}

    async def receive() -> dict[str, Any]:
        return await inbox.get()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] in ("websocket.accept", "websocket.close"):
            await inbox.put({"type": "websocket.disconnect", "code": 1000})

    await app(ws_scope, receive, send)
    return sent[0]["type"], sent[0]


def test_a_forwarded_loopback_address_never_makes_a_remote_peer_local() -> None:
    forged = {"host": "127.0.0.1:8000", "x-forwarded-for": "127.0.0.1"}
    for trusted in (None, "*"):
        app = create_app(Settings(forwarded_allow_ips=trusted), fake_engines())
        kind, _ = asyncio.run(_call(app, "/v1/realtime", "203.0.113.9", forged))
        assert kind == "websocket.close", trusted
    local_app = create_app(Settings(), fake_engines())
    kind, _ = asyncio.run(_call(local_app, "/v1/realtime", "127.0.0.1", {"host": "127.0.0.1:8000"}))
    assert kind == "websocket.accept"


def test_an_empty_api_key_is_refused_at_start_up(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValidationError, match="empty"):
        Settings(api_keys=[""])
    with pytest.raises(ValidationError, match="empty"):
        Settings(api_keys=["ok", "  "])
    assert cli_main(["serve", "--engines", "fake", "--api-key", ""]) == 2
    assert "empty" in capsys.readouterr().err


def test_api_docs_are_off_unless_enabled() -> None:
    with running_server(fake_engines()) as host:
        assert httpx.get(f"http://{host}/docs").status_code == 404
        assert httpx.get(f"http://{host}/openapi.json").status_code == 404
    with running_server(fake_engines(), Settings(api_docs=True)) as host:
        assert httpx.get(f"http://{host}/openapi.json").status_code == 200
