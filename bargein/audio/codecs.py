"""Wire audio formats of the Realtime protocol: pcm16 little-endian, G.711 μ-law and A-law.

G.711 is done with numpy lookup tables (``audioop`` is gone from Python 3.13).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

AudioFormatType = Literal["audio/pcm", "audio/pcmu", "audio/pcma"]
Int16Audio = npt.NDArray[np.int16]


class AudioFormatError(ValueError):
    """Client audio that cannot be decoded in the session's format."""


@dataclass(frozen=True)
class AudioFormat:
    """A wire format and its sample rate (pcm16 at 24 kHz, G.711 at 8 kHz)."""

    type: AudioFormatType = "audio/pcm"
    rate: int = 24_000

    @property
    def bytes_per_sample(self) -> int:
        """2 for pcm16, 1 for G.711."""
        return 2 if self.type == "audio/pcm" else 1

    def decode(self, payload: bytes) -> Int16Audio:
        """Wire bytes to int16 samples."""
        if self.type == "audio/pcm":
            if len(payload) % 2:
                raise AudioFormatError(
                    f"audio/pcm needs whole 16-bit samples, got an odd byte count ({len(payload)})"
                )
            return np.frombuffer(payload, dtype="<i2").astype(np.int16)
        table = _ULAW_DECODE if self.type == "audio/pcmu" else _ALAW_DECODE
        return table[np.frombuffer(payload, dtype=np.uint8)]

    def encode(self, samples: Int16Audio) -> bytes:
        """int16 samples to wire bytes."""
        if self.type == "audio/pcm":
            return samples.astype("<i2", copy=False).tobytes()
        table = _ULAW_ENCODE if self.type == "audio/pcmu" else _ALAW_ENCODE
        return table[samples.astype(np.int32) + 32768].tobytes()

    def duration_ms(self, byte_count: int) -> float:
        """Play time of ``byte_count`` wire bytes."""
        return 1000.0 * byte_count / self.bytes_per_sample / self.rate


def decode_base64(text: str) -> bytes:
    """Strict base64 decoding: anything that is not valid base64 raises :class:`AudioFormatError`."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as error:
        raise AudioFormatError(f"audio is not valid base64: {error}") from error


def encode_base64(payload: bytes) -> str:
    """Base64 text of wire bytes."""
    return base64.b64encode(payload).decode("ascii")


def int16_to_float(samples: Int16Audio) -> npt.NDArray[np.float32]:
    """int16 to float32 in [-1, 1)."""
    return samples.astype(np.float32) / 32768.0


def float_to_int16(samples: npt.NDArray[np.floating]) -> Int16Audio:
    """float in [-1, 1] to int16 with clipping (no wrap-around on overshoot); NaN becomes silence."""
    # NaN has no int16 value: numpy's cast of it is undefined (and warns), so an engine's NaN must not reach it.
    scaled: npt.NDArray[np.floating] = np.nan_to_num(samples * 32767.0, nan=0.0, posinf=32767.0, neginf=-32768.0)
    return np.clip(np.round(scaled), -32768, 32767).astype(np.int16)


def _ulaw_decode_byte(byte: int) -> int:
    byte = ~byte & 0xFF
    sign, exponent, mantissa = byte & 0x80, (byte >> 4) & 0x07, byte & 0x0F
    magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
    return -magnitude if sign else magnitude


def _ulaw_encode_sample(sample: int) -> int:
    # the 14-bit reference algorithm (ITU-T G.711 / Sun's g711.c), bit-exact with audioop
    value = sample >> 2
    mask = 0xFF
    if value < 0:
        value, mask = -value, 0x7F
    value = min(value, 8159) + 0x21
    segment = max(0, value.bit_length() - 6)
    if segment >= 8:
        return 0x7F ^ mask
    return ((segment << 4) | ((value >> (segment + 1)) & 0x0F)) ^ mask


def _alaw_decode_byte(byte: int) -> int:
    byte ^= 0x55
    sign, exponent, mantissa = byte & 0x80, (byte >> 4) & 0x07, byte & 0x0F
    magnitude = (mantissa << 4) + 8 if exponent == 0 else ((mantissa << 4) + 0x108) << (exponent - 1)
    return magnitude if sign else -magnitude


def _alaw_encode_sample(sample: int) -> int:
    sign = 0x80 if sample >= 0 else 0
    magnitude = min(sample if sample >= 0 else -sample - 1, 32767)
    if magnitude >= 256:
        exponent = max(1, min(7, magnitude.bit_length() - 8))
        mantissa = (magnitude >> (exponent + 3)) & 0x0F
    else:
        exponent, mantissa = 0, magnitude >> 4
    return (sign | (exponent << 4) | mantissa) ^ 0x55


_ULAW_DECODE = np.array([_ulaw_decode_byte(b) for b in range(256)], dtype=np.int16)
_ALAW_DECODE = np.array([_alaw_decode_byte(b) for b in range(256)], dtype=np.int16)
_ULAW_ENCODE = np.array([_ulaw_encode_sample(s) for s in range(-32768, 32768)], dtype=np.uint8)
_ALAW_ENCODE = np.array([_alaw_encode_sample(s) for s in range(-32768, 32768)], dtype=np.uint8)
