"""The audio wire formats a client names (``audio.input.format``, ``audio.output.format``, and a response's own
``audio.output.format``), as the OpenAI Realtime GA schema defines them.

Kept apart from :mod:`bargein.protocol.session_config` so ``response.create`` (in
:mod:`bargein.protocol.client_events`, which the session config imports) validates them the same way.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from bargein.audio.codecs import AudioFormat


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PcmFormat(_Strict):
    """pcm16 little-endian; only 24 kHz is defined by the protocol."""

    type: Literal["audio/pcm"] = "audio/pcm"
    rate: Literal[24000] = 24000


class PcmuFormat(_Strict):
    """G.711 μ-law at 8 kHz."""

    type: Literal["audio/pcmu"] = "audio/pcmu"


class PcmaFormat(_Strict):
    """G.711 A-law at 8 kHz."""

    type: Literal["audio/pcma"] = "audio/pcma"


WireFormat = Annotated[PcmFormat | PcmuFormat | PcmaFormat, Field(discriminator="type")]


def to_audio_format(wire: PcmFormat | PcmuFormat | PcmaFormat) -> AudioFormat:
    """The codec for a configured wire format."""
    if isinstance(wire, PcmFormat):
        return AudioFormat("audio/pcm", wire.rate)
    return AudioFormat(wire.type, 8_000)


def format_wire(fmt: AudioFormat) -> dict[str, Any]:
    """The JSON object of a codec, as ``audio.output.format`` names it (``rate`` for pcm16 only)."""
    return {"type": fmt.type, "rate": fmt.rate} if fmt.type == "audio/pcm" else {"type": fmt.type}
