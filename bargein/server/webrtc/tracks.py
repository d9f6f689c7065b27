"""The call's media: the reply audio track the server sends, paced by the RTP clock, and the caller's audio decoded.

:class:`ReplyAudioTrack` is what aiortc's RTP sender pulls a packet from every 20 ms: the session's reply audio as
it was queued (24 kHz pcm16), silence when there is nothing to play, encoded by the track itself
(:class:`~.opus.OpusEncoder`, in-band FEC on) so that aiortc only packs it. The frame is chosen and encoded after
the pacing wait, the moment it is due, and goes out without a hop to aiortc's encoder thread; a
:meth:`ReplyAudioTrack.clear` drops everything queued and resets the encoder, so the packets after it code silence
from nothing (not the cut reply's ringing tail), and wakes the sender, so the first of them (which still holds the
codec's look-ahead, the last 6.5 ms of the reply) leaves at once rather than at its tick; :meth:`ReplyAudioTrack.cut`
also lets it leave before the caller's next work. A :meth:`ReplyAudioTrack.hold` (a half-hop onset probe's
provisional stop) stops a response's audio at once the same way (the encoder reset: no ringing tail) but keeps it
queued, the last frame's look-ahead put back in front (:data:`REPLAYED_S`), so a :meth:`ReplyAudioTrack.release`
plays on from the sample the listener last heard; a :meth:`ReplyAudioTrack.clear` ends a hold (the pause that
confirms it cuts the track).
It is also the server's playback truth: it knows which response's audio, and how far into its item, went on the
wire with each frame (:class:`OnWire`).
Nothing here blocks: the sender's task awaits only the pacing sleep, and 20 ms of Opus encodes in well under a
millisecond.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import av
import numpy as np
import numpy.typing as npt
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from bargein.audio.resample import LowDelayResampler
from bargein.server.webrtc.opus import OPUS_RATE, OpusEncoder

SEND_RATE = 24_000
"""The rate the reply audio is queued at (and counted in, for the playback truth)."""
FRAME_S = 0.020
FRAME_SAMPLES = int(SEND_RATE * FRAME_S)
OPUS_FRAME_SAMPLES = int(OPUS_RATE * FRAME_S)
MAX_BEHIND_S = 0.2
"""A sender this far behind its clock (a stalled loop) starts its clock afresh instead of sending a burst."""
REPLAYED_S = 0.0075
"""What a held frame puts back in front of the queue: the codec's look-ahead (6.5 ms at 48 kHz) and the upsampler's
holdback (about 1 ms), which the reset encoder never codes; played again after a release, so none of it is lost."""
MAX_QUEUED_S = 30.0
"""Reply audio the track may hold (the reply's pacer keeps about a second ahead; this only bounds a bug)."""


@dataclass(frozen=True)
class OnWire:
    """The newest reply audio sent: its response, its item, and how far into the item its last sample reaches."""

    response_id: str
    item_id: str
    item_ms: float
    start_ms: float
    """Where this stretch of the item began going out (0, or where a resumed reply restarted)."""
    sent_at: float
    """The loop time the frame holding that last sample left."""


@dataclass
class _Chunk:
    response_id: str
    item_id: str
    item_ms: float
    """The item position of ``samples[offset]``."""
    samples: npt.NDArray[np.int16]
    offset: int = 0
    replayed: bool = False
    """The held frame's tail put back: it goes out again where it went before (no resume's jump)."""


Started = Callable[[str], None]
Drained = Callable[[str], None]


class ReplyAudioTrack(MediaStreamTrack):
    """The agent's voice: queued reply audio, one 20 ms frame per RTP tick, silence in between."""

    kind = "audio"

    def __init__(self, on_started: Started, on_drained: Drained) -> None:
        super().__init__()
        self._queue: deque[_Chunk] = deque()
        self.queued_samples = 0
        self._on_started = on_started
        self._on_drained = on_drained
        self._next_at: float | None = None
        self._pts = 0
        self._sent_at = 0.0
        self.on_wire: OnWire | None = None
        """The newest reply audio sent (None before any, and after a :meth:`clear`)."""
        self.frames_sent = 0
        self._to_opus_rate = OpusRateFrames(SEND_RATE)
        self._encoder = OpusEncoder()
        self._wake: asyncio.Future[None] | None = None
        """What the sender's task awaits until the next tick (a cut resolves it early)."""
        self._cut = False
        self._held: str | None = None
        """The response whose audio a provisional hold keeps from the wire."""
        self._held_at = 0.0
        self._last_frame = np.zeros(0, np.int16)
        """The reply samples of the newest frame taken (what a hold puts the tail of back)."""
        self.held_s = 0.0
        """Time the track spent holding audio it then released (the hiccups of holds no barge-in followed)."""

    @property
    def holds_audio(self) -> bool:
        """Reply audio waits to be sent."""
        return self.queued_samples > 0

    def holds(self, response_id: str) -> bool:
        """Audio of ``response_id`` waits to be sent."""
        return any(chunk.response_id == response_id for chunk in self._queue)

    def play(self, response_id: str, item_id: str, item_ms: float, samples: npt.NDArray[np.int16]) -> bool:
        """Queue ``samples`` (24 kHz) of ``item_id`` starting ``item_ms`` into it; False when the bound is reached."""
        if self.queued_samples + len(samples) > MAX_QUEUED_S * SEND_RATE:
            return False
        if len(samples):
            self._queue.append(_Chunk(response_id, item_id, item_ms, samples))
            self.queued_samples += len(samples)
        return True

    def clear(self) -> OnWire | None:
        """Drop every queued sample (the next frame is silence): what was on the wire last, then forgotten."""
        last = self.on_wire
        if self._queue or last is not None:
            self._restart_codec()
        self._queue.clear()
        self.queued_samples = 0
        self.on_wire = None
        self._held = None
        return last

    def hold(self, response_id: str) -> None:
        """Send silence in place of ``response_id``'s audio from the next packet, which leaves at once; the audio
        stays queued, its place kept (what :attr:`on_wire` says was sent stays the truth)."""
        if self._held is not None:
            return
        self._held = response_id
        self._held_at = asyncio.get_running_loop().time()
        last = self.on_wire
        if last is None or last.response_id != response_id:
            return  # none of it on the wire yet (another reply's tail plays on): its first packet waits
        # the look-ahead is the frame's last 7.5 ms: where the reply ran short, silence filled part of it, and the
        # reply's samples before that silence were coded and heard already (put back, they would play twice)
        uncoded = int(REPLAYED_S * SEND_RATE) - (FRAME_SAMPLES - len(self._last_frame))
        tail = self._last_frame[len(self._last_frame) - uncoded:] if uncoded > 0 else self._last_frame[:0]
        if len(tail):
            self._queue.appendleft(_Chunk(response_id, last.item_id, last.item_ms - 1000.0 * len(tail) / SEND_RATE,
                                          tail.copy(), replayed=True))
            self.queued_samples += len(tail)
        self._restart_codec()

    def _restart_codec(self) -> None:
        """The next packet codes from nothing (a reset encoder and upsampler: no ringing tail of what was sent) and
        leaves at once, not at its tick (a cut or a hold)."""
        self._encoder.reset()
        self._to_opus_rate = OpusRateFrames(SEND_RATE)
        self._cut = True
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def release(self, response_id: str) -> None:
        """Send ``response_id``'s held audio on from the sample the hold stopped at."""
        if self._held != response_id:
            return
        self._held = None
        self.held_s += asyncio.get_running_loop().time() - self._held_at

    async def cut(self) -> OnWire | None:
        """:meth:`clear`, and when the sender's task is waiting for its tick, one loop pass for it to take the packet
        after the cut (aiortc packs and sends it in the same step) before the caller goes on: the work of a barge-in
        that follows (the truncate, the events after it on the data channel) would otherwise hold that packet."""
        waiting = self._wake is not None and not self._wake.done()
        last = self.clear()
        if waiting:
            await asyncio.sleep(0)
        return last

    async def recv(self) -> av.Packet[Any]:
        """The next 20 ms packet, chosen and encoded at its time on the RTP clock."""
        if self.readyState != "live":
            raise MediaStreamError
        await self._pace()
        packet = self._encoder.encode(self._to_opus_rate.frame(self._take()), self._pts)
        self._pts += OPUS_FRAME_SAMPLES
        self.frames_sent += 1
        return packet

    async def _pace(self) -> None:
        """Wait for the next tick of the RTP clock; after a cut, not at all. The packet after a cut still holds the
        cut reply's last few milliseconds (the codec's look-ahead): it goes at once, up to 20 ms before its tick (a
        receiver's jitter buffer holds it that much longer), and the ticks after it keep their times."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._next_at is None or now - self._next_at > MAX_BEHIND_S:
            self._next_at = now
        elif self._next_at > now and not self._cut:
            self._wake = loop.create_future()
            tick = loop.call_at(self._next_at, _wake_up, self._wake)
            try:
                await self._wake
            finally:
                tick.cancel()
                self._wake = None
        self._cut = False
        self._next_at += FRAME_S
        self._sent_at = loop.time()

    def _take(self) -> npt.NDArray[np.int16]:
        """One frame of queued audio (silence where it runs short), noting what went on the wire."""
        out = np.zeros(FRAME_SAMPLES, dtype=np.int16)
        filled = 0
        while filled < FRAME_SAMPLES and self._queue and self._queue[0].response_id != self._held:
            chunk = self._queue[0]
            count = min(FRAME_SAMPLES - filled, len(chunk.samples) - chunk.offset)
            out[filled:filled + count] = chunk.samples[chunk.offset:chunk.offset + count]
            self._sent(chunk, count)
            filled += count
            chunk.offset += count
            chunk.item_ms += 1000.0 * count / SEND_RATE
            if chunk.offset >= len(chunk.samples):
                self._queue.popleft()
                if not self.holds(chunk.response_id):
                    self._on_drained(chunk.response_id)
        self.queued_samples -= filled
        self._last_frame = out[:filled]
        return out

    def _sent(self, chunk: _Chunk, count: int) -> None:
        reached = chunk.item_ms + 1000.0 * count / SEND_RATE
        last = self.on_wire
        if last is None or last.response_id != chunk.response_id or last.item_id != chunk.item_id:
            self.on_wire = OnWire(chunk.response_id, chunk.item_id, reached, chunk.item_ms, self._sent_at)
            if last is None or last.response_id != chunk.response_id:
                self._on_started(chunk.response_id)
        else:
            kept = abs(last.item_ms - chunk.item_ms) < 1.0 or chunk.replayed
            start = last.start_ms if kept else chunk.item_ms  # a resume jumped
            self.on_wire = OnWire(chunk.response_id, chunk.item_id, reached, start, self._sent_at)


def _wake_up(wake: asyncio.Future[None]) -> None:
    if not wake.done():
        wake.set_result(None)


class OpusRateFrames:
    """20 ms frames at ``rate`` made 20 ms frames at 48 kHz, the rate the track's Opus encoder codes without a
    resampler of its own (the streaming low-delay filter holds back about a millisecond: the first frame starts
    with that much silence, once)."""

    def __init__(self, rate: int) -> None:
        self._upsampler = LowDelayResampler(rate, OPUS_RATE)
        self._pending = np.zeros(0, np.float32)
        """48 kHz samples made but not sent yet (fewer than a frame)."""
        self._quiet = True

    def frame(self, samples: npt.NDArray[np.int16]) -> npt.NDArray[np.int16]:
        """The next 20 ms at 48 kHz, pcm16, from the next 20 ms at the input rate."""
        if self._quiet and not samples.any() and not self._pending.any():
            return np.zeros(OPUS_FRAME_SAMPLES, np.int16)  # silence stays silence, without the filter's work
        self._quiet = not samples.any()
        pending = np.concatenate([self._pending, self._upsampler.process(samples.astype(np.float32) / 32768.0)])
        if len(pending) < OPUS_FRAME_SAMPLES:
            pending = np.concatenate([np.zeros(OPUS_FRAME_SAMPLES - len(pending), np.float32), pending])
        out, self._pending = pending[:OPUS_FRAME_SAMPLES], pending[OPUS_FRAME_SAMPLES:]
        return (out * 32768.0).clip(-32768, 32767).astype(np.int16)


MAX_GAP_S = 1.0
"""A jump in the caller's RTP clock longer than this is a new start (a muted track, a paused sender), not loss."""


class InputClock:
    """Keeps the caller's audio on the caller's clock: a gap in the RTP timestamps that was not concealed (a jump past
    the receive buffer, a paused sender) is filled with silence, so stream time still runs with the caller's time; a
    frame from before what was already heard (late, duplicated) is dropped."""

    def __init__(self) -> None:
        self.next_pts: int | None = None
        self.filled_samples = 0
        """Silence put in for lost audio (at the decoder's rate)."""
        self.dropped_frames = 0

    def place(self, frame: av.AudioFrame) -> npt.NDArray[np.float32] | None:
        """The frame as mono float32, after silence for any audio lost before it; None for a frame to drop."""
        samples = mono_float(frame)
        pts = frame.pts
        if pts is None or self.next_pts is None:
            self.next_pts = None if pts is None else pts + len(samples)
            return samples
        gap = pts - self.next_pts
        if gap < 0 and -gap < MAX_GAP_S * frame.sample_rate:
            self.dropped_frames += 1
            return None
        self.next_pts = pts + len(samples)
        if 0 < gap <= MAX_GAP_S * frame.sample_rate:
            self.filled_samples += gap
            return np.concatenate([np.zeros(gap, dtype=np.float32), samples])
        return samples


def mono_float(frame: av.AudioFrame) -> npt.NDArray[np.float32]:
    """A decoded frame (aiortc's Opus decoder gives packed s16, stereo at 48 kHz) as mono float32."""
    data = frame.to_ndarray()
    channels = len(frame.layout.channels)
    if frame.format.is_planar:
        samples = data.astype(np.float32).mean(axis=0)
    else:
        samples = data.reshape(-1, channels).astype(np.float32).mean(axis=1)
    scale = 32768.0 if frame.format.name.startswith("s16") else 1.0
    mono: npt.NDArray[np.float32] = (samples / scale).astype(np.float32)
    return mono
