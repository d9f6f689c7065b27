"""The Twilio Media Streams wire shape: the provider's JSON messages in, ``media``/``mark``/``clear`` out.

A phone call reaches the server as one WebSocket on which the provider sends ``connected``, then ``start``
(the stream's ``streamSid`` and the call's parameters), then ``media`` (20 ms of 8 kHz G.711 mu-law, base64) for
as long as the caller talks, ``mark`` when the audio the server sent before a mark of its own has played, ``dtmf``
for a key press and ``stop`` when the call ends. The server answers with ``media`` (its own mu-law audio),
``mark`` (a name the provider echoes once the audio before it has played) and ``clear`` (drop all audio not yet
played; the provider then echoes the marks it dropped too).

Only the fields bargein uses are read, each bounded; anything else is ignored, as the provider adds fields.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from bargein.audio.codecs import encode_base64

FRAME_BYTES = 160
"""One 20 ms frame of 8 kHz mu-law: what the provider sends and what it plays best."""
FRAME_MS = 20.0
MAX_SID_CHARS = 64
"""A ``streamSid`` or ``callSid`` is 34 characters; longer ones are refused as hostile."""
MAX_MARK_CHARS = 128
MAX_PARAMETERS = 32
"""Custom parameters kept from ``start`` (``<Parameter>`` in the TwiML), each name and value cut to 256."""


class MediaStreamError(ValueError):
    """A provider message that cannot be read (not JSON, not an object, a field of the wrong kind)."""


@dataclass(frozen=True)
class Connected:
    """The provider's greeting (carries nothing bargein needs)."""


@dataclass(frozen=True)
class Start:
    """The stream begins: its id, the call's, and the TwiML's custom parameters."""

    stream_sid: str
    call_sid: str
    encoding: str
    sample_rate: int
    parameters: dict[str, str]


@dataclass(frozen=True)
class Media:
    """A piece of the caller's audio (base64 mu-law, as the provider sent it)."""

    payload: str
    track: str


@dataclass(frozen=True)
class Mark:
    """The provider played the server's audio up to the mark of this name (or dropped it, after a ``clear``)."""

    name: str


@dataclass(frozen=True)
class Dtmf:
    """The caller pressed a key."""

    digit: str


@dataclass(frozen=True)
class Stop:
    """The call ended (the caller hung up, or the stream was stopped)."""


@dataclass(frozen=True)
class Ignored:
    """A message of a kind bargein does not act on."""

    event: str


ProviderMessage = Connected | Start | Media | Mark | Dtmf | Stop | Ignored


def parse_message(raw: str | bytes) -> ProviderMessage:
    """One provider message; raises :class:`MediaStreamError` for anything unreadable."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise MediaStreamError("not JSON") from None
    if not isinstance(data, dict):
        raise MediaStreamError("not a JSON object")
    kind = data.get("event")
    if not isinstance(kind, str):
        raise MediaStreamError("no event name")
    match kind:
        case "connected":
            return Connected()
        case "start":
            return _start(_object(data, "start"), data.get("streamSid"))
        case "media":
            media = _object(data, "media")
            return Media(_text(media, "payload", 64 * 1024), str(media.get("track", "inbound"))[:16])
        case "mark":
            return Mark(_text(_object(data, "mark"), "name", MAX_MARK_CHARS))
        case "dtmf":
            return Dtmf(_text(_object(data, "dtmf"), "digit", 4))
        case "stop":
            return Stop()
    return Ignored(kind[:32])


def _start(start: dict[str, Any], outer_sid: object) -> Start:
    sid = start.get("streamSid", outer_sid)
    if not isinstance(sid, str) or not sid or len(sid) > MAX_SID_CHARS:
        raise MediaStreamError("start: streamSid missing or malformed")
    call_sid = start.get("callSid", "")
    media_format = start.get("mediaFormat") or {}
    if not isinstance(media_format, dict):
        raise MediaStreamError("start: mediaFormat is not an object")
    encoding = str(media_format.get("encoding", "audio/x-mulaw"))[:32]
    rate = media_format.get("sampleRate", 8000)
    custom = start.get("customParameters") or {}
    if not isinstance(custom, dict):
        raise MediaStreamError("start: customParameters is not an object")
    parameters = {str(key)[:256]: str(value)[:256] for key, value in list(custom.items())[:MAX_PARAMETERS]}
    return Start(sid, str(call_sid)[:MAX_SID_CHARS], encoding, rate if isinstance(rate, int) else 0, parameters)


def _object(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    if not isinstance(value, dict):
        raise MediaStreamError(f"{data.get('event')}: {key!r} is not an object")
    return value


def _text(data: dict[str, Any], key: str, limit: int) -> str:
    value = data.get(key)
    if not isinstance(value, str) or len(value) > limit:
        raise MediaStreamError(f"{key!r} is missing, not text, or longer than {limit} characters")
    return value


def supported_format(start: Start) -> bool:
    """The stream carries what the session is set up for: 8 kHz mu-law."""
    return start.encoding == "audio/x-mulaw" and start.sample_rate == 8000


# -- what the server sends --------------------------------------------------------------------------

OutboundKind = Literal["media", "mark", "clear"]


def media_message(stream_sid: str, frame: bytes) -> str:
    """Play ``frame`` (mu-law) to the caller."""
    return _dumps({"event": "media", "streamSid": stream_sid, "media": {"payload": encode_base64(frame)}})


def mark_message(stream_sid: str, name: str) -> str:
    """Ask the provider to echo ``name`` once everything sent before it has played."""
    return _dumps({"event": "mark", "streamSid": stream_sid, "mark": {"name": name}})


def clear_message(stream_sid: str) -> str:
    """Drop every piece of audio the provider holds and has not played yet."""
    return _dumps({"event": "clear", "streamSid": stream_sid})


def _dumps(message: dict[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"))


class FrameSplitter:
    """Cuts a reply's audio deltas into 20 ms frames; a short remainder waits for the next delta of its item."""

    def __init__(self) -> None:
        self.item_id: str | None = None
        self._rest = b""

    def frames(self, item_id: str, payload: bytes) -> list[bytes]:
        """The whole frames ``payload`` completes (a new item drops the last one's remainder: it never plays)."""
        if item_id != self.item_id:
            self.item_id, self._rest = item_id, b""
        data = self._rest + payload
        whole = len(data) - len(data) % FRAME_BYTES
        self._rest = data[whole:]
        return [data[start:start + FRAME_BYTES] for start in range(0, whole, FRAME_BYTES)]

    def flush(self, item_id: str) -> bytes:
        """The item's audio is done: its last partial frame, padded with mu-law silence to a whole frame."""
        if item_id != self.item_id or not self._rest:
            return b""
        rest, self._rest = self._rest, b""
        return rest + b"\xff" * (FRAME_BYTES - len(rest))

    def drop(self) -> None:
        """A ``clear``: the remainder will never play."""
        self._rest = b""
