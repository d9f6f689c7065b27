"""The body of ``POST /v1/realtime/calls``: an SDP offer, alone or with a session config, checked before aiortc sees it.

Two shapes, as OpenAI accepts them: the SDP itself (``Content-Type: application/sdp``), or ``multipart/form-data``
with the fields ``sdp`` and ``session`` (a JSON session config, as ``session.update`` takes it). The body is read
with a byte bound, so an oversized offer costs the server at most that many bytes; the SDP must look like an offer
with an audio m-line. Every refusal is an :class:`OfferError` whose reason the client is told (400).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from email.message import Message
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

MAX_SESSION_BYTES = 256 * 1024
"""The ``session`` field's bound (a config with many tools is tens of KiB)."""
MULTIPART_OVERHEAD = 4096
"""Bytes of boundaries and part headers a multipart body may add."""


class OfferError(ValueError):
    """An offer the server refuses, with the reason the client is told."""


@dataclass(frozen=True)
class Offer:
    """A checked offer: the SDP and the session config that came with it (None: the server's default)."""

    sdp: str
    session: dict[str, Any] | None = None


def body_limit(max_sdp_bytes: int) -> int:
    """The most bytes a request body may carry: the SDP bound, plus a session config and the multipart framing."""
    return max_sdp_bytes + MAX_SESSION_BYTES + MULTIPART_OVERHEAD


async def read_bounded(chunks: AsyncIterator[bytes], limit: int) -> bytes:
    """The body from ``chunks``; :class:`OfferError` as soon as it passes ``limit`` bytes (the rest is not read)."""
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise OfferError(f"the request body is over {limit} bytes")
    return bytes(body)


def parse_offer(content_type: str, body: bytes, max_sdp_bytes: int) -> Offer:
    """The offer in ``body`` of ``content_type``, checked (raises :class:`OfferError` with the reason)."""
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type == "application/sdp":
        return Offer(checked_sdp(body, max_sdp_bytes))
    if media_type == "multipart/form-data":
        fields = _form_fields(content_type, body)
        if "sdp" not in fields:
            raise OfferError("the multipart body has no 'sdp' field")
        session = fields.get("session")
        return Offer(checked_sdp(fields["sdp"], max_sdp_bytes), _session(session) if session is not None else None)
    raise OfferError(f"Content-Type must be application/sdp or multipart/form-data, not {media_type or 'none'!r}")


def checked_sdp(raw: bytes, max_sdp_bytes: int) -> str:
    """The SDP text, refused when over the bound, not UTF-8, not a session description, or without audio."""
    if len(raw) > max_sdp_bytes:
        raise OfferError(f"the SDP offer is {len(raw)} bytes, over the limit of {max_sdp_bytes}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise OfferError("the SDP offer is not UTF-8 text") from None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines or lines[0] != "v=0":
        raise OfferError("malformed SDP: a session description starts with 'v=0'")
    if any(len(line) < 2 or line[1] != "=" for line in lines):
        raise OfferError("malformed SDP: every line is '<type>=<value>'")
    if not any(line.startswith("m=audio ") for line in lines):
        raise OfferError("the SDP offer has no audio m-line (the call needs a sendrecv audio transceiver)")
    return text


def _form_fields(content_type: str, body: bytes) -> dict[str, bytes]:
    """The named fields of a ``multipart/form-data`` body (the last of a repeated name wins)."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1", "replace")
    message: Message = BytesParser(policy=HTTP).parsebytes(head + body)
    if not message.is_multipart():
        raise OfferError("malformed multipart body (is the boundary right?)")
    fields: dict[str, bytes] = {}
    for part in message.iter_parts():  # type: ignore[attr-defined]
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields[name] = payload
    return fields


def _session(raw: bytes) -> dict[str, Any]:
    """The ``session`` field: a JSON object within its bound."""
    if len(raw) > MAX_SESSION_BYTES:
        raise OfferError(f"the session config is over {MAX_SESSION_BYTES} bytes")
    try:
        session = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise OfferError(f"the session field is not JSON: {error}") from None
    if not isinstance(session, dict):
        raise OfferError("the session field must be a JSON object (a session config, as session.update takes it)")
    return session
