"""A WebRTC call through the lossy relay (``bench/harness/udp_relay.py``: 80 +- 30 ms each way, reordering, 5 % of
the media and data channel packets lost) against a real server with the instant fakes: every turn is answered,
and speech over a reply still stops it (its audio stops arriving, ``output_audio_buffer.cleared`` and the
truncation arrive)."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bench.harness import phone_provider
from bench.harness.udp_relay import Impairment, UdpRelay
from bench.harness.webrtc_peer import WebRtcPeer

RATE = 24_000
FILLER = " ".join(["and one more thing about the weather"] * 20)
"""A reply of about 45 s: still playing when the next turn speaks over it."""
STOP_WITHIN_S = 1.0
"""From the interrupting tone's first sample leaving to the reply's last packet arriving: the relay's 110 ms at
most each way, the server's jitter buffer and VAD, the client's jitter buffer, and a busy test machine."""


TURN_S = 1.5
"""Each turn's speech: aiortc's receive jitter buffer can lose a few hundred ms of audio after a lost packet, and a
0.8 s turn that loses that much is judged too short for its words."""


def tone_pcm(seconds: float, hz: float) -> bytes:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * 32767 * np.sin(2 * np.pi * hz * t)).astype("<i2").tobytes()


def silence_pcm(seconds: float) -> bytes:
    return bytes(2 * int(seconds * RATE))


def engines() -> Engines:
    questions = ("what time is it", "wait what is the weather like tomorrow", "and how about the weekend")
    return Engines(FakeVad(), FakeRecognizer(questions), FakeLanguageModel(filler=FILLER),
                   FakeSynthesizer(ms_per_char=60))


async def _answered(peer: WebRtcPeer, after: float, since_event: int) -> tuple[int, float]:
    """The next reply: its ``response.created`` index, and when its first audible audio arrived after ``after``."""
    index, _ = await peer.next_event("response.created", after=since_event, timeout=20)
    await peer.next_event("output_audio_buffer.started", after=index, timeout=20)
    deadline = time.monotonic() + 10
    while not (voiced := [at for at in peer.audio.voiced_times() if at > after]):
        assert time.monotonic() < deadline, "the reply's audio never arrived"
        await asyncio.sleep(0.05)
    return index, voiced[0]


async def test_a_conversation_through_jitter_and_loss_completes_and_barge_in_still_stops_the_reply() -> None:
    with phone_provider.phone_server(engines()) as (host, _state):
        async with UdpRelay(Impairment(), seed=45) as relay, \
                WebRtcPeer(f"http://{host}", own_events=True, relay=relay) as peer:
            await peer.next_event("session.created")
            first_at = await peer.say(tone_pcm(TURN_S, 300) + silence_pcm(0.1))
            created, audible = await _answered(peer, first_at, 0)
            await asyncio.sleep(max(0.0, audible + 1.0 - time.monotonic()))
            onset = await peer.say(tone_pcm(TURN_S, 340) + silence_pcm(0.1))
            cleared, _ = await peer.next_event("output_audio_buffer.cleared", after=created, timeout=10)
            _, truncated = await peer.next_event("conversation.item.truncated", after=created, timeout=10)
            second, _ = await _answered(peer, onset + TURN_S, cleared)
            cut = [at for at in peer.audio.voiced_times() if onset < at < onset + TURN_S]
            assert cut and cut[-1] - onset <= STOP_WITHIN_S, "the reply's audio stopped after the speech began"
            assert truncated["audio_end_ms"] > 500  # it had played about a second before the cut
            peer.send({"type": "response.cancel"})
            await asyncio.sleep(1.0)
            third_at = await peer.say(tone_pcm(TURN_S, 380) + silence_pcm(0.1))
            await _answered(peer, third_at, second + 1)
    assert relay.to_server.counters.dropped > 0 and relay.to_client.counters.dropped > 0
    assert relay.to_server.counters.reordered + relay.to_client.counters.reordered > 0
