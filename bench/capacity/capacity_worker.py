"""One load-generator process of ``bench/capacity/sessions.py``: many real-time sessions on one asyncio loop.

Each session is a :class:`~bench.harness.realtime_harness.Microphone` (a 20 ms append every 20 ms) on the
official ``openai`` client. Appends are serialised once per distinct chunk and sent with
``send_raw``, so the generator spends its CPU on pacing and sockets, not on JSON.

* ``listening`` sessions: ``turn_detection.create_response`` false; speech clip, 1 to 2.5 s of
  silence, next clip. The server runs VAD, endpointing and (fake) transcription, never a reply.
* ``talking`` sessions: the server answers every turn; the session waits for the reply to play out,
  pauses 0.3 to 1 s, and speaks again.

Every session sends a probe (``session.update`` that changes nothing) every ``probe_s`` and times its
``session.updated``. The server handles a connection's messages in order, so the probe is answered only
after every append sent before it has been processed: its round trip is the inbound frame lag.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

from bench.harness.realtime_harness import WIRE_RATE, Microphone, SpeechClip, append_sender, load_clips
from bench.harness.session_observer import Observer

PROBE = json.dumps({"type": "session.update", "session": {"type": "realtime"}})
PROBE_TIMEOUT_S = 5.0
VAD_FRAME_MS = 32.0


@dataclass(frozen=True)
class StepPlan:
    """What one worker does during one ramp step."""

    host_port: str
    mode: str
    sessions: int
    start_at: float
    """Monotonic time (shared by all processes on Linux) at which streaming begins."""
    warmup_s: float
    measure_s: float
    probe_s: float
    seed: int
    silence_ms: int | None = None
    """Each session sets ``silence_duration_ms`` (plain silence: no end-of-turn model); None: the default."""


@dataclass
class StepSamples:
    """Samples a worker took inside the measurement window."""

    probe_lag_ms: list[float] = field(default_factory=list)
    onset_lag_ms: list[float] = field(default_factory=list)
    first_audio_ms: list[float] = field(default_factory=list)
    sessions_connected: int = 0
    errors: int = 0
    late_chunks: int = 0
    """Appends the generator itself sent more than 20 ms late (its own CPU starvation)."""
    missing_replies: int = 0
    loop_lag_ms: list[float] = field(default_factory=list)
    """Oversleep of a 10 ms timer on the generator's own loop: how starved the load generator was."""
    failures: list[str] = field(default_factory=list)
    """The first few sessions' exceptions (a session that died measures nothing)."""


def run_worker(plan: StepPlan, results: Any) -> None:
    """Process entry point: run the sessions, put a :class:`StepSamples` dict on ``results``."""
    try:
        samples = asyncio.run(_run(plan))
    except BaseException as error:  # report it: a silent worker would look like fewer sessions
        samples = StepSamples(failures=[f"load generator died: {type(error).__name__}: {error}"[:200]])
    results.put(samples.__dict__)


async def _run(plan: StepPlan) -> StepSamples:
    from openai import AsyncOpenAI

    clips = load_clips()
    samples = StepSamples()
    client = AsyncOpenAI(api_key="sk-local", websocket_base_url=f"ws://{plan.host_port}/v1", max_retries=0)
    rng = random.Random(plan.seed)
    window = (plan.start_at + plan.warmup_s, plan.start_at + plan.warmup_s + plan.measure_s)
    async with contextlib.AsyncExitStack() as stack:
        connections = await asyncio.gather(
            *(stack.enter_async_context(client.realtime.connect(model="bargein-capacity", max_retries=0))
              for _ in range(plan.sessions)), return_exceptions=True)
        live = [c for c in connections if not isinstance(c, BaseException)]
        monitor = asyncio.create_task(_watch_loop(window, samples))
        samples.sessions_connected = len(live)
        samples.errors += len(connections) - len(live)
        outcomes = await asyncio.gather(*(_session(c, plan, clips, rng.random(), window, samples) for c in live),
                                        return_exceptions=True)
        failed = [o for o in (*connections, *outcomes) if isinstance(o, BaseException)]
        samples.failures = [f"{type(o).__name__}: {o}"[:200] for o in failed[:3]]
        samples.errors += sum(1 for o in outcomes if isinstance(o, BaseException))
        monitor.cancel()
        # close every connection at once: with its reader gone, a talking session's unread reply audio
        # stalls its closing handshake until websockets' close timeout, and one after another those
        # timeouts outlast the parent's wait for this report
        await asyncio.gather(*(c.close() for c in live), return_exceptions=True)
    return samples


async def _watch_loop(window: tuple[float, float], samples: StepSamples) -> None:
    while True:
        asked = time.monotonic()
        await asyncio.sleep(0.01)
        woke = time.monotonic()
        if _in(window, asked):
            samples.loop_lag_ms.append(1000 * (woke - asked - 0.01))


def _in(window: tuple[float, float], at: float) -> bool:
    return window[0] <= at <= window[1]


async def _session(connection: Any, plan: StepPlan, clips: list[SpeechClip], phase: float,
                   window: tuple[float, float], samples: StepSamples) -> None:
    observer = Observer(quiet=True)
    reader = asyncio.create_task(observer.read(connection))
    send = append_sender(connection)

    detection: dict[str, Any] = {"type": "server_vad", "create_response": plan.mode != "listening"}
    if plan.silence_ms is not None:
        detection["silence_duration_ms"] = plan.silence_ms
    if plan.mode == "listening" or plan.silence_ms is not None:
        await connection.send_raw(json.dumps({"type": "session.update", "session": {"type": "realtime", "audio": {
            "input": {"turn_detection": detection}}}}))
        await observer.wait_event("session.updated", timeout=30)
    await asyncio.sleep(max(0.0, plan.start_at - time.monotonic()) + 0.02 * phase)
    mic = Microphone(send)
    tasks = [asyncio.create_task(mic.run()), asyncio.create_task(_probe(connection, observer, plan, window, samples))]
    try:
        await asyncio.sleep(phase * 3.0)  # spread the sessions' speech over time, as real users would be
        turn = int(phase * 1000)
        while time.monotonic() < window[1]:
            clip = clips[turn % len(clips)]
            turn += 1
            await _speak(mic, observer, clip, plan, window, samples)
    finally:
        mic.stop()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        samples.late_chunks += sum(1 for a, b in zip(mic.sent_at, mic.sent_at[1:], strict=False)
                                   if _in(window, b) and b - a > 0.04)
        _collect_onsets(mic, observer, window, samples)
        samples.errors += len(observer.errors)
        reader.cancel()


async def _speak(mic: Microphone, observer: Observer, clip: SpeechClip, plan: StepPlan,
                 window: tuple[float, float], samples: StepSamples) -> None:
    start = mic.play(clip.pcm)
    end_at = await mic.wait_sent(start + clip.end)
    if plan.mode == "listening":
        await mic.wait_sent(start + clip.samples - 1)
        await asyncio.sleep(random.uniform(1.0, 2.5))
        return
    started = observer.last_speech_started(before_ms=1000 * (start + clip.end) / WIRE_RATE)
    if started is None:
        await asyncio.sleep(1.0)
        return
    try:
        reply = await observer.wait_audible_reply(after=started, timeout=8.0)
    except TimeoutError:
        if _in(window, end_at):
            samples.missing_replies += 1
        return
    assert reply.audible_at is not None
    if _in(window, end_at):
        samples.first_audio_ms.append(1000 * (reply.audible_at - end_at))
    with contextlib.suppress(TimeoutError):
        await observer.wait_done(reply.response_id, timeout=10.0)
    play_end = reply.audible_at + reply.audio_ms / 1000
    await asyncio.sleep(max(0.0, play_end - time.monotonic()) + random.uniform(0.3, 1.0))


async def _probe(connection: Any, observer: Observer, plan: StepPlan, window: tuple[float, float],
                 samples: StepSamples) -> None:
    await asyncio.sleep(random.uniform(0, plan.probe_s))
    while True:
        answered = len(observer.other.get("session.updated", []))
        sent_at = time.monotonic()
        await connection.send_raw(PROBE)
        def answer(n: int = answered) -> bool | None:
            return True if len(observer.other.get("session.updated", [])) > n else None

        try:
            await observer.until(answer, PROBE_TIMEOUT_S)
            lag = observer.other["session.updated"][answered][0] - sent_at
        except TimeoutError:
            lag = PROBE_TIMEOUT_S
        if _in(window, sent_at):
            samples.probe_lag_ms.append(1000 * lag)
        await asyncio.sleep(plan.probe_s * random.uniform(0.5, 1.5))


def _collect_onsets(mic: Microphone, observer: Observer, window: tuple[float, float], samples: StepSamples) -> None:
    """``speech_started`` arrival minus the send time of the chunk that completed the onset VAD frame."""
    for arrival, onset_ms, _item in observer.speech_started:
        frame_end = int((onset_ms + VAD_FRAME_MS) * WIRE_RATE / 1000) - 1
        sent = mic.sent_time(frame_end)
        if sent is not None and _in(window, sent):
            samples.onset_lag_ms.append(1000 * (arrival - sent))
