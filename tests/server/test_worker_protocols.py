"""``bargein serve --workers N``: every worker process serves with the protocol wrappers of the single-process
server (the handshake guard, the tracked WebSocket protocol that skips pongs past a backlog), built from the
configuration uvicorn hands each worker, without spawning any."""

from __future__ import annotations

import asyncio
import os
import pickle
from typing import Any

import pytest

from bargein.config import Settings
from bargein.server import serving, workers
from tests.support.pong import written_after_ping_then_close


class _Transport:
    """A just-accepted TCP connection from ``host``: records whether the server aborted it."""

    def __init__(self, host: str, port: int) -> None:
        self.peer = (host, port)
        self.aborted = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": self.peer, "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.aborted

    def set_write_buffer_limits(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        self.aborted = True


def _loaded_worker_config(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Any:
    config = workers.worker_config(settings, "warning")
    pickle.loads(pickle.dumps(config))  # uvicorn pickles it for every worker process it spawns
    monkeypatch.setattr(workers, "WORKER_PROTOCOLS", workers.WorkerProtocols())  # as in a fresh worker process
    with workers.worker_environment(settings):
        config.load()  # the first thing each worker does with it
    return config


def test_a_worker_skips_pongs_for_a_client_that_reads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    config = _loaded_worker_config(Settings(workers=2, ws_impl="websockets-sansio"), monkeypatch)
    ws = config.ws_protocol_class
    assert written_after_ping_then_close(ws, 0).startswith(b"\x8a")  # a reading client gets its pong
    written = written_after_ping_then_close(ws, serving.MAX_PONG_BACKLOG_BYTES + 1)
    assert b"\x8a" not in written, "a worker answers every ping of a client that never reads"
    assert written.startswith(b"\x88")  # the close echo still goes out


def test_a_worker_guards_handshakes_per_client(monkeypatch: pytest.MonkeyPatch) -> None:
    config = _loaded_worker_config(Settings(workers=2, max_connections_per_client=2), monkeypatch)

    async def connect() -> list[bool]:
        transports = [_Transport("203.0.113.7", 40000 + n) for n in range(3)]
        for transport in transports:
            config.http_protocol_class(config=config, server_state=_server_state(), app_state={}) \
                .connection_made(transport)
        return [transport.aborted for transport in transports]

    assert asyncio.run(connect()) == [False, False, True]  # the third young connection of one address


def test_the_worker_protocols_are_built_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "WORKER_PROTOCOLS", workers.WorkerProtocols())
    with workers.worker_environment(Settings(workers=2)):
        assert workers.WORKER_PROTOCOLS.http is workers.WORKER_PROTOCOLS.http  # one handshake guard per worker
        assert workers.WORKER_PROTOCOLS.ws is workers.WORKER_PROTOCOLS.ws


def _server_state() -> Any:
    from uvicorn.server import ServerState

    return ServerState()


def test_the_keys_reach_a_worker_through_its_configuration_never_its_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BARGEIN_API_KEYS", '["sk-client-key"]')
    monkeypatch.setenv("BARGEIN_LLM_API_KEY", "sk-llm-key")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-another-services-key")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    settings = Settings(workers=2)
    assert settings.api_keys == ["sk-client-key"] and settings.llm_api_key == "sk-llm-key"
    config = pickle.loads(pickle.dumps(workers.worker_config(settings, "warning")))  # as uvicorn's spawn pipe
    monkeypatch.setattr(workers, "WORKER_PROTOCOLS", workers.WorkerProtocols())
    with workers.worker_environment(settings):
        assert not any("sk-" in value for value in os.environ.values()), "a worker would inherit a key"
        assert os.environ["HF_HUB_OFFLINE"] == "1"  # what the workers need still reaches them
        config.load()
        in_worker = workers.worker_settings()
    assert in_worker.api_keys == ["sk-client-key"] and in_worker.llm_api_key == "sk-llm-key"
    assert os.environ["BARGEIN_API_KEYS"] == '["sk-client-key"]'  # the parent's own environment is restored
    assert os.environ["OPENAI_API_KEY"] == "sk-another-services-key"


def test_the_metrics_key_and_a_memory_urls_password_reach_no_workers_environment_and_no_engine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The metrics key reads /metrics, a memory URL's password opens every user's memories: like the API keys
    they reach a session worker through its configuration only, and an engine worker not at all."""
    from bargein.engines.process import frames, wire

    monkeypatch.setenv("BARGEIN_METRICS_KEY", "mk-scraper-secret")
    monkeypatch.setenv("BARGEIN_MEMORY_URL", "postgresql://bargein:pw-secret@db.internal/memories")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    settings = Settings(workers=2)
    config = pickle.loads(pickle.dumps(workers.worker_config(settings, "warning")))  # as uvicorn's spawn pipe
    monkeypatch.setattr(workers, "WORKER_PROTOCOLS", workers.WorkerProtocols())
    with workers.worker_environment(settings):
        leaked = [key for key, value in os.environ.items() if "mk-scraper" in value or "pw-secret" in value]
        assert leaked == [], f"a worker would inherit a secret in {leaked}"
        config.load()
        in_worker = workers.worker_settings()
    assert in_worker.metrics_key == "mk-scraper-secret" and in_worker.memory_url == settings.memory_url
    frame = frames.encode(("spec", wire.WorkerSpec("x:y", {"settings": settings})), wire._describe)
    assert b"mk-scraper" not in frame and b"pw-secret" not in frame, "an engine worker would receive a secret"
