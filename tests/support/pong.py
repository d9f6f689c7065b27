"""A ping then a close frame, in one read, through a WebSocket protocol class whose client reads nothing: what
the server writes back (for the tests of the pong wrapper, ``bargein.server.serving.tracked_ws_protocol``)."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState
from websockets.protocol import State


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


def written_after_ping_then_close(protocol_class: type[Any], backlog: int) -> bytes:
    """What ``protocol_class`` (one built on uvicorn's sans-I/O WebSocket protocol) writes when one read brings
    a ping and the client's close frame while ``backlog`` bytes of output wait unsent."""
    async def app(scope: Any, receive: Any, send: Any) -> None:
        pass

    async def run() -> bytes:
        config = Config(app=app, ws="websockets-sansio", ws_ping_interval=None)
        protocol = protocol_class(config, ServerState(), {})
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
        written: bytes = protocol.transport.written
        return written

    return asyncio.run(run())
