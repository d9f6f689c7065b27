"""The server's life: engines loaded (or handed in) and warmed, background watches started, all closed at the end."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.memory_upkeep import keep_memory_flat
from bargein.metrics import loop_cpu
from bargein.metrics.gc_pauses import GcPauseWatch
from bargein.metrics.prometheus import watch_event_loop
from bargein.metrics.tracing import configure_tracing, flush_tracing
from bargein.server.memory_api import open_memory_store, warm_tools
from bargein.server.operator_pages import redacted_description
from bargein.server.state import ServerState, merged_by_maximum, publish_figures
from bargein.server.warm_up import warm_first_turn

log = logging.getLogger(__name__)
EngineLoader = Callable[[Settings], Engines]
Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


def server_lifespan(state: ServerState, loader: EngineLoader | None,
                    on_ready: Callable[[ServerState], None] | None) -> Lifespan:
    """The app's lifespan: ``loader`` runs off the event loop unless ``state`` already holds engines."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if state.settings.local_only:
            log.warning("no API key configured: local-only mode, only loopback clients may connect")
        configure_tracing()
        loaded_here = state.engines is None and loader is not None
        if state.engines is None and loader is not None:
            await _load_engines(state, loader)
        if state.engines is not None:
            state.memory = await open_memory_store(state.settings)
            await _watch_and_warm(state, state.engines)
        # the models' objects live as long as the server: keep them out of every later collection,
        # whose full passes otherwise stall the event loop for 100 ms at a time
        gc.collect()
        gc.freeze()
        state.drain.loop = asyncio.get_running_loop()
        background = _Background(state)
        if on_ready is not None:
            on_ready(state)
        yield
        await state.calls.close_all()  # WebRTC calls have no socket for the drain to close
        background.stop()
        with contextlib.suppress(OSError):  # its last counts, then into the retired ones (kept in /metrics)
            state.board.publish(state.figures())
        state.board.withdraw(os.getpid(), merged_by_maximum())
        await asyncio.to_thread(flush_tracing)
        if state.memory is not None:
            await state.memory.close()
        # engines handed in by the caller are the caller's to close; the ones loaded here are ours
        if loaded_here and state.engines is not None:
            await state.engines.aclose()

    return lifespan


async def _load_engines(state: ServerState, loader: EngineLoader) -> None:
    """Load the engines off the event loop, timing it; a failure is kept by kind only, then raised."""
    started = time.perf_counter()
    try:
        state.engines = await asyncio.to_thread(loader, state.settings)
    except Exception as error:
        state.load_error = type(error).__name__  # the message may quote a URL or an upstream reply
        raise
    state.load_seconds = time.perf_counter() - started


async def _watch_and_warm(state: ServerState, engines: Engines) -> None:
    """Point the metrics at the engines, then run the first turn's work (with the memory tools where memory is
    on) once so that no user waits for it."""
    state.metrics.watch_llm(engines.llm)
    if engines.turn is not None:
        state.metrics.watch_turn_model(engines.turn)
    state.metrics.describe_engines(redacted_description(engines.description))
    if engines.health is not None:
        state.metrics.watch_health(engines.health)
    warm_s = await warm_first_turn(engines, warm_tools(state.settings, state.memory))
    log.info("first turn warmed up in %.1f s (the default prompt evaluated, the end-of-turn model run)", warm_s)


class _Background:
    """The watches that run as long as the server: loop lag, garbage-collection pauses, figures, memory."""

    def __init__(self, state: ServerState) -> None:
        self.gc_watch = GcPauseWatch(state.metrics.gc_pause)
        self.gc_watch.install()
        loop_cpu.install()  # each session's steps on this loop are charged to it (the ``session`` stage)
        self.tasks = [
            asyncio.create_task(watch_event_loop(state.metrics, on_sample=state.load.observe_lag), name="loop-lag"),
            asyncio.create_task(publish_figures(state), name="worker-figures"),
            asyncio.create_task(keep_memory_flat(after_pass=state.metrics.note_settled_memory),
                                name="memory-upkeep")]

    def stop(self) -> None:
        """Cancel the watches."""
        for task in self.tasks:
            task.cancel()
        self.gc_watch.remove()
        loop_cpu.uninstall()
