"""Edges of the server layer: who may mint client secrets, and what ``/metrics`` sums across workers."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.metrics.aggregate import WorkerFigures, merged_exposition
from bargein.server.app import create_app

SECRETS = "/v1/realtime/client_secrets"


def fake_engines() -> Engines:
    return Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer())


async def _mint(settings: Settings, client: str, headers: dict[str, str]) -> int:
    """The status of one mint request reaching the app from the socket address ``client``."""
    app = create_app(settings, fake_engines())
    transport = httpx.ASGITransport(app=app, client=(client, 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
        response = await http.post(SECRETS, json={}, headers=headers)
    return response.status_code


def test_a_forwarded_loopback_address_does_not_let_a_remote_peer_mint_in_local_only_mode() -> None:
    # a trusted proxy (or "*") rewrites request.client from X-Forwarded-For; local-only mode must still
    # decide "loopback" from the socket, as the WebSocket does, or a remote peer mints a secret that then
    # opens a session from any address
    forged = {"host": "127.0.0.1:8000", "x-forwarded-for": "127.0.0.1"}
    assert asyncio.run(_mint(Settings(forwarded_allow_ips="*"), "203.0.113.9", forged)) == 401
    assert asyncio.run(_mint(Settings(), "127.0.0.1", {"host": "127.0.0.1:8000"})) == 200


def test_a_rebound_name_or_a_foreign_page_cannot_mint_in_local_only_mode() -> None:
    # a page whose DNS name was rebound to 127.0.0.1 reaches us from loopback and can read the answer
    rebound = {"host": "evil.example:8000", "origin": "http://evil.example:8000"}
    assert asyncio.run(_mint(Settings(), "127.0.0.1", rebound)) == 401
    foreign = {"host": "127.0.0.1:8000", "origin": "http://evil.example"}
    assert asyncio.run(_mint(Settings(), "127.0.0.1", foreign)) == 401
    own_page = {"host": "127.0.0.1:8000", "origin": "http://127.0.0.1:8000"}
    assert asyncio.run(_mint(Settings(), "127.0.0.1", own_page)) == 200


def test_shared_engines_llm_worker_figures_are_not_summed_across_session_workers() -> None:
    # with shared engines every session worker reads the same LLM worker process (its pid comes from the hub)
    registry = CollectorRegistry()
    Gauge("bargein_llm_worker_resident_memory_bytes", "", registry=registry).set(1000.0)
    Gauge("bargein_llm_nonfinite_fallbacks", "", registry=registry).set(3.0)
    exposition = generate_latest(registry).decode()
    workers = [WorkerFigures(pid, exposition, {}) for pid in (11, 12)]
    shared = merged_exposition(workers, shared_engines=True, shared_llm=True).decode()
    assert "bargein_llm_worker_resident_memory_bytes 1000.0" in shared
    assert "bargein_llm_nonfinite_fallbacks 3.0" in shared
    own_llm = merged_exposition(workers, shared_engines=True).decode()  # --llm-in-process: Whisper, Kokoro shared
    assert "bargein_llm_nonfinite_fallbacks 6.0" in own_llm
    apart = merged_exposition(workers).decode()  # each worker its own LLM process: the total is the sum
    assert "bargein_llm_worker_resident_memory_bytes 2000.0" in apart


def test_shared_session_counts_cap_an_address_across_workers_and_forget_dead_ones(tmp_path: Path) -> None:
    """Two workers (two pids) count into one table: the cap is the server's; a dead worker's counts lapse."""
    import asyncio
    import subprocess
    import sys

    from bargein.server.client_counts import SharedSessionCounts

    path = str(tmp_path / "counts.sqlite3")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    mine, other, gone = (SharedSessionCounts(path, 3, pid=pid) for pid in (os.getpid(), os.getppid(), dead.pid))

    async def scenario() -> None:
        assert await mine.acquire("10.0.0.1") and await other.acquire("10.0.0.1") and await mine.acquire("10.0.0.1")
        assert not await other.acquire("10.0.0.1") and not await mine.acquire("10.0.0.1")
        assert await other.acquire("10.0.0.2"), "another address is not affected"
        await mine.release("10.0.0.1")
        assert await other.acquire("10.0.0.1")
        assert mine.open_sessions("10.0.0.1") == 3
        await mine.release("10.0.0.1")
        assert await gone.acquire("10.0.0.1")  # a worker that then dies with the session open
        assert mine.open_sessions("10.0.0.1") == 3
        assert await mine.acquire("10.0.0.1"), "the dead worker's session is not counted any more"

    asyncio.run(scenario())
