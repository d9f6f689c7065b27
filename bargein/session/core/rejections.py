"""The errors the duplex machine answers a client request it cannot honour with: the OpenAI Realtime API's codes
and wording, so a client written for it recognises them."""

from __future__ import annotations

from bargein.protocol.errors import ProtocolError


def commit_too_small(minimum_ms: float, buffered_ms: float, event_id: str | None) -> ProtocolError:
    """``input_audio_buffer.commit`` with less audio than a turn needs."""
    return ProtocolError(f"buffer too small: expected at least {minimum_ms:.0f} ms of audio, have {buffered_ms:.2f} ms",
                         code="input_audio_buffer_commit_empty", event_id=event_id)


def reply_in_progress(response_id: str, event_id: str | None) -> ProtocolError:
    """``response.create`` while a reply is still live."""
    return ProtocolError(f"conversation already has an active response in progress: {response_id}",
                         code="conversation_already_has_active_response", event_id=event_id)


def nothing_to_cancel(response_id: str | None, event_id: str | None) -> ProtocolError:
    """``response.cancel`` with no live reply, or naming another one."""
    named = f" with id {response_id}" if response_id else ""
    return ProtocolError(f"cancellation failed: no active response found{named}", code="response_cancel_not_active",
                         param="response_id", event_id=event_id)
