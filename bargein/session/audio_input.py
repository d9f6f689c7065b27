"""The input stage: client audio in, 16 kHz buffer and VAD frames out.

Appended wire audio is decoded, resampled with a streaming resampler to 16 kHz, kept in the input
buffer (with its stream position, the clock that onsets and ends are measured against), and cut
into VAD frames whose speech probabilities feed the duplex machine.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator

import numpy as np
import numpy.typing as npt

from bargein.audio.codecs import AudioFormat, AudioFormatError, int16_to_float
from bargein.audio.framing import Framer
from bargein.audio.noise_suppression import NoiseSuppressor
from bargein.audio.resample import LowDelayResampler, resample
from bargein.engines.base import VadStream, VoiceActivityDetector
from bargein.protocol.errors import ProtocolError
from bargein.session.core.vocabulary import OnsetProbe, VadFrame
from bargein.session.input_buffer import MS_PER_SAMPLE, InputBuffer
from bargein.values import LISTEN_SAMPLE_RATE

SUPPRESS_INLINE_S = 0.2
"""Appends up to 200 ms are denoised on the event loop (about 0.5 ms per 20 ms here); longer ones go to a
worker thread so one big append cannot stall the other sessions."""
MAX_BUFFER_BYTES = 15 * 1024 * 1024
"""The OpenAI Realtime API's input buffer cap, in wire bytes of its default format."""
MAX_BUFFER_SECONDS = MAX_BUFFER_BYTES / (2 * 24_000)
"""The input buffer cap in seconds of audio (15 MiB of pcm16 at 24 kHz: about 328 s), whatever the
wire format: G.711 carries 3x more audio per byte, and the buffer's memory goes by the second."""
SLICE_S = 10.0
"""Seconds of an append resampled and heard at a time."""


class AudioInput:
    """Decodes, resamples, buffers and runs the VAD for one session."""

    def __init__(self, vad: VoiceActivityDetector, wire_format: AudioFormat) -> None:
        self._detector = vad
        self._vad = vad.open_stream()
        self._framer = Framer(vad.frame_samples)
        self._probe: HalfHopStream | None = None
        """The half-hop stream, while the machine wants onset probes."""
        self.buffer = InputBuffer()
        self.wire_format = wire_format
        self._resampler = _listen_resampler(wire_format)
        self.vad_running = True
        """False after the VAD failed: audio is only buffered (manual turns) until turn detection is set again."""
        self._suppressor: NoiseSuppressor | None = None
        self._carry: list[npt.NDArray[np.float32]] = []
        """16 kHz audio a retired resampler or suppressor still held, heard before the next audio."""

    @property
    def stream_ms(self) -> float:
        """Stream time: the position of the newest sample heard, in ms since the session began."""
        return self.buffer.end_sample * MS_PER_SAMPLE

    def set_format(self, wire_format: AudioFormat) -> None:
        """Switch the client's wire format (keeps the stream clock: what the old format's filters still held
        is heard before the new format's audio)."""
        if wire_format != self.wire_format:
            if self._suppressor is not None:
                self._retire_suppressor(NoiseSuppressor(wire_format.rate, LISTEN_SAMPLE_RATE))
            self.wire_format = wire_format
            self._restart_resampler()  # (idle, so it holds nothing, while the suppressor is on)

    @property
    def noise_reduction(self) -> bool:
        """Whether live input audio goes through the noise suppressor before the VAD and the transcriber."""
        return self._suppressor is not None

    def set_noise_reduction(self, enabled: bool) -> None:
        """Turn the suppressor on or off (raises :class:`WeightError` when RNNoise is not installed); what the
        path being left still held is heard before the next audio, so the stream clock stays exact."""
        if enabled and self._suppressor is None:
            suppressor = NoiseSuppressor(self.wire_format.rate, LISTEN_SAMPLE_RATE)  # raises before anything moves
            self._restart_resampler()
            self._suppressor = suppressor
        elif not enabled and self._suppressor is not None:
            self._retire_suppressor(None)

    def _retire_suppressor(self, successor: NoiseSuppressor | None) -> None:
        """Keep what the suppressor still holds for the next audio, close it and put ``successor`` in its place."""
        if self._suppressor is not None:
            self._carry.append(self._suppressor.flush())
            self._suppressor.close()
        self._suppressor = successor

    def check_room(self, payload_bytes: int, *, event_id: str | None) -> None:
        """Refuse an append that would take the buffer past its cap (what is held stays)."""
        adding_s = payload_bytes / (self.wire_format.rate * self.wire_format.bytes_per_sample)
        if self.buffer.duration_ms / 1000.0 + adding_s > MAX_BUFFER_SECONDS:
            raise ProtocolError(
                f"the input audio buffer would exceed {MAX_BUFFER_SECONDS:.0f} s of audio "
                f"({MAX_BUFFER_BYTES // (1024 * 1024)} MiB of pcm16 at 24 kHz); commit or clear it first",
                code="input_audio_buffer_full", param="audio", event_id=event_id)

    def decode(self, payload: bytes) -> npt.NDArray[np.float32]:
        """Wire bytes to 16 kHz float32, denoised when noise reduction is on (raises :class:`AudioFormatError`)."""
        return self._listen(int16_to_float(self.wire_format.decode(payload)))

    def decode_slices(self, payload: bytes) -> AsyncIterator[npt.NDArray[np.float32]]:
        """Wire bytes to 16 kHz float32, resampled (and denoised) :data:`SLICE_S` at a time, so an append of
        minutes of audio is heard slice by slice; the whole payload is checked before the first slice comes out.
        A slice being denoised that is longer than :data:`SUPPRESS_INLINE_S` goes to a worker thread."""
        samples = int16_to_float(self.wire_format.decode(payload))  # raises AudioFormatError
        step = int(SLICE_S * self.wire_format.rate)
        inline = int(SUPPRESS_INLINE_S * self.wire_format.rate)

        async def slices() -> AsyncIterator[npt.NDArray[np.float32]]:
            for start in range(0, len(samples), step):
                piece = samples[start:start + step]
                suppressor = self._suppressor
                if suppressor is not None and len(piece) > inline:
                    yield self._after_carry(await asyncio.to_thread(suppressor.process, piece))
                else:
                    yield self._listen(piece)

        return slices()

    def listen(self, samples: npt.NDArray[np.float32], rate: int | None = None) -> npt.NDArray[np.float32]:
        """Client-rate float samples (a media transport's, already decoded) to 16 kHz, as :meth:`decode` does. A
        transport that decodes at the listening rate itself (``rate``, 16 kHz) hands them on unresampled while the
        suppressor is off: no filter then holds back the end of each packet, which a VAD frame ending there waits for
        (raises ``ValueError`` for any other rate, or at 16 kHz with the suppressor on, which takes the wire rate)."""
        if rate is None or rate == self.wire_format.rate:
            return self._listen(samples)
        if rate != LISTEN_SAMPLE_RATE or self._suppressor is not None:
            raise ValueError(f"audio at {rate} Hz is heard at the input format's rate, or at {LISTEN_SAMPLE_RATE} Hz "
                             "without noise reduction")
        return self._after_carry(samples)

    def _listen(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Client-rate samples to 16 kHz, through the suppressor when it is on."""
        if self._suppressor is not None:
            return self._after_carry(self._suppressor.process(samples))
        return self._after_carry(self._resampler.process(samples))

    def held(self) -> npt.NDArray[np.float32]:
        """The 16 kHz audio the input path still holds back (the resampler's half filter: 1.6 ms at 24 kHz, 3.3 ms
        at 8 kHz; with noise reduction, also a partial frame and RNNoise's 20 ms) and whatever a switch left to be
        heard, the path started afresh (RNNoise keeps its noise estimate): for a client's commit or clear, which
        cover every sample appended before them."""
        if self._suppressor is not None:
            self._carry.append(self._suppressor.flush())
        else:
            self._restart_resampler()
        return self._after_carry(np.zeros(0, dtype=np.float32))

    def _restart_resampler(self) -> None:
        """Keep what the resampler still holds for the next audio; a fresh one from the wire format's rate on."""
        self._carry.append(self._resampler.process(np.zeros(0, dtype=np.float32), last=True))
        self._resampler = _listen_resampler(self.wire_format)

    def _after_carry(self, audio16k: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """``audio16k`` after whatever a format or suppression switch left to be heard."""
        if not self._carry:
            return audio16k
        carried, self._carry = self._carry, []
        return np.concatenate([*carried, audio16k]).astype(np.float32, copy=False)

    def decode_clip(self, payload: bytes) -> npt.NDArray[np.float32]:
        """A whole clip (an ``input_audio`` item) to 16 kHz float32, apart from the live stream; a clip is
        held to the input buffer's cap in seconds too."""
        seconds = len(payload) / (self.wire_format.rate * self.wire_format.bytes_per_sample)
        if seconds > MAX_BUFFER_SECONDS:
            raise AudioFormatError(f"an input_audio clip of {seconds:.0f} s is longer than the "
                                   f"{MAX_BUFFER_SECONDS:.0f} s allowed")
        samples = int16_to_float(self.wire_format.decode(payload))
        return resample(samples, self.wire_format.rate, LISTEN_SAMPLE_RATE)

    async def hear(self, audio16k: npt.NDArray[np.float32], *,
                   onset_probe: bool = False) -> list[VadFrame | OnsetProbe]:
        """Buffer 16 kHz audio and return the VAD frames that became whole, placed in stream time; with
        ``onset_probe``, the half-hop stream's frames too (:class:`HalfHopStream`), all in the order they end (each
        awaited in turn, as the main frames alone were: a frame's probability never waits for a later frame's)."""
        self.buffer.append(audio16k)
        first_sample = self._framer.samples_framed
        step = self._framer.frame_samples
        main = self._framer.push(audio16k)
        if not onset_probe or not self.vad_running:
            self._stop_probe()
        elif self._probe is None:
            self._probe = HalfHopStream(self._detector.open_stream(), step, grid_start=first_sample,
                                        from_sample=self.buffer.end_sample - len(audio16k))
        if not self.vad_running:
            return []  # frames dropped, but the framer stays on the stream clock
        probed = self._probe.push(audio16k) if self._probe is not None else []
        frames: list[VadFrame | OnsetProbe] = []
        for index, frame in enumerate(main):
            start = first_sample + index * step
            if self._probe is not None:  # the probe frames that end before this one, first
                frames += await self._probe.hear(probed, before=start + step)
            probability = await self._vad.probability(frame)
            energy_db = 10.0 * math.log10(float(np.mean(np.square(frame))) + 1e-10)
            frames.append(VadFrame(start * MS_PER_SAMPLE, (start + step) * MS_PER_SAMPLE, probability, energy_db))
        if self._probe is not None:
            frames += await self._probe.hear(probed, before=None)
        return frames

    def _stop_probe(self) -> None:
        if self._probe is not None:
            self._probe.stream.close()
            self._probe = None

    def close(self) -> None:
        """Release the VAD stream and the suppressor's state."""
        self._vad.close()
        self._stop_probe()
        if self._suppressor is not None:
            self._suppressor.close()
            self._suppressor = None


class HalfHopStream:
    """A second VAD stream on the main grid shifted by half a frame: each of its frames ends ``frame_samples / 2``
    after a main frame's, with its own recurrent state, fed the same audio. It begins at the first half-hop grid
    point at or after the sample it is opened at (from silence, as a session's first stream does)."""

    def __init__(self, stream: VadStream, frame_samples: int, *, grid_start: int, from_sample: int) -> None:
        self.stream = stream
        phase = (grid_start + frame_samples // 2) % frame_samples
        first = from_sample + (phase - from_sample) % frame_samples
        self._skip = first - from_sample
        """Samples still to pass before the stream's first frame begins."""
        self._framer = Framer(frame_samples)
        self._framer.samples_framed = first

    def push(self, audio16k: npt.NDArray[np.float32]) -> list[tuple[int, npt.NDArray[np.float32]]]:
        """The frames ``audio16k`` completes, each with its first sample's stream position."""
        skipped = min(self._skip, len(audio16k))
        self._skip -= skipped
        first = self._framer.samples_framed
        step = self._framer.frame_samples
        return [(first + index * step, frame) for index, frame in enumerate(self._framer.push(audio16k[skipped:]))]

    async def hear(self, pushed: list[tuple[int, npt.NDArray[np.float32]]], *, before: int | None) \
            -> list[OnsetProbe]:
        """The probes of ``pushed``'s frames that end before stream sample ``before`` (all: ``None``), taken off it
        in order."""
        step = self._framer.frame_samples
        probes: list[OnsetProbe] = []
        while pushed and (before is None or pushed[0][0] + step < before):
            start, frame = pushed.pop(0)
            probability = await self.stream.probability(frame)
            probes.append(OnsetProbe(start * MS_PER_SAMPLE, (start + step) * MS_PER_SAMPLE, probability))
        return probes


def _listen_resampler(wire_format: AudioFormat) -> LowDelayResampler:
    """A stream resampler from the client's wire rate to the listening rate: the low-delay one, since every ms it
    held back would delay the VAD's frames and so the endpoint (soxr's blocks held up to 61 ms at 8 kHz)."""
    return LowDelayResampler(wire_format.rate, LISTEN_SAMPLE_RATE)
