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


LEAKY_URL = "http://alice:hunter2@llm.internal:8080/v1?api_key=sk-upstream"


def leaky_engines() -> Engines:
    """Engines whose description carries a URL with credentials and whose LLM stage failed with upstream text."""
    from bargein.engines.health import Health

    health = Health()
    health["llm"].record_failure(RuntimeError("upstream said: the other user's secret plan"))
    engines = fake_engines()
    engines.description = {"llm": f"OpenAI-compatible server at {LEAKY_URL}", "tts": "fake"}
    engines.health = health
    return engines


def _leaks(text: str) -> list[str]:
    return [secret for secret in ("alice", "hunter2", "sk-upstream", "secret plan") if secret in text]


def test_healthz_tells_strangers_only_ready_and_draining_and_metrics_needs_a_key() -> None:
    import httpx

    settings = Settings(port=free_port(), api_keys=["sk-right"], metrics_key="mk-scraper")
    with running_server(leaky_engines(), settings) as host:
        anonymous = httpx.get(f"http://{host}/healthz")
        assert anonymous.status_code == 200 and anonymous.json() == {"ready": True, "draining": False}
        for headers in ({}, {"Authorization": "Bearer sk-wrong"}, {"Authorization": "Basic sk-right"}):
            assert httpx.get(f"http://{host}/metrics", headers=headers).status_code == 401
            assert set(httpx.get(f"http://{host}/healthz", headers=headers).json()) == {"ready", "draining"}
        for key in ("sk-right", "mk-scraper"):
            headers = {"Authorization": f"Bearer {key}"}
            details = httpx.get(f"http://{host}/healthz", headers=headers)
            metrics = httpx.get(f"http://{host}/metrics", headers=headers)
            assert details.status_code == 200 and metrics.status_code == 200
            body = details.json()
            assert body["engines"]["llm"] == "OpenAI-compatible server at http://llm.internal:8080/v1"
            assert body["stages"]["llm"]["last_error"].startswith("RuntimeError (")
            assert 'engine="OpenAI-compatible server at http://llm.internal:8080/v1"' in metrics.text
            assert _leaks(details.text) == [] and _leaks(metrics.text) == []


def test_local_only_loopback_reads_the_details_without_a_key_but_not_the_secrets() -> None:
    import httpx

    with running_server(leaky_engines()) as host:
        body = httpx.get(f"http://{host}/healthz").json()
        metrics = httpx.get(f"http://{host}/metrics")
        assert body["local_only"] is True and body["stages"]["llm"]["state"] == "degraded"
        assert metrics.status_code == 200 and "bargein_engine" in metrics.text
        assert _leaks(json.dumps(body)) == [] and _leaks(metrics.text) == []
        # a page whose DNS name was rebound to 127.0.0.1 names another host: it learns only ready or not
        rebound = httpx.get(f"http://{host}/healthz", headers={"Host": "attacker.example"})
        assert set(rebound.json()) == {"ready", "draining"}
        assert httpx.get(f"http://{host}/metrics", headers={"Host": "attacker.example"}).status_code == 401


def test_urls_lose_their_credentials_and_errors_their_payloads() -> None:
    from bargein.server.operator_pages import error_kind, redact_urls

    assert redact_urls(f"a {LEAKY_URL}; b https://[::1]:9/x?token=t#frag") == \
        "a http://llm.internal:8080/v1; b https://[::1]:9/x"
    assert error_kind("llm ConnectError: 401 from upstream: bad key sk-upstream") == \
        "llm ConnectError (details in the server's log)"
    assert error_kind("retry: ReadTimeout: body") == "retry: ReadTimeout (details in the server's log)"
    assert error_kind("asr timed out").startswith("asr timed out")
    assert error_kind("some upstream text without a kind") == "details in the server's log"
    assert error_kind(None) is None


@pytest.mark.parametrize("url", [
    "http://alice:hun,ter2@llm.internal:8080/v1", "http://alice:hun;ter2@llm.internal:8080/v1",
    "http://alice:hun(ter2)@llm.internal:8080/v1", "http://alice:hun'ter2@llm.internal:8080/v1",
    "http://llm.internal:8080/v1?api_key=sk,upstream", "http://llm.internal:8080/v1?api_key=sk(upstream)",
])
def test_a_credential_holding_a_delimiter_is_withheld_whole(url: str) -> None:
    """RFC 3986 lets a password or a query hold , ; ( ) ': the whole of it goes, not only what precedes one."""
    from bargein.server.operator_pages import redact_urls

    shown = redact_urls(f"qwen at {url}")
    assert shown.rstrip(")") == "qwen at http://llm.internal:8080/v1"  # a closing bracket may be the text's
    assert [part for part in ("alice", "ter2", "upstream") if part in shown] == []
