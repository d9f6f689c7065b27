"""The WebRTC benchmark's measuring tools: the word bursts a client counts, the clips brought to one level, and the
frames cut from a WebSocket delta."""

from __future__ import annotations

import itertools

import numpy as np

from bargein.values import CancelToken
from bench.harness.realtime_harness import SpeechClip
from bench.latency.webrtc_engines import WORD_GAP_MS, WordBurstSynthesizer, word_bursts
from bench.latency.webrtc_links import pcm_frames
from bench.latency.webrtc_onset import stop_terms
from bench.latency.webrtc_turns import audible_between, count_bursts, even_levels


def test_each_word_is_a_burst_then_a_gap() -> None:
    words = word_bursts("a quick brown fox")
    assert [w.word for w in words] == ["a", "quick", "brown", "fox"]
    assert words[0].end_ms - words[0].start_ms == 120.0  # the shortest burst
    assert words[1].end_ms - words[1].start_ms == 225.0  # 45 ms a character
    assert all(b.start_ms - a.end_ms == WORD_GAP_MS for a, b in itertools.pairwise(words))


async def test_the_synthesised_bursts_count_back_to_the_words() -> None:
    audio = np.concatenate([chunk.audio async for chunk in WordBurstSynthesizer().synthesize(
        "you said why is the sky blue", voice=None, cancel=CancelToken())])
    pcm = (audio * 32767).astype("<i2").tobytes()
    frames = pcm_frames(pcm, arrival=1.0)
    assert count_bursts(frames) == 7
    assert count_bursts(frames[:len(frames) // 2]) in (3, 4)  # a cut inside the audio: the words before it


def test_count_bursts_needs_a_real_gap_between_words() -> None:
    loud, quiet = (0.0, 5000, 20.0), (0.0, 0, 20.0)
    assert count_bursts([loud, quiet, loud]) == 1  # 20 ms of quiet is a dip, not a gap
    assert count_bursts([loud, quiet, quiet, loud, loud, quiet, quiet, quiet, loud]) == 3
    assert audible_between([(1.0, 5000, 20.0), (2.0, 10, 20.0), (3.0, 5000, 20.0)], 1.0, 3.0) == [(3.0, 5000, 20.0)]


def test_even_levels_brings_every_clip_to_one_speech_level() -> None:
    rate = 24_000
    tone = np.sin(2 * np.pi * 200 * np.arange(rate) / rate)
    clips = [SpeechClip(name, (tone * level).astype("<i2").tobytes(), 0, rate - 1, 0.0)
             for name, level in (("quiet", 800.0), ("loud", 12000.0))]
    levels = []
    for clip in even_levels(clips):
        samples = np.frombuffer(clip.pcm, dtype="<i2").astype(np.float64)
        levels.append(20 * np.log10(np.sqrt(np.mean(samples ** 2)) / 32768))
        assert (clip.onset, clip.end) == (0, rate - 1)
    assert abs(levels[0] - levels[1]) < 0.1
    assert abs(levels[0] + 20.0) < 0.1


def test_a_cut_is_split_into_its_terms_from_the_servers_trace() -> None:
    # onset at RTP 48_000 (16 kHz sample 16_000, inside frame 31), sent at t = 10.000; frame 32 (the next) is the
    # first voiced one: it ends at sample 16_896, 56 ms of speech after the onset
    records = [
        {"k": "pkt", "t": 9.990, "ts": 47_040, "id": 7},
        {"k": "pkt", "t": 10.002, "ts": 48_000, "id": 7},  # the onset's packet
        {"k": "vad", "s": 1, "i": 32, "t0": 10.001, "t1": 10.002, "p": 0.9},  # the WebSocket's session, long before
        {"k": "vad", "s": 2, "i": 31, "t0": 10.030, "t1": 10.031, "p": 0.2},
        {"k": "vad", "s": 2, "i": 32, "t0": 10.050, "t1": 10.052, "p": 0.8},
        {"k": "input_audio_buffer.speech_started", "t": 10.053, "ms": 1024},
        {"k": "clear", "t": 10.054, "had": True},
        {"k": "after_cut", "t": 10.056},
    ]
    records[2]["t1"] = 8.0
    terms = stop_terms(records, onset_at=10.000, onset_pts=48_000, last_packet_at=10.057)
    assert terms is not None
    assert terms.frames == 1
    assert round(terms.speech, 3) == 56.0
    assert [round(value, 1) for value in (terms.receive, terms.assembly, terms.vad, terms.core, terms.cut,
                                          terms.send, terms.tail, terms.stop)] == \
        [2.0, -6.0, 2.0, 1.0, 1.0, 2.0, 1.0, 57.0]
    assert stop_terms(records[:-1], onset_at=10.000, onset_pts=48_000, last_packet_at=10.057) is None
