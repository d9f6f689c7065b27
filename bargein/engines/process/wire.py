"""The messages between a supervisor and its worker process, and the errors a request can end with.

Every message is a pickled tuple over a :class:`multiprocessing.connection.Connection` (a Unix socket
pair), so a worker needs nothing but the standard library to speak it (the Mandarin voice's worker runs
in a virtualenv without bargein). Payloads in a worker of another environment must be plain Python
values (str, int, float, bytes, dict, list, tuple); workers of bargein's own environment may send any
picklable object.

Supervisor to worker:

- ``("spec", WorkerSpec)``: the first message to a worker of bargein's own environment (what to build);
- ``("start", request_id, owner, request)``: serve a request for the session ``owner`` (an int or None;
  from a shared engine's hub, ``(client, session)``: see :mod:`~bargein.engines.process.shared`);
- ``("cancel", request_id)``: stop serving it (from its next item on);
- ``("notify", payload, owner)``: a hint that needs no answer (an LLM's prefill), for the session ``owner``;
- ``("ping", n)``: answered with ``("pong", n)`` by the worker's serving loop (a wedged loop is killed);
- ``None``: finish and exit.

Worker to supervisor: ``("ready", info)`` once loaded (``info``: a dict the client may read, such as a
recogniser's languages) or ``("failed", message)``; then ``("item", request_id, payload)`` for each
streamed piece, and ``("end", request_id, payload)`` or ``("error", request_id, message)`` to end a request
(a hub also ends one with ``("died", request_id, message)`` when its engine is restarting).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from bargein.engines.fair import EngineBusy

FD_ENV = "BARGEIN_WORKER_FD"
"""The environment variable naming the worker's end of the socket pair (a file descriptor number)."""


class WorkerDied(RuntimeError):
    """The worker process ended (or was restarting) while this request needed it."""


class WorkerError(RuntimeError):
    """The engine raised inside the worker (the worker lives on)."""


class WorkerBusy(EngineBusy):
    """Too many requests are in flight for this worker (or for this session): backpressure, not a crash.

    Also what a refusal inside the worker, or a hub's for its client, becomes on the caller's side (only
    its text crosses: :func:`~bargein.engines.fair.refusal_text`)."""


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker builds: ``"module:callable"`` and keyword arguments (all picklable)."""

    factory: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def build(self) -> Any:
        """Import and call the factory (in the worker)."""
        module_name, _, attribute = self.factory.partition(":")
        return getattr(importlib.import_module(module_name), attribute)(**self.kwargs)

    def build_engine(self) -> tuple[Any, str]:
        """Build, for a factory that returns an engine or ``(engine, description)`` (as the loaders do)."""
        built = self.build()
        if isinstance(built, tuple):
            engine, description = built
            return engine, str(description)
        return built, str(getattr(built, "description", type(built).__name__))
