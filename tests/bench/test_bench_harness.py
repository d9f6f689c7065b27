"""The benchmark harness's own measuring tools: offline speech bounds and the microphone's stream clock."""

from __future__ import annotations

import asyncio
import base64

import numpy as np

from bench.harness.realtime_harness import CHUNK_BYTES, CHUNK_SAMPLES, Microphone, first_audible, speech_bounds
from bench.harness.session_observer import Observer
from bench.robustness.soak import ClientCounts, Sample, SoakReport

RATE = 24_000


def _tone_in_noise(segments: list[tuple[float, float]], total_s: float, seed: int = 1) -> np.ndarray:
    """-50 dBFS noise with -20 dBFS 220 Hz tone bursts at the given (start, end) seconds."""
    rng = np.random.default_rng(seed)
    audio = (rng.standard_normal(int(total_s * RATE)) * 10 ** (-50 / 20)).astype(np.float32)
    for start, end in segments:
        first, last = int(start * RATE), int(end * RATE)
        t = np.arange(last - first) / RATE
        audio[first:last] += (0.1 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    return audio


def test_speech_bounds_find_onset_end_and_inner_pause() -> None:
    audio = _tone_in_noise([(0.5, 1.1), (1.3, 1.7)], total_s=2.5)
    onset, end, pause = speech_bounds(audio, RATE)
    assert abs(onset / RATE - 0.5) <= 0.011
    assert abs(end / RATE - 1.7) <= 0.011
    assert 0.18 <= pause <= 0.21


def test_a_click_is_not_an_onset() -> None:
    audio = _tone_in_noise([(1.0, 1.6)], total_s=2.0)
    audio[int(0.3 * RATE):int(0.3 * RATE) + 100] += 0.5  # 4 ms click: shorter than three 10 ms frames
    onset, _end, _pause = speech_bounds(audio, RATE)
    assert abs(onset / RATE - 1.0) <= 0.011


def test_first_audible_skips_leading_silence() -> None:
    samples = np.zeros(480, "<i2")
    samples[123] = 2000
    assert first_audible(samples.tobytes()) == 123
    assert first_audible(bytes(960)) is None


def _delta(response_id: str, silent_ms: float, loud_ms: float) -> dict[str, str]:
    audio = np.concatenate([np.zeros(int(silent_ms * 24), np.int16), np.full(int(loud_ms * 24), 3000, np.int16)])
    return {"type": "response.output_audio.delta", "response_id": response_id,
            "delta": base64.b64encode(audio.astype("<i2").tobytes()).decode()}


def test_the_first_sound_is_played_after_the_silence_before_it_and_after_an_underrun() -> None:
    observer = Observer()
    observer.take({"type": "response.created", "response": {"id": "r1"}}, 10.0)
    observer.take(_delta("r1", 200, 0), 10.0)  # a whole delta of silence, played 10.0 to 10.2
    observer.take(_delta("r1", 50, 150), 10.05)  # arrives early: queued behind it, its sound 50 ms in
    reply = observer.responses["r1"]
    assert reply.audible_at == 10.05
    assert abs(reply.audible_played_at() - 10.25) < 1e-9  # type: ignore[operator]
    observer.take({"type": "response.created", "response": {"id": "r2"}}, 20.0)
    observer.take(_delta("r2", 100, 0), 20.0)
    observer.take(_delta("r2", 30, 170), 20.5)  # arrives after the first delta has played: starts at once
    assert abs(observer.responses["r2"].audible_played_at() - 20.53) < 1e-9  # type: ignore[operator]


def test_playback_stalls_count_the_waits_once_the_reply_is_heard_not_jitter_or_the_wait_before() -> None:
    observer = Observer()
    observer.take({"type": "response.created", "response": {"id": "r1"}}, 10.0)
    assert observer.responses["r1"].playback_stall_ms() is None  # nothing audible yet
    observer.take(_delta("r1", 100, 0), 10.0)  # silence before the voice: waiting then is not a stall
    observer.take(_delta("r1", 0, 300), 10.4)  # the voice: plays 10.4 to 10.7
    observer.take(_delta("r1", 0, 300), 10.71)  # 10 ms late: jitter, plays 10.71 to 11.01
    observer.take(_delta("r1", 0, 300), 11.26)  # the next clause came 250 ms after the last one played
    observer.take(_delta("r1", 0, 300), 11.3)  # ahead of its playback: queued to 11.56-11.86, no wait
    observer.take(_delta("r1", 0, 300), 11.8)  # still ahead: queued behind it, no wait
    observer.take(_delta("r1", 0, 300), 12.2)  # 40 ms after the queue ran dry at 12.16
    assert abs(observer.responses["r1"].playback_stall_ms() - 290.0) < 1e-6  # type: ignore[operator]


def _delta_of(response_id: str, *parts: tuple[float, bool]) -> dict[str, str]:
    audio = np.concatenate([np.full(int(ms * 24), 3000 if loud else 0, np.int16) for ms, loud in parts])
    return {"type": "response.output_audio.delta", "response_id": response_id,
            "delta": base64.b64encode(audio.astype("<i2").tobytes()).decode()}


def test_the_longest_pause_heard_joins_silence_and_a_stall_between_the_first_and_last_sound() -> None:
    observer = Observer()
    observer.take({"type": "response.created", "response": {"id": "r1"}}, 10.0)
    assert observer.responses["r1"].longest_pause_ms() is None  # nothing audible yet
    observer.take(_delta_of("r1", (300, False), (200, True)), 10.0)  # the silence before the voice is no pause
    observer.take(_delta_of("r1", (100, True), (120, False)), 10.5)  # plays 10.5 to 10.72, ends quiet
    observer.take(_delta_of("r1", (100, False), (100, True)), 10.9)  # 180 ms stall, then 100 ms of lead-in
    observer.take(_delta_of("r1", (150, True), (60, False), (50, True)), 11.0)  # a 60 ms gap between words
    observer.take(_delta_of("r1", (50, True), (500, False)), 11.1)  # the silence after the last sound is no pause
    assert abs(observer.responses["r1"].longest_pause_ms() - 400.0) < 1e-6  # type: ignore[operator]


async def test_microphone_maps_stream_positions_to_the_chunks_that_carried_them() -> None:
    sent: list[bytes] = []

    async def send(chunk: bytes) -> None:
        sent.append(chunk)

    mic = Microphone(send)
    clip = bytes(range(256)) * 10  # 2560 bytes: two whole chunks and a partial one, padded
    runner = asyncio.create_task(mic.run())
    await mic.wait_sent(2 * CHUNK_SAMPLES)  # three chunks of silence first
    start = mic.play(clip)
    await mic.wait_sent(start + len(clip) // 2 - 1)
    mic.stop()
    await runner
    assert start % CHUNK_SAMPLES == 0 and start >= 3 * CHUNK_SAMPLES
    first = start // CHUNK_SAMPLES
    assert sent[:first] == [bytes(CHUNK_BYTES)] * first
    assert b"".join(sent[first:first + 3])[:len(clip)] == clip
    assert all(len(chunk) == CHUNK_BYTES for chunk in sent)
    assert mic.sent_time(start) == mic.sent_at[first]
    assert mic.sent_time(start + CHUNK_SAMPLES - 1) == mic.sent_at[first]
    assert mic.sent_time(start + CHUNK_SAMPLES) == mic.sent_at[first + 1]
    assert mic.sent_at == sorted(mic.sent_at)


def _soak_report(rss_mb: list[float], warmup_s: float = 0.0, settled_mb: list[float] | None = None) -> SoakReport:
    settled = settled_mb or [float("nan")] * len(rss_mb)
    samples = [Sample(at_s=5.0 * index, rss_mb=value, fds=20, tasks=50, sessions=10, lag_p99_ms=5, lag_mean_ms=1,
                      settled_rss_mb=settled[index])
               for index, value in enumerate(rss_mb)]
    return SoakReport(samples, warmup_s, ClientCounts(), load="")


def test_soak_slope_ignores_upkeep_dips_and_a_busy_sample_but_not_steady_growth() -> None:
    flat = [243.0] * 30
    for index in range(2, 30, 3):
        flat[index] = 238.5  # the dip after each memory upkeep pass
    flat[7] = 251.6  # several replies in flight at once
    flat[-1] = 236.0  # the users hang up
    assert abs(_soak_report(flat).slope_per_min("rss_mb")) < 0.1
    assert np.polyfit(np.arange(30) / 12, flat, 1)[0] < -0.5  # least squares is misled by the last sample
    leaking = [240.0 + 1.5 * index / 12 + (4.0 if index % 3 == 2 else 0.0) for index in range(30)]
    assert _soak_report(leaking).slope_per_min("rss_mb") > 1.4  # 1.5 MB/min shows through the noise
    assert _soak_report([243.0] * 10 + [300.0] * 20, warmup_s=50).slope_per_min("rss_mb") == 0.0


def test_settled_memory_is_read_through_its_steps_and_a_missing_reading_is_left_out() -> None:
    # the gauge changes once per upkeep pass (every 15 s) and is read every 5 s: a staircase
    leaking = [238.0 + 1.2 * (index // 3) * 15 / 60 for index in range(30)]
    assert abs(_soak_report([243.0] * 30, settled_mb=leaking).slope_per_min("settled_rss_mb") - 1.2) < 0.05
    flat = [238.0 + 0.4 * ((index // 3) % 2) for index in range(30)]
    assert abs(_soak_report([243.0] * 30, settled_mb=flat).slope_per_min("settled_rss_mb")) < 0.1
    # a server whose every pass reads the same pages is flat, not unmeasured
    assert _soak_report([243.0] * 30, settled_mb=[238.0] * 30).slope_per_min("settled_rss_mb") == 0.0
    unread = [float("nan")] * 5 + leaking[5:]  # before the server's first reading
    assert abs(_soak_report([243.0] * 30, settled_mb=unread).slope_per_min("settled_rss_mb") - 1.2) < 0.05
    assert np.isnan(_soak_report([243.0] * 30).slope_per_min("settled_rss_mb"))  # a server without the gauge


def test_a_one_off_step_is_taken_out_of_the_fit_and_a_leak_is_not() -> None:
    """Five minutes of settled readings: a 6 MB step once (an arena that grew, as a CI run of the whole suite saw)
    reads as +1.9 MB/min fitted whole and as flat without it; a leak keeps its slope, one that starts half-way
    included (3.8 MB/min over the second half)."""
    stepped = _soak_report([243.0] * 60, settled_mb=[122.5] * 30 + [129.5] * 30)
    assert stepped.slope_per_min("settled_rss_mb") > 1.0
    assert stepped.slope_without_step_per_min("settled_rss_mb") == 0.0
    leaking = [122.0 + 1.2 * (index // 3) * 15 / 60 for index in range(60)]
    assert abs(_soak_report([243.0] * 60, settled_mb=leaking).slope_without_step_per_min("settled_rss_mb") - 1.2) < 0.1
    late = [122.0 + 3.8 * max(0, index // 3 - 10) * 15 / 60 for index in range(60)]
    assert _soak_report([243.0] * 60, settled_mb=late).slope_without_step_per_min("settled_rss_mb") > 1.0
