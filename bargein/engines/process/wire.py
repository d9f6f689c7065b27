"""The messages between a supervisor and its worker process, and the errors a request can end with.

Every message is a tuple in one frame of :mod:`~bargein.engines.process.frames` over a
:class:`multiprocessing.connection.Connection` (a Unix socket pair, or a shared engine's authenticated
socket), a format that builds values, never runs code, so a compromised worker cannot take the server
(nothing is unpickled). Its file needs nothing but the standard library, so the Mandarin voice's worker,
in a virtualenv without bargein, speaks it too. Payloads are plain values (None, bool, int, float, str,
bytes, list, tuple, dict), numeric numpy arrays, and the value types of :data:`WIRE_TYPES` (a
:class:`~bargein.config.Settings` crosses without its keys: :data:`SECRET_SETTINGS`).

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

import dataclasses
import importlib
from dataclasses import dataclass, field
from functools import cache
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from bargein.engines.fair import EngineBusy
from bargein.engines.process import frames

if TYPE_CHECKING:
    from bargein.engines.base import SharedEngine

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
    """What a worker builds: ``"module:callable"`` and keyword arguments (wire values: see the module docstring)."""

    factory: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def build(self) -> Any:
        """Import and call the factory (in the worker)."""
        module_name, _, attribute = self.factory.partition(":")
        return getattr(importlib.import_module(module_name), attribute)(**self.kwargs)

    def build_engine(self) -> tuple[Any, str]:
        """Build, for a factory that returns an engine or ``(engine, description)`` (as the loaders do); a bare
        engine describes itself (:attr:`~bargein.engines.base.SharedEngine.description`)."""
        built = self.build()
        if isinstance(built, tuple):
            engine, description = built
            return engine, str(description)
        described: SharedEngine = built
        return built, str(described.description)


WIRE_TYPES: dict[str, str] = {
    "ChatImage": "bargein.values:ChatImage",
    "ChatMessage": "bargein.values:ChatMessage",
    "GenerationOptions": "bargein.values:GenerationOptions",
    "SpeechChunk": "bargein.values:SpeechChunk",
    "ToolCall": "bargein.values:ToolCall",
    "Transcript": "bargein.values:Transcript",
    "WordTiming": "bargein.values:WordTiming",
    "RecognitionRequest": "bargein.engines.transcribe.asr_process:RecognitionRequest",
    "WorkerSpec": "bargein.engines.process.wire:WorkerSpec",
    "Settings": "bargein.config:Settings",
}
"""The only objects that cross the wire besides plain values: dataclasses built from their fields (and the
settings, from their validated dump). A reader builds no other type, whatever a frame names."""
SECRET_SETTINGS = frozenset({"api_keys", "llm_api_key", "metrics_key", "memory_url"})
"""Settings no engine worker needs: left out when settings cross to one (a worker sees no key, and no memory URL,
whose password opens every user's memories); a session worker gets them through its configuration."""


@cache
def _types() -> dict[str, type]:
    resolved: dict[str, type] = {}
    for name, path in WIRE_TYPES.items():
        module_name, _, attribute = path.partition(":")
        resolved[name] = getattr(importlib.import_module(module_name), attribute)
    return resolved


@cache
def _names() -> dict[type, str]:
    return {kind: name for name, kind in _types().items()}


_FIELDS: dict[type, tuple[str, ...]] = {}


def _field_names(kind: type) -> tuple[str, ...]:
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple(item.name for item in dataclasses.fields(kind) if item.init)
    return names


def _describe(value: Any) -> tuple[str, Any] | None:
    name = _names().get(type(value))
    if name is None:
        return None
    if name == "Settings":
        return name, value.model_dump(mode="json", exclude=set(SECRET_SETTINGS))
    return name, tuple(getattr(value, field) for field in _field_names(type(value)))  # in order: both ends agree


def _construct(name: str, fields: Any) -> Any:
    kind = _types().get(name)
    if kind is None:
        raise frames.WireError(f"{name!r} is not a type the engine-process wire carries")
    if name == "Settings":
        if not isinstance(fields, dict):
            raise frames.WireError("malformed settings")
        return kind.model_validate(fields)  # type: ignore[attr-defined]
    if not isinstance(fields, tuple):
        raise frames.WireError(f"malformed {name}")
    return kind(*fields)


def send(conn: Connection, message: Any) -> None:
    """Write one message (a tuple of wire values, or None) on ``conn``."""
    frames.send(conn, message, _describe)


def receive(conn: Connection) -> Any:
    """Read one message from ``conn`` (blocking); :class:`~bargein.engines.process.frames.WireError` (a
    ValueError) for a frame that does not parse or names a type outside :data:`WIRE_TYPES`."""
    return frames.receive(conn, _construct)
