"""A real uvicorn server on a free loopback port, in a background thread, for end-to-end tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.server.app import create_app
from bargein.server.serving import server_config


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def running_server(engines: Engines, settings: Settings | None = None) -> Iterator[str]:
    """Serve ``engines`` until the block ends; yields ``host:port``."""
    port = free_port()
    settings = settings or Settings(port=port)
    app = create_app(settings, engines)
    config = server_config(app, settings, host="127.0.0.1", port=port, log_level="warning",
                           ws_max_size=64 * 1024 * 1024)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120  # start-up runs a real first turn (seconds with real models on a busy machine)
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.05)
    else:
        raise RuntimeError("the test server did not start")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
