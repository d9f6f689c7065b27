"""Spoken turns over any :class:`~bench.latency.webrtc_links.Link`, measured the same way on both transports.

Every other turn cuts into the reply before it (after ``PLAY_BEFORE_CUT_S`` of it has played); the other replies
are cancelled by their id (:func:`_cancel_after`) once ``PLAY_BEFORE_CANCEL_S`` has played, so a run of ``n`` turns
lasts about ``n`` times (clip + 3 s) whatever the reply's length. Speech onsets that cut in are at least 5.5 s
apart, so the storm guard never enters confirm mode. Measured per turn (docs/design.md's definitions, on the
client's clock):

- **first audio**: the chunk holding the last speech sample leaving the client to the first audible agent frame
  the client can play (over WebRTC, out of aiortc's jitter buffer and decoder); **at the wire**: to the first
  voiced RTP packet reaching the client (over the WebSocket, the same);
- **stop** (turns that cut in): the chunk holding the first speech sample leaving the client to the last voiced
  packet of the interrupted reply reaching the client (over WebRTC on loopback, the last reply packet the server
  sent, a fraction of a millisecond later); **heard**: to the last audible frame out of the jitter buffer;
- **started**: the same onset to ``input_audio_buffer.speech_started`` arriving;
- **heard** (turns that cut in): the words of the interrupted reply the client played (its tone bursts,
  :mod:`bench.latency.webrtc_engines`) against the words the server's history kept of it
  (``conversation.item.retrieve``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

from bench.harness.realtime_harness import WIRE_RATE, SpeechClip
from bench.latency.webrtc_links import AudioFrame, Link, Received

AUDIBLE = 33
"""A frame is audible above -60 dBFS (as ``bench.harness.realtime_harness.AUDIBLE_INT16``)."""
WORD_LEVEL = 1000
"""A frame belongs to a word's burst above -30 dBFS (the bursts are at -14 dBFS; codec ringing stays under)."""
WORD_GAP_FRAMES_MS = 40.0
"""Quiet audio that separates two bursts (the synthesiser leaves 80 ms)."""
PLAY_BEFORE_CUT_S = 1.2
PLAY_BEFORE_CANCEL_S = 0.8
CANCEL_WAIT_S = 15.0
"""How long a cancelled reply may play on before the next turn is spoken anyway (two SCTP retransmissions of a
late cancel fit)."""
REPLY_ID_WAIT_S = 10.0
"""How long a turn waits for its reply's ``response.created`` (the data channel may lag the audio) before it
cancels the reply unnamed."""
CUT_IN_LEAD_S = 0.1
BARGE_GAP_S = 5.5


@dataclass
class TurnFigures:
    """One turn's figures (ms; None where not measured)."""

    index: int
    clip: str
    cut_in: bool
    first_audio_ms: float | None = None
    first_wire_ms: float | None = None
    stop_ms: float | None = None
    stop_heard_ms: float | None = None
    started_ms: float | None = None
    played_words: int | None = None
    history_words: int | None = None
    history_text: str | None = None
    unanswered: str | None = None
    """For a turn with no audible reply: what reached the client after its speech ended, to tell why."""
    cancelled: bool = False
    """The turn cancelled its reply (rather than the next turn cutting into it)."""
    cancel_stop_ms: float | None = None
    """For a reply the turn cancelled: how long after the cancel its audio stopped arriving (None: not cancelled,
    or it played on through ``CANCEL_WAIT_S``)."""
    onset_at: float | None = None
    """A cut's onset leaving the client (``time.monotonic``), with its RTP timestamp (WebRTC only) and the interrupted
    reply's last voiced packet arriving: for :mod:`bench.latency.webrtc_onset`'s terms."""
    onset_rtp: int | None = None
    last_packet_at: float | None = None

    @property
    def completed(self) -> bool:
        """The turn got an audible reply."""
        return self.first_audio_ms is not None

    def line(self) -> str:
        """One printed line."""
        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value:.0f}"
        heard = "" if self.played_words is None else f", heard {self.played_words} words, history {self.history_words}"
        return (f"turn {self.index:2d} {self.clip:28s} first audio {ms(self.first_audio_ms)} ms (wire "
                f"{ms(self.first_wire_ms)})"
                + (f", stop {ms(self.stop_ms)} ms (heard {ms(self.stop_heard_ms)}), speech_started "
                   f"{ms(self.started_ms)} ms{heard}" if self.cut_in else "")
                + (f"; no reply audio, events after its speech: {self.unanswered}" if self.unanswered else ""))


def even_levels(clips: list[SpeechClip], speech_dbfs: float = -20.0) -> list[SpeechClip]:
    """The clips scaled so that each one's speech has the same RMS level (as a browser's auto gain would leave
    them): the listening policy takes speech well under the user's own level for the room's, and the held-out
    voices differ by 10 dB."""
    import numpy as np

    even = []
    for clip in clips:
        samples = np.frombuffer(clip.pcm, dtype="<i2").astype(np.float32)
        speech = samples[clip.onset:clip.end + 1]
        rms = float(np.sqrt(np.mean(np.square(speech)))) if len(speech) else 0.0
        gain = 32768 * 10 ** (speech_dbfs / 20) / rms if rms > 0 else 1.0
        pcm = np.clip(samples * gain, -32768, 32767).astype("<i2").tobytes()
        even.append(SpeechClip(clip.name, pcm, clip.onset, clip.end, clip.longest_pause_s))
    return even


def audible_between(audio: list[AudioFrame], after: float, before: float, level: int = AUDIBLE) -> list[AudioFrame]:
    """The frames above ``level`` that arrived in ``(after, before]``."""
    return [frame for frame in audio if after < frame[0] <= before and frame[1] > level]


def count_bursts(audio: list[AudioFrame]) -> int:
    """Runs of loud frames separated by at least ``WORD_GAP_FRAMES_MS`` of quiet ones: the words played."""
    bursts, quiet_ms, loud = 0, WORD_GAP_FRAMES_MS, False
    for _at, peak, ms in audio:
        if peak > WORD_LEVEL:
            if not loud and quiet_ms >= WORD_GAP_FRAMES_MS:
                bursts += 1
            loud, quiet_ms = True, 0.0
        else:
            loud = False
            quiet_ms += ms
    return bursts


async def first_audible_after(received: Received, after: float, timeout_s: float, *,
                              wire: bool = False) -> float | None:
    """The arrival of the first audible frame (``wire``: voiced packet) after ``after`` (None: none within
    ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        frames = audible_between(received.wire if wire else received.audio, after, float("inf"))
        if frames:
            return frames[0][0]
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(0.01)


async def run_turns(link: Link, clips: list[SpeechClip], turns: int, *, barge: bool = True,
                    reply_timeout_s: float = 20.0, quiet: bool = False) -> list[TurnFigures]:
    """Speak ``turns`` clips (cycling), cutting into every other reply when ``barge``; figures per turn (each
    printed unless ``quiet``)."""
    results: list[TurnFigures] = []
    cut_reply: tuple[str | None, float] | None = None  # (the reply to cut, when it became audible)
    last_cut = -1e9
    handled: set[str] = set()  # the replies turns have answered with so far (cut or cancelled)
    await asyncio.sleep(0.5)
    for index in range(turns):
        clip = clips[index % len(clips)]
        if cut_reply is not None:
            await asyncio.sleep(max(0.0, last_cut + BARGE_GAP_S - time.monotonic()))
        figures, reply_id, audible_at = await _turn(link, clip, index, cut_reply, reply_timeout_s, handled)
        if reply_id is not None:
            handled.add(reply_id)
        if figures.cut_in:
            last_cut = time.monotonic()
        results.append(figures)
        if not quiet:
            print(figures.line(), flush=True)
        cut_reply = None
        if audible_at is None:
            await asyncio.sleep(1.0)
        elif barge and index % 2 == 0 and index < turns - 1:
            await asyncio.sleep(max(0.0, audible_at + PLAY_BEFORE_CUT_S - time.monotonic()))
            cut_reply = (reply_id, audible_at)
        else:
            figures.cancelled = True
            figures.cancel_stop_ms = await _cancel_after(link, audible_at, reply_id)
    return results


async def _turn(link: Link, clip: SpeechClip, index: int, cut_reply: tuple[str | None, float] | None,
                timeout_s: float, handled: set[str]) -> tuple[TurnFigures, str | None, float | None]:
    skip = max(0, clip.onset - int(CUT_IN_LEAD_S * WIRE_RATE)) if cut_reply else 0
    start = link.mic.play(clip.from_sample(skip))
    onset_at = await link.mic.wait_sent(start + clip.onset - skip)
    end_at = await link.mic.wait_sent(start + clip.end - skip)
    figures = TurnFigures(index, clip.name, cut_in=cut_reply is not None)
    rtp_position = getattr(link.mic, "rtp_position", None)
    figures.onset_rtp = rtp_position(start + clip.onset - skip) if rtp_position is not None else None
    audible_at = await first_audible_after(link.received, end_at, timeout_s)
    if audible_at is not None:
        figures.first_audio_ms = 1000 * (audible_at - end_at)
        wire_at = await first_audible_after(link.received, end_at, 0.0, wire=True)
        figures.first_wire_ms = None if wire_at is None else 1000 * (wire_at - end_at)
    else:
        figures.unanswered = "; ".join(event_trail(link.received, end_at - 1.0, time.monotonic())[:60]) or "none"
    if cut_reply is not None:
        await _judge_cut(link, figures, cut_reply, onset_at, end_at)
    reply_id = await _reply_of_turn(link.received, end_at - 1.0, handled,
                                    REPLY_ID_WAIT_S if audible_at is not None else 0.0)
    return figures, reply_id, audible_at


def event_trail(received: Received, after: float, before: float,
                marks: list[tuple[float, str]] | None = None) -> list[str]:
    """What reached the client in ``(after, before]``, one line each with its arrival relative to ``after``: the
    events (not the deltas, nor ``bargein.reply.audio``), with the status, verdict or error that tells why a turn
    went unanswered, the stretches of reply audio at the wire and out of the jitter buffer, and ``marks``."""
    trail: list[tuple[float, str]] = list(marks or [])
    for at, event in received.events:
        kind = str(event.get("type", "?"))
        if not after < at <= before or "delta" in kind or kind == "bargein.reply.audio":
            continue
        detail = ""
        if kind == "response.done":
            detail = f"({event['response'].get('status')}:{event['response'].get('id')})"
        elif kind == "response.created":
            detail = f"({event['response'].get('id')})"
        elif kind == "error":
            detail = f"({event.get('error', {}).get('code')}: {event.get('error', {}).get('message')})"
        elif kind == "bargein.listen.segment":
            detail = f"({event.get('decision')}: {event.get('action')}; {event.get('reasons')})"
        elif kind.startswith("output_audio_buffer") or kind == "response.cancel":
            detail = f"({event.get('response_id')})"
        trail.append((at, f"{kind}{detail}"))
    for name, frames in (("wire", received.wire), ("played", received.audio)):
        runs = voiced_runs(frames, after, before)
        trail.extend((start, f"[{name} audio {end - start:.2f} s]") for start, end in runs)
    return [f"+{at - after:7.2f} {text}" for at, text in sorted(trail)]


def voiced_runs(frames: list[AudioFrame], after: float, before: float, gap_s: float = 0.3) -> list[tuple[float, float]]:
    """The stretches of audible frames in ``(after, before]`` (a gap over ``gap_s`` ends one)."""
    runs: list[tuple[float, float]] = []
    for at, peak, _ms in frames:
        if not after < at <= before or peak <= AUDIBLE:
            continue
        if runs and at - runs[-1][1] <= gap_s:
            runs[-1] = (runs[-1][0], at)
        else:
            runs.append((at, at))
    return runs


async def _reply_of_turn(received: Received, after: float, handled: set[str], wait_s: float) -> str | None:
    """The turn's reply: the newest ``response.created`` after ``after`` for a reply no earlier turn answered with,
    waiting up to ``wait_s`` for it (over WebRTC the events' data channel may lag the reply's RTP audio by seconds
    on a lossy path, so an earlier reply's event can arrive after this turn's speech)."""
    deadline = time.monotonic() + wait_s
    while True:
        fresh = [str(event["response"]["id"]) for _at, event in received.events_of("response.created", after)
                 if str(event["response"]["id"]) not in handled]
        if fresh or time.monotonic() >= deadline:
            return fresh[-1] if fresh else None
        await asyncio.sleep(0.02)


async def _judge_cut(link: Link, figures: TurnFigures, cut_reply: tuple[str | None, float], onset_at: float,
                     end_at: float) -> None:
    """The interrupted reply: when its last audible frame arrived, when speech_started did, and its words played
    against those its history item kept."""
    reply_id, reply_audible_at = cut_reply
    cut_packets = audible_between(link.received.wire, onset_at, end_at)
    figures.stop_ms = 1000 * (cut_packets[-1][0] - onset_at) if cut_packets else 0.0
    figures.onset_at = onset_at
    figures.last_packet_at = cut_packets[-1][0] if cut_packets else onset_at
    cut_frames = audible_between(link.received.audio, onset_at, end_at)
    figures.stop_heard_ms = 1000 * (cut_frames[-1][0] - onset_at) if cut_frames else 0.0
    with contextlib.suppress(TimeoutError):
        at, _ = await link.received.wait_event("input_audio_buffer.speech_started", onset_at - 0.2, 3.0)
        figures.started_ms = 1000 * (at - onset_at)
    last = cut_frames[-1][0] if cut_frames else onset_at
    played = [frame for frame in link.received.audio if reply_audible_at - 0.001 <= frame[0] <= last]
    figures.played_words = count_bursts(played)
    figures.history_text = await _history_text(link, reply_id)
    figures.history_words = None if figures.history_text is None else len(figures.history_text.split())


async def _history_text(link: Link, reply_id: str | None) -> str | None:
    """The transcript the server's history holds for the reply's audio item (once the reply is done)."""
    if reply_id is None:
        return None
    added = [event for _at, event in link.received.events_of("response.output_item.added")
             if event.get("response_id") == reply_id]
    if not added:
        return None
    item_id = added[0]["item"]["id"]
    with contextlib.suppress(TimeoutError):
        await link.received.wait_event("response.done", 0.0, 5.0,
                                       where=lambda e: e["response"]["id"] == reply_id)
    await asyncio.sleep(0.3)  # the heard position may settle after the cancel
    asked = time.monotonic()
    await link.send({"type": "conversation.item.retrieve", "item_id": item_id})
    try:
        _at, event = await link.received.wait_event("conversation.item.retrieved", asked - 0.001, 5.0,
                                                    where=lambda e: e["item"]["id"] == item_id)
    except TimeoutError:
        return None
    return " ".join(str(part.get("transcript") or part.get("text") or "") for part in event["item"]["content"])


async def _cancel_after(link: Link, audible_at: float, reply_id: str | None) -> float | None:
    """Let the reply play ``PLAY_BEFORE_CANCEL_S``, cancel it by its id, and wait (at most ``CANCEL_WAIT_S``) for its
    audio to stop; how long after the cancel its last voiced packet arrived (ms; None: it played on).

    The cancel names the reply, and no ``output_audio_buffer.clear`` follows it (over WebRTC the server empties the
    reply track at the cancel itself). A client event can arrive seconds late: SCTP resends a lost packet only after
    its retransmission timeout, which the lossy relay on a loaded machine was seen to push past 5 s. An unnamed cancel,
    and a clear (which names nothing), that late land on whatever reply is live then: the next turn's, which then
    never sounds. A late cancel naming this reply is refused, and the wait keeps the next turn from being spoken over
    a reply still playing."""
    await asyncio.sleep(max(0.0, audible_at + PLAY_BEFORE_CANCEL_S - time.monotonic()))
    await link.send({"type": "response.cancel", **({"response_id": reply_id} if reply_id else {})})
    cancelled_at = quiet_since = time.monotonic()
    deadline = cancelled_at + CANCEL_WAIT_S
    stopped = False
    while time.monotonic() < deadline:
        if audible_between(link.received.audio, time.monotonic() - 0.4, float("inf")):
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= 0.4:
            stopped = True
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.4)
    if not stopped:
        return None
    after = audible_between(link.received.wire, cancelled_at, float("inf"))
    return 1000 * (after[-1][0] - cancelled_at) if after else 0.0


def transcripts_in_order(received: Received) -> list[str]:
    """The user turns' final transcripts, in the order their items were committed."""
    order = [event.get("item_id") for _at, event in received.events_of("input_audio_buffer.committed")]
    done = {event.get("item_id"): str(event.get("transcript", ""))
            for _at, event in received.events_of("conversation.item.input_audio_transcription.completed")}
    return [done[item] for item in order if item in done]


def summary_of(results: list[TurnFigures]) -> dict[str, Any]:
    """The lists the report takes percentiles of."""
    return {
        "first": [r.first_audio_ms for r in results if r.first_audio_ms is not None],
        "first_wire": [r.first_wire_ms for r in results if r.first_wire_ms is not None],
        "stop": [r.stop_ms for r in results if r.stop_ms is not None],
        "stop_heard": [r.stop_heard_ms for r in results if r.stop_heard_ms is not None],
        "started": [r.started_ms for r in results if r.started_ms is not None],
        "heard_off": [abs(r.played_words - r.history_words) for r in results
                      if r.played_words is not None and r.history_words is not None],
        "completed": sum(r.completed for r in results), "turns": len(results),
        "cancel_stop": [r.cancel_stop_ms for r in results if r.cancel_stop_ms is not None],
        "cancel_never_stopped": sum(r.cancelled and r.cancel_stop_ms is None for r in results),
        "cuts": [(r.onset_at, r.onset_rtp, r.last_packet_at) for r in results
                 if r.onset_at is not None and r.onset_rtp is not None and r.last_packet_at is not None],
    }
