"""uvicorn's private attributes that :mod:`bargein.server.serving` reads, checked on the installed uvicorn.

serving.py reads them through ``getattr`` with a default (a guard against a crash), so a uvicorn that renamed
one would not fail there: the handshake guard would stop telling a handshake from a request (``cycle``), skipped
pongs would take nothing back (``conn.data_to_send``), and a paused read could be resumed against uvicorn's
wish (``read_paused``). pyproject.toml pins uvicorn below its next minor release; this test names the attribute
that is gone when the pin is raised over a uvicorn that changed them.
"""

from __future__ import annotations

from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.protocols.http.auto import AutoHTTPProtocol
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.auto import AutoWebSocketsProtocol
from uvicorn.server import ServerState


async def _app(scope: Any, receive: Any, send: Any) -> None:
    """An ASGI app that is never called: the protocols only need one to be built."""


def _built(protocol: Any) -> Any:
    """The protocol as uvicorn builds it, on the running loop (a test before may have closed the default one)."""
    config = Config(app=_app, lifespan="off", log_config=None)
    config.load()
    return protocol(config=config, server_state=ServerState(), app_state={})


@pytest.mark.parametrize("protocol", sorted({AutoHTTPProtocol, H11Protocol}, key=lambda cls: cls.__name__))
async def test_the_http_protocol_has_a_request_cycle(protocol: Any) -> None:
    built = _built(protocol)
    assert hasattr(built, "cycle"), f"uvicorn's {protocol.__name__} has no 'cycle' attribute any more: " \
        "serving.guarded_protocol tells a handshake from a request by it"
    assert built.cycle is None  # no request yet: what the guard reads as "still handshaking"


async def test_the_websocket_protocol_has_what_serving_reads() -> None:
    assert AutoWebSocketsProtocol is not None
    built = _built(AutoWebSocketsProtocol)
    name = AutoWebSocketsProtocol.__name__
    missing = [attribute for attribute in ("conn", "read_paused", "handle_ping", "transport")
               if not hasattr(built, attribute) and not hasattr(AutoWebSocketsProtocol, attribute)]
    assert missing == [], f"uvicorn's {name} lacks {missing}: serving.tracked_ws_protocol reads them"
    assert callable(getattr(built.conn, "data_to_send", None)), \
        f"uvicorn's {name}.conn has no 'data_to_send()': serving.tracked_ws_protocol drops pongs through it"
    assert built.read_paused is False, f"uvicorn's {name}.read_paused is not the bool serving reads"
