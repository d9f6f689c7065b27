"""Several session worker processes on one port: ``bargein serve --workers N``.

One Python process holds the GIL for everything its sessions do, so one process uses one core. With
``--workers N`` uvicorn's supervisor starts N worker processes that accept on the same listening socket
(the kernel hands each new connection to whichever worker accepts first, so a busy worker takes fewer),
restarts a worker that dies, and each worker builds the app below from the settings the parent passed
in its environment, less the keys: those (the API keys, the LLM's key, the metrics key, a memory URL with
its password, the shared engines' hub key) travel in uvicorn's configuration, which reaches each worker over
its spawn pipe (:class:`WorkerConfig`), so no worker's environment or command line holds a key. The stages that
run in worker processes (Whisper, the embedded LLM, Kokoro) are loaded once, in this parent, and shared by every
session worker (:mod:`bargein.server.shared_engines`; ``--engines-per-worker`` has each session worker load its
own); each worker admits sessions against its own load, and publishes its figures so that any worker's
``/metrics`` covers all.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI
from uvicorn import Config
from uvicorn.supervisors.multiprocess import Multiprocess

from bargein.config import Settings
from bargein.engines.process.hub_link import hub_key, set_hub_key
from bargein.engines.process.spawn import CHILD_ENVIRONMENT
from bargein.engines.process.wire import SECRET_SETTINGS
from bargein.server.app import WORKER_DIR_ENV, ServerState, create_app
from bargein.server.drain import raise_drain_flag

SETTINGS_ENV = "BARGEIN_WORKER_SETTINGS"
"""The parent's settings as JSON, for the workers (flags are not passed to spawned processes), without the
keys (:data:`~bargein.engines.process.wire.SECRET_SETTINGS`: see :class:`WorkerConfig`)."""
KEY_ENVIRONMENT = tuple(f"BARGEIN_{name.upper()}" for name in sorted(SECRET_SETTINGS))
"""The keys' own environment variables, which the parent's environment loses while the workers run."""
WORKER_ENVIRONMENT = CHILD_ENVIRONMENT | {
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE"}
"""What a session worker inherits besides ``LC_*``, ``BARGEIN_*`` (not the keys), ``OTEL_*`` (its traces'
exporter) and ``RAY_*`` (joining the cluster of ``--ray-address``): an engine child's allow-list, and what
reaches an ``--llm-url`` (proxies, certificates). The rest of the parent's environment (another service's
key, a cloud's credentials) is out of it while the workers run."""
_WORKER_PREFIXES = ("LC_", "BARGEIN_", "OTEL_", "RAY_")
_secrets: dict[str, Any] = {}
"""This worker's keys, from its configuration (:meth:`WorkerConfig.load`)."""
WORKER_HEALTHCHECK_S = 60
"""How long the supervisor waits for a worker's health answer before it counts it hung (loading models
and a loaded loop both delay the answer; a crashed worker is noticed at once regardless)."""


def worker_settings() -> Settings:
    """The settings the parent passed to this worker process (with the keys its configuration brought)."""
    return Settings.model_validate_json(os.environ[SETTINGS_ENV]).model_copy(update=_secrets)


class WorkerConfig(Config):
    """uvicorn's configuration with the keys the workers need: uvicorn pickles it to each worker it spawns,
    over the spawn pipe, and each worker's first step with it is :meth:`load`, which installs them."""

    def __init__(self, app: str, *, worker_secrets: dict[str, Any], **options: Any) -> None:
        super().__init__(app, **options)
        self.worker_secrets = worker_secrets

    def load(self) -> None:
        """Install the keys (the API keys and the LLM's key for the app, the hub key for the shared engines),
        then load as uvicorn does."""
        secrets = dict(self.worker_secrets)
        set_hub_key(secrets.pop("hub_key"))
        _secrets.clear()
        _secrets.update(secrets)
        super().load()


def worker_app() -> FastAPI:
    """The app one worker serves (uvicorn calls this in each worker process)."""
    from bargein.engines.factory import load_engines

    return create_app(worker_settings(), loader=load_engines, on_ready=_announce_worker)


class WorkerProtocols:
    """The protocol classes of :func:`bargein.server.serving.protocol_classes`, built in each worker process.

    uvicorn pickles its configuration for every worker it spawns, and classes made inside a function do not
    pickle; it also accepts an import string for ``http`` and ``ws``, resolved in the worker when it loads its
    configuration, so the configuration names the properties below and each worker builds the same wrappers
    as the single-process server from its own settings.
    """

    def __init__(self) -> None:
        self._built: tuple[type[asyncio.Protocol], type[asyncio.Protocol]] | None = None

    def _classes(self) -> tuple[type[asyncio.Protocol], type[asyncio.Protocol]]:
        if self._built is None:  # once per process: http and ws share one handshake guard
            from bargein.server.serving import protocol_classes

            self._built = protocol_classes(worker_settings())
        return self._built

    @property
    def http(self) -> type[asyncio.Protocol]:
        """The guarded HTTP protocol."""
        return self._classes()[0]

    @property
    def ws(self) -> type[asyncio.Protocol]:
        """The tracked WebSocket protocol (sliced parsing, pongs skipped past a backlog)."""
        return self._classes()[1]


WORKER_PROTOCOLS = WorkerProtocols()
HTTP_PROTOCOL_IMPORT = "bargein.server.workers:WORKER_PROTOCOLS.http"
WS_PROTOCOL_IMPORT = "bargein.server.workers:WORKER_PROTOCOLS.ws"


def _announce_worker(state: ServerState) -> None:
    from bargein.server.drain import drain_running_server

    drain_running_server(state.drain)  # each worker drains its own sessions when the supervisor stops it
    print(f"  worker {os.getpid()} ready "
          f"({state.load_seconds or 0:.1f} s to load its engines)", flush=True)


@contextlib.contextmanager
def worker_environment(settings: Settings) -> Iterator[str]:
    """Settings (without the keys) and a figures directory in the environment the workers inherit, and
    everything else but :data:`WORKER_ENVIRONMENT` out of it; all restored afterwards."""
    directory = tempfile.mkdtemp(prefix="bargein-workers-")
    dropped = [key for key in os.environ if key in KEY_ENVIRONMENT
               or not (key in WORKER_ENVIRONMENT or key.startswith(_WORKER_PREFIXES))]
    saved = {key: os.environ.get(key) for key in (SETTINGS_ENV, WORKER_DIR_ENV, *dropped)}
    os.environ[SETTINGS_ENV] = settings.model_dump_json(exclude=set(SECRET_SETTINGS))
    os.environ[WORKER_DIR_ENV] = directory
    for key in dropped:
        os.environ.pop(key, None)
    try:
        yield directory
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(directory, ignore_errors=True)


def worker_config(settings: Settings, log_level: str) -> Config:
    """The uvicorn configuration every worker process loads: the options and protocol wrappers of the
    single-process server (the wrappers as import strings, resolved in each worker)."""
    from bargein.server.serving import safe_uvicorn_options

    secrets = {**settings.model_dump(include=set(SECRET_SETTINGS)), "hub_key": hub_key()}
    return WorkerConfig("bargein.server.workers:worker_app", worker_secrets=secrets, factory=True,
                        workers=settings.workers, host=settings.host, port=settings.port, log_level=log_level,
                        http=HTTP_PROTOCOL_IMPORT, ws=WS_PROTOCOL_IMPORT,
                        timeout_worker_healthcheck=WORKER_HEALTHCHECK_S, **safe_uvicorn_options(settings))


def run_workers(settings: Settings, log_level: str) -> None:
    """Serve with ``settings.workers`` processes until interrupted."""
    from bargein.server.shared_engines import shared_engines

    with shared_engines(settings) as shared, worker_environment(settings) as directory:
        if shared:
            print(f"bargein: {', '.join(shared)} loaded once, shared by the session workers", flush=True)
        print(f"bargein: starting {settings.workers} session workers on {settings.host}:{settings.port} "
              f"(local-only: {settings.local_only})", flush=True)
        config = worker_config(settings, log_level)
        with contextlib.suppress(KeyboardInterrupt):
            _DrainingSupervisor(config, sockets=[config.bind_socket()], runtime_directory=directory).run()


class _DrainingSupervisor(Multiprocess):
    """uvicorn's worker supervisor, raising the shared draining flag before it signals any worker.

    uvicorn signals the workers one after another; without the flag a client that the kernel hands to a
    worker not yet signalled would be accepted, then closed by that worker's drain (1001), instead of
    refused (1013). Only a full stop raises it: a rolling restart (SIGHUP) retires workers one at a time
    while the others go on serving.
    """

    def __init__(self, config: Config, sockets: list[socket.socket], runtime_directory: str) -> None:
        super().__init__(config, sockets)
        self.runtime_directory = runtime_directory

    def terminate_all(self) -> None:
        """Raise the flag, then signal every worker."""
        try:
            raise_drain_flag(self.runtime_directory)
        except OSError as error:  # the workers still drain on their own signals
            print(f"bargein: could not raise the shared draining flag: {error}", flush=True)
        super().terminate_all()
