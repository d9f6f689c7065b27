"""The endpoint set as the VAD and Smart Turn hear it: runs of silence in each clip, scored, cached.

What ``bench.quality.endpoint_quality`` and ``training.endpoint_tiers`` both read: Silero's probabilities of
every 32 ms frame (the clips run as one batch), the runs of silence after speech began with the duplex
machine's hysteresis, and for each run Smart Turn's end-of-turn probability and Whisper tiny.en's words so far.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from testdata.endpoint_clips import RATE, Clip, load

FRAME = 512
FRAME_MS = FRAME * 1000 / RATE
THRESHOLD = 0.5
HYSTERESIS = 0.15



@dataclass(frozen=True)
class SilenceRun:
    """One stretch of VAD silence inside a turn: where it starts and how long it lasts (ms)."""

    start_ms: float
    length_ms: float
    probability: float = float("nan")
    """Smart Turn's end-of-turn probability for the audio up to the run's first silent frame."""
    words: str = ""
    """What Whisper tiny.en heard from the turn's start to the run's start (speculation has these)."""
    last_word_probability: float = float("nan")
    """How sure Whisper was of the last of those words (NaN: no words)."""
    last_word_end_ms: float = float("nan")
    """Where Whisper's word timings put the end of the last of those words, from the clip's start (NaN: no words)."""


def vad_probabilities(clips: list[np.ndarray]) -> list[np.ndarray]:
    """Silero's speech probability of every 32 ms frame of every clip, the clips run as one batch."""
    from bargein.engines.listen.silero_vad import CONTEXT_SAMPLES, STATE_SHAPE, SileroModel

    model = SileroModel(threads=2)
    frames = max(len(clip) for clip in clips) // FRAME
    padded = np.zeros((len(clips), frames * FRAME), np.float32)
    for index, clip in enumerate(clips):
        usable = len(clip) // FRAME * FRAME
        padded[index, :usable] = clip[:usable]
    states = np.zeros((STATE_SHAPE[0], len(clips), STATE_SHAPE[1]), np.float32)
    contexts = np.zeros((len(clips), CONTEXT_SAMPLES), np.float32)
    out = np.zeros((len(clips), frames), np.float32)
    for step in range(frames):
        chunk = padded[:, step * FRAME:(step + 1) * FRAME]
        out[:, step], states = model.step(chunk, contexts, states)
        contexts = chunk[:, -CONTEXT_SAMPLES:]
    return [out[index, : len(clip) // FRAME] for index, clip in enumerate(clips)]


def silence_runs(probabilities: np.ndarray) -> list[SilenceRun]:
    """The runs of silence after speech began, as the duplex machine sees them (same hysteresis)."""
    runs: list[SilenceRun] = []
    started = False
    since: float | None = None
    for index, p in enumerate(probabilities):
        start = index * FRAME_MS
        if p >= THRESHOLD:
            started = True
            if since is not None:
                runs.append(SilenceRun(since, start - since))
                since = None
        elif started and since is None and p < THRESHOLD - HYSTERESIS:
            since = start
    if since is not None:
        runs.append(SilenceRun(since, len(probabilities) * FRAME_MS - since))
    return runs


def score_runs(audio: np.ndarray, runs: list[SilenceRun], model: object, asr: object) -> list[SilenceRun]:
    """Each run with Smart Turn's probability for the audio up to the end of its first silent frame,
    and the words of the turn up to the run's start."""
    scored = []
    for run in runs:
        end = int((run.start_ms + FRAME_MS) * RATE / 1000)
        probability = float(model.probabilities([audio[:end]])[0])  # type: ignore[attr-defined]
        heard = asr.transcribe_sync(audio[:int(run.start_ms * RATE / 1000)])  # type: ignore[attr-defined]
        last = heard.words[-1] if heard.words else None
        sure = None if last is None else last.probability
        scored.append(SilenceRun(run.start_ms, run.length_ms, probability, heard.text,
                                 float("nan") if sure is None else float(sure),
                                 float("nan") if last is None else last.end_ms))
    return scored


def wilson(hits: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (95 %) of a proportion, in percent."""
    if total == 0:
        return float("nan"), float("nan")
    p = hits / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * np.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return 100 * max(0.0, centre - half), 100 * min(1.0, centre + half)


def score_all(out: Path, clips: list[Clip]) -> dict[str, list[SilenceRun]]:
    """Silence runs with Smart Turn scores for every clip (cached next to the set)."""
    cache = out / "scores.json"
    stored = json.loads(cache.read_text()) if cache.is_file() else {}
    # a clip scored before the last word's probability and end were kept (four or five fields a run) is scored again
    missing = [clip for clip in clips if clip.id not in stored or any(len(run) < 6 for run in stored[clip.id])]
    if missing:
        from bargein.engines.listen.smart_turn import SmartTurnModel
        from bargein.engines.transcribe.whisper_asr import load_whisper

        model = SmartTurnModel(threads=2)
        asr = load_whisper("tiny.en")
        audios = [load(out, clip) for clip in missing]
        for clip, audio, probabilities in zip(missing, audios, vad_probabilities(audios), strict=True):
            runs = score_runs(audio, silence_runs(probabilities), model, asr)
            stored[clip.id] = [[run.start_ms, run.length_ms, run.probability, run.words, run.last_word_probability,
                                run.last_word_end_ms] for run in runs]
        cache.write_text(json.dumps(stored))
    return {clip.id: [SilenceRun(*run) for run in stored[clip.id]] for clip in clips}
