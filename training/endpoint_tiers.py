"""The tiered default endpoint: fitted on the training voices of the endpoint set, reported on held-out ones.

    python -m training.endpoint_tiers [--json figures.json]   # fits and reports in seconds (endpoint_quality's cache)
    python -m training.endpoint_tiers --no-fit                # the committed DEFAULT_TIERS only

bargein's default endpoint (:class:`bargein.session.core.endpointing.TieredPreset`) waits server_vad's plain
500 ms of silence unless the two witnesses at the first silence agree: a short silence when Smart Turn says
finished and the words read as a finished sentence, a long one when the words lead on or Smart Turn says
unfinished and the words do not read finished. This fits its thresholds (``high``, ``low``, the fewest
words, the short silence) on the **training** voices and reports every policy on the **held-out** ones,
with Wilson 95 % intervals. The split follows docs/turn_quality.md: Flite's ``slt`` and real recorded
speech (LibriVox and commands) are held out; Kokoro (3 rates), eSpeak NG (4 voices) and Flite's rms, awb and kal16
are training. The held-out synthetic clips speak the same 24 sentences as the training ones (the real ones do
not). eSpeak NG and Flite, held out for ``bench.quality.endpoint_quality``'s ``semantic_vad`` fit, are training
data here.

The clips, the VAD runs, the Smart Turn scores and the words come from ``bench.quality.endpoint_quality``'s cache
(stream time, as that bench). Three kinds of false cut-off are counted:

* **long pauses**: a paused clip (600 to 1,200 ms at a hesitation point) committed in its pause;
* **short pauses**: the same clips with the pause shortened so that the VAD hears 468 ms of silence there
  (one frame less than 500), which server_vad never cuts: a cut here is a cut-off the short tier *adds*;
* **complete clips** committed before their last word.

The fit takes one tier at a time, on the training voices. The short tier (``high``, the fewest words, the
short silence from 200 / 250 / 300 ms): the lowest mean commit delay on complete clips (to the ms) with
short-pause cut-offs and cut complete clips each within 5 %; ties go to the more cautious thresholds. Then the
long tier (``low``): the fewest long-pause cut-offs with complete clips committed later than server_vad would (and
cut complete clips) within 5 %. The middle (500 ms) and long (1.5 s) silences are given, not fitted. Delays run
from the end of the last word to the commit, on complete clips, in stream time (the live wait for the words is not
in it).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bargein.session.core.endpointing import DEFAULT_TIERS, SEMANTIC_PRESETS, SemanticPreset, TieredPreset
from bench.harness.endpoint_runs import SilenceRun, score_all, wilson
from testdata.endpoint_clips import HELD_OUT_VOICES, Clip, held_out
from testdata.endpoint_set import DEFAULT_DIR, build

SHORT_PAUSE_MS = 468.0
BUDGET_PCT = 5.0
Wait = Callable[[SilenceRun], float]


def _pause_run(clip: Clip, runs: list[SilenceRun]) -> int | None:
    """The index of the run of silence that holds a paused clip's pause."""
    start, end = clip.pause_start_s * 1000 - 300, (clip.pause_start_s * 1000 + clip.pause_ms)
    return next((i for i, run in enumerate(runs) if start <= run.start_ms < end), None)


def _commit(wait: Wait, runs: list[SilenceRun]) -> tuple[int, float] | None:
    """The run in which the turn is committed and the commit's stream time, or None."""
    for index, run in enumerate(runs):
        needed = wait(run)
        if run.length_ms >= needed:
            return index, run.start_ms + needed
    return None


@dataclass
class Tally:
    """One policy's outcomes on a set of clips."""

    paused: int = 0
    long_cut: int = 0
    short_cut: int = 0
    complete: int = 0
    complete_cut: int = 0
    later_than_plain: int = 0
    sooner_than_plain: int = 0
    delays: list[float] | None = None

    def add(self, clip: Clip, runs: list[SilenceRun], wait: Wait, plain: Wait) -> None:
        """Count one clip."""
        self.delays = self.delays if self.delays is not None else []
        commit = _commit(wait, runs)
        if clip.kind == "paused":
            self.paused += 1
            second_part_ms = (clip.pause_start_s * 1000 + clip.pause_ms)
            self.long_cut += commit is not None and commit[1] < second_part_ms
            pause = _pause_run(clip, runs)
            if pause is None:
                return
            early = _commit(wait, runs[:pause])
            self.short_cut += early is not None or wait(runs[pause]) <= SHORT_PAUSE_MS
            return
        self.complete += 1
        if commit is None:
            return
        end_ms = clip.speech_end_s * 1000
        if commit[1] < end_ms - 50:
            self.complete_cut += 1
            return
        self.delays.append(commit[1] - end_ms)
        baseline = _commit(plain, runs)
        self.later_than_plain += baseline is None or commit[1] > baseline[1] + 1
        self.sooner_than_plain += baseline is not None and commit[1] < baseline[1] - 1

    def figures(self) -> dict[str, Any]:
        """Rates (%) with Wilson intervals, and delay percentiles (ms)."""
        delays = self.delays or [float("nan")]
        out: dict[str, Any] = {
            "paused": self.paused, "complete": self.complete,
            "long_pause_cut_pct": 100 * self.long_cut / max(1, self.paused),
            "long_pause_cut_ci": list(wilson(self.long_cut, self.paused)),
            "short_pause_cut_pct": 100 * self.short_cut / max(1, self.paused),
            "short_pause_cut_ci": list(wilson(self.short_cut, self.paused)),
            "complete_cut_pct": 100 * self.complete_cut / max(1, self.complete),
            "later_than_plain_pct": 100 * self.later_than_plain / max(1, self.complete),
            "sooner_than_plain_pct": 100 * self.sooner_than_plain / max(1, self.complete),
            "delay_p50_ms": float(np.percentile(delays, 50)), "delay_p90_ms": float(np.percentile(delays, 90)),
            "delay_mean_ms": float(np.mean(delays))}
        return out


def tally(wait: Wait, scored: dict[str, list[SilenceRun]], clips: list[Clip]) -> Tally:
    """One policy over ``clips``."""
    plain = _plain(500)
    result = Tally()
    for clip in clips:
        result.add(clip, scored[clip.id], wait, plain)
    return result


def _plain(ms: float) -> Wait:
    return lambda run: ms


def _preset(preset: TieredPreset | SemanticPreset) -> Wait:
    return lambda run: preset.silence_ms(run.probability, run.words)


def fit(scored: dict[str, list[SilenceRun]], clips: list[Clip], middle_ms: int = 500,
        long_ms: int = 1500) -> TieredPreset:
    """The tiered preset fitted on ``clips``, one tier at a time (see the module's docstring)."""
    def figures(preset: TieredPreset) -> dict[str, Any]:
        return tally(_preset(preset), scored, clips).figures()

    def over(f: dict[str, Any], *names: str) -> bool:
        return max(float(f[name]) for name in names) > BUDGET_PCT

    short_best: tuple[tuple[Any, ...], TieredPreset] | None = None
    for high in np.arange(0.5, 0.995, 0.01):  # the short tier alone (no long tier: low 0)
        for min_words in (1, 2, 3, 4):
            for short_ms in (200, 250, 300):
                preset = TieredPreset(round(float(high), 2), 0.0, min_words, short_ms, middle_ms, long_ms)
                f = figures(preset)
                key = (over(f, "short_pause_cut_pct", "complete_cut_pct"), round(float(f["delay_mean_ms"])),
                       -preset.high, -min_words, -short_ms)
                if short_best is None or key < short_best[0]:
                    short_best = (key, preset)
    assert short_best is not None
    long_best: tuple[tuple[Any, ...], TieredPreset] | None = None
    for low in np.arange(0.0, short_best[1].high, 0.01):  # then the long tier, the short one fixed
        preset = replace(short_best[1], low=round(float(low), 2))
        f = figures(preset)
        rank = (over(f, "later_than_plain_pct", "complete_cut_pct"), float(f["long_pause_cut_pct"]),
                round(float(f["delay_mean_ms"])), preset.low)
        if long_best is None or rank < long_best[0]:
            long_best = (rank, preset)
    assert long_best is not None
    return long_best[1]


def main() -> None:
    """Fit on the training voices; report training and held-out figures side by side."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--no-fit", action="store_true", help="report the committed DEFAULT_TIERS only")
    args = parser.parse_args()
    out = args.out / "full"
    clips = build(out)
    scored = score_all(out, clips)
    train = [c for c in clips if not held_out(c)]
    fitted = DEFAULT_TIERS if args.no_fit else fit(scored, train)
    print(f"load average {os.getloadavg()[0]:.2f}; fitted on the training voices: {fitted}")
    print(f"committed DEFAULT_TIERS: {DEFAULT_TIERS}")
    policies: dict[str, Wait] = {"server_vad 500 ms": _plain(500), "tiered (fitted)": _preset(fitted),
                                 "tiered (committed)": _preset(DEFAULT_TIERS),
                                 "semantic_vad auto": _preset(SEMANTIC_PRESETS["auto"])}
    groups = {"training": train, "held out: flite slt": [c for c in clips if c.voice in HELD_OUT_VOICES],
              "held out: real speech": [c for c in clips if c.family == "librivox"],
              "held out: all": [c for c in clips if held_out(c)]}
    report: dict[str, dict[str, dict[str, Any]]] = {}
    for group, subset in groups.items():
        print(f"\n{group}")
        for name, wait in policies.items():
            f = tally(wait, scored, subset).figures()
            report.setdefault(group, {})[name] = f
            lc, sc = f["long_pause_cut_ci"], f["short_pause_cut_ci"]
            assert isinstance(lc, list) and isinstance(sc, list)
            print(f"  {name:<20} paused {f['paused']:>3.0f}: long-pause cut {f['long_pause_cut_pct']:5.1f}% "
                  f"[{lc[0]:4.1f}-{lc[1]:5.1f}]  short-pause cut {f['short_pause_cut_pct']:5.1f}% "
                  f"[{sc[0]:4.1f}-{sc[1]:5.1f}] | complete {f['complete']:>3.0f}: cut {f['complete_cut_pct']:4.1f}% "
                  f"delay p50 {f['delay_p50_ms']:5.0f} p90 {f['delay_p90_ms']:5.0f} mean {f['delay_mean_ms']:5.0f} "
                  f"ms; vs 500 ms: sooner {f['sooner_than_plain_pct']:4.1f}% later {f['later_than_plain_pct']:4.1f}%")
    if args.json:
        args.json.write_text(json.dumps({"fitted": asdict(fitted), "report": report}, indent=2))


if __name__ == "__main__":
    main()
