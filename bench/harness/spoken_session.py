"""One benchmark session: real speech streamed in real time through the official ``openai`` client, each turn
measured (first audio, barge-in stop, what the server's ledger says); every ``--barge-every``-th reply is
interrupted by the next clip.

Run by ``bench.latency.first_audio``, ``bench.latency.ray_overhead`` and ``bench.capacity.sessions``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.harness.realtime_harness import WIRE_RATE, Microphone, SpeechClip, load_clips
from bench.harness.session_observer import Observer, TurnResult

VAD_FRAME_MS = 32.0
CUT_IN_LEAD_S = 0.1
"""An interrupting clip starts this long before its speech onset (a little room noise, as in life)."""


async def run_session(host_port: str, args: argparse.Namespace, language: str = "en", *,
                      alongside: Callable[[Any], Awaitable[None]] | None = None,
                      ) -> tuple[list[TurnResult], Observer, int | None]:
    """Stream ``args.turns`` clips through one session and measure each turn; ``alongside(connection)`` runs
    beside the turns for as long as they last (``bench.latency.seeing_latency``: a camera streaming frames)."""
    from openai import AsyncOpenAI

    clips = await _session_clips(language, args)
    client = AsyncOpenAI(api_key="sk-local", websocket_base_url=f"ws://{host_port}/v1", max_retries=0)
    results: list[TurnResult] = []
    async with client.realtime.connect(model="bargein-bench", max_retries=0,
                                       extra_query={"bargein_events": "1"}) as connection:
        observer = Observer()
        reader = asyncio.create_task(observer.read(connection))
        silence_ms = await _configure(connection, observer, args, language)

        async def send(chunk: bytes) -> None:
            import base64

            await connection.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())

        mic = Microphone(send)
        streaming = asyncio.create_task(mic.run())
        beside = asyncio.create_task(alongside(connection)) if alongside is not None else None
        try:
            await asyncio.sleep(0.5)
            await _run_turns(mic, observer, clips, silence_ms, args, results)
            await asyncio.sleep(0.3)  # let the last ledger event arrive
            if silence_ms is not None and args.silence_ms is None:
                _beyond_from_ledger(results, observer, mic)
        finally:
            mic.stop()
            streaming.cancel()
            reader.cancel()
            if beside is not None:
                beside.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await streaming
    return results, observer, silence_ms


async def _session_clips(language: str, args: argparse.Namespace) -> list[SpeechClip]:
    """The clips the session speaks: English questions or recordings, or synthesised Mandarin."""
    if language == "en" and args.clips == "questions":
        from bench.harness.question_clips import question_clips

        return question_clips()
    if language == "en":
        return load_clips()
    from bench.harness.mandarin_clips import mandarin_clips

    return await mandarin_clips()


async def _configure(connection: Any, observer: Observer, args: argparse.Namespace, language: str) -> int | None:
    """Set the session's turn detection, fields and language as ``args`` asks; print the turn detection it ends
    with and return its server_vad silence in ms (None for any other detection)."""
    created = await observer.wait_event("session.created", timeout=30)
    silence_ms = args.silence_ms
    if silence_ms is not None:
        await connection.session.update(session={"type": "realtime", "audio": {"input": {"turn_detection": {
            "type": "server_vad", "silence_duration_ms": silence_ms}}}})
        created = await observer.wait_event("session.updated", timeout=30)
    elif args.semantic:
        await connection.session.update(session={"type": "realtime", "audio": {"input": {"turn_detection": {
            "type": "semantic_vad"}}}})
        created = await observer.wait_event("session.updated", timeout=30)
    if getattr(args, "session", None):  # the caller's own session fields (bench.quality.memory: memory off)
        await connection.session.update(session={"type": "realtime", **args.session})
        created = await observer.wait_event("session.updated", timeout=30)
    if language != "en":
        await connection.session.update(session={"type": "realtime", "audio": {"input": {
            "transcription": {"language": language}}}})
        created = await observer.wait_event("session.updated", timeout=30)
    detection = created["session"]["audio"]["input"]["turn_detection"] or {}
    print(f"turn detection: {detection}", flush=True)
    return int(detection["silence_duration_ms"]) if detection.get("type") == "server_vad" else None


async def _run_turns(mic: Microphone, observer: Observer, clips: list[SpeechClip], silence_ms: int | None,
                     args: argparse.Namespace, results: list[TurnResult]) -> None:
    """Speak ``args.turns`` clips, cutting in on every ``args.barge_every``-th reply, appending each turn's
    result to ``results`` as it ends (so a failure keeps the turns measured so far); wait for the last reply."""
    cut_in: str | None = None
    for index in range(args.turns):
        clip = clips[index % len(clips)]
        interrupt = args.barge_every > 0 and index % args.barge_every == args.barge_every - 1 \
            and index < args.turns - 1
        result = await _turn(mic, observer, clip, index, cut_in, silence_ms, args)
        results.append(result)
        print(result.line(), flush=True)
        cut_in = None
        if result.response_id is None:
            await asyncio.sleep(1.0)
        elif interrupt:
            cut_in = result.response_id
        else:
            await _let_reply_play(observer, result.response_id, args.max_reply_s)
    if results and results[-1].response_id:
        with contextlib.suppress(TimeoutError):
            await observer.wait_done(results[-1].response_id, timeout=args.max_reply_s)


async def _turn(mic: Microphone, observer: Observer, clip: SpeechClip, index: int, cut_in: str | None,
                silence_ms: int | None, args: argparse.Namespace) -> TurnResult:
    skip = max(0, clip.onset - int(CUT_IN_LEAD_S * WIRE_RATE)) if cut_in else 0
    began = time.monotonic()
    start = mic.play(clip.from_sample(skip))
    onset_pos = start + clip.onset - skip
    end_pos = start + clip.end - skip
    result = TurnResult(index, clip.name, interrupted=cut_in)
    onset_at = started_at = None
    if cut_in is not None:
        onset_at = await mic.wait_sent(onset_pos)
        started = await observer.wait_speech_started(since_ms=1000 * start / WIRE_RATE - 50, timeout=10)
        if started is not None:
            started_at = started[0]
            result.barge_in_ms = 1000 * (started_at - onset_at)
    end_at = await mic.wait_sent(end_pos)
    turn_started = observer.last_speech_started(before_ms=1000 * end_pos / WIRE_RATE)
    if turn_started is None:
        result.unanswered = "no speech_started before the clip's end; " + observer.story(began)
        return result
    try:
        reply = await observer.wait_audible_reply(after=turn_started, timeout=args.reply_timeout_s)
    except TimeoutError:
        result.unanswered = observer.story(began)
        return result
    finally:
        if cut_in is not None:
            await _judge_cut(observer, result, cut_in, onset_at, started_at, end_at)
    assert reply.audible_at is not None
    result.response_id = reply.response_id
    result.first_audio_ms = 1000 * (reply.audible_at - end_at)
    if (played_at := reply.audible_played_at()) is not None:
        result.first_sound_ms = 1000 * (played_at - end_at)
    stopped = observer.last_speech_stopped(before=reply.audible_at)
    if stopped is not None:
        result.vad_end_lag_ms = stopped - 1000 * end_pos / WIRE_RATE
        if silence_ms is None:
            return result
        endpoint_ms = stopped + math.ceil(silence_ms / VAD_FRAME_MS) * VAD_FRAME_MS
        endpoint_at = mic.sent_time(int(endpoint_ms * WIRE_RATE / 1000) - 1)
        if endpoint_at is not None:
            result.beyond_endpoint_ms = 1000 * (reply.audible_at - endpoint_at)
    return result


def _beyond_from_ledger(results: list[TurnResult], observer: Observer, mic: Microphone) -> None:
    """Beyond the endpoint where the server's silence varies by turn (the tiered default endpoint): from the
    chunk that completed the commit (the ledger's ``commit_stream_ms``) to the first audible sample."""
    commits = {m.get("response_id"): m.get("commit_stream_ms") for m in observer.turn_metrics}
    for result in results:
        commit_ms = commits.get(result.response_id)
        reply = observer.responses.get(result.response_id or "")
        if commit_ms is None or reply is None or reply.audible_at is None:
            result.beyond_endpoint_ms = None
            continue
        endpoint_at = mic.sent_time(int(commit_ms * WIRE_RATE / 1000) - 1)
        result.beyond_endpoint_ms = None if endpoint_at is None else 1000 * (reply.audible_at - endpoint_at)
    print("beyond the ledger's commit per turn: "
          + " ".join("-" if r.beyond_endpoint_ms is None else f"{r.beyond_endpoint_ms:.0f}" for r in results))


async def _judge_cut(observer: Observer, result: TurnResult, cut_in: str, onset_at: float | None,
                     started_at: float | None, end_at: float) -> None:
    """How the interrupted reply ended: paused when, audio after the onset was heard, closed when."""
    cut = observer.responses[cut_in]
    with contextlib.suppress(TimeoutError):
        await observer.wait_done(cut_in, timeout=5)
    result.cut_status = cut.status
    if cut.done_at is not None:
        result.cut_done_ms = 1000 * (cut.done_at - end_at)
    if cut.paused_at is not None and onset_at is not None:
        result.paused_ms = 1000 * (cut.paused_at - onset_at)
    if started_at is not None:
        result.late_audio_ms = cut.audio_after(started_at)


async def _let_reply_play(observer: Observer, response_id: str, max_reply_s: float) -> None:
    """Wait for the reply to end and for the client to have played it, then a short pause."""
    reply = observer.responses[response_id]
    with contextlib.suppress(TimeoutError):
        await observer.wait_done(response_id, timeout=max_reply_s)
    if reply.audible_at is not None:
        play_end = reply.audible_at + min(reply.audio_ms / 1000, max_reply_s)
        await asyncio.sleep(max(0.0, play_end - time.monotonic()))
    await asyncio.sleep(0.6)
