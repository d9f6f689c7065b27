"""How an engine worker process starts and stops: its launch, the spawn over an inherited socket, its stderr.

:func:`spawn` starts a :class:`Launch`'s command with one end of a socket pair as its only inherited file
(named by :data:`~bargein.engines.process.wire.FD_ENV`); :func:`stop` waits for it to exit and kills it
after a grace period. :class:`~bargein.engines.process.supervisor.EngineProcess` supervises the result.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from bargein.engines.process.shared import shared_socket
from bargein.engines.process.wire import FD_ENV, WorkerSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Launch:
    """How to start a worker: its command line, extra environment, and the spec to send it first (if any)."""

    command: tuple[str, ...]
    spec: WorkerSpec | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    capture_stderr: bool = False
    """Keep the worker's stderr (its last lines name the cause when it dies) instead of sharing ours."""
    connect: str | None = None
    """A shared engine's socket to connect to instead of starting a worker (see :mod:`.shared`)."""


def python_worker(spec: WorkerSpec, label: str = "engine") -> Launch:
    """A worker in this interpreter's environment that builds ``spec`` (see :mod:`bargein.engines.process.child`);
    ``label`` ends its command line, so ``ps`` tells the workers apart; where the parent process shares an
    engine of that label (``bargein serve --workers N``), the launch connects to it instead."""
    paths = [os.path.abspath(entry or os.curdir) for entry in sys.path]
    path = os.pathsep.join(dict.fromkeys(entry for entry in paths if os.path.isdir(entry)))
    return Launch((sys.executable, "-m", "bargein.engines.process.child", label), spec, {"PYTHONPATH": path},
                  connect=shared_socket(label))


@dataclass
class Worker:
    """A worker process started (or a shared engine connected to) and its end of the socket."""

    process: subprocess.Popen[bytes] | None  # None: a shared engine this process is connected to
    conn: Connection
    started: float
    pid: int
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=20))


def spawn(launch: Launch, name: str) -> Worker:
    """Start the launch's command with its end of a new socket pair (the caller waits for ``ready``)."""
    ours, theirs = socket.socketpair()
    environment = {**os.environ, **launch.env, FD_ENV: str(theirs.fileno())}
    try:
        process = subprocess.Popen(
            launch.command, stdin=subprocess.DEVNULL, env=environment, pass_fds=(theirs.fileno(),),
            stderr=subprocess.PIPE if launch.capture_stderr else None)
    finally:
        theirs.close()
    conn = Connection(ours.detach())
    worker = Worker(process, conn, time.monotonic(), process.pid)
    if launch.capture_stderr:
        threading.Thread(target=_drain_stderr, args=(worker, name), name=f"{name}-stderr",
                         daemon=True).start()
    return worker


def stop(process: subprocess.Popen[bytes] | None, *, grace_s: float) -> None:
    """Wait up to ``grace_s`` for the process to exit, then kill it."""
    if process is None:  # a shared engine: the parent process stops it
        return
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _drain_stderr(worker: Worker, name: str) -> None:
    assert worker.process is not None
    stream = worker.process.stderr
    assert stream is not None
    for raw in stream:
        line = raw.decode(errors="replace").rstrip()
        if line:
            worker.stderr_tail.append(line)
            log.debug("%s worker: %s", name, line)


def tail(worker: Worker) -> str:
    """The worker's last stderr lines, for a log message (empty when not kept)."""
    return f"; its last output: {' | '.join(worker.stderr_tail)}" if worker.stderr_tail else ""
