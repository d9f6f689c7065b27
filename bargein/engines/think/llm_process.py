"""A language model in a supervised worker process, so a crash in native code cannot take the server down.

The worker (``multiprocessing`` spawn context) builds the real model from a :class:`WorkerSpec` and serves
every session's replies through one duplex pipe: the server sends ``start`` / ``cancel`` messages, the
worker streams ``token`` messages back and ends each reply with ``end`` or ``error``. A reply's cancel
reaches the worker as a message and the model's own cancel flag stops it within one token; the server
side stops yielding at once.

If the worker dies (a segfault in llama.cpp, the OOM killer, a ``kill -9``), every reply it was serving
fails with :class:`WorkerDied`, which the session turns into its fallback reply; the supervisor starts a
new worker in the background, and replies asked for meanwhile wait for it (up to ``ready_wait_s``).
The worker ignores SIGINT and SIGTERM: the server's graceful drain decides when it stops.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib
import itertools
import logging
import multiprocessing
import signal
import threading
import time
import weakref
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from bargein.engines.base import (
    CancelToken,
    ChatMessage,
    GenerationOptions,
    LanguageModel,
    ReplyPiece,
    ToolCall,
    ToolCallingModel,
)
from bargein.engines.fair import current_owner, owner

log = logging.getLogger(__name__)
_LIVE: weakref.WeakSet[ProcessLanguageModel] = weakref.WeakSet()


def _close_all() -> None:
    """At interpreter exit, before multiprocessing joins its children: the workers ignore SIGTERM, so
    its ``terminate()`` would wait for them forever; ask them to stop instead."""
    for model in list(_LIVE):
        model.close()


class WorkerDied(RuntimeError):
    """The worker process ended while serving this reply."""


class WorkerError(RuntimeError):
    """The model raised inside the worker (the worker lives on)."""


@dataclass(frozen=True)
class WorkerSpec:
    """How the worker builds its model: ``"module:callable"`` and keyword arguments (all picklable)."""

    factory: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def build(self) -> LanguageModel:
        """Import and call the factory (in the worker)."""
        module_name, _, attribute = self.factory.partition(":")
        made: LanguageModel = getattr(importlib.import_module(module_name), attribute)(**self.kwargs)
        return made


@dataclass
class _Reply:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[tuple[str, Any]]

    def deliver(self, kind: str, payload: Any) -> None:
        with contextlib.suppress(RuntimeError):  # that session's loop is gone: nobody listens
            self.loop.call_soon_threadsafe(self.queue.put_nowait, (kind, payload))


class ProcessLanguageModel:
    """A :class:`~bargein.engines.base.LanguageModel` served by a supervised worker process."""

    def __init__(self, spec: WorkerSpec, *, name: str = "llm", start_timeout_s: float = 600.0,
                 ready_wait_s: float = 60.0, restart_backoff_s: float = 1.0) -> None:
        self.spec = spec
        self.name = name
        self.start_timeout_s = start_timeout_s
        self.ready_wait_s = ready_wait_s
        self.restart_backoff_s = restart_backoff_s
        self.restarts = 0
        """Workers started after the first (each one a crash survived)."""
        self.nonfinite_fallbacks = 0
        self._context = multiprocessing.get_context("spawn")
        self._replies: dict[int, _Reply] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._closing = False
        self._process: Any = None
        self._conn: Connection | None = None
        self._start_worker()
        self._supervisor = threading.Thread(target=self._supervise, name=f"llm-supervisor-{name}", daemon=True)
        self._supervisor.start()
        if not _LIVE:
            atexit.register(_close_all)  # registered after multiprocessing's own exit hook, so it runs first
        _LIVE.add(self)

    # --- the session side --------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The worker's process id (None while it restarts)."""
        return self._process.pid if self._process is not None and self._ready.is_set() else None

    @property
    def queue_depth(self) -> int:
        """Replies the worker is serving (the ``bargein_queue_depth`` gauge)."""
        return len(self._replies)

    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        """Yield the reply piece by piece; return at once when ``cancel`` fires."""
        async for piece in self._pieces(messages, cancel, options, tools=False):
            if isinstance(piece, str):
                yield piece

    async def stream_reply(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                           options: GenerationOptions | None = None) -> AsyncIterator[ReplyPiece]:
        """Reply text and tool calls, when the worker's model can call tools (plain text otherwise)."""
        async for piece in self._pieces(messages, cancel, options, tools=True):
            yield piece

    def prefill(self, messages: Sequence[ChatMessage], options: GenerationOptions | None = None) -> None:
        """Have the worker's model evaluate a prompt ahead of its reply, where it can; never waits."""
        with contextlib.suppress(OSError, ValueError, WorkerDied):
            self._send(("prefill", list(messages), options or GenerationOptions()))

    async def _pieces(self, messages: Sequence[ChatMessage], cancel: CancelToken,
                      options: GenerationOptions | None, *, tools: bool) -> AsyncIterator[ReplyPiece]:
        if cancel.cancelled:
            return
        await self._wait_ready(cancel)
        if cancel.cancelled:
            return
        reply_id = next(self._ids)
        reply = _Reply(asyncio.get_running_loop(), asyncio.Queue())
        self._replies[reply_id] = reply

        async def watch_cancel() -> None:
            await cancel.wait()
            reply.queue.put_nowait(("cancelled", None))

        watcher = asyncio.ensure_future(watch_cancel())
        finished = False
        try:
            session = owner()  # the worker's model serves sessions in turn by it, as it would here
            self._send(("start", reply_id, list(messages), options or GenerationOptions(), tools,
                        None if session is None else id(session)))
            while True:
                kind, payload = await reply.queue.get()
                if kind == "token" and not cancel.cancelled:
                    yield payload if isinstance(payload, ToolCall) else str(payload)
                    continue
                finished = kind in ("end", "error", "died")
                if kind == "end":
                    self.nonfinite_fallbacks = max(self.nonfinite_fallbacks, int(payload))
                elif kind == "error":
                    raise WorkerError(f"{self.name}: {payload}")
                elif kind == "died":
                    raise WorkerDied(f"{self.name}: the model's worker process ended ({payload})")
                return
        finally:
            watcher.cancel()
            self._replies.pop(reply_id, None)
            if not finished:  # cancelled, or the consumer walked away: stop the worker's generation
                with contextlib.suppress(OSError, ValueError, WorkerDied):
                    self._send(("cancel", reply_id))

    async def _wait_ready(self, cancel: CancelToken) -> None:
        deadline = time.monotonic() + self.ready_wait_s
        while not self._ready.is_set():
            if self._closing or time.monotonic() > deadline:
                raise WorkerDied(f"{self.name}: no model worker is running (restarting)")
            if cancel.cancelled:
                return
            await asyncio.sleep(0.02)

    def _send(self, message: tuple[Any, ...]) -> None:
        with self._lock:
            if self._conn is None or not self._ready.is_set():
                raise WorkerDied(f"{self.name}: the model's worker process is restarting")
            self._conn.send(message)

    def close(self) -> None:
        """Stop the worker (politely, then by force); closing twice is harmless."""
        _LIVE.discard(self)
        self._closing = True
        with self._lock:
            conn, process = self._conn, self._process
            self._ready.clear()
        if conn is not None:
            with contextlib.suppress(OSError, ValueError):
                conn.send(None)
        if process is not None:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
        if conn is not None:
            conn.close()
        self._supervisor.join(timeout=5)

    async def aclose(self) -> None:
        """Close without blocking the event loop."""
        await asyncio.to_thread(self.close)

    # --- the supervisor ------------------------------------------------------------------------------------

    def _start_worker(self) -> None:
        ours, theirs = self._context.Pipe(duplex=True)
        process = self._context.Process(target=worker_main, args=(self.spec, theirs), name=f"{self.name}-worker",
                                        daemon=True)
        process.start()
        theirs.close()
        if not ours.poll(self.start_timeout_s):
            process.kill()
            raise WorkerDied(f"{self.name}: the worker did not load its model in {self.start_timeout_s:.0f} s")
        try:
            kind, detail = ours.recv()
        except (EOFError, OSError) as error:
            process.join(timeout=5)
            raise WorkerDied(f"{self.name}: the worker died while loading (exit code {process.exitcode})") \
                from error
        if kind != "ready":
            process.join(timeout=5)
            raise WorkerDied(f"{self.name}: the worker could not load its model: {detail}")
        with self._lock:
            self._process, self._conn = process, ours
            self._ready.set()
        log.info("%s: model worker %d ready", self.name, process.pid)

    def _supervise(self) -> None:
        while not self._closing:
            conn = self._conn  # only this thread replaces it (after a restart), so it is set here
            if conn is None:
                return
            try:
                kind, reply_id, payload = conn.recv()
            except (EOFError, OSError, TypeError, ValueError):  # the worker died (or sent something torn)
                if self._closing:
                    return
                self._worker_died()
                continue
            if (reply := self._replies.get(reply_id)) is not None:
                reply.deliver(kind, payload)

    def _worker_died(self) -> None:
        with self._lock:
            self._ready.clear()
            process, self._process, self._conn = self._process, None, None
        process.join(timeout=5)
        code = process.exitcode
        log.error("%s: model worker %d died (exit code %s); %d reply(ies) fail over, restarting",
                  self.name, process.pid, code, len(self._replies))
        for reply in list(self._replies.values()):
            reply.deliver("died", f"exit code {code}")
        backoff = self.restart_backoff_s
        while not self._closing:
            try:
                self._start_worker()
                self.restarts += 1
                return
            except Exception:
                log.exception("%s: restarting the model worker failed; retrying in %.0f s", self.name, backoff)
                time.sleep(backoff)
                backoff = min(60.0, backoff * 2)


# --- the worker process ---------------------------------------------------------------------------------------


def worker_main(spec: WorkerSpec, conn: Connection) -> None:
    """The worker's entry point: build the model, then serve replies until told to stop or orphaned."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s[worker]: %(message)s")
    try:
        model = spec.build()
    except BaseException as error:
        conn.send(("failed", f"{type(error).__name__}: {error}"))
        raise
    conn.send(("ready", type(model).__name__))
    asyncio.run(_serve(model, conn))


async def _serve(model: LanguageModel, conn: Connection) -> None:
    loop = asyncio.get_running_loop()
    cancels: dict[int, CancelToken] = {}
    tasks: set[asyncio.Task[None]] = set()
    stopped = asyncio.Event()

    def send(message: tuple[str, int, Any]) -> None:
        with contextlib.suppress(OSError, ValueError):
            conn.send(message)

    async def run(reply_id: int, messages: list[ChatMessage], options: GenerationOptions,
                  cancel: CancelToken, tools: bool, session: int | None) -> None:
        current_owner.set(session)  # this task's own context: the model's fair queue sees the session
        pieces: AsyncIterator[ReplyPiece]
        if tools and isinstance(model, ToolCallingModel):
            pieces = model.stream_reply(messages, cancel=cancel, options=options)
        else:
            pieces = model.stream(messages, cancel=cancel, options=options)
        try:
            async for piece in pieces:
                if cancel.cancelled:
                    break
                send(("token", reply_id, piece))
            send(("end", reply_id, int(getattr(model, "nonfinite_fallbacks", 0))))
        except Exception as error:
            log.exception("generation failed")
            send(("error", reply_id, f"{type(error).__name__}: {error}"))
        finally:
            cancels.pop(reply_id, None)

    def dispatch(message: Any) -> None:
        if message is None:
            stopped.set()
            return
        if message[0] == "start":
            _, reply_id, messages, options, tools, session = message
            cancel = cancels[reply_id] = CancelToken()
            task = loop.create_task(run(reply_id, messages, options, cancel, tools, session))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        elif message[0] == "prefill" and (prefill := getattr(model, "prefill", None)) is not None:
            prefill(message[1], message[2])  # queues the work on the model's own thread
        elif message[0] == "cancel" and (token := cancels.get(message[1])) is not None:
            token.cancel("cancelled")

    def read() -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):  # the server is gone: so are we
                loop.call_soon_threadsafe(stopped.set)
                return
            loop.call_soon_threadsafe(dispatch, message)
            if message is None:
                return

    threading.Thread(target=read, name="llm-worker-inbox", daemon=True).start()
    await stopped.wait()
    for token in list(cancels.values()):
        token.cancel("shutdown")
    closer = getattr(model, "aclose", None)
    if closer is not None:
        await closer()
