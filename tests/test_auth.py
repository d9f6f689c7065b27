"""Who may connect: configured keys by header or browser subprotocol; loopback only without keys."""

from __future__ import annotations

import json

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from tests.support.server import free_port, running_server


def fake_engines() -> Engines:
    return Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer())


def test_keys_by_bearer_header_or_subprotocol() -> None:
    port = free_port()
    with running_server(fake_engines(), Settings(port=port, api_keys=["sk-right"])) as host:
        url = f"ws://{host}/v1/realtime?model=x"
        with connect(url, additional_headers={"Authorization": "Bearer sk-right"}) as ws:
            assert json.loads(ws.recv(timeout=5))["type"] == "session.created"
        with connect(url, subprotocols=["realtime", "openai-insecure-api-key.sk-right"]) as ws:  # type: ignore[list-item]
            assert ws.subprotocol == "realtime"
            assert json.loads(ws.recv(timeout=5))["type"] == "session.created"
        for headers, protocols in (({"Authorization": "Bearer sk-wrong"}, None), ({}, None),
                                   ({}, ["realtime", "openai-insecure-api-key.sk-wrong"])):
            with pytest.raises(InvalidStatus), connect(url, additional_headers=headers,
                                                       subprotocols=protocols):  # type: ignore[arg-type]
                pass


def test_local_only_mode_accepts_loopback_without_a_key() -> None:
    with running_server(fake_engines()) as host, connect(f"ws://{host}/v1/realtime") as ws:
        assert json.loads(ws.recv(timeout=5))["type"] == "session.created"


def test_healthz_reports_ready_and_the_engines() -> None:
    import httpx

    with running_server(fake_engines()) as host:
        body = httpx.get(f"http://{host}/healthz").json()
    assert body["ready"] is True and body["local_only"] is True


def test_only_loopback_addresses_count_as_local() -> None:
    from bargein.server.auth import is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("127.8.0.1")
    assert not is_loopback("10.0.0.5") and not is_loopback("192.168.1.2") and not is_loopback("example.org")
