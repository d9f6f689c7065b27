"""Pongs skipped for a client that reads nothing (``tracked_ws_protocol``): only the pongs, never what the same
read queued with them (the close frame answering the client's close), on uvicorn's sans-I/O WebSocket protocol."""

from __future__ import annotations

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from bargein.server import serving
from tests.support.pong import written_after_ping_then_close


def test_a_skipped_pong_takes_nothing_else_with_it() -> None:
    tracked = serving.tracked_ws_protocol(WebSocketsSansIOProtocol)
    control = written_after_ping_then_close(tracked, 0)
    assert control.startswith(b"\x8a") and b"\x88" in control  # pong then close echo, as uvicorn writes them
    written = written_after_ping_then_close(tracked, serving.MAX_PONG_BACKLOG_BYTES + 1)
    assert b"\x8a" not in written  # the pong is dropped, as meant
    assert written.startswith(b"\x88"), f"the close frame answering the client's close was dropped too: {written!r}"
