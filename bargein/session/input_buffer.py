"""The input audio buffer: 16 kHz samples placed in stream time, cut out as items when turns commit.

Stream time (ms since the session's first sample) is the clock onsets, ends and commits are measured
against; the buffer keeps its position when older audio is trimmed away. Samples are held as int16
(2 bytes a sample, 32 KB a second, whatever the client's wire format) and handed out as float32.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from bargein.audio.codecs import float_to_int16, int16_to_float
from bargein.values import LISTEN_SAMPLE_RATE

MS_PER_SAMPLE = 1000.0 / LISTEN_SAMPLE_RATE


class InputBuffer:
    """16 kHz audio from stream position ``start_sample`` on, with the wire size it stands for."""

    def __init__(self) -> None:
        self._chunks: list[npt.NDArray[np.int16]] = []
        self.start_sample = 0
        self.end_sample = 0

    @property
    def nbytes(self) -> int:
        """Memory the samples take."""
        return sum(chunk.nbytes for chunk in self._chunks)

    @property
    def duration_ms(self) -> float:
        """Audio held, in ms."""
        return (self.end_sample - self.start_sample) * MS_PER_SAMPLE

    def append(self, samples: npt.NDArray[np.float32]) -> None:
        """Add audio at the end."""
        if len(samples):
            self._chunks.append(float_to_int16(samples))
            self.end_sample += len(samples)

    def take(self, start_ms: float | None, end_ms: float | None) -> npt.NDArray[np.float32]:
        """Audio between two stream positions (``None``: the buffer's ends); drops everything up to the end."""
        audio = self._joined()
        first = self.start_sample if start_ms is None else max(self.start_sample, int(start_ms / MS_PER_SAMPLE))
        last = self.end_sample if end_ms is None else min(self.end_sample, int(end_ms / MS_PER_SAMPLE))
        clip = int16_to_float(audio[first - self.start_sample:max(first, last) - self.start_sample])
        self.trim_before(last * MS_PER_SAMPLE)
        return clip

    def trim_before(self, stream_ms: float) -> None:
        """Forget audio before a stream position (keeps idle buffers small in VAD mode)."""
        cut = min(self.end_sample, max(self.start_sample, int(stream_ms / MS_PER_SAMPLE)))
        if cut == self.start_sample:
            return
        audio = self._joined()[cut - self.start_sample:]
        self._chunks = [audio] if len(audio) else []
        self.start_sample = cut

    def peek(self, start_ms: float, end_ms: float | None = None) -> npt.NDArray[np.float32]:
        """A copy of the audio between two stream positions, leaving the buffer as it is."""
        audio = self._joined()
        first = max(self.start_sample, int(start_ms / MS_PER_SAMPLE))
        last = self.end_sample if end_ms is None else min(self.end_sample, int(end_ms / MS_PER_SAMPLE))
        return int16_to_float(audio[first - self.start_sample:max(first, last) - self.start_sample])

    def clear(self) -> None:
        """Drop everything held."""
        self._chunks = []
        self.start_sample = self.end_sample

    def _joined(self) -> npt.NDArray[np.int16]:
        if len(self._chunks) != 1:
            self._chunks = [np.concatenate(self._chunks)] if self._chunks else [np.zeros(0, np.int16)]
        return self._chunks[0]
