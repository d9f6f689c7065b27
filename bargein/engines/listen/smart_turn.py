"""Smart Turn v3.2 on onnxruntime: has the speaker finished their turn, judged from the sound alone.

The model hears the last 8 s of 16 kHz audio (zero-padded at the front when shorter), normalised to
zero mean and unit variance, as 80 Whisper log-mel bands by 800 frames, and answers the probability
that the turn is complete. It listens to intonation and rhythm, so "a table for... [pause]" sounds
unfinished while "a table for four." sounds done. One model serves every session: requests that
arrive while a batch runs wait for the next one and run together, in a worker thread, off the loop.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from bargein.engines.base import LISTEN_SAMPLE_RATE, Float32Audio
from bargein.engines.batching import MicroBatcher
from bargein.engines.listen.smart_turn_file import smart_turn_path

WINDOW_SECONDS = 8
WINDOW_SAMPLES = WINDOW_SECONDS * LISTEN_SAMPLE_RATE
MEL_BANDS = 80
MEL_FRAMES = 800
RUN_BATCH = 4
"""The most clips in one forward pass (a larger batch is run in slices of this size)."""


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
        # onnxruntime's arena keeps the largest run's buffers and grows in steps as larger batches first
        # occur, which reads as memory creeping up under load: runs are capped at RUN_BATCH clips, and one
        # run of that size at load reaches the arena's final size at once
        self.predict(np.zeros((RUN_BATCH, MEL_BANDS, MEL_FRAMES), dtype=np.float32))

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
        features = features.astype(np.float32, copy=False)
        outputs = [np.asarray(self._session.run(None, {"input_features": features[start:start + RUN_BATCH]})[0],
                              dtype=np.float32).reshape(-1) for start in range(0, len(features), RUN_BATCH)]
        return np.concatenate(outputs) if outputs else np.zeros(0, dtype=np.float32)

    def probabilities(self, clips: list[Float32Audio]) -> npt.NDArray[np.float32]:
        """End-of-turn probability of each clip (features and forward pass in one call)."""
        return self.predict(np.stack([self.features(clip) for clip in clips]))


@dataclass
class _Request:
    audio: Float32Audio
    future: asyncio.Future[float]


class SmartTurn(MicroBatcher[_Request]):
    """Smart Turn shared by all sessions, with requests batched across them."""

    name = "smart-turn-batcher"
    window_seconds = WINDOW_SECONDS

    def __init__(self, model: SmartTurnModel | None = None, *, max_batch: int = 16) -> None:
        super().__init__()
        self.model = model or SmartTurnModel()
        self.max_batch = max_batch
        self.batches_run = 0
        self.clips_run = 0

    async def probability(self, audio: Float32Audio) -> float:
        """Probability (0 to 1) that the speaker has finished, from the audio up to now."""
        future: asyncio.Future[float] = self._loop().create_future()
        # only the window is kept: a caller's long buffer never lingers in the queue
        self._enqueue(_Request(np.array(audio[-WINDOW_SAMPLES:], dtype=np.float32), future))
        return await future

    def _take_batch(self) -> list[_Request]:
        waiting = [item for item in self._pending if not item.future.done()]  # callers that gave up are dropped
        batch, self._pending = waiting[:self.max_batch], waiting[self.max_batch:]
        return batch

    def _infer(self, batch: list[_Request]) -> npt.NDArray[np.float32]:
        return self.model.probabilities([item.audio for item in batch])

    def _deliver(self, batch: list[_Request], results: npt.NDArray[np.float32]) -> None:
        self.batches_run += 1
        self.clips_run += len(batch)
        for item, value in zip(batch, results, strict=True):
            if not item.future.done():
                item.future.set_result(float(value))
