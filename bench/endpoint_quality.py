"""Endpoint quality: false cut-offs on paused utterances and the commit delay on complete ones.

    python -m bench.endpoint_quality [--quick] [--fit-on espeak] [--out DIR]

Every clip of the endpoint set (bench/endpoint_set.py: sentences said whole, and the same sentences
with a 600 to 1,200 ms pause at a hesitation point, in Kokoro, flite and espeak-ng voices) runs
through the real Silero VAD frame by frame, with the duplex machine's speech and silence thresholds.
Each time the VAD first sees silence, Smart Turn v3.2 scores the audio heard so far. Then each
endpoint policy decides when the turn would have been committed:

* ``fixed 500 ms``: the ``server_vad`` default, commit after 500 ms of silence;
* ``smart turn only``: commit after a short silence when Smart Turn (at threshold 0.5, as Pipecat
  uses it) says the turn is complete, after a long one (1.5 s) when it says it is not;
* ``words only``: the same, judged only by whether the words so far (Whisper tiny.en, as speculation
  has them at the first silence) end on a word that leads on ("for", "to", "the", "and");
* ``semantic``: both: a short silence only when the sound says finished and the words do not lead on;
  its threshold and short silence are fitted.

A **false cut-off** is a paused clip committed before its second part starts (or a complete clip
committed before its last word). The **commit delay** is the time from the true end of the last word
to the commit, on complete clips: the part of first audio the endpoint costs.

Thresholds are fitted on one voice family (``--fit-on``, Kokoro by default) and reported on the
others, which the fit never saw; the fitted family's own figures are marked as such.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bargein.session.core.endpointing import SEMANTIC_PRESETS, leads_on
from bench.endpoint_set import DEFAULT_DIR, FAMILIES, RATE, Clip, build, load

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


@dataclass(frozen=True)
class Policy:
    """When a turn is committed: after ``short_ms`` of silence if the end-of-turn probability is at
    least ``threshold``, else after ``long_ms`` (a fixed endpoint has threshold 0: always short).
    With ``words``, a turn whose words so far end on a word that leads on ("for", "to", "and") waits
    ``long_ms`` whatever the sound says."""

    name: str
    threshold: float
    short_ms: float
    long_ms: float
    words: bool = False

    def commit_ms(self, runs: list[SilenceRun]) -> float | None:
        """Stream time of the commit, or None if no run of silence is long enough."""
        for run in runs:
            finished = run.probability >= self.threshold and not (self.words and leads_on(run.words))
            needed = self.short_ms if finished else self.long_ms
            if run.length_ms >= needed:
                return run.start_ms + needed
        return None


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
        words = asr.transcribe_sync(audio[:int(run.start_ms * RATE / 1000)]).text  # type: ignore[attr-defined]
        scored.append(SilenceRun(run.start_ms, run.length_ms, probability, words))
    return scored


@dataclass(frozen=True)
class Outcome:
    """What a policy did with one clip."""

    clip: Clip
    commit_s: float | None

    @property
    def cut_off(self) -> bool:
        """Committed while the user still had words to say."""
        if self.commit_s is None:
            return False
        if self.clip.kind == "paused":
            return self.commit_s < self.clip.pause_start_s + self.clip.pause_ms / 1000
        return self.commit_s < self.clip.speech_end_s - 0.05

    @property
    def delay_ms(self) -> float | None:
        """From the end of the last word to the commit (complete clips, not cut off)."""
        if self.commit_s is None or self.cut_off:
            return None
        return (self.commit_s - self.clip.speech_end_s) * 1000


def evaluate(policy: Policy, scored: dict[str, list[SilenceRun]], clips: list[Clip]) -> dict[str, float]:
    """False cut-off rate on paused clips, and commit delays on complete clips."""
    outcomes = []
    for clip in clips:
        commit = policy.commit_ms(scored[clip.id])
        outcomes.append(Outcome(clip, None if commit is None else commit / 1000))
    paused = [o for o in outcomes if o.clip.kind == "paused"]
    complete = [o for o in outcomes if o.clip.kind == "complete"]
    delays = [o.delay_ms for o in complete if o.delay_ms is not None]
    return {
        "paused": len(paused),
        "false_cutoff_pct": 100 * sum(o.cut_off for o in paused) / max(1, len(paused)),
        "complete": len(complete),
        "complete_cut_pct": 100 * sum(o.cut_off for o in complete) / max(1, len(complete)),
        "never_committed": sum(o.commit_s is None for o in complete),
        "delay_p50_ms": float(np.percentile(delays, 50)) if delays else float("nan"),
        "delay_p90_ms": float(np.percentile(delays, 90)) if delays else float("nan"),
    }


def fit(scored: dict[str, list[SilenceRun]], clips: list[Clip], *, long_ms: float,
        max_cutoff_pct: float = 5.0) -> Policy:
    """The semantic policy (threshold and short silence, words on) fitted on ``clips``: the lowest median
    delay among those whose false cut-offs stay within ``max_cutoff_pct``, else the fewest cut-offs."""
    candidates = []
    for threshold in np.arange(0.1, 0.96, 0.05):
        for short_ms in (100, 150, 200, 250, 300):
            policy = Policy("semantic (fitted)", round(float(threshold), 2), short_ms, long_ms, words=True)
            result = evaluate(policy, scored, clips)
            cut = max(result["false_cutoff_pct"], result["complete_cut_pct"])
            candidates.append((cut > max_cutoff_pct, cut if cut > max_cutoff_pct else 0.0,
                               result["delay_p50_ms"], policy))
    return min(candidates, key=lambda c: c[:3])[3]


def score_all(out: Path, clips: list[Clip]) -> dict[str, list[SilenceRun]]:
    """Silence runs with Smart Turn scores for every clip (cached next to the set)."""
    cache = out / "scores.json"
    stored = json.loads(cache.read_text()) if cache.is_file() else {}
    missing = [clip for clip in clips if clip.id not in stored]
    if missing:
        from bargein.engines.listen.smart_turn import SmartTurnModel
        from bargein.engines.transcribe.whisper_asr import load_whisper

        model = SmartTurnModel(threads=2)
        asr = load_whisper("tiny.en")
        audios = [load(out, clip) for clip in missing]
        for clip, audio, probabilities in zip(missing, audios, vad_probabilities(audios), strict=True):
            runs = score_runs(audio, silence_runs(probabilities), model, asr)
            stored[clip.id] = [[run.start_ms, run.length_ms, run.probability, run.words] for run in runs]
        cache.write_text(json.dumps(stored))
    return {clip.id: [SilenceRun(*run) for run in stored[clip.id]] for clip in clips}


def main() -> None:
    """Build or load the set, score it, fit on one family, report every family."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--quick", action="store_true", help="a quarter of the sentences")
    parser.add_argument("--fit-on", choices=FAMILIES, default="kokoro")
    parser.add_argument("--long-ms", type=float, default=1500.0, help="silence when the turn sounds unfinished")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    out = args.out / ("quick" if args.quick else "full")
    clips = build(out, quick=args.quick)
    scored = score_all(out, clips)
    fitted = fit(scored, [c for c in clips if c.family == args.fit_on], long_ms=args.long_ms)
    policies = [Policy("fixed 500 ms", 0.0, 500, 500),
                Policy("smart turn only", 0.5, fitted.short_ms, fitted.long_ms),
                Policy("words only", 0.0, fitted.short_ms, fitted.long_ms, words=True), fitted,
                *(Policy(f"bargein {name}", preset.threshold, preset.short_ms, preset.long_ms, words=True)
                  for name, preset in SEMANTIC_PRESETS.items() if name != "medium")]
    print(f"load average {os.getloadavg()[0]:.2f}; fitted on {args.fit_on}: threshold {fitted.threshold}, "
          f"short {fitted.short_ms:.0f} ms, long {fitted.long_ms:.0f} ms")
    print(f"{'family':<8} {'policy':<18} {'paused':>6} {'false cut-off':>14} {'complete':>8} "
          f"{'delay p50':>10} {'delay p90':>10} {'never':>6}")
    report: dict[str, dict[str, dict[str, float]]] = {}
    for family in FAMILIES:
        subset = [c for c in clips if c.family == family]
        label = f"{family}*" if family == args.fit_on else family
        for policy in policies:
            result = evaluate(policy, scored, subset)
            report.setdefault(family, {})[policy.name] = result
            print(f"{label:<8} {policy.name:<18} {result['paused']:>6.0f} {result['false_cutoff_pct']:>13.1f}% "
                  f"{result['complete']:>8.0f} {result['delay_p50_ms']:>8.0f}ms {result['delay_p90_ms']:>8.0f}ms "
                  f"{result['never_committed']:>6.0f}")
    print("* the family the threshold was fitted on")
    if args.json:
        args.json.write_text(json.dumps({"fitted": fitted.__dict__, "report": report}, indent=2))


if __name__ == "__main__":
    main()
