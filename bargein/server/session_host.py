"""What every transport does around a session: admission, a new session, hosting it, releasing it.

The WebSocket (:mod:`.realtime_ws`), the phone line (:mod:`.twilio_ws`) and WebRTC (:mod:`.webrtc`) differ in how
client events and audio arrive and leave; they share this: the place a session holds (server-wide and per client
address), the session a connection asked for (a client secret's bound settings, else the server's for its language),
its registration among the live sessions with its history budget, long-term memory and engine ownership, and the
release of all of it when the session ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.fair import current_owner
from bargein.memory.session_memory import SessionMemory
from bargein.memory.store import MemoryStore, MemoryStoreError
from bargein.metrics.cost_meter import current_meter
from bargein.metrics.loop_cpu import meter_connection
from bargein.metrics.prometheus import ServerMetrics
from bargein.protocol.session_config import SessionConfig
from bargein.server.client_counts import CountsBusy, LocalSessionCounts, SessionCounts
from bargein.server.client_secrets import BUSY_SECRETS, INVALID_SECRET, ClientSecrets, ClientSecretsBusy
from bargein.server.history_budget import HistoryLedger
from bargein.server.session_locks import SessionLocks
from bargein.session.history import MAX_HISTORY_BYTES
from bargein.session.observers import FirstEventHook, ReplyClosedHook
from bargein.session.realtime_session import RealtimeSession
from bargein.tools.memory_tools import memory_tools
from bargein.tools.registry import ToolRegistry, default_registry

POLICY_CLOSE = 1008
GOING_AWAY_CLOSE = 1001
TRY_LATER_CLOSE = 1013
FIRST_RECALL_S = 0.5
"""How long a new session waits for its first recalled memories before it starts (then they come in the background)."""


class SessionRegistry:
    """The live sessions of this server (bounded by ``max_sessions``, and per client address)."""

    def __init__(self, max_sessions: int, per_address: int = 16, history: HistoryLedger | None = None,
                 addresses: SessionCounts | None = None) -> None:
        self.max_sessions = max_sessions
        self.live: set[RealtimeSession] = set()
        self.addresses = addresses or LocalSessionCounts(per_address)
        """Open sessions per client address (across the workers of one server when they share a directory)."""
        self.history = history or HistoryLedger(MAX_HISTORY_BYTES * per_address, MAX_HISTORY_BYTES * max_sessions)
        """The history memory of this worker's sessions, per client address and in all."""
        self.sockets: dict[RealtimeSession, Any] = {}
        """Each live session's WebSocket, or what closes a WebRTC call the same way (the drain closes them)."""


@dataclass(frozen=True)
class Ending:
    """Why the server ends a session: the error the client is sent, and the close code."""

    code: str
    message: str
    close_code: int


@dataclass(frozen=True)
class SessionPlace:
    """What an admitted connection brings its session: the address it counts against, what its client secret
    locked, and whose long-term memories it may use (None: nobody decided)."""

    address: str
    locks: SessionLocks
    memory_scope: str | None


async def admit(registry: SessionRegistry, metrics: ServerMetrics | None,
                refusal: Callable[[], str | None] | None, address: str) -> Ending | None:
    """None once the session holds a place for ``address`` (the caller releases it), else why it may not start."""
    busy = refusal() if refusal is not None else (
        "too many sessions" if len(registry.live) >= registry.max_sessions else None)
    if busy is not None:
        if metrics is not None:
            metrics.refused.labels("load").inc()
        return Ending("server_unavailable", f"{busy}; retry on another worker", TRY_LATER_CLOSE)
    try:
        admitted = await registry.addresses.acquire(address)
    except CountsBusy:
        return Ending("server_unavailable", "the server is busy; retry shortly", TRY_LATER_CLOSE)
    if not admitted:
        return Ending("too_many_sessions", f"at most {registry.addresses.per_address} sessions per client address",
                      POLICY_CLOSE)
    return None


async def spend(client_secrets: ClientSecrets, secret: str) -> Ending | None:
    """Redeem the session's secret: None once spent here, else why the session cannot start."""
    try:
        if await client_secrets.redeem_async(secret) is None:  # spent or expired meanwhile (another worker)
            return Ending("invalid_client_secret", INVALID_SECRET, POLICY_CLOSE)
    except ClientSecretsBusy:
        return Ending("server_unavailable", BUSY_SECRETS, TRY_LATER_CLOSE)
    return None


def session_config(settings: Settings, model: str | None, bound: SessionConfig | None) -> SessionConfig:
    """A new session's config: a client secret's bound one, else the server's for its language."""
    if bound is not None:
        return bound
    return SessionConfig.for_language(settings.language, model=(model or "bargein")[:200])


def new_session(settings: Settings, engines: Engines, metrics: ServerMetrics | None,
                config: SessionConfig) -> RealtimeSession:
    """A session of ``config`` with the server's engines and settings."""
    return RealtimeSession(engines, config=config, metrics=metrics,
                           listen=settings.listen, outbound_bytes=settings.max_outbound_bytes,
                           builtin_tools=default_registry() if settings.builtin_tools else None,
                           semantic_default=settings.turn_detection == "semantic_vad",
                           tiered_default=settings.tiered_endpoint, text_end_default=settings.text_end_estimate)


@asynccontextmanager
async def hosted(session: RealtimeSession, settings: Settings, registry: SessionRegistry, place: SessionPlace,
                 memory_store: MemoryStore | None = None, socket: Any = None) -> AsyncIterator[RealtimeSession]:
    """Register ``session`` (history budget, memory, locks, engine ownership, the live set), start it, and
    release all of it when the block ends (the address's place is the caller's to release)."""
    session.conversation.bind_budget(settings.max_history_bytes, registry.history.account(place.address))
    if place.locks.locked:
        session.message_guard = place.locks.check
    # every task the session starts inherits this: shared engines serve sessions in turn by it
    current_owner.set(session)
    current_meter.set(session.ledgers)  # and charge the CPU they spend to the session's turns
    # after the owner: the memory's first notes are warmed into this session's own KV cache
    memory = await attach_memory(session, memory_store, place.memory_scope, settings)
    registry.live.add(session)
    if socket is not None:
        registry.sockets[session] = socket
        meter_connection(socket, session.ledgers)  # its frames parsed are the session's CPU too
    try:
        session.start()
        yield session
    finally:
        registry.live.discard(session)
        registry.sockets.pop(session, None)
        await session.close()
        if memory is not None:
            await memory.close()
        session.conversation.release()


async def attach_memory(session: RealtimeSession, store: MemoryStore | None, scope: str | None,
                        settings: Settings) -> SessionMemory | None:
    """Give ``session`` its scope's long-term memory: recalled notes in its prompts, learning after each turn and
    the memory tools (None: memory is off on this server, or nobody decided whose memories these would be).
    The first notes are recalled before the session starts (from a slow store: in the background instead), and
    warmed once the client's first message was handled, only if memory is still on then."""
    if store is None or scope is None:
        return None
    memory = SessionMemory(store, scope, lambda: session.conversation.chat_messages(None),
                           enabled=lambda: session.config.memory is not False)
    session.replies.remembered = memory.prompt
    memory.on_given = session.executor.warm_ahead  # new notes are evaluated before the user's next turn
    # but not the first ones before the client could turn memory off: a memory-off session never pays for them
    memory.hold_warm = True
    session.observe(FirstEventHook(memory.client_heard))
    session.replies.builtins = default_registry(extra=memory_tools(memory)) if settings.builtin_tools \
        else ToolRegistry(memory_tools(memory))
    session.observe(ReplyClosedHook(memory.on_reply_closed))
    try:
        await asyncio.wait_for(memory.refresh(), FIRST_RECALL_S)
    except (TimeoutError, MemoryStoreError):
        memory.start()
    return memory
