"""A phone call over ``/v1/telephony/twilio``: a scripted provider against a real uvicorn server on loopback.

The provider streams espeak-ng speech as 8 kHz mu-law frames in real time and plays the server's audio in real
time, echoing marks as they play; the checks are the marks, the ``clear`` on a barge-in, and that the history keeps
the reply cut exactly at the last mark the phone played before the clear.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import websockets

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.server.app import ServerState
from bargein.server.phone_tokens import mint_token
from bench.harness import phone_provider
from bench.harness.phone_provider import MULAW_SILENCE, ScriptedProvider, speech_onset_frame, spoken_mulaw

FILLER = " ".join(["and here is one more thing I would like to tell you about"] * 6)


def phone_engines() -> Engines:
    return Engines(FakeVad(), FakeRecognizer(("hello can you hear me", "wait what time is it right now")),
                   FakeLanguageModel(filler=FILLER), FakeSynthesizer())


@contextmanager
def phone_server(settings: Settings | None = None) -> Iterator[tuple[str, ServerState]]:
    with phone_provider.phone_server(phone_engines(), settings) as served:
        yield served


def assistant_items(state: ServerState) -> list[Any]:
    (session,) = state.registry.live
    return [item for item in session.conversation if item.role == "assistant" and item.type == "message"]


@pytest.fixture(scope="module")
def speech() -> tuple[bytes, bytes]:
    return spoken_mulaw("Hello, can you hear me?"), spoken_mulaw("Wait, what time is it right now?")


async def test_a_call_is_answered_with_marked_frames_and_a_barge_in_clears_and_cuts_the_history(
        speech: tuple[bytes, bytes]) -> None:
    first, second = speech
    with phone_server() as (host, state):
        async with websockets.connect(f"ws://{host}/v1/telephony/twilio") as ws:
            phone = ScriptedProvider(ws)
            await phone.begin()
            phone.say(MULAW_SILENCE * 10 + first + MULAW_SILENCE * 50)
            await phone.wait_played_ms(1500, timeout=30)  # the reply plays on the phone
            assert phone.log.media_received > 0
            names = [name for _, name, _ in phone.log.echoed]
            item_id, _, reached = names[-1].rpartition("@")
            assert item_id.startswith("item_") and 1000 <= float(reached) <= 2000, names[-1]
            assert not phone.log.clears
            onset = phone.say(second + MULAW_SILENCE * 40) + speech_onset_frame(second)
            onset_at = await phone.wait_sent(onset)
            cleared_at = await phone.wait_clear(onset_at)
            assert cleared_at - onset_at < 1.0, "the clear follows the barge-in at once"
            heard_mark = phone.log.last_played_mark_before(cleared_at)
            assert heard_mark is not None
            await asyncio.sleep(1.5)  # the verdict (a query), the cut reply's response.done, the next reply
            items = assistant_items(state)
            cut = next(item for item in items if item.id == heard_mark.rpartition("@")[0])
            played_ms = float(heard_mark.rpartition("@")[2])
            # the server cuts at the newest echo it had received when it sent the clear: the phone's last one, or
            # one a frame or two before when those echoes were still on the wire
            assert played_ms - 40.0 - 1e-6 <= cut.heard_ms <= played_ms + 1e-6, \
                "the history keeps exactly what played before the last echoed mark"
            assert cut.heard_ms < cut.audio_ms
            heard_words = cut.heard_text().split()
            assert 2 <= len(heard_words) < len(" ".join(p.text for p in cut.parts).split())
            assert all(w.end_ms <= cut.heard_ms + 1e-6 for w in cut.words[:len(heard_words) - 2])
            assert any(not played for _, _, played in phone.log.echoed), "the cleared marks came back too"
            await phone.stop()


async def test_speech_over_the_tail_the_phone_still_plays_after_the_reply_ended_on_the_server_clears_it(
        speech: tuple[bytes, bytes]) -> None:
    """The phone plays 2 s behind the server's estimate: the reply has ended on the server when the caller speaks,
    but its marks are outstanding, so the tail is cleared and the history cut where the phone was."""
    with phone_provider.phone_server(Engines(FakeVad(), FakeRecognizer(("hello can you hear me", "wait")),
                                             FakeLanguageModel(), FakeSynthesizer())) as (host, state):
        async with websockets.connect(f"ws://{host}/v1/telephony/twilio") as ws:
            phone = ScriptedProvider(ws, jitter_buffer_s=2.0)
            await phone.begin()
            phone.say(MULAW_SILENCE * 10 + speech[0] + MULAW_SILENCE * 25)
            reply = await completed_reply(state)
            await phone.wait_played_ms(300, timeout=30)
            assert len(phone.log.played) * 20 < reply.audio_ms - 600, "the phone still plays the reply's tail"
            onset = phone.say(speech[1] + MULAW_SILENCE * 40) + speech_onset_frame(speech[1])
            cleared_at = await phone.wait_clear(await phone.wait_sent(onset))
            await asyncio.sleep(0.3)
            played = float(phone.log.last_played_mark_before(cleared_at).rpartition("@")[2])  # type: ignore[union-attr]
            assert played - 41.0 <= reply.heard_ms <= played + 1.0, (played, reply.heard_ms, reply.audio_ms)
            assert reply.heard_ms < reply.audio_ms - 200
            await phone.stop()


async def completed_reply(state: ServerState, timeout: float = 20.0) -> Any:
    """The first reply's item, once it has ended on the server (played out by the server's estimate)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = assistant_items(state) if state.registry.live else []
        if items and items[0].status == "completed":
            return items[0]
        await asyncio.sleep(0.02)
    raise TimeoutError("the reply did not end on the server")


async def test_malformed_and_hostile_messages_are_logged_and_the_call_goes_on(
        speech: tuple[bytes, bytes], caplog: pytest.LogCaptureFixture) -> None:
    with phone_server() as (host, _):
        async with websockets.connect(f"ws://{host}/v1/telephony/twilio") as ws:
            phone = ScriptedProvider(ws)
            await phone.begin()
            for hostile in ("{not json", "[1, 2]", json.dumps({"event": "media", "media": "x"}),
                            json.dumps({"event": "media", "media": {"payload": "!!!not base64!!!"}}),
                            json.dumps({"event": "mark", "mark": {"name": "item_forged@99999"}}),
                            json.dumps({"event": "mark", "mark": {"name": "x" * 5000}}),
                            json.dumps({"event": "start", "start": {"streamSid": "MZ" + "9" * 500}}),
                            json.dumps({"event": "dtmf", "dtmf": {"digit": "5"}}),
                            json.dumps({"event": "surprise"})):
                await ws.send(hostile)
            for _ in range(250):  # a flood: counted, not logged line by line
                await ws.send("{")
            phone.say(MULAW_SILENCE * 5 + speech[0] + MULAW_SILENCE * 50)
            await phone.wait_played_ms(400, timeout=30)  # answered all the same
            await phone.stop()
    lines = sum("phone call:" in record.getMessage() for record in caplog.records)
    assert 5 <= lines <= 15, lines


async def test_refused_messages_are_logged_and_counted_in_metrics_as_error_events_are_on_the_websocket(
        caplog: pytest.LogCaptureFixture) -> None:
    """A message over the size bound and a burst over the event rate: the shared budgets make them ``error``
    events, which the phone line cannot send, so they are logged, and counted once each as on the WebSocket."""
    settings = Settings(events_per_s=100, event_burst=20, max_message_bytes=2048)
    with phone_server(settings) as (host, _):
        async with websockets.connect(f"ws://{host}/v1/telephony/twilio") as ws:
            phone = ScriptedProvider(ws)  # its microphone sends 50 frames a second
            await phone.begin()
            await ws.send(json.dumps({"event": "mark", "mark": {"name": "x" * 4000}}))
            for _ in range(40):  # twice the burst at once: held back about half a second, and told once
                await ws.send(json.dumps({"event": "mark", "mark": {"name": "unknown"}}))
            await asyncio.sleep(1.0)
            text = (await asyncio.to_thread(httpx.get, f"http://{host}/metrics")).text
            await phone.stop()
    assert 'bargein_client_errors_total{code="message_too_large"} 1.0' in text
    assert re.search(r'bargein_client_errors_total\{code="rate_limit_exceeded"\} [1-9]', text), text
    logged = "\n".join(record.getMessage() for record in caplog.records if "phone call:" in record.getMessage())
    assert "exceeds the limit of 2048 bytes" in logged and "events are being delayed" in logged


async def test_a_provider_that_never_starts_is_closed_after_the_handshake_time() -> None:
    with phone_server(Settings(handshake_timeout_s=0.5)) as (host, _):
        async with websockets.connect(f"ws://{host}/v1/telephony/twilio") as ws:
            await ws.send(json.dumps({"event": "connected"}))
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 5)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


async def test_with_keys_a_call_needs_the_key_or_a_valid_signed_token_in_the_path_or_query(
        caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings(api_keys=["sk-phone-test"])
    with phone_server(settings) as (host, _), uvicorn_lines(caplog):
        refused = [f"ws://{host}/v1/telephony/twilio", f"ws://{host}/v1/telephony/twilio/v1.1.forged",
                   f"ws://{host}/v1/telephony/twilio/{mint_token('sk-phone-test', -5)}",
                   f"ws://{host}/v1/telephony/twilio/{mint_token('sk-other', 60)}"]
        for url in refused:
            with pytest.raises(websockets.InvalidStatus):
                async with websockets.connect(url):
                    pass
        token = mint_token("sk-phone-test", 60)
        for url, headers in ((f"ws://{host}/v1/telephony/twilio/{token}", None),
                             (f"ws://{host}/v1/telephony/twilio?token={token}", None),
                             (f"ws://{host}/v1/telephony/twilio", {"Authorization": "Bearer sk-phone-test"})):
            async with websockets.connect(url, additional_headers=headers) as ws:
                phone = ScriptedProvider(ws)
                await phone.begin()
                await phone.stop()
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "/v1/telephony/twilio/<token>" in logged, "uvicorn named the paths"
    assert token not in logged and "forged" not in logged and "sk-phone-test" not in logged


@contextmanager
def uvicorn_lines(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """uvicorn's INFO lines (each WebSocket's path, accepted or refused) into ``caplog``."""
    logger = logging.getLogger("uvicorn.error")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(caplog.handler)
    try:
        yield
    finally:
        logger.removeHandler(caplog.handler)
        logger.setLevel(level)
