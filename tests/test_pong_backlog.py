"""Pongs skipped for a client that reads nothing (``tracked_ws_protocol``): only the pongs, never what the same
read queued with them (the close frame answering the client's close), on uvicorn's sans-I/O WebSocket protocol."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.server import ServerState
from websockets.protocol import State

from bargein.server import serving


class FakeTransport:
    """A transport whose unsent output is ``backlog`` bytes, recording what is written."""

    def __init__(self, backlog: int) -> None:
        self.backlog = backlog
        self.written = b""
        self.closed = False

    def get_write_buffer_size(self) -> int:
        return self.backlog

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _frame(opcode: int, payload: bytes) -> bytes:
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + b"\0\0\0\0" + payload  # masked with zeros


def _written_after_ping_then_close(backlog: int) -> bytes:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        pass

    async def run() -> bytes:
        config = Config(app=app, ws="websockets-sansio", ws_ping_interval=None)
        protocol = serving.tracked_ws_protocol(WebSocketsSansIOProtocol)(config, ServerState(), {})
        protocol.transport = FakeTransport(backlog)
        conn = protocol.conn  # the handshake, done on the sans-I/O connection itself
        conn.receive_data(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                          b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        [request] = conn.events_received()
        conn.send_response(conn.accept(request))
        conn.data_to_send()
        assert conn.state is State.OPEN
        protocol.handshake_complete = True
        # one read holding a ping and the client's close frame (code 1000)
        protocol.data_received(_frame(0x9, b"hi") + _frame(0x8, (1000).to_bytes(2, "big")))
        return protocol.transport.written

    return asyncio.run(run())


def test_a_skipped_pong_takes_nothing_else_with_it() -> None:
    control = _written_after_ping_then_close(0)
    assert control.startswith(b"\x8a") and b"\x88" in control  # pong then close echo, as uvicorn writes them
    written = _written_after_ping_then_close(serving.MAX_PONG_BACKLOG_BYTES + 1)
    assert b"\x8a" not in written  # the pong is dropped, as meant
    assert written.startswith(b"\x88"), f"the close frame answering the client's close was dropped too: {written!r}"
