"""Playback truth over WebRTC: the server knows what it put on the wire. A barge-in empties the reply track at once
(``output_audio_buffer.cleared``, no more reply audio) and the history keeps the reply cut where the caller had
heard it; the client's ``output_audio_buffer.clear`` does the same on request."""

from __future__ import annotations

import asyncio
from itertools import pairwise
from typing import Any

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.server.app import ServerState
from bench.harness import phone_provider
from bench.harness.webrtc_peer import WebRtcPeer
from tests.server.webrtc.test_webrtc_call import silence_pcm, tone_pcm

IN_FLIGHT_MS = 300.0
"""Reply audio sent before a clear that may still arrive after it (the receiver's jitter buffer, the network)."""
FILLER = " ".join(["and here is one more thing I would like to tell you about"] * 6)


def long_replies() -> Engines:
    return Engines(FakeVad(), FakeRecognizer(("hello can you hear me", "wait what time is it right now")),
                   FakeLanguageModel(filler=FILLER), FakeSynthesizer())


def assistant_item(state: ServerState, item_id: str) -> Any:
    (session,) = state.registry.live
    return next(item for item in session.conversation if item.id == item_id)


async def test_a_barge_in_clears_the_reply_audio_and_the_history_keeps_what_was_heard() -> None:
    with phone_provider.phone_server(long_replies()) as (host, state):
        async with WebRtcPeer(f"http://{host}", own_events=True) as peer:
            await peer.next_event("session.created")
            asked_at = await peer.say(tone_pcm(0.8) + silence_pcm(0.8))
            started, event = await peer.next_event("output_audio_buffer.started", timeout=20)
            response_id = event["response_id"]
            await asyncio.sleep(1.5)  # the reply plays
            onset_at = await peer.say(tone_pcm(1.0) + silence_pcm(1.0))
            cleared, event = await peer.next_event("output_audio_buffer.cleared", after=started, timeout=10)
            cleared_at = peer.arrival(cleared)
            assert event["response_id"] == response_id
            assert cleared_at - onset_at < 1.5, "the audio is cleared at the barge-in"
            _, truncated = await peer.next_event("conversation.item.truncated", after=started)
            await asyncio.sleep(0.5)
            # what was on its way when the track was cleared still arrives (aiortc's receiver holds about 100 ms
            # in its jitter buffer), and nothing after it
            assert peer.audio.voiced_ms_between(cleared_at, cleared_at + 0.5) <= IN_FLIGHT_MS
            # the audio of the reply the caller received (and here played): the fake voice is one unbroken tone, so
            # its audible frames count it (their arrival times would stretch with a loaded machine's stalls)
            received_ms = peer.audio.voiced_ms_between(asked_at, cleared_at + 0.5)
            (call,) = state.calls.calls.values()
            assert call.connection is not None
            delay_ms = call.connection.delay.delay_ms
            item = assistant_item(state, truncated["item_id"])
            assert item.heard_ms == truncated["audio_end_ms"]
            # heard: what was sent less the playout delay (from the receiver reports), where this caller received
            # (and played) all that was sent; a frame either way for one partly audible
            assert received_ms - delay_ms - 60 <= item.heard_ms <= received_ms + 20, (received_ms, item.heard_ms)
            assert item.heard_ms < item.audio_ms
            heard_words = item.heard_text().split()
            assert 1 <= len(heard_words) < len(" ".join(part.text for part in item.parts).split())
            assert all(word.end_ms <= item.heard_ms + 1e-6 for word in item.words[:len(heard_words) - 1])
            assert "output_audio_buffer.stopped" not in peer.types()[started:cleared], "cleared, not stopped"


async def test_the_clients_output_audio_buffer_clear_cuts_the_audio_playing() -> None:
    with phone_provider.phone_server(long_replies()) as (host, _):
        async with WebRtcPeer(f"http://{host}") as peer:
            await peer.next_event("session.created")
            await peer.say(tone_pcm(0.8) + silence_pcm(0.5))
            started, event = await peer.next_event("output_audio_buffer.started", timeout=20)
            await asyncio.sleep(1.0)
            peer.send({"type": "output_audio_buffer.clear"})  # the reply goes on, unheard
            cleared, cleared_event = await peer.next_event("output_audio_buffer.cleared", after=started)
            assert cleared_event["response_id"] == event["response_id"]
            cleared_at = peer.arrival(cleared)
            await asyncio.sleep(0.8)
            assert peer.audio.voiced_ms_between(cleared_at, cleared_at + 0.8) <= IN_FLIGHT_MS
            peer.send({"type": "response.cancel"})
            _, done = await peer.next_event("response.done", after=started)
            assert done["response"]["status"] == "cancelled"
            peer.send({"type": "output_audio_buffer.clear", "event_id": "evt_again"})  # nothing plays: no-op
            peer.send({"type": "session.update", "event_id": "evt_after", "session": {"instructions": "Next."}})
            after, _ = await peer.next_event("session.updated", after=cleared)
            assert "error" not in peer.types()[cleared:after], "a clear with nothing playing is not an error"
            assert peer.types().count("output_audio_buffer.cleared") == 1
            assert "bargein.reply.audio" not in peer.types(), "bargein's own events only to a client that asked"


async def test_a_reply_paused_by_a_noise_resumes_from_where_it_was_heard_and_plays_to_its_end() -> None:
    engines = Engines(FakeVad(), FakeRecognizer(("hello can you hear me", "")), FakeLanguageModel(),
                      FakeSynthesizer())
    with phone_provider.phone_server(engines) as (host, state):
        async with WebRtcPeer(f"http://{host}", own_events=True) as peer:
            await peer.next_event("session.created")
            await peer.say(tone_pcm(0.8) + silence_pcm(0.8))
            started, event = await peer.next_event("output_audio_buffer.started", timeout=20)
            await asyncio.sleep(0.6)
            await peer.say(tone_pcm(0.3) + silence_pcm(2.0))  # a cough: paused, judged noise, resumed
            cleared, _ = await peer.next_event("output_audio_buffer.cleared", after=started)
            _, truncated = await peer.next_event("conversation.item.truncated", after=started)
            resumed, resume = await peer.next_event("bargein.reply.resumed", after=cleared, timeout=10)
            assert abs(resume["audio_start_ms"] - truncated["audio_end_ms"]) < 1.0, "restarts at the cut"
            assert "bargein.reply.audio" not in peer.types()[cleared:resumed], "nothing queued while it was paused"
            _, requeued = await peer.next_event("bargein.reply.audio", after=resumed)
            assert requeued["audio_start_ms"] == resume["audio_start_ms"], "queued again from the cut"
            again, _ = await peer.next_event("output_audio_buffer.started", after=resumed)
            _, done = await peer.next_event("response.done", after=again, timeout=20)
            assert done["response"]["status"] == "completed" and done["response"]["id"] == event["response_id"]
            await peer.next_event("output_audio_buffer.stopped", after=again, timeout=20)
            assert peer.audio.voiced_ms_between(peer.arrival(resumed)) > 200, "the rest of the reply was heard"
            item = assistant_item(state, truncated["item_id"])
            assert item.heard_ms is None or item.heard_ms >= item.audio_ms - 1.0, "heard to its end"


async def test_the_data_channel_places_each_stretch_of_reply_audio_the_track_queued() -> None:
    """The reply's audio deltas ride the track, not the data channel: a client that asked for bargein's events gets
    each one's place in its item instead (``bargein.reply.audio``), in order with the transcript deltas, so it can
    show the words as they are heard. The stretches tile the item's audio from 0 to its end."""
    engines = Engines(FakeVad(), FakeRecognizer(("hello can you hear me",)), FakeLanguageModel(), FakeSynthesizer())
    with phone_provider.phone_server(engines) as (host, state):
        async with WebRtcPeer(f"http://{host}", own_events=True) as peer:
            await peer.next_event("session.created")
            await peer.say(tone_pcm(0.8) + silence_pcm(0.8))
            started, _ = await peer.next_event("output_audio_buffer.started", timeout=20)
            await peer.next_event("output_audio_buffer.stopped", after=started, timeout=20)
            events = [event for _, event in peer.events]
            kinds = [event["type"] for event in events]
            queued = [event for event in events if event["type"] == "bargein.reply.audio"]
            assert kinds.index("response.output_audio_transcript.delta") < kinds.index("bargein.reply.audio"), \
                "a clause's words come just before its audio, as over a WebSocket"
            assert kinds.index("bargein.reply.audio") < started, "queued, then its first frame went out"
            assert queued[0]["audio_start_ms"] == 0
            assert all(a["audio_end_ms"] == b["audio_start_ms"] for a, b in pairwise(queued))
            item = assistant_item(state, queued[0]["item_id"])
            assert abs(queued[-1]["audio_end_ms"] - item.audio_ms) < 1.0
            assert {event["item_id"] for event in queued} == {item.id}
