"""The caller's audio from its RTP packets to decoded frames: in order with no prefetch, lost packets concealed.

aiortc's audio receiver decodes what its jitter buffer releases, four packets late (``prefetch=4``), on a decoder
thread, and with no loss concealment. :func:`receive_audio` puts a :class:`ReceiveBuffer` in that jitter buffer's
place on the call's audio receiver: it takes each packet as aiortc hands it on (after SRTP, the RTCP statistics and
the depayloading), orders it (:class:`~.reorder.Reorderer`), decodes it on the event loop (20 ms of Opus is tens of
microseconds) at the listening rate (:data:`DECODE_RATE`), and puts the frame on its own track,
:class:`ReceivedAudio`, at once. aiortc's decoder thread then gets nothing. A lost packet is recovered by libopus
itself (:class:`ConcealingDecoder`): from the in-band FEC copy of it that the next packet carries (a browser sends
one, ``useinbandfec=1``) when the next packet has come, else by libopus's packet-loss concealment, which continues
the voice and fades it; after ``MAX_CONCEALED`` lost packets in a row the rest of a gap is silence.

aiortc offers no public hook for its receive buffer: :data:`RECEIVER_BUFFER` names the one private attribute this
replaces (pyproject.toml pins aiortc, and ``tests/server/webrtc/test_aiortc_internals.py`` fails loudly when a
newer aiortc renames it). Where it is missing, the call falls back to aiortc's own track, as before.
"""

from __future__ import annotations

import asyncio
import fractions
import logging
from typing import Any

import av
import numpy as np
import numpy.typing as npt
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av.packet import Packet

from bargein.server.webrtc.opus import OPUS_RATE, FecDecoder, load_libopus
from bargein.server.webrtc.reorder import Release, Reorderer
from bargein.values import LISTEN_SAMPLE_RATE

log = logging.getLogger(__name__)
RECEIVER_BUFFER = "_RTCRtpReceiver__jitter_buffer"
"""aiortc's ``RTCRtpReceiver.__jitter_buffer``: ``add(packet) -> (pli_flag, encoded_frame | None)``, called with
each depayloaded RTP packet (its ``_data``); what it returns goes to aiortc's decoder thread."""
MAX_CONCEALED = 5
"""Lost packets in a row that libopus conceals (100 ms, its fade has run by then); the rest of a gap is silence."""
MAX_FRAMES_QUEUED = 250
"""Decoded frames (5 s) waiting for the session's reader; beyond it the oldest is dropped (a stalled reader)."""
DECODE_RATE = LISTEN_SAMPLE_RATE
"""The rate a call's audio is decoded at: the listening rate, 16 kHz, which libopus reaches within its own synthesis,
holding nothing back, so the session's VAD gets each packet's audio whole (decoded at 48 or 24 kHz, the listen
path's resampler held back the last 25 to 42 samples of each packet, and the one VAD frame in five whose last sample
ends a packet waited for the next one, 20 ms; 512 and 320 samples meet every 2,560)."""
TOC_CODE_MASK = 0xFC
"""An Opus packet's first byte without its frame-count code: the same byte with code 0 and no frame data is a
packet whose one frame is missing, which libopus conceals."""


class ConcealingDecoder:
    """libopus, mono at ``rate`` (a call's is :data:`DECODE_RATE`): a lost packet is recovered from the next packet's
    in-band FEC copy of it where that packet has come, else concealed by libopus's packet-loss concealment (silence
    past ``MAX_CONCEALED`` in a row). libopus is called directly (:class:`~.opus.FecDecoder`) where it loads;
    otherwise through PyAV, at 48 kHz, which cannot decode FEC: a lost packet is then concealed by decoding a packet
    of only the previous packet's table-of-contents byte."""

    def __init__(self, rate: int = OPUS_RATE) -> None:
        lib = load_libopus()
        self._libopus = FecDecoder(lib, rate) if lib is not None else None
        self.rate = rate if self._libopus is not None else OPUS_RATE
        """The rate frames come out at (their ``pts`` count its samples; the packets' RTP clock is 48 kHz): the one
        asked for, or 48 kHz through PyAV (FFmpeg's libopus decoder always decodes at 48 kHz)."""
        self._time_base = fractions.Fraction(1, self.rate)
        self.codec: Any = None
        if self._libopus is None:
            self.codec = av.CodecContext.create("libopus", "r")
            self.codec.format = "s16"
            self.codec.layout = "mono"
            self.codec.sample_rate = OPUS_RATE
        self._toc: int | None = None
        self._lost_in_a_row = 0
        self._samples = self.rate // 50
        self.recovered = 0
        """Lost packets decoded from the next packet's FEC data (libopus conceals those whose next carries none)."""

    def decode(self, release: Release) -> list[av.AudioFrame]:
        """The frames of one released packet, or of its recovery or concealment (silence past ``MAX_CONCEALED``)."""
        if release.payload:  # an empty payload (padding only) is no packet to libopus: an empty one ends its stream
            self._lost_in_a_row = 0
            self._toc = release.payload[0] & TOC_CODE_MASK
            frames = self._decode(release.payload)
        else:
            self._lost_in_a_row += 1
            if self._toc is not None and self._lost_in_a_row <= MAX_CONCEALED:
                frames = self._conceal(release.recovery)
            else:
                frames = [self._frame(None)]
        at = release.timestamp * self.rate // OPUS_RATE
        for frame in frames:
            frame.pts, frame.time_base, frame.sample_rate = at, self._time_base, self.rate
            at += frame.samples
            self._samples = frame.samples
        return frames

    def _decode(self, data: bytes) -> list[av.AudioFrame]:
        if self._libopus is not None:
            return [self._frame(self._libopus.decode(data))]
        try:
            return list(self.codec.decode(Packet(data)))
        except av.FFmpegError as error:  # a corrupt packet: conceal it rather than stop the call
            log.debug("an Opus packet did not decode: %s", error)
            return [self._frame(None)]

    def _conceal(self, recovery: bytes | None) -> list[av.AudioFrame]:
        if self._libopus is None:
            return self._decode(bytes([self._toc or 0]))
        if recovery:
            self.recovered += 1
            return [self._frame(self._libopus.recover(recovery, self._samples))]
        return [self._frame(self._libopus.conceal(self._samples))]

    def _frame(self, samples: npt.NDArray[np.int16] | None) -> av.AudioFrame:
        """``samples`` as a frame (silence, a frame long, for None: a packet libopus refused)."""
        if samples is None or not len(samples):
            samples = np.zeros(self._samples, np.int16)
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = self.rate
        return frame


class ReceivedAudio(MediaStreamTrack):
    """The caller's decoded audio, frame by frame as :class:`ReceiveBuffer` puts it (bounded)."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._frames: asyncio.Queue[av.AudioFrame | None] = asyncio.Queue()
        self.dropped = 0
        self.watcher: asyncio.Future[None] | None = None
        """The task that ends this track with aiortc's (kept here so that it is not collected)."""

    def put(self, frame: av.AudioFrame) -> None:
        """Queue ``frame`` for :meth:`recv`, dropping the oldest past ``MAX_FRAMES_QUEUED``."""
        if self._frames.qsize() >= MAX_FRAMES_QUEUED:
            self._frames.get_nowait()
            self.dropped += 1
        self._frames.put_nowait(frame)

    def end(self) -> None:
        """No more frames: :meth:`recv` raises once it has given those queued."""
        self._frames.put_nowait(None)

    async def recv(self) -> av.AudioFrame:
        """The next decoded frame (raises ``MediaStreamError`` once the caller's track has ended)."""
        if self.readyState != "live":
            raise MediaStreamError
        frame = await self._frames.get()
        if frame is None:
            self.stop()
            raise MediaStreamError
        return frame


class ReceiveBuffer:
    """What aiortc's audio receiver calls in place of its jitter buffer: orders, decodes and queues each packet."""

    capacity = 16

    def __init__(self, out: ReceivedAudio, rate: int = OPUS_RATE) -> None:
        self.out = out
        self.reorderer = Reorderer()
        self.decoder = ConcealingDecoder(rate)
        self._first_timestamp: int | None = None
        self._timer: asyncio.TimerHandle | None = None

    def add(self, packet: Any) -> tuple[bool, None]:
        """aiortc's ``JitterBuffer.add``: take the packet; nothing goes to aiortc's decoder (no picture loss)."""
        if self._first_timestamp is None:
            self._first_timestamp = packet.timestamp
        timestamp = (packet.timestamp - self._first_timestamp) % (1 << 32)  # from 0, past the 32-bit wrap
        loop = asyncio.get_running_loop()
        payload = bytes(getattr(packet, "_data", b"") or b"")
        self._emit(self.reorderer.take(packet.sequence_number, timestamp, payload, loop.time()))
        self._arm(loop)
        return False, None

    def _emit(self, releases: list[Release]) -> None:
        for release in releases:
            for frame in self.decoder.decode(release):
                self.out.put(frame)

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wake when the oldest held packet's wait runs out, to conceal what it waits for."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self.reorderer.deadline()
        if deadline is not None:
            self._timer = loop.call_at(deadline, self._expire)

    def _expire(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        self._emit(self.reorderer.due(loop.time()))
        self._arm(loop)

    def close(self) -> None:
        """Stop the wake-up timer (the call ended)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def receive_audio(receiver: Any, aiortc_track: MediaStreamTrack, rate: int = OPUS_RATE) -> MediaStreamTrack:
    """Put a :class:`ReceiveBuffer` decoding at ``rate`` in ``receiver``'s jitter buffer's place; the track its frames
    arrive on. Where this aiortc has no such attribute, ``aiortc_track`` (aiortc's own receive path, 48 kHz) is
    returned, with an error."""
    if not hasattr(receiver, RECEIVER_BUFFER):
        log.error("aiortc's RTCRtpReceiver has no %s: the caller's audio goes through aiortc's own jitter buffer "
                  "(4 packets late, no loss concealment)", RECEIVER_BUFFER)
        return aiortc_track
    out = ReceivedAudio()
    buffer = ReceiveBuffer(out, rate)
    setattr(receiver, RECEIVER_BUFFER, buffer)
    out.watcher = asyncio.ensure_future(_end_with(aiortc_track, out))
    out.on("ended", buffer.close)
    return out


async def _end_with(aiortc_track: MediaStreamTrack, out: ReceivedAudio) -> None:
    """End ``out`` when aiortc ends its own track (an RTCP BYE, the call closing): its decoder thread, given no
    frames any more, then passes on only that end."""
    try:
        while True:
            await aiortc_track.recv()
    except MediaStreamError:
        out.end()
