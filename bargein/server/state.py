"""What the server's routes share (:class:`ServerState`), and how a worker publishes its figures to the others."""

from __future__ import annotations

import asyncio
import logging
import os

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.process.shared import SHARED_DIR_ENV, shared_socket
from bargein.memory.store import MemoryStore
from bargein.metrics.aggregate import WorkerBoard, WorkerFigures, maxima
from bargein.metrics.prometheus import ServerMetrics, StageSource
from bargein.server.client_counts import session_counts
from bargein.server.client_secrets import ClientSecrets, secrets_path
from bargein.server.drain import Drain, shared_drain_flag
from bargein.server.history_budget import HistoryLedger
from bargein.server.load import LoadLimits, LoadMonitor
from bargein.server.realtime_ws import SessionRegistry
from bargein.server.webrtc.calls import CallBook

log = logging.getLogger(__name__)
WORKER_DIR_ENV = "BARGEIN_WORKER_DIR"
"""Set by ``bargein serve --workers N``: where the workers publish their figures for ``/metrics``."""
PUBLISH_EVERY_S = 1.0


class ServerState:
    """What the routes share: settings, engines once loaded, live sessions."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.engines: Engines | None = None
        self.load_error: str | None = None
        self.load_seconds: float | None = None
        runtime_directory = os.environ.get(WORKER_DIR_ENV)  # shared by the workers of ``--workers N``
        self.registry = SessionRegistry(settings.max_sessions, settings.max_connections_per_client,
                                        HistoryLedger(settings.max_history_bytes_per_client,
                                                      settings.max_history_bytes_per_worker),
                                        session_counts(runtime_directory, settings.max_connections_per_client))
        self.client_secrets = ClientSecrets(secrets_path(runtime_directory))
        self.drain = Drain(self.registry, settings.drain_s, shared_flag=shared_drain_flag(runtime_directory))
        self.metrics = ServerMetrics(self.queue_sources)
        self.metrics.sessions.set_function(lambda: float(len(self.registry.live)))
        self.load = LoadMonitor(LoadLimits(settings.max_sessions, settings.max_loop_lag_ms, settings.max_queue_depth),
                                lambda: len(self.registry.live), self.queue_sources)
        self.board = WorkerBoard(runtime_directory)
        self.calls = CallBook()
        """The live WebRTC calls (docs/webrtc.md)."""
        self.memory: MemoryStore | None = None
        """The long-term memory store, opened with the server (None: ``--no-memory``, or not open yet)."""

    def figures(self) -> WorkerFigures:
        """This worker's exposition and load, as published to the other workers."""
        return WorkerFigures(os.getpid(), self.metrics.exposition().decode(), self.load.snapshot().as_dict())

    def refusal(self) -> str | None:
        """Why this worker takes no new session now (draining, or the load), or None."""
        # asked again once the connection is accepted: a drain may have begun while the upgrade was answered,
        # and has then already listed the sessions it will tell
        return "the server is shutting down" if self.drain.draining else self.load.refusal()

    def queue_sources(self) -> dict[str, StageSource]:
        """Each stage's queue, for the ``bargein_queue_depth`` gauge."""
        sources: dict[str, StageSource] = {"outbound": _OutboundDepth(self.registry)}
        if self.engines is not None:
            sources.update(vad=self.engines.vad, asr=self.engines.asr, llm=self.engines.llm, tts=self.engines.tts)
        return sources


class _OutboundDepth:
    worker = None  # the sessions' outbound queues run in this process

    def __init__(self, registry: SessionRegistry) -> None:
        self.registry = registry

    @property
    def queue_depth(self) -> int:
        return sum(len(session.outbound) for session in self.registry.live)


async def publish_figures(state: ServerState) -> None:
    """Publish this worker's figures for the others' ``/metrics`` (only when there are others)."""
    if state.board.directory is None:
        return
    while True:
        try:
            state.board.publish(state.figures())
        except OSError as error:  # a full or vanished directory must not stop the worker
            log.warning("could not publish this worker's figures: %s", error)
        await asyncio.sleep(PUBLISH_EVERY_S)


def merged_by_maximum() -> frozenset[str]:
    """The families ``/metrics`` merges by their maximum here (engines shared by the session workers or not)."""
    return maxima(shared_engines=bool(os.environ.get(SHARED_DIR_ENV)), shared_llm=shared_socket("llm") is not None)
