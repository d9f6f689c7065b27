"""Endpoint quality: false cut-offs on paused utterances and the commit delay on complete ones.

    python -m bench.quality.endpoint_quality [--quick] [--fit-on espeak] [--out DIR]
    python -m bench.quality.endpoint_quality   # builds the set once (~5 min), scores it once (~11 min), then seconds
    python -m bench.quality.endpoint_quality --fit-on flite --json figures.json

Every clip of the endpoint set (testdata/endpoint_set.py: sentences said whole, and the same sentences
with a 600 to 1,200 ms pause at a hesitation point, in Kokoro, flite and espeak-ng voices; and real
recorded speech, with silence spliced in at word boundaries, testdata/endpoint_real.py) runs
through the real Silero VAD frame by frame, with the duplex machine's speech and silence thresholds.
Each time the VAD first sees silence, Smart Turn v3.2 scores the audio heard so far. Then each
endpoint policy decides when the turn would have been committed:

* ``fixed 500 ms``: plain ``server_vad`` (a client's own 500 ms; the default is tiered, training/endpoint_tiers.py);
* ``smart turn only``: commit after a short silence when Smart Turn (at threshold 0.5, as Pipecat
  uses it) says the turn is complete, after a long one (1.5 s) when it says it is not;
* ``words only``: the same, judged only by whether the words so far (Whisper tiny.en, as speculation
  has them at the first silence) end on a word that leads on ("for", "to", "the", "and": articles, possessives,
  conjunctions, prepositions, auxiliaries, subject pronouns, fillers);
* ``semantic``: both, as a graded wait: a short silence only when the sound says finished and the
  words do not lead on (probability >= ``high``), a middle one (500 ms, given, not fitted) when the sound is
  unsure (``low`` <= probability < ``high``), else the long one (1.5 s: below ``low``, words that lead on, or a
  score or words that have not come back yet); its two thresholds and short silence are fitted; ``old auto`` is
  the two-level preset it replaced.

A **false cut-off** is a paused clip committed before its second part starts (or a complete clip
committed before its last word). The **commit delay** is the time from the true end of the last word
to the commit, on complete clips, in stream time: the part of first audio the endpoint costs (it assumes the
score and the words are back by then; live, the commit waits for them).

**The set** (cached under ``~/.cache/bargein/endpoint-set``, nothing in git): 24 sentences, each with a hesitation
point ("I want to book a table for | four people."), spoken by three voice families: Kokoro (bargein's TTS, its
bundled voice at three rates), flite (slt, rms, awb, kal16) and espeak-ng (en-us, en-gb, en-us+f3, en-gb-x-rp+m3).
Each sentence is said whole (a **complete** clip) and with a pause of 600, 900 or 1,200 ms at the hesitation point
(a **paused** clip: the pause is made by writing a comma there, so the voice keeps the level pitch of a speaker who
is going on, then lengthening the quiet stretch the TTS made at the comma).

**Real speech** (the ``librivox`` family, held out: never fitted on): the recordings of Debian's
``pocketsphinx-testdata``, five LibriVox sentences read by one reader and three short commands by another speaker,
each a complete clip. The LibriVox sentences also give paused clips: 600, 900 or 1,200 ms of silence spliced in at
every real word boundary that leaves two words on each side (the boundary from Whisper's word timings, moved to
the quietest 10 ms nearby); what the splice lacks is the breath or "um" a real pause would have. The end of speech
of a recording is estimated from its level (12 dB over its own noise floor), good to a few hundred ms. Two
speakers: a check on real voices, not a survey.

Thresholds are fitted on one voice family (``--fit-on``, Kokoro by default) and reported on the
others, which the fit never saw; the fitted family's own figures are marked as such. The fit: false cut-offs (and
cut complete clips) <= 5 %, then the lowest median commit delay, then the lowest mean, ties going to the lowest
thresholds; flite, espeak-ng and the real clips never enter it.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bargein.session.core.endpointing import SEMANTIC_PRESETS, SemanticPreset, leads_on
from bench.harness.endpoint_runs import SilenceRun, score_all, wilson
from testdata.endpoint_clips import Clip
from testdata.endpoint_set import DEFAULT_DIR, FAMILIES, build


@dataclass(frozen=True)
class Policy:
    """When a turn is committed: after ``short_ms`` of silence if the end-of-turn probability is at
    least ``threshold``, after ``middle_ms`` if it is at least ``low`` (a graded wait; without ``low``
    there is no middle), else after ``long_ms`` (a fixed endpoint has threshold 0: always short).
    With ``words``, a turn whose words so far end on a word that leads on ("for", "to", "and") waits
    ``long_ms`` whatever the sound says."""

    name: str
    threshold: float
    short_ms: float
    long_ms: float
    words: bool = False
    low: float | None = None
    middle_ms: float = 500.0

    @classmethod
    def of(cls, name: str, preset: SemanticPreset) -> Policy:
        """The policy bargein's session follows with ``preset`` (words on)."""
        return cls(name, preset.high, preset.short_ms, preset.long_ms, True, preset.low, preset.middle_ms)

    def wait_ms(self, run: SilenceRun) -> float:
        """The silence this policy waits in ``run``."""
        if self.words and leads_on(run.words):
            return self.long_ms
        if run.probability >= self.threshold:
            return self.short_ms
        return self.middle_ms if self.low is not None and run.probability >= self.low else self.long_ms

    def commit_ms(self, runs: list[SilenceRun]) -> float | None:
        """Stream time of the commit, or None if no run of silence is long enough."""
        for run in runs:
            needed = self.wait_ms(run)
            if run.length_ms >= needed:
                return run.start_ms + needed
        return None

    def describe(self) -> str:
        """The policy's numbers in one line."""
        middle = "" if self.low is None else f", >= {self.low} -> {self.middle_ms:.0f} ms"
        return f">= {self.threshold} -> {self.short_ms:.0f} ms{middle}, else {self.long_ms:.0f} ms"


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
        "delay_mean_ms": float(np.mean(delays)) if delays else float("nan"),
        "false_cutoffs": sum(o.cut_off for o in paused),
    }


def fit(scored: dict[str, list[SilenceRun]], clips: list[Clip], *, long_ms: float, middle_ms: float = 500.0,
        max_cutoff_pct: float = 5.0) -> Policy:
    """The graded semantic policy (words on) fitted on ``clips``: its two thresholds and short silence
    (the middle and long silences are given). Among the policies whose false cut-offs stay within
    ``max_cutoff_pct`` (else the fewest cut-offs), the lowest median delay on complete clips, then the
    lowest mean delay; a fitting family that scores all its complete clips high leaves many tied, and
    then the lowest thresholds win: the eagerest policy the cut-off budget allows, so voices that score
    lower than the fitting family's wait a short or middle silence rather than the long one."""
    candidates = []
    for high in np.arange(0.5, 0.995, 0.01):
        for low in [*np.arange(0.05, high - 0.01, 0.05), high]:
            for short_ms in (100, 150, 200, 250, 300):
                policy = Policy("semantic (fitted)", round(float(high), 2), short_ms, long_ms, words=True,
                                low=round(float(low), 2), middle_ms=middle_ms)
                result = evaluate(policy, scored, clips)
                cut = max(result["false_cutoff_pct"], result["complete_cut_pct"])
                candidates.append((cut > max_cutoff_pct, cut if cut > max_cutoff_pct else 0.0,
                                   result["delay_p50_ms"], result["delay_mean_ms"], policy.threshold, policy.low,
                                   policy))
    return min(candidates, key=lambda c: c[:6])[6]  # type: ignore[no-any-return]


OLD_AUTO = Policy("old auto (2-level)", 0.95, 100, 1500, words=True)
"""The two-level preset this graded one replaced (fitted the same way, without a middle)."""


def main() -> None:
    """Build or load the set, score it, fit on one family, report every family."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--quick", action="store_true", help="a quarter of the sentences")
    parser.add_argument("--fit-on", choices=FAMILIES, default="kokoro")
    parser.add_argument("--long-ms", type=float, default=1500.0, help="silence when the turn sounds unfinished")
    parser.add_argument("--middle-ms", type=float, default=500.0, help="silence when the sound is unsure")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    out = args.out / ("quick" if args.quick else "full")
    clips = build(out, quick=args.quick)
    scored = score_all(out, clips)
    fitted = fit(scored, [c for c in clips if c.family == args.fit_on], long_ms=args.long_ms,
                 middle_ms=args.middle_ms)
    policies = [Policy("fixed 500 ms", 0.0, 500, 500),
                Policy("smart turn only", 0.5, fitted.short_ms, fitted.long_ms),
                Policy("words only", 0.0, fitted.short_ms, fitted.long_ms, words=True), OLD_AUTO, fitted,
                *(Policy.of(f"bargein {name}", preset) for name, preset in SEMANTIC_PRESETS.items()
                  if name != "medium")]
    print(f"load average {os.getloadavg()[0]:.2f}; fitted on {args.fit_on}: {fitted.describe()}")
    print(f"{'family':<9} {'policy':<19} {'paused':>6} {'false cut-off [95% CI]':>23} {'complete':>8} "
          f"{'cut':>4} {'delay p50':>9} {'delay p90':>9} {'never':>5}")
    report: dict[str, dict[str, dict[str, float]]] = {}
    for family in FAMILIES:
        subset = [c for c in clips if c.family == family]
        label = f"{family}*" if family == args.fit_on else family
        for policy in policies:
            result = evaluate(policy, scored, subset)
            low, high = wilson(int(result["false_cutoffs"]), int(result["paused"]))
            result["false_cutoff_ci_pct"] = [low, high]  # type: ignore[assignment]
            report.setdefault(family, {})[policy.name] = result
            print(f"{label:<9} {policy.name:<19} {result['paused']:>6.0f} {result['false_cutoff_pct']:>6.1f}% "
                  f"[{low:>4.1f}-{high:>4.1f}%]{'':>4} {result['complete']:>8.0f} "
                  f"{result['complete_cut_pct']:>3.0f}% {result['delay_p50_ms']:>7.0f}ms "
                  f"{result['delay_p90_ms']:>7.0f}ms {result['never_committed']:>5.0f}")
    print("* the family the thresholds were fitted on")
    if args.json:
        args.json.write_text(json.dumps({"fitted": fitted.__dict__, "report": report}, indent=2))


if __name__ == "__main__":
    main()
