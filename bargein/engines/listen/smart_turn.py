"""Smart Turn v3.2 on onnxruntime: has the speaker finished their turn, judged from the sound alone.

The model hears the last 8 s of 16 kHz audio (zero-padded at the front when shorter), normalised to
zero mean and unit variance, as 80 Whisper log-mel bands by 800 frames, and answers the probability
that the turn is complete. It listens to intonation and rhythm, so "a table for... [pause]" sounds
unfinished while "a table for four." sounds done. One model serves every session: requests that
arrive while a batch runs wait for the next one and run together, in a worker thread, off the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from bargein.engines.base import LISTEN_SAMPLE_RATE, Float32Audio
from bargein.engines.listen.smart_turn_file import smart_turn_path

log = logging.getLogger(__name__)

WINDOW_SECONDS = 8
WINDOW_SAMPLES = WINDOW_SECONDS * LISTEN_SAMPLE_RATE
MEL_BANDS = 80
MEL_FRAMES = 800


class SmartTurnModel:
    """The bare model: features and a batched forward pass, no scheduling."""

    def __init__(self, path: Path | None = None, *, threads: int = 1) -> None:
        from faster_whisper.feature_extractor import FeatureExtractor

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        model_path = str(path or smart_turn_path())
        self._session = ort.InferenceSession(model_path, sess_options=options, providers=["CPUExecutionProvider"])
        self._extractor = FeatureExtractor(feature_size=MEL_BANDS, chunk_length=WINDOW_SECONDS)

    def features(self, audio: Float32Audio) -> npt.NDArray[np.float32]:
        """``[80, 800]`` log-mel features of the last 8 s of ``audio`` (16 kHz mono)."""
        window = np.zeros(WINDOW_SAMPLES, dtype=np.float32)
        tail = np.asarray(audio, dtype=np.float32)[-WINDOW_SAMPLES:]
        if len(tail):
            window[WINDOW_SAMPLES - len(tail):] = tail
        window = (window - window.mean()) / np.sqrt(window.var() + 1e-7)
        mel = np.asarray(self._extractor(window, padding=0), dtype=np.float32)
        return mel[:, :MEL_FRAMES]

    def predict(self, features: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """End-of-turn probabilities ``[batch]`` for features ``[batch, 80, 800]``."""
        (output,) = self._session.run(None, {"input_features": features.astype(np.float32, copy=False)})
        return np.asarray(output, dtype=np.float32).reshape(len(features))

    def probabilities(self, clips: list[Float32Audio]) -> npt.NDArray[np.float32]:
        """End-of-turn probability of each clip (features and forward pass in one call)."""
        return self.predict(np.stack([self.features(clip) for clip in clips]))


@dataclass
class _Request:
    audio: Float32Audio
    future: asyncio.Future[float]


class SmartTurn:
    """Smart Turn shared by all sessions, with requests batched across them."""

    window_seconds = WINDOW_SECONDS

    def __init__(self, model: SmartTurnModel | None = None, *, max_batch: int = 16) -> None:
        self.model = model or SmartTurnModel()
        self.max_batch = max_batch
        self._pending: list[_Request] = []
        self._wakeup = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self.batches_run = 0
        self.clips_run = 0

    async def probability(self, audio: Float32Audio) -> float:
        """Probability (0 to 1) that the speaker has finished, from the audio up to now."""
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done() or self._worker.get_loop() is not loop:
            # an Event and its waiters belong to one loop: a model reused on a new loop needs fresh ones
            self._wakeup = asyncio.Event()
            self._pending = [item for item in self._pending if item.future.get_loop() is loop]
            self._worker = loop.create_task(self._run(), name="smart-turn-batcher")
        future: asyncio.Future[float] = loop.create_future()
        # only the window is kept: a caller's long buffer never lingers in the queue
        self._pending.append(_Request(np.array(audio[-WINDOW_SAMPLES:], dtype=np.float32), future))
        self._wakeup.set()
        return await future

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                batch, self._pending = self._pending[:self.max_batch], self._pending[self.max_batch:]
                batch = [item for item in batch if not item.future.done()]  # the caller gave up
                if not batch:
                    continue
                try:
                    results = await asyncio.to_thread(self.model.probabilities, [item.audio for item in batch])
                except Exception as error:  # an engine failure reaches each waiting session
                    log.exception("smart turn batch failed")
                    for item in batch:
                        if not item.future.done():
                            item.future.set_exception(error)
                    continue
                self.batches_run += 1
                self.clips_run += len(batch)
                for item, value in zip(batch, results, strict=True):
                    if not item.future.done():
                        item.future.set_result(float(value))

    async def aclose(self) -> None:
        """Stop the batching task."""
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
