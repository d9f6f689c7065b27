"""The abuse bench's WebRTC attacks (``bench/robustness/webrtc_attacks.py``), small and fast, against a real server:
an address's answered calls are capped, calls whose ICE never completes are reaped and their places come back, and
a data channel flood is served at the event rate at most."""

from __future__ import annotations

import asyncio

import httpx

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bench.robustness.attack_target import Target
from bench.robustness.webrtc_attacks import data_channel_flood, never_connecting, offer_flood
from tests.support.server import free_port, running_server

CONNECT_TIMEOUT_S = 1.0


def _settings(**overrides: object) -> Settings:
    return Settings(port=free_port(), max_connections_per_client=3, webrtc_connect_timeout_s=CONNECT_TIMEOUT_S,
                    **overrides)


def _target(host: str, duration_s: float, events_per_s: float = 200.0, event_burst: int = 200) -> Target:
    return Target(host, None, idle_timeout_s=300.0, handshake_timeout_s=10.0, per_client=3, duration_s=duration_s,
                  events_per_s=events_per_s, event_burst=event_burst, webrtc_connect_timeout_s=CONNECT_TIMEOUT_S)


def _engines() -> Engines:
    return Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer())


def test_calls_that_never_connect_hold_the_cap_until_reaped() -> None:
    with running_server(_engines(), _settings()) as host:
        outcome = asyncio.run(never_connecting(_target(host, 0.2)))
        assert httpx.get(f"http://{host}/healthz", timeout=5).json()["sessions"] == 0
    assert outcome.held, outcome.note


def test_an_offer_flood_is_refused_past_the_cap_and_leaves_nothing_behind() -> None:
    with running_server(_engines(), _settings()) as host:
        outcome = asyncio.run(offer_flood(_target(host, 1.0)))
    assert outcome.held, outcome.note
    assert "429" in outcome.note


def test_a_data_channel_flood_is_served_at_the_event_rate_at_most() -> None:
    """The answers stay within the bucket over the time they were served (see :func:`data_channel_flood`), and the
    flood is over the rate even when a loaded machine carries only a few dozen events a second: the server says so
    (``rate_limit_exceeded``, while it holds events back or as it ends the call)."""
    settings = _settings(events_per_s=20.0, event_burst=20, rate_limit_sustain_s=1.0)
    with running_server(_engines(), settings) as host:
        outcome = asyncio.run(data_channel_flood(_target(host, 2.5, events_per_s=20.0, event_burst=20)))
    assert outcome.held, outcome.note
    assert "rate_limit_exceeded" in outcome.note, outcome.note
