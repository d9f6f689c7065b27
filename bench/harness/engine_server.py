"""A bargein server with engines of the benchmark's choosing, in a child process of its own.

``bargein serve`` picks its engines by name; a benchmark that needs a long scripted reply, a synthesiser whose
words can be counted in the audio, or Whisper beside instant fakes builds its :class:`Engines` with a factory
(``"module:function"``, called in the child) and gets a real uvicorn server on a free loopback port. The server
runs in its own process so its CPU time is its own (``/proc/PID/stat``) and the benchmark's
clients (Opus, SRTP, asyncio) do not share its interpreter lock.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx

from bench.harness.realtime_harness import free_port


def _serve(factory: str, settings: dict[str, Any]) -> None:
    """The child: build the engines and serve until terminated."""
    import uvicorn

    from bargein.config import Settings
    from bargein.server.app import create_app
    from bargein.server.serving import server_config

    module, _, name = factory.partition(":")
    engines = getattr(importlib.import_module(module), name)()
    config = Settings(**settings)
    app = create_app(config, engines)
    uvicorn.Server(server_config(app, config, host=config.host, port=config.port, log_level="warning")).run()


@contextlib.contextmanager
def engine_server(factory: str, **settings: Any) -> Iterator[tuple[str, int]]:
    """Yield ``(host:port, pid)`` of a server whose engines ``factory`` builds, with ``settings`` (fields of
    :class:`bargein.config.Settings`); stopped on exit."""
    port = free_port()
    settings = {"host": "127.0.0.1", "port": port, **settings}
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    child = multiprocessing.get_context("spawn").Process(target=_serve, args=(factory, settings), daemon=True)
    child.start()
    try:
        _wait_ready(f"127.0.0.1:{port}", child, timeout_s=300.0)
        assert child.pid is not None
        yield f"127.0.0.1:{port}", child.pid
    finally:
        child.terminate()
        child.join(timeout=15)
        if child.is_alive():
            child.kill()
            child.join()


def _wait_ready(host_port: str, child: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not child.is_alive():
            raise RuntimeError(f"the benchmark server exited with code {child.exitcode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://{host_port}/healthz", timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"the benchmark server was not ready after {timeout_s:.0f} s")
