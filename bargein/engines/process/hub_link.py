"""A session worker's way to a shared engine's hub: where it listens, the key, the handshake, the connection.

The hubs of :mod:`~bargein.engines.process.shared` listen on Unix sockets in a private directory (mode
0700), and the two ends also prove to each other that they hold the server's hub key before a message
passes: a random key made once per server (:func:`hub_key`), which the parent hands to its session
workers over uvicorn's spawn pipe (never in an environment or on a command line; see
:mod:`bargein.server.workers`). Each side sends a random challenge and checks the answer, an HMAC-SHA256
of it under the key and the answering side's role (so neither can replay the other's answer), with a
time limit: a connection without the key is closed before it can send a request. A server whose shared
engines another process runs (``$BARGEIN_SHARED_ENGINE_DIR`` set by its caller, as the tests do) reads that
process's key from the inherited file descriptor ``$BARGEIN_HUB_KEY_FD`` instead of making one.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import socket
from multiprocessing.connection import Client, Connection
from typing import Any

from bargein.engines.process import wire
from bargein.engines.process.wire import WorkerDied

SHARED_DIR_ENV = "BARGEIN_SHARED_ENGINE_DIR"
"""The directory of the shared engines' sockets, for the session workers (unset: each loads its own; not a
setting, though it has their prefix: no setting is named ``shared_engine_dir``)."""
HUB_KEY_FD_ENV = "BARGEIN_HUB_KEY_FD"
"""An inherited file descriptor to read the hub key from (the key is never in the environment itself)."""
HANDSHAKE_S = 5.0
"""How long either side waits for the other's challenge or answer."""
_CHALLENGE = b"bargein-hub-challenge:"
_key: bytes | None = None


class HubAuthenticationError(ConnectionError):
    """The other end of a hub connection does not hold this server's hub key (or did not answer in time)."""


def hub_key() -> bytes:
    """This server's hub key: made at first use in the parent (or read from ``$BARGEIN_HUB_KEY_FD``), installed
    by :func:`set_hub_key` in a session worker."""
    global _key
    if _key is None:
        descriptor = os.environ.pop(HUB_KEY_FD_ENV, None)
        if descriptor is None:
            _key = secrets.token_bytes(32)
        else:
            with os.fdopen(int(descriptor), "rb") as source:
                _key = source.read(1024)
    return _key


def set_hub_key(key: bytes) -> None:
    """Install the parent's hub key (in a session worker, before its engines connect)."""
    global _key
    _key = bytes(key)


def socket_path(directory: str, label: str) -> str:
    """Where the hub of the engine labelled ``label`` (``asr``, ``llm``, ``tts``) listens."""
    return os.path.join(directory, f"{label}.sock")


def shared_socket(label: str) -> str | None:
    """The socket of a shared engine for ``label`` this process should connect to (None: spawn its own)."""
    directory = os.environ.get(SHARED_DIR_ENV)
    if not directory:
        return None
    path = socket_path(directory, label)
    return path if os.path.exists(path) else None


def _answer_of(key: bytes, role: bytes, nonce: bytes) -> bytes:
    return hmac.new(key, role + nonce, hashlib.sha256).digest()


def _challenge(conn: Connection, key: bytes, role: bytes, timeout_s: float) -> None:
    nonce = secrets.token_bytes(32)
    conn.send_bytes(_CHALLENGE + nonce)
    if not conn.poll(timeout_s):
        raise HubAuthenticationError("no answer to the hub key challenge")
    if not hmac.compare_digest(conn.recv_bytes(64), _answer_of(key, role, nonce)):
        raise HubAuthenticationError("the answer to the hub key challenge is wrong")


def _answer(conn: Connection, key: bytes, role: bytes, timeout_s: float) -> None:
    if not conn.poll(timeout_s):
        raise HubAuthenticationError("no hub key challenge came")
    message = conn.recv_bytes(len(_CHALLENGE) + 64)
    if not message.startswith(_CHALLENGE) or len(message) != len(_CHALLENGE) + 32:
        raise HubAuthenticationError("a malformed hub key challenge")
    conn.send_bytes(_answer_of(key, role, message[len(_CHALLENGE):]))


def authenticate_client(conn: Connection, key: bytes, timeout_s: float = HANDSHAKE_S) -> None:
    """The hub's side: the client proves it holds ``key``, then the hub does (raises
    :class:`HubAuthenticationError`, or OSError/EOFError for a closed connection)."""
    _challenge(conn, key, b"client", timeout_s)
    _answer(conn, key, b"hub", timeout_s)


def authenticate_hub(conn: Connection, key: bytes, timeout_s: float = HANDSHAKE_S) -> None:
    """The client's side of :func:`authenticate_client`."""
    _answer(conn, key, b"client", timeout_s)
    _challenge(conn, key, b"hub", timeout_s)


def connect(path: str, *, name: str, timeout_s: float) -> tuple[Connection, dict[str, Any]]:
    """Connect to a hub, prove the key both ways, and wait for its ``ready`` (the engine's info, with its
    ``pid`` and ``restarts``)."""
    try:
        conn = Client(path, family="AF_UNIX")
    except OSError as error:
        raise WorkerDied(f"{name}: the shared engine at {path} is unreachable ({error})") from error
    try:
        authenticate_hub(conn, hub_key())
        if not conn.poll(timeout_s):
            raise WorkerDied(f"{name}: the shared engine was not ready in {timeout_s:.0f} s")
        kind, info = wire.receive(conn)
    except (EOFError, OSError, ValueError) as error:  # HubAuthenticationError is an OSError
        conn.close()
        raise WorkerDied(f"{name}: the shared engine closed the connection ({error})") from error
    except WorkerDied:
        conn.close()
        raise
    if kind != "ready":
        conn.close()
        raise WorkerDied(f"{name}: the shared engine refused the connection: {info}")
    return conn, dict(info)


def shut(conn: Connection) -> None:
    """Shut a connection both ways, so a thread blocked reading it wakes with an error (close is not enough)."""
    with contextlib.suppress(OSError, ValueError):
        duplicate = socket.socket(fileno=os.dup(conn.fileno()))
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        finally:
            duplicate.close()
