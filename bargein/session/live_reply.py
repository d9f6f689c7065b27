"""One live reply's shell state in one object, and the byte arithmetic of resuming it from a cut point.

A :class:`LiveReply` holds everything the shell keeps for a reply while it runs and shortly after: its
response events (:class:`ReplyState`), cancel token, pacer, the wire audio forwarded so far, the pause
(cut point and what was held), the gate a paused pipeline waits on, and the playback estimate (kept a
little after the reply ends, for a barge-in while the client still plays it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from bargein.audio.codecs import AudioFormat
from bargein.session.playback import Pacer, PlaybackEstimate
from bargein.session.response_events import ReplyState
from bargein.values import CancelToken, ToolCall, WordTiming

RESEND_PIECE_MS = 200.0
"""A resumed reply re-sends its audio after the cut point in pieces of this length."""


class AudioPiece:
    """Wire audio travelling through the machine as an opaque payload."""

    __slots__ = ("data", "duration_ms", "words")

    def __init__(self, data: bytes, duration_ms: float, words: Sequence[WordTiming]) -> None:
        self.data = data
        self.duration_ms = duration_ms
        self.words = words


@dataclass
class Pause:
    """Where the client's playback stood when the reply paused, and what was produced since."""

    cut_ms: float
    segment_item_id: str
    held: list[AudioPiece | str | ToolCall] = field(default_factory=list)
    """Audio pieces, text and client tool calls, in the order the pipeline produced them: a call announced during
    the pause would follow the turn over it in the history, unanswered if that turn cuts the reply."""


@dataclass
class LiveReply:
    """The shell's state of one reply."""

    state: ReplyState
    cancel: CancelToken
    pacer: Pacer
    playback: PlaybackEstimate = field(default_factory=PlaybackEstimate)
    forwarded: bytearray = field(default_factory=bytearray)
    """Wire audio sent so far: what a resume re-sends from the cut point."""
    pause: Pause | None = None
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    """Set while the pipeline may produce; cleared while paused."""
    ended: bool = False
    over: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the reply has ended: wakes a wait for its play-out."""
    playing_out: bool = False
    """Every word is out; the reply stays live while the client plays its last stretch."""

    def __post_init__(self) -> None:
        self.gate.set()

    @property
    def response_id(self) -> str:
        """The response's id."""
        return self.state.response_id

    def audio_left_ms(self) -> float:
        """Audio forwarded to the client (queued or sent) that it has not played yet, by the playback estimate."""
        return self.state.item.audio_ms - self.playback.heard_ms()

    def cut_now(self) -> tuple[float, float]:
        """Where a cancel now cuts a spoken reply's item: ``(audio_ms, heard_ms)``, the audio that reached the
        client (purged deltas never did) and how much of it was heard: a client's truncate, else the pause's
        cut point, else the playback estimate."""
        item = self.state.item
        heard = item.heard_ms if item.heard_ms is not None else \
            self.pause.cut_ms if self.pause is not None else self.playback.heard_ms()
        return self.playback.sent_ms, heard

    def end(self) -> None:
        """The reply is over: free its audio and wake a pipeline waiting on the pause."""
        self.ended = True
        self.forwarded = bytearray()
        self.gate.set()
        self.over.set()


@dataclass(frozen=True)
class Resumption:
    """How a paused reply continues: the exact cut and the audio after it, re-cut into pieces."""

    cut_ms: float
    """The cut point rounded to a whole sample of what was actually forwarded."""
    cut_byte: int
    pieces: list[AudioPiece]
    kept_words: list[WordTiming]
    """The item's words before the cut (the item keeps only these)."""


def resumption(forwarded: bytes, cut_ms: float, fmt: AudioFormat, words: Sequence[WordTiming]) -> Resumption:
    """Cut forwarded audio at ``cut_ms`` (a whole sample, never past what was sent) and re-piece the tail.

    The client dropped what it had not played when it saw ``speech_started``, so the reply restarts at
    exactly the sample where playback stopped: no sample is lost and none is played twice. Word timings
    of the tail move with it, relative to each piece.
    """
    cut_byte = min(len(forwarded), round(cut_ms * fmt.rate / 1000) * fmt.bytes_per_sample)
    cut_ms = 1000.0 * cut_byte / fmt.bytes_per_sample / fmt.rate
    tail = forwarded[cut_byte:]
    tail_words = [WordTiming(w.word, w.start_ms - cut_ms, w.end_ms - cut_ms) for w in words if w.start_ms >= cut_ms]
    step = round(fmt.rate * RESEND_PIECE_MS / 1000) * fmt.bytes_per_sample
    pieces = []
    for offset in range(0, len(tail), step):
        piece = tail[offset:offset + step]
        start_ms = 1000.0 * offset / fmt.bytes_per_sample / fmt.rate
        duration_ms = 1000.0 * len(piece) / fmt.bytes_per_sample / fmt.rate
        piece_words = [WordTiming(w.word, w.start_ms - start_ms, w.end_ms - start_ms) for w in tail_words
                       if start_ms <= w.start_ms < start_ms + duration_ms]
        pieces.append(AudioPiece(bytes(piece), duration_ms, piece_words))
    return Resumption(cut_ms, cut_byte, pieces, [w for w in words if w.start_ms < cut_ms])


def restarted_clocks(cut_ms: float, lead_ms: float) -> tuple[PlaybackEstimate, Pacer]:
    """A playback estimate and a pacer for a reply that resumes at ``cut_ms`` now."""
    started = time.monotonic() - cut_ms / 1000.0
    return PlaybackEstimate(sent_ms=cut_ms, first_sent_wall_s=started), Pacer(lead_ms, started_s=started)
