"""A phone call with the embedded models (Whisper, llama.cpp, Kokoro): the scripted Twilio provider asks for a story
over 8 kHz mu-law, hears it spoken back as marked 20 ms frames, then talks over it: the ``clear`` comes and the
history keeps only what the phone played."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import websockets

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.factory import load_engines
from bench.harness.phone_provider import MULAW_SILENCE, ScriptedProvider, phone_server, speech_onset_frame, spoken_mulaw

pytestmark = pytest.mark.slow
TRIES = 3
"""Replies the test may try to cut: a sampled story from the small model is sometimes over before the caller
speaks; the reply to that interruption is the next one to cut."""


@pytest.fixture(scope="module")
def real_engines() -> Iterator[Engines]:
    yield load_engines(Settings(llm_model="smollm2-135m"))


async def test_a_phone_call_with_the_real_models_is_answered_cleared_and_cut_where_it_played(
        real_engines: Engines) -> None:
    ask = spoken_mulaw("Please tell me a long story about a dragon and a knight.")
    interruption = spoken_mulaw("Stop, stop. Tell me about the weather instead.")
    with phone_server(real_engines) as (host, state):
        async with websockets.connect(f"ws://{host}/v1/telephony/twilio") as ws:
            phone = ScriptedProvider(ws)
            await phone.begin()
            phone.say(MULAW_SILENCE * 25 + ask + MULAW_SILENCE * 100)
            for _ in range(TRIES):
                await phone.wait_played_ms(len(phone.log.played) * 20 + 1200, timeout=180)
                onset = phone.say(interruption + MULAW_SILENCE * 100) + speech_onset_frame(interruption)
                onset_at = await phone.wait_sent(onset)
                try:
                    cleared_at = await phone.wait_clear(onset_at, timeout=5)
                except TimeoutError:
                    continue  # the reply had played out: its answer is the next one to cut
                break
            else:
                pytest.fail("no reply was long enough to cut")
            await asyncio.sleep(0.3)  # the truncate follows the clear; the verdict on the long interruption comes later
            mark = phone.log.last_played_mark_before(cleared_at)
            assert mark is not None
            item_id, _, reached = mark.rpartition("@")
            (session,) = state.registry.live
            users = [item for item in session.conversation if item.role == "user"]
            assert users, "the caller's turn is in the history"
            cut = next(item for item in session.conversation if item.id == item_id)
            assert cut.heard_ms is not None and float(reached) - 41.0 <= cut.heard_ms <= float(reached) + 1.0
            assert cut.heard_ms < cut.audio_ms, "the reply was cut before its end"
            kept = cut.heard_text()
            played = [w.word.strip() for w in cut.words if w.end_ms <= cut.heard_ms]
            begun = [w.word.strip() for w in cut.words if w.start_ms < cut.heard_ms]
            # a word the phone finished playing is kept, one it never began is not (a word it was inside may go
            # either way: the cut can fall within the reply's last word)
            assert played == kept.split()[:len(played)] and len(kept.split()) <= len(begun), (kept, cut.words)
            await phone.stop()
