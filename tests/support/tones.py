"""Synthetic input for session tests: tones as speech, zeros as silence, streamed in 20 ms appends."""

from __future__ import annotations

import asyncio
import base64
from typing import Protocol

import numpy as np
import numpy.typing as npt

from bargein.audio.codecs import float_to_int16

RATE = 24_000
"""The wire rate of pcm16 input."""


class Sender(Protocol):
    """Anything that sends a client event (the in-process session harness)."""

    async def send(self, **event: object) -> None: ...


def tone(seconds: float, hz: float = 300.0) -> npt.NDArray[np.float32]:
    """A tone the fake VAD hears as speech."""
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def quiet(seconds: float) -> npt.NDArray[np.float32]:
    """Digital silence."""
    return np.zeros(int(seconds * RATE), np.float32)


async def stream(sender: Sender, audio: npt.NDArray[np.float32], *, pause_s: float = 0.004) -> None:
    """Append 20 ms chunks, letting the session's background work (scores, guesses) run between them."""
    wire = float_to_int16(audio).tobytes()
    for offset in range(0, len(wire), 960):
        await sender.send(type="input_audio_buffer.append", audio=base64.b64encode(wire[offset:offset + 960]).decode())
        await asyncio.sleep(pause_s)
