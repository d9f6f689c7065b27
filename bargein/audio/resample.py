"""Streaming sample-rate conversion with soxr, so chunk boundaries leave no seams."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import soxr


class StreamResampler:
    """Converts a mono float32 stream chunk by chunk; a no-op when the rates match."""

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


def resample(samples: npt.NDArray[np.float32], in_rate: int, out_rate: int) -> npt.NDArray[np.float32]:
    """One-shot conversion of a whole clip."""
    if in_rate == out_rate:
        return samples.astype(np.float32, copy=False)
    return np.asarray(soxr.resample(samples.astype(np.float32), in_rate, out_rate), dtype=np.float32)
