"""Shared pieces of the live benchmarks: real speech clips, a server subprocess, a real-time microphone.

A benchmark client behaves like a microphone: it sends a 20 ms append every 20 ms, forever, with
silence whenever no clip is playing, and it remembers when each chunk left. Any position in the input
stream (a sample index at 24 kHz) therefore maps to the wall time the server could first have had it,
which is the clock docs/design.md measures first audio and barge-in stop against.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import wave
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bargein.audio.codecs import float_to_int16
from bargein.audio.resample import resample

LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
WIRE_RATE = 24_000
CHUNK_SAMPLES = 480
"""20 ms at 24 kHz: the append size of every benchmark client."""
CHUNK_BYTES = 2 * CHUNK_SAMPLES
ENERGY_FRAME_S = 0.01
AUDIBLE_INT16 = 33
"""An agent sample is "non-silent" above -60 dBFS (33 of 32768)."""


@dataclass(frozen=True)
class SpeechClip:
    """A clip as wire audio (pcm16 24 kHz) and where its speech starts and ends (sample indexes)."""

    name: str
    pcm: bytes
    onset: int
    """First sample of speech."""
    end: int
    """Last sample of speech (inclusive)."""
    longest_pause_s: float
    """The longest pause inside the speech (a pause longer than the endpoint silence splits the turn)."""

    @property
    def samples(self) -> int:
        """Length in samples."""
        return len(self.pcm) // 2

    def from_sample(self, start: int) -> bytes:
        """The clip from sample ``start`` on (to cut in quickly when barging in)."""
        return self.pcm[2 * max(0, start):]


def speech_bounds(audio: npt.NDArray[np.float32], rate: int) -> tuple[int, int, float]:
    """(onset sample, last speech sample, longest inner pause s) by frame energy, offline.

    A 10 ms frame is speech when its level is 12 dB above the clip's noise floor (10th percentile of
    frame levels) and within 30 dB of its loud frames (95th percentile). The onset needs three speech
    frames in a row, so a click is not an onset; the end is the last speech frame. Energy is used
    rather than the server's own VAD so the benchmark does not grade the VAD by itself.
    """
    frame = int(rate * ENERGY_FRAME_S)
    count = len(audio) // frame
    frames = audio[:count * frame].reshape(count, frame)
    level = 20 * np.log10(np.sqrt(np.mean(np.square(frames), axis=1)) + 1e-9)
    threshold = max(float(np.percentile(level, 10)) + 12.0, float(np.percentile(level, 95)) - 30.0)
    speech = level > threshold
    runs = np.convolve(speech.astype(int), np.ones(3, int), mode="valid") == 3
    if not runs.any():
        raise ValueError("no speech found in the clip")
    first = int(np.argmax(runs))
    last = int(count - 1 - np.argmax(speech[::-1]))
    gaps = np.flatnonzero(speech[first:last + 1])
    pause = float(np.max(np.diff(gaps)) - 1) * ENERGY_FRAME_S if len(gaps) > 1 else 0.0
    return first * frame, (last + 1) * frame - 1, pause


def load_clips(numbers: Sequence[str] = ("0880", "0930", "0890", "0920", "0870")) -> list[SpeechClip]:
    """The LibriVox clips of Debian's pocketsphinx-testdata as 24 kHz pcm16 with their speech bounds."""
    clips = []
    for number in numbers:
        path = LIBRIVOX / f"sense_and_sensibility_01_austen_64kb-{number}.wav"
        if not path.is_file():
            sys.exit(f"{path} is missing: install Debian's pocketsphinx-testdata (apt-get install "
                     "pocketsphinx-testdata)")
        with wave.open(str(path)) as handle:
            rate = handle.getframerate()
            samples = np.frombuffer(handle.readframes(handle.getnframes()), dtype="<i2")
        clips.append(speech_clip(number, resample(samples.astype(np.float32) / 32768.0, rate, WIRE_RATE)))
    return clips


def speech_clip(name: str, audio: npt.NDArray[np.float32], *, lead_s: float = 0.0) -> SpeechClip:
    """``audio`` (float32 at the wire rate) as a clip of whole 20 ms chunks, with its speech bounds; ``lead_s`` of
    digital silence goes before it (after the bounds are found: zeros would lower the clip's noise floor)."""
    onset, end, pause = speech_bounds(audio, WIRE_RATE)
    lead = int(lead_s * WIRE_RATE)
    pcm = float_to_int16(np.concatenate([np.zeros(lead, np.float32), audio])).tobytes()
    pcm += bytes(-len(pcm) % CHUNK_BYTES)  # whole chunks, so clip positions map to chunk indexes
    return SpeechClip(name, pcm, onset + lead, end + lead, pause)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (linear interpolation), NaN for no values."""
    return float(np.percentile(np.asarray(values, float), q)) if len(values) else math.nan


def fmt_ms(value: float) -> str:
    """Milliseconds for a table cell."""
    return "   n/a" if math.isnan(value) else f"{value:6.0f}"


def first_audible(pcm16: bytes) -> int | None:
    """Index of the first non-silent sample of an agent audio delta, if any."""
    samples = np.frombuffer(pcm16[:len(pcm16) // 2 * 2], dtype="<i2")
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > AUDIBLE_INT16)
    return int(loud[0]) if len(loud) else None


def audible_frames(pcm16: bytes, frame_ms: float = 10.0) -> list[tuple[bool, float]]:
    """(any sample audible, ms) of each ``frame_ms`` frame of an agent audio delta (pcm16 24 kHz); the last may be
    shorter."""
    samples = np.abs(np.frombuffer(pcm16[:len(pcm16) // 2 * 2], dtype="<i2").astype(np.int32))
    step = int(WIRE_RATE * frame_ms / 1000)
    return [(bool(np.any(samples[start:start + step] > AUDIBLE_INT16)),
             1000.0 * len(samples[start:start + step]) / WIRE_RATE) for start in range(0, len(samples), step)]


class Microphone:
    """Sends 20 ms appends at real-time pace, silence when nothing is queued, and logs send times.

    A late event loop catches up by sending the chunks that are due at once, as a microphone client
    that buffered them would; the log keeps the true send time, so the measurement stays honest.
    """

    def __init__(self, send: Callable[[bytes], Awaitable[None]]) -> None:
        self._send = send
        self._queued: deque[bytes] = deque()
        self.sent_at: list[float] = []
        """Monotonic time chunk ``k`` (samples ``480k`` to ``480k+479``) was handed to the socket."""
        self._progress = asyncio.Event()
        self._stopped = False

    @property
    def next_free_sample(self) -> int:
        """Stream position at which audio queued now would start."""
        return (len(self.sent_at) + len(self._queued)) * CHUNK_SAMPLES

    def play(self, pcm: bytes) -> int:
        """Queue audio right after what is queued; returns its stream position (sample index)."""
        start = self.next_free_sample
        pcm += bytes(-len(pcm) % CHUNK_BYTES)
        self._queued.extend(pcm[i:i + CHUNK_BYTES] for i in range(0, len(pcm), CHUNK_BYTES))
        return start

    @property
    def busy(self) -> bool:
        """True while queued audio remains to be sent."""
        return bool(self._queued)

    def sent_time(self, sample: int) -> float | None:
        """When the chunk holding stream sample ``sample`` left, if it has."""
        index = sample // CHUNK_SAMPLES
        return self.sent_at[index] if 0 <= index < len(self.sent_at) else None

    async def wait_sent(self, sample: int) -> float:
        """Wait until stream sample ``sample`` has been sent; returns its send time."""
        while (at := self.sent_time(sample)) is None:
            self._progress.clear()
            await self._progress.wait()
        return at

    def stop(self) -> None:
        """End :meth:`run` after the current chunk."""
        self._stopped = True

    async def run(self) -> None:
        """Stream until stopped."""
        silence = bytes(CHUNK_BYTES)
        start = time.monotonic()
        while not self._stopped:
            chunk = self._queued.popleft() if self._queued else silence
            await self._send(chunk)
            self.sent_at.append(time.monotonic())
            self._progress.set()
            delay = start + len(self.sent_at) * CHUNK_SAMPLES / WIRE_RATE - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)


def append_sender(connection: Any, cache_size: int = 2000) -> Callable[[bytes], Awaitable[None]]:
    """``send(chunk)`` for a :class:`Microphone`: one ``input_audio_buffer.append`` per chunk, sent raw.

    Each distinct chunk is serialised once (clips repeat, silence repeats), so a load generator spends
    its CPU on pacing and sockets rather than on JSON and base64.
    """
    cache: dict[bytes, str] = {}

    async def send(chunk: bytes) -> None:
        message = cache.get(chunk)
        if message is None:
            message = json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(chunk).decode()})
            if len(cache) < cache_size:
                cache[chunk] = message
        await connection.send_raw(message)

    return send


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ServerProcess:
    """``python -m bargein serve`` in a subprocess on a free loopback port, stopped on exit."""

    def __init__(self, engines: str, *, extra_args: Sequence[str] = (), ready_timeout_s: float = 600.0) -> None:
        self.engines = engines
        self.port = free_port()
        self.extra_args = list(extra_args)
        self.ready_timeout_s = ready_timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = Path(tempfile.mkstemp(prefix="bargein-bench-", suffix=".log")[1])

    @property
    def host_port(self) -> str:
        """``127.0.0.1:PORT``."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The server's process id."""
        assert self.process is not None
        return self.process.pid

    def __enter__(self) -> ServerProcess:
        import httpx

        command = [sys.executable, "-m", "bargein", "serve", "--engines", self.engines, "--host", "127.0.0.1",
                   "--port", str(self.port), "--log-level", "warning", *self.extra_args]
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            cwd=Path(__file__).resolve().parents[2])
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._fail(f"the server exited with code {self.process.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://{self.host_port}/healthz", timeout=2).status_code == 200:
                    return self
            time.sleep(0.2)
        self._fail(f"the server was not ready after {self.ready_timeout_s:.0f} s")
        raise AssertionError("unreachable")

    def _fail(self, why: str) -> None:
        self.stop()
        tail = self.log_path.read_text(errors="replace")[-3000:]
        sys.exit(f"{why}; its log ({self.log_path}) ends with:\n{tail}")

    def stop(self) -> None:
        """Ask the server to stop (Ctrl-C), then kill it if it lingers."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __exit__(self, *_: object) -> None:
        self.stop()


def tree_memory(pid: int) -> tuple[int, float, float]:
    """The server process ``pid`` and all its descendants: how many, their summed resident memory and their
    summed proportional set size (PSS: a page shared by k processes counts 1/k in each), in MB."""
    import psutil

    root = psutil.Process(pid)
    processes = [root, *root.children(recursive=True)]
    rss = pss = 0.0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            info = process.memory_full_info()
            rss += info.rss
            pss += getattr(info, "pss", info.rss)
    return len(processes), rss / 2**20, pss / 2**20


@contextlib.contextmanager
def server_or_url(engines: str, url: str | None, *, extra_args: Sequence[str] = ()) -> Iterator[tuple[str, int | None]]:
    """Yield ``(host:port, server pid or None)``: the given ``--url`` or a server started for the run."""
    if url:
        yield url.removeprefix("ws://").removeprefix("http://").split("/")[0], None
        return
    with ServerProcess(engines, extra_args=extra_args) as server:
        print(f"server: bargein serve --engines {engines} on {server.host_port} (pid {server.pid})", flush=True)
        yield server.host_port, server.pid
