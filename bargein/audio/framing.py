"""Cut a stream of samples into fixed-size frames (512 samples at 16 kHz for Silero), keeping the rest."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


class Framer:
    """Accumulates samples and returns whole frames; tracks the stream position of each frame."""

    def __init__(self, frame_samples: int) -> None:
        self.frame_samples = frame_samples
        self._rest = np.zeros(0, dtype=np.float32)
        self.samples_framed = 0
        """Samples already handed out in frames: the stream position of the next frame's start."""

    def push(self, samples: npt.NDArray[np.float32]) -> list[npt.NDArray[np.float32]]:
        """Add samples; return the frames that are now whole."""
        data = np.concatenate([self._rest, samples.astype(np.float32, copy=False)])
        count = len(data) // self.frame_samples
        frames = [data[i * self.frame_samples:(i + 1) * self.frame_samples] for i in range(count)]
        self._rest = data[count * self.frame_samples:]
        self.samples_framed += count * self.frame_samples
        return frames

    def reset(self) -> None:
        """Drop a partial frame (after a buffer clear); the dropped samples still count, so the next frame is placed
        where its first sample sits in the stream."""
        self.samples_framed += len(self._rest)
        self._rest = np.zeros(0, dtype=np.float32)
