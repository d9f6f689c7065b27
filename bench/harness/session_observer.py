"""What a benchmark client sees on one Realtime connection: replies, VAD events, ledger events, arrival times."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.harness.realtime_harness import audible_frames, first_audible, fmt_ms

STALL_JITTER_S = 0.02
"""A wait for the next delta shorter than this is jitter, not a gap a listener hears."""


@dataclass
class ReplyStats:
    """One response as the client received it (monotonic arrival times)."""

    response_id: str
    created_at: float
    first_delta_at: float | None = None
    audible_at: float | None = None
    """Arrival of the delta holding the reply's first non-silent sample."""
    audible_delta: int | None = None
    """That delta's index in :attr:`deltas`."""
    audible_offset_ms: float = 0.0
    """Where that sample lies in that delta (the silence the client plays before it)."""
    done_at: float | None = None
    status: str | None = None
    audio_ms: float = 0.0
    """Agent audio received (pcm16 24 kHz)."""
    deltas: list[tuple[float, float]] = field(default_factory=list)
    """(arrival, ms of audio) of every audio delta."""
    frames: list[list[tuple[bool, float]]] = field(default_factory=list)
    """Every audio delta's 10 ms frames: (audible, ms)."""
    paused_at: float | None = None
    """Arrival of ``bargein.reply.paused`` (the server holds a reply while it decides about an onset)."""

    def _playback(self) -> list[tuple[float, float]]:
        """(start, wait) of every delta for a client that plays each on arrival, back to back: a delta starts when
        it arrives or when the one before it has played, whichever is later, and ``wait`` is how long the player
        stood idle for it (both in seconds)."""
        played: list[tuple[float, float]] = []
        free_at = 0.0  # when the player has played everything before the delta in hand
        for arrival, ms in self.deltas:
            played.append((max(arrival, free_at), max(0.0, arrival - free_at)))
            free_at = played[-1][0] + ms / 1000
        return played

    def audible_played_at(self) -> float | None:
        """When a client that plays every delta on arrival, back to back, plays the first non-silent sample
        (a delta that arrives after the one before it has played starts on arrival)."""
        if self.audible_delta is None:
            return None
        return self._playback()[self.audible_delta][0] + self.audible_offset_ms / 1000

    def playback_stall_ms(self) -> float | None:
        """How long a client that plays every delta on arrival, back to back, waits for audio once the delta with
        the reply's first non-silent sample is playing: the reply falling behind its own playback (waits under
        :data:`STALL_JITTER_S` are the network's and the loop's jitter, not counted). ``None`` before it is audible."""
        if self.audible_delta is None:
            return None
        waits = [wait for _start, wait in self._playback()[self.audible_delta + 1:]]
        return 1000 * sum(wait for wait in waits if wait >= STALL_JITTER_S)

    def longest_pause_ms(self) -> float | None:
        """The longest stretch between the reply's first and last sound in which a client that plays every delta on
        arrival, back to back, plays nothing audible: silence in the audio (a pause between clauses) and waits for
        audio (:meth:`playback_stall_ms`, jitter included) together. ``None`` before it is audible."""
        if self.audible_delta is None:
            return None
        longest = quiet = 0.0
        sounded = False
        for (_start, wait), frames in zip(self._playback(), self.frames, strict=True):
            quiet += 1000 * wait if sounded else 0.0
            for audible, ms in frames:
                if audible:
                    if sounded:
                        longest = max(longest, quiet)
                    quiet, sounded = 0.0, True
                elif sounded:
                    quiet += ms
        return longest

    def audio_after(self, at: float) -> float:
        """Ms of this reply's audio that arrived after ``at``."""
        return sum(ms for arrival, ms in self.deltas if arrival > at)


@dataclass
class TurnResult:
    """The figures of one user turn."""

    index: int
    clip: str
    interrupted: str | None = None
    """The reply this turn's speech cut into, if any."""
    response_id: str | None = None
    first_audio_ms: float | None = None
    first_sound_ms: float | None = None
    """End of speech to the client *playing* the reply's first non-silent sample (deltas played on arrival, back
    to back): first audio plus the silence the reply opens with."""
    beyond_endpoint_ms: float | None = None
    vad_end_lag_ms: float | None = None
    """The server's ``speech_stopped`` ``audio_end_ms`` minus the speech end found by energy."""
    barge_in_ms: float | None = None
    paused_ms: float | None = None
    """Onset to ``bargein.reply.paused`` of the interrupted reply, when the server pauses before deciding."""
    late_audio_ms: float | None = None
    """Ms of the interrupted reply's audio that arrived after ``speech_started`` (a client must flush it)."""
    cut_status: str | None = None
    cut_done_ms: float | None = None
    """From the end of the interrupting speech to the interrupted reply's ``response.done``."""
    unanswered: str = ""
    """For a turn without an audible reply: what the server said during it (:meth:`Observer.story`)."""

    def line(self) -> str:
        """One row of the per-turn log."""
        def cell(value: float | None) -> str:
            return fmt_ms(float("nan") if value is None else value)

        text = (f"turn {self.index:3d} clip {self.clip}: first audio {cell(self.first_audio_ms)} ms "
                f"(sound played {cell(self.first_sound_ms)} ms), beyond endpoint {cell(self.beyond_endpoint_ms)} ms")
        if self.interrupted:
            text += (f", barge-in stop {cell(self.barge_in_ms)} ms, paused {cell(self.paused_ms)} ms, "
                     f"{cell(self.late_audio_ms)} ms audio after it; reply {self.cut_status or 'not closed'} "
                     f"{cell(self.cut_done_ms)} ms after the speech end")
        if self.unanswered:
            text += f"\n    no audible reply; the server said: {self.unanswered}"
        return text


@dataclass
class Observer:
    """Reads raw server events and keeps what the benchmarks measure."""

    responses: dict[str, ReplyStats] = field(default_factory=dict)
    speech_started: list[tuple[float, float, str]] = field(default_factory=list)
    """(arrival, audio_start_ms, item_id)."""
    speech_stopped: list[tuple[float, float, str]] = field(default_factory=list)
    """(arrival, audio_end_ms, item_id)."""
    turn_metrics: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    other: dict[str, list[tuple[float, dict[str, Any]]]] = field(default_factory=dict)
    deltas_after_done: int = 0
    quiet: bool = False
    """Do not print server errors (the load generator counts them instead)."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def read(self, connection: Any) -> None:
        """Read until the connection closes (run as a task)."""
        try:
            while True:
                raw = await connection.recv_bytes()
                self.take(json.loads(raw), time.monotonic())
        except Exception:
            self.changed.set()

    def story(self, since: float) -> str:
        """What the server said about turns and segments since ``since`` (a monotonic time), in order: why a
        turn went unanswered, for the per-turn log."""
        told: list[tuple[float, str]] = [(at, f"speech_started {item} @{ms:.0f}")
                                         for at, ms, item in self.speech_started if at >= since]
        told += [(at, f"speech_stopped {item} @{ms:.0f}") for at, ms, item in self.speech_stopped if at >= since]
        told += [(reply.created_at, f"response.created {reply.response_id}") for reply in self.responses.values()
                 if reply.created_at >= since]
        told += [(reply.done_at, f"response.done {reply.response_id} {reply.status}") for reply in
                 self.responses.values() if reply.done_at is not None and reply.done_at >= since]
        for kind in ("input_audio_buffer.committed", "bargein.listen.segment", "bargein.reply.resumed",
                     "conversation.item.deleted", "bargein.turn.mode"):
            for at, event in self.other.get(kind, []):
                if at >= since:
                    detail = f" {event.get('decision')} ({'; '.join(event.get('reasons', []))}) -> " \
                             f"{event.get('action')}" if kind == "bargein.listen.segment" else ""
                    told.append((at, f"{kind} {event.get('item_id') or event.get('response_id', '')}{detail}"))
        return " | ".join(text for _, text in sorted(told))

    def take(self, event: dict[str, Any], at: float) -> None:
        """Account for one server event that arrived at ``at``."""
        kind = event.get("type", "")
        if kind == "response.output_audio.delta":
            reply = self.responses.get(event["response_id"])
            if reply is None:
                return
            if reply.done_at is not None:
                self.deltas_after_done += 1
            audio = base64.b64decode(event["delta"])
            reply.audio_ms += len(audio) / 48.0
            reply.deltas.append((at, len(audio) / 48.0))
            reply.frames.append(audible_frames(audio))
            if reply.first_delta_at is None:
                reply.first_delta_at = at
            if reply.audible_at is None and (index := first_audible(audio)) is not None:
                reply.audible_at, reply.audible_delta, reply.audible_offset_ms = at, len(reply.deltas) - 1, index / 24
        elif kind == "response.created":
            response_id = event["response"]["id"]
            self.responses[response_id] = ReplyStats(response_id, at)
        elif kind == "response.done":
            reply = self.responses.get(event["response"]["id"])
            if reply is not None:
                reply.done_at = at
                reply.status = event["response"].get("status")
        elif kind == "input_audio_buffer.speech_started":
            self.speech_started.append((at, float(event["audio_start_ms"]), event.get("item_id", "")))
        elif kind == "input_audio_buffer.speech_stopped":
            self.speech_stopped.append((at, float(event["audio_end_ms"]), event.get("item_id", "")))
        elif kind == "bargein.reply.paused" and (paused := self.responses.get(event.get("response_id", ""))):
            paused.paused_at = paused.paused_at or at
        elif kind == "bargein.turn.metrics":
            self.turn_metrics.append(event)
        elif kind == "error":
            self.errors.append(event)
            if not self.quiet:
                print(f"server error: {event.get('error')}", flush=True)
        else:
            self.other.setdefault(kind, []).append((at, event))
        self.changed.set()

    async def until(self, found: Callable[[], Any], timeout: float) -> Any:
        """Wait until ``found()`` returns something other than None, and return it (TimeoutError after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while (value := found()) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), remaining)
            except TimeoutError:
                continue
        return value

    async def wait_event(self, kind: str, *, timeout: float) -> dict[str, Any]:
        """The newest event of a type that the observer does not track itself (waits for the first)."""
        found: dict[str, Any] = await self.until(
            lambda: self.other[kind][-1][1] if self.other.get(kind) else None, timeout)
        return found

    async def wait_speech_started(self, *, since_ms: float, timeout: float) -> tuple[float, float, str] | None:
        """The first ``speech_started`` at or after stream position ``since_ms``, or None on timeout."""
        try:
            found: tuple[float, float, str] = await self.until(
                lambda: next((s for s in self.speech_started if s[1] >= since_ms), None), timeout)
        except TimeoutError:
            return None
        return found

    def last_speech_started(self, *, before_ms: float) -> tuple[float, float, str] | None:
        """The newest ``speech_started`` whose onset lies before stream position ``before_ms``."""
        return next((s for s in reversed(self.speech_started) if s[1] <= before_ms), None)

    def last_speech_stopped(self, *, before: float) -> float | None:
        """``audio_end_ms`` of the newest ``speech_stopped`` that arrived before ``before``."""
        return next((s[1] for s in reversed(self.speech_stopped) if s[0] <= before), None)

    async def wait_audible_reply(self, *, after: tuple[float, float, str], timeout: float) -> ReplyStats:
        """The first reply created after a ``speech_started`` to have reached an audible sample."""
        def found() -> ReplyStats | None:
            audible = [r for r in self.responses.values() if r.created_at >= after[0] and r.audible_at is not None]
            return min(audible, key=lambda r: r.audible_at or 0.0) if audible else None

        reply: ReplyStats = await self.until(found, timeout)
        return reply

    async def wait_done(self, response_id: str, *, timeout: float) -> ReplyStats:
        """The reply once its ``response.done`` has arrived."""
        reply: ReplyStats = await self.until(
            lambda: r if (r := self.responses.get(response_id)) and r.done_at is not None else None, timeout)
        return reply
