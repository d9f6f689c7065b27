"""Smart Turn v3.2 on onnxruntime: has the speaker finished their turn, judged from the sound alone.

The model hears the last 8 s of 16 kHz audio (zero-padded at the front when shorter), normalised to
zero mean and unit variance, as 80 Whisper log-mel bands by 800 frames, and answers the probability
that the turn is complete. It listens to intonation and rhythm, so "a table for... [pause]" sounds
unfinished while "a table for four." sounds done. One model serves every session: requests wait in one
queue and run one at a time in a worker thread, off the loop (a pass over several clips costs no less
per clip), and a request withdrawn while it waits never runs. With a CPU share (:class:`CpuBudget`), an
optional request (the default endpoint's score, whose absence leaves the turn on plain silence) is refused
with :class:`TurnModelBusy` once the model has spent its share: a crowd of sessions then gets plain silence
for some of its pauses instead of late audio for all of them.

Features are computed as faster-whisper's ``FeatureExtractor`` would on the whole padded window, but
cheaper: most clips are much shorter than 8 s, and every STFT frame that sees only the padding holds
the same constant, so one such frame is computed and stands for all of them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from bargein.engines.base import EndOfTurnModel, TurnModelBusy
from bargein.engines.batching import MicroBatcher
from bargein.engines.cpu_budget import CpuBudget
from bargein.engines.listen.smart_turn_file import smart_turn_path
from bargein.metrics.cost_meter import Bill, bill_now, charge
from bargein.values import LISTEN_SAMPLE_RATE, Float32Audio

log = logging.getLogger(__name__)

WINDOW_SECONDS = 8
WINDOW_SAMPLES = WINDOW_SECONDS * LISTEN_SAMPLE_RATE
MEL_BANDS = 80
MEL_FRAMES = 800
RUN_BATCH = 1
"""Clips per forward pass (a batch is run in slices of this size). One: a pass over several clips costs no less
per clip, and one input shape keeps onnxruntime's arena at the size the warm-up gives it (docs/operations.md)."""
FIRST_PASS_ESTIMATE_S = 0.03
"""CPU seconds held back for a pass before any has been measured (26 ms on a VNNI core, 85 without)."""


def int8_saturates(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """True on an x86-64 CPU with AVX2 but no VNNI (AVX-512 or AVX): there onnxruntime's default int8 kernels
    multiply with an instruction that saturates at 16 bits, and a model quantised as Smart Turn is can answer
    differently. False where the CPU's flags cannot be read (not Linux), or on other architectures."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), None)
    return flags is not None and "avx2" in flags and not {"avx512_vnni", "avx_vnni"} & set(flags)


class SmartTurnModel:
    """The bare model: features and the forward pass, no scheduling."""

    def __init__(self, path: Path | None = None, *, threads: int = 1) -> None:
        from faster_whisper.feature_extractor import FeatureExtractor

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if int8_saturates():
            # on an AVX2 CPU without VNNI a sentence cut mid-way scored 0.74 (finished) where exact arithmetic,
            # as VNNI CPUs do it, gives 0.26; there exact int8 cost no time (85 against 93 ms a pass)
            options.add_session_config_entry("session.x64quantprecision", "1")
            log.info("Smart Turn: exact int8 arithmetic (this CPU has no VNNI)")
        model_path = str(path or smart_turn_path())
        self._session = ort.InferenceSession(model_path, sess_options=options, providers=["CPUExecutionProvider"])
        self._extractor = FeatureExtractor(feature_size=MEL_BANDS, chunk_length=WINDOW_SECONDS)
        # the periodic Hann window faster-whisper's STFT applies to every frame
        self._hann = np.hanning(self._extractor.n_fft + 1)[:-1].astype(np.float32)
        # onnxruntime's arena keeps the buffers of the runs it has seen, and passes of mixed batch sizes
        # fragmented it: it grew by 23 to 40 MB at moments no warm-up foresaw, which a soak reads as a leak.
        # Every pass has one shape (RUN_BATCH clips), so this first one gives the arena its final size
        self.predict(np.zeros((RUN_BATCH, MEL_BANDS, MEL_FRAMES), dtype=np.float32))

    def features(self, audio: Float32Audio) -> npt.NDArray[np.float32]:
        """``[80, 800]`` log-mel features of the last 8 s of ``audio`` (16 kHz mono).

        The same as ``FeatureExtractor(80, chunk_length=8)(window, padding=0)[:, :800]`` on the window
        zero-padded at the front and normalised over all of it, zeros included.
        """
        tail = np.asarray(audio, dtype=np.float32)[-WINDOW_SAMPLES:]
        padding = WINDOW_SAMPLES - len(tail)
        window = np.zeros(WINDOW_SAMPLES, dtype=np.float32)
        window[padding:] = tail
        # the statistics and every sample are computed exactly as the reference does, in float32: the
        # quietest bands of a frame are so sensitive that a one-ulp change in the samples shows in them
        mean, std = window.mean(), np.sqrt(window.var() + 1e-7)
        window[:padding] = (window[:padding] - mean) / std
        window[padding:] = (tail - mean) / std
        return self._log_mel(window, padding)

    def _log_mel(self, window: npt.NDArray[np.float32], padding: int) -> npt.NDArray[np.float32]:
        """Whisper log-mel ``[80, 800]`` of ``window``, whose first ``padding`` samples are one constant.

        faster-whisper centres frame ``t`` on sample ``t * hop`` with the window mirrored ``n_fft // 2``
        samples past each end, so frame ``t`` reads samples up to ``t * hop + n_fft // 2`` (frame 0
        reaches that far through the mirror). Every frame that ends before the audio starts has the same
        spectrum; only the last of them is computed and copied to the others.
        """
        n_fft, hop = self._extractor.n_fft, self._extractor.hop_length
        constant = min(max((padding - n_fft // 2 - 1) // hop + 1, 0), MEL_FRAMES)
        start = max(constant - 1, 0)  # the last padding-only frame, computed once (frame 0 when none is)
        padded = np.pad(window, n_fft // 2, mode="reflect")
        frames = np.lib.stride_tricks.sliding_window_view(padded[start * hop:], n_fft)[::hop][:MEL_FRAMES - start]
        # float32 throughout, as faster-whisper computes it
        power = np.abs(np.fft.rfft(frames * self._hann, axis=-1).astype(np.complex64, copy=False)) ** 2
        mel = self._extractor.mel_filters @ power.T
        log_mel = np.log10(np.maximum(mel, 1e-10))
        # the floor at 8 below the peak is the same with or without the copies: they repeat column 0
        log_mel = (np.maximum(log_mel, log_mel.max() - 8.0) + 4.0) / 4.0
        features = np.empty((MEL_BANDS, MEL_FRAMES), dtype=np.float32)
        features[:, :start] = log_mel[:, :1]
        features[:, start:] = log_mel
        return features

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
    estimate_s: float = 0.0
    """CPU seconds held back from the budget for this request (0: not counted against it)."""
    bill: Bill | None = field(default_factory=bill_now)
    """The asking session's bill (taken in its context): the clip's share of its pass is charged to it."""


class SmartTurn(MicroBatcher[_Request], EndOfTurnModel):
    """Smart Turn shared by all sessions, with requests batched across them; optional requests are refused
    once ``cpu_share`` of one core is spent (None: no limit)."""

    name = "smart-turn-batcher"
    window_seconds = WINDOW_SECONDS

    def __init__(self, model: SmartTurnModel | None = None, *, max_batch: int = 1,
                 cpu_share: float | None = None) -> None:
        super().__init__()
        self.model = model or SmartTurnModel()
        self.max_batch = max_batch
        self.budget = CpuBudget(cpu_share) if cpu_share is not None else None
        self.pass_cpu_s = FIRST_PASS_ESTIMATE_S
        """A running mean of the CPU one clip's pass costs, held back from the budget when a request is admitted."""
        self.batches_run = 0
        self.clips_run = 0
        self.scores_shed = 0

    @property
    def score_counts(self) -> tuple[int, int]:
        """Clips scored, and optional scores shed for want of CPU."""
        return self.clips_run, self.scores_shed

    async def probability(self, audio: Float32Audio, *, optional: bool = False) -> float:
        """Probability (0 to 1) that the speaker has finished, from the audio up to now. An ``optional``
        request raises :class:`TurnModelBusy` at once when the model's CPU share is spent."""
        estimate = 0.0
        if optional and self.budget is not None:
            if not self.budget.admit(self.pass_cpu_s):
                self.scores_shed += 1
                raise TurnModelBusy("the end-of-turn model has spent its CPU share")
            estimate = self.pass_cpu_s
        future: asyncio.Future[float] = self._loop().create_future()
        # only the window is kept: a caller's long buffer never lingers in the queue
        self._enqueue(_Request(np.array(audio[-WINDOW_SAMPLES:], dtype=np.float32), future, estimate))
        return await future

    def _take_batch(self) -> list[_Request]:
        waiting = []
        for item in self._pending:
            if not item.future.done():
                waiting.append(item)
            elif self.budget is not None and item.estimate_s:  # a caller that gave up: it never runs
                self.budget.settle(item.estimate_s, 0.0)
        batch, self._pending = waiting[:self.max_batch], waiting[self.max_batch:]
        return batch

    def _infer(self, batch: list[_Request]) -> tuple[npt.NDArray[np.float32], float]:
        started = time.thread_time()  # onnxruntime runs a one-thread session in the calling thread
        results = self.model.probabilities([item.audio for item in batch])
        return results, time.thread_time() - started

    def _deliver(self, batch: list[_Request], results: tuple[npt.NDArray[np.float32], float]) -> None:
        probabilities, spent_s = results
        self.batches_run += 1
        self.clips_run += len(batch)
        per_clip = spent_s / max(len(batch), 1)
        self.pass_cpu_s += 0.2 * (per_clip - self.pass_cpu_s)
        for item, value in zip(batch, probabilities, strict=True):
            charge("turn_end", item.bill, per_clip)
            if self.budget is not None and item.estimate_s:
                self.budget.settle(item.estimate_s, per_clip)
            if not item.future.done():
                item.future.set_result(float(value))
