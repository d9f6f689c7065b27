"""Streaming sample-rate conversion, so chunk boundaries leave no seams.

Two streaming converters: :class:`StreamResampler` (soxr, for reply audio, where a few tens of ms held back
cost nothing) and :class:`LowDelayResampler` (a polyphase FIR in numpy, for the listening path, where every ms
held back delays the VAD's frames and so the endpoint). soxr filters in blocks: its "LQ" stream held back up to
61 ms of 8 kHz audio between 20 ms appends (33 ms on average) and up to 20 ms of 24 kHz audio; the polyphase
filter holds back only its half length (3.3 ms at 8 kHz, 1.6 ms at 24 kHz), whatever the chunking.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import soxr

STOPBAND_DB = 80.0
"""The low-delay filter's stopband attenuation (soxr's LQ is a 16-bit filter; 80 dB is below any mic's floor)."""
PASSBAND = 0.8
"""The low-delay filter passes up to this share of the narrower Nyquist band (soxr's LQ passes 80% too)."""
_BLOCK = 8192
"""Outputs computed at a time, so a minutes-long append never builds one huge gather matrix."""


class StreamResampler:
    """Converts a mono float32 stream chunk by chunk with soxr; a no-op when the rates match."""

    def __init__(self, in_rate: int, out_rate: int, *, quality: str = "HQ") -> None:
        self.in_rate = in_rate
        self.out_rate = out_rate
        self._stream = (
            None if in_rate == out_rate
            else soxr.ResampleStream(in_rate, out_rate, 1, dtype="float32", quality=quality)
        )

    def process(self, samples: npt.NDArray[np.float32], *, last: bool = False) -> npt.NDArray[np.float32]:
        """Resample the next chunk; ``last`` flushes what the filter holds back."""
        if self._stream is None:
            return samples.astype(np.float32, copy=False)
        out = self._stream.resample_chunk(samples.astype(np.float32, copy=False), last=last)
        return np.asarray(out, dtype=np.float32)


class LowDelayResampler:
    """Converts a mono float32 stream chunk by chunk with a Kaiser-windowed polyphase FIR; a no-op when the rates
    match.

    Output sample ``n`` stands for the instant ``n / out_rate`` (no delay): it is emitted as soon as the inputs
    its filter reaches have arrived, so only the filter's half length is held back. ``last`` flushes the rest
    (the missing inputs are silence) and ends the stream at ``round(inputs * out_rate / in_rate)`` samples; the
    next chunk starts a new stream.
    """

    def __init__(self, in_rate: int, out_rate: int) -> None:
        self.in_rate = in_rate
        self.out_rate = out_rate
        common = math.gcd(in_rate, out_rate)
        self._up, self._down = out_rate // common, in_rate // common
        self._phases, self._delay = _polyphase_filter(self._up, self._down)
        self._taps = self._phases.shape[1]
        self._reversed = np.ascontiguousarray(self._phases[:, ::-1])
        """Each phase's taps newest input last, as a window of the history holds its inputs."""
        self._start()

    def _start(self) -> None:
        """A fresh stream: silence before its first sample."""
        self._history = np.zeros(self._taps, dtype=np.float32)
        self._history_start = -self._taps
        """The stream index of ``_history[0]``: inputs still needed, with silence before the stream began."""
        self._received = 0
        self._emitted = 0

    def process(self, samples: npt.NDArray[np.float32], *, last: bool = False) -> npt.NDArray[np.float32]:
        """Resample the next chunk; ``last`` flushes what the filter holds back."""
        samples = samples.astype(np.float32, copy=False).reshape(-1)
        if self._up == self._down:
            return samples
        self._history = np.concatenate([self._history, samples])
        self._received += len(samples)
        up, down = self._up, self._down
        if last:
            target = (2 * self._received * up + down) // (2 * down)  # round(received * up / down)
            newest = (max(0, target - 1) * down + self._delay) // up  # the latest input the last output reaches
            missing = newest + 1 - (self._history_start + len(self._history))
            if missing > 0:
                self._history = np.concatenate([self._history, np.zeros(missing, np.float32)])
        else:  # the outputs whose every input has arrived: n * down + delay < received * up
            target = max(self._emitted, -(-(self._received * up - self._delay) // down))
        out = [self._compute(first, min(first + _BLOCK, target)) for first in range(self._emitted, target, _BLOCK)]
        self._emitted = target
        if last:
            self._start()
        else:  # keep only the inputs the next output still reaches
            oldest = (target * down + self._delay) // up - (self._taps - 1)
            drop = max(0, min(oldest - self._history_start, len(self._history)))
            self._history = self._history[drop:]
            self._history_start += drop
        return np.concatenate(out) if out else np.zeros(0, np.float32)

    def _compute(self, first: int, end: int) -> npt.NDArray[np.float32]:
        """Outputs ``first`` to ``end`` (exclusive): each the dot product of its phase's taps and its inputs.

        Outputs ``up`` apart share a phase and read windows ``down`` inputs apart, so each such run is one
        matrix-vector product over a strided view of the history (no gathered copy of every window)."""
        out = np.empty(end - first, dtype=np.float32)
        history, item = self._history, self._history.itemsize
        for offset in range(min(self._up, end - first)):
            count = len(range(first + offset, end, self._up))
            at = (first + offset) * self._down + self._delay
            oldest = at // self._up - self._history_start - self._taps + 1  # the run's first window's start
            run = np.ndarray((count, self._taps), np.float32, history, oldest * item, (self._down * item, item))
            out[offset::self._up] = np.dot(run, self._reversed[at % self._up])
        return out


def _polyphase_filter(up: int, down: int) -> tuple[npt.NDArray[np.float32], int]:
    """The anti-aliasing (and anti-imaging) low-pass at ``up`` times the input rate, split into its ``up``
    phases (row ``p`` holds taps ``p, p + up, ...``), and its delay in samples at that rate."""
    nyquist = 0.5 / max(up, down)  # the narrower band edge, in cycles per sample at the upsampled rate
    transition = (1.0 - PASSBAND) * nyquist
    cutoff = nyquist - transition / 2
    # Kaiser's estimates of the length and the window's beta for the stopband asked
    length = math.ceil((STOPBAND_DB - 8.0) / (2.285 * 2 * math.pi * transition)) + 1
    half = -(-length // (2 * up)) * up  # a whole number of taps per phase on each side
    beta = 0.1102 * (STOPBAND_DB - 8.7)
    k = np.arange(-half, half + 1, dtype=np.float64)
    taps = 2 * cutoff * np.sinc(2 * cutoff * k) * np.kaiser(len(k), beta) * up  # gain ``up``: zero-stuffing
    per_phase = -(-len(taps) // up)
    padded = np.zeros(per_phase * up)
    padded[:len(taps)] = taps
    return padded.reshape(per_phase, up).T.astype(np.float32).copy(), half


def resample(samples: npt.NDArray[np.float32], in_rate: int, out_rate: int) -> npt.NDArray[np.float32]:
    """One-shot conversion of a whole clip."""
    if in_rate == out_rate:
        return samples.astype(np.float32, copy=False)
    return np.asarray(soxr.resample(samples.astype(np.float32), in_rate, out_rate), dtype=np.float32)
