"""Turn quality: does the agent answer only when addressed, and keep talking through a cough?

    python -m bench.quality.turn_quality [--split held_out|train|kokoro] [--verbose] [--dump results.json]

By default runs the **held-out voice families** of the family set (``testdata/make_family_set.py``:
commands, full queries, backchannels, vocal sounds and noise over a live reply, in several voices of
other engines and recorded speech, in a room, under a background talker and through a telephone
channel) and prints the held-out table with 95 % Wilson intervals per category and per family
(``bench/harness/turn_quality_families.py``). ``--split train`` runs the families the classifier is fitted on
(for ``training/fit_listening.py``, with ``--dump``); ``--split kokoro`` the older one-voice set below.

The one-voice set: runs the labelled listening set (``testdata/make_listening_set.py``, generated on first use into
``~/.cache/bargein/listening-set``) through in-process Realtime sessions with the real Silero VAD and
the real Whisper recogniser (tiny.en by default), the fake LLM and TTS (see
``bench/harness/turn_quality_runner.py`` for why), and prints:

* **false-trigger rate**: noise that got a reply (alone) or cut the agent's reply (timelines);
* **missed-query rate**: a query that got no reply (alone) or did not cut the reply it landed on;
* **false-interruption resume rate**: of the replies that noise paused, the share that resumed;
* **endpoint delay** p50/p95 in stream time: from the true end of the speech (frame energy of the clean
  sound) to the VAD's ``speech_stopped`` and to the commit, and the wall time from commit to decision;
* **speculative waste**: the share of speculative recognitions and LLM starts that were thrown away,
  and the **speculative replies leaked**: replies that reached the client for a turn that was not a
  finished query (must be 0).

Segments are streamed ``--speed`` times faster than real time (the classifier does not care; the
wall-clock figures then include the queueing that causes), except the two-part queries, whose pause
is there to test speculation; those and the timelines are streamed in real time by default, because
speculation races the speaker, the reply a timeline lands on is paced in real time, and the
false-interruption timer is wall-clock.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import time
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bargein.engines.listen.silero_vad import SileroVad
from bench.harness import cut_stages
from bench.harness import turn_quality_families as families
from bench.harness.cut_stages import TimedRecognizer, case_tag
from bench.harness.turn_quality_runner import CaseResult, run_case
from testdata import make_family_set
from testdata.make_listening_set import Case, build, default_dir, read_wav

TARGETS = {"false_trigger": 0.02, "missed_query": 0.02, "resume": 0.95}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (nan for no values)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def outcome(result: CaseResult) -> tuple[bool, str]:
    """Whether the case went as its label says, and a few words on what happened."""
    case = result.case
    verdicts = ", ".join(f"{s['decision']}" for s in result.segments if s.get("decision") != "text") or "no segment"
    if case.kind == "segment":
        answered = bool(result.answers)
        ok = {"reply": answered, "no_reply": not answered, "either": True}[case.expect]
        return ok, f"{'replied' if answered else 'no reply'} ({verdicts})"
    if case.expect == "resume":
        what = "cut" if result.cut else "resumed" if result.resumed else "paused" if result.paused else "untouched"
        return not result.cut and not result.answers, f"{what} ({verdicts})"
    answered = result.cut and bool(result.answers)
    return answered, f"{'cut and answered' if answered else 'cut' if result.cut else 'not cut'} ({verdicts})"


def rate(hits: int, total: int) -> str:
    """``hits/total (pct)``."""
    return f"{hits}/{total} ({100 * hits / total:.1f} %)" if total else "0/0 (-)"


def report(results: list[CaseResult], elapsed_s: float, args: argparse.Namespace) -> dict[str, float]:
    """Print the table (and the breakdowns); return the headline rates."""
    noise = [r for r in results if r.case.expect in ("no_reply", "resume")]
    false_triggers = [r for r in noise if not outcome(r)[0]]
    queries = [r for r in results if r.case.expect in ("reply", "cut")]
    missed = [r for r in queries if not outcome(r)[0]]
    paused = [r for r in results if r.case.expect == "resume" and r.paused]
    resumed = [r for r in paused if r.resumed and not r.cut]
    stop_lag, commit_delay, decide = turn_latencies(queries)
    ledger = [ms for r in results if r.real_time and r.case.expect == "reply" for ms in r.ledger_endpoint_ms]
    counts = [r.counts for r in results]
    asr_started = sum(c.asr_started for c in counts)
    asr_wasted = sum(c.asr_discarded for c in counts)
    llm_started = sum(c.llm_started for c in counts)
    llm_wasted = sum(c.llm_discarded for c in counts)
    leaks = [(r.case.id, leak) for r in results for leak in r.leaks()]
    both = asr_started + llm_started
    rates = {"false_trigger": len(false_triggers) / len(noise) if noise else 0.0,
             "missed_query": len(missed) / len(queries) if queries else 0.0,
             "resume": len(resumed) / len(paused) if paused else 1.0, "leaks": float(len(leaks))}

    def check(name: str, low_is_good: bool = True) -> str:
        value, target = rates[name], TARGETS[name]
        return "ok" if (value <= target if low_is_good else value >= target) else "MISSED"

    language = f" ({args.language})" if args.language else ""
    print(f"\nturn quality: {len(results)} cases ({args.set}), Whisper {args.asr_model}{language}, Silero VAD, "
          f"server_vad 500 ms, segments at {args.speed:g}x, timelines at {args.timeline_speed:g}x, "
          f"{args.concurrency} sessions at once, {elapsed_s:.0f} s\n")
    rows = [
        ("false-trigger rate (noise -> reply or cut)", rate(len(false_triggers), len(noise)), "<= 2 %",
         check("false_trigger")),
        ("missed-query rate (query -> no reply / no cut)", rate(len(missed), len(queries)), "<= 2 %",
         check("missed_query")),
        ("false-interruption resume rate", rate(len(resumed), len(paused)), ">= 95 %", check("resume", False)),
        ("end of speech -> speech_stopped p50 / p95 (stream)",
         f"{percentile(stop_lag, 50):.0f} / {percentile(stop_lag, 95):.0f} ms", "", ""),
        ("end of speech -> commit p50 / p95 (stream)",
         f"{percentile(commit_delay, 50):.0f} / {percentile(commit_delay, 95):.0f} ms", "", ""),
        (f"ledger endpoint_ms p50 / p95 (wall, {len(ledger)} real-time turns)",
         f"{percentile(ledger, 50):.0f} / {percentile(ledger, 95):.0f} ms", "", ""),
        ("commit -> listen decision p50 / p95 (wall)",
         f"{percentile(decide, 50):.0f} / {percentile(decide, 95):.0f} ms", "", ""),
        ("speculative waste: recognitions", rate(asr_wasted, asr_started), "", ""),
        ("speculative waste: LLM starts", rate(llm_wasted, llm_started), "", ""),
        ("speculative waste: all", f"{100 * (asr_wasted + llm_wasted) / both:.1f} %" if both else "-", "", ""),
        ("speculative replies leaked", str(len(leaks)), "0", "ok" if not leaks else "MISSED"),
    ]
    print_table(rows)
    breakdown(results)
    print_problems(results, leaks, false_triggers + missed)
    return rates


def turn_latencies(queries: list[CaseResult]) -> tuple[list[float], list[float], list[float]]:
    """Per query turn, ms from the end of speech to speech_stopped and to the commit, and the listen decision's ms."""
    stop_lag, commit_delay, decide = [], [], []
    for r in queries:
        end_ms = 1000 * r.case.event_end_s
        # the turn that holds the end of the speech: the first commit at or after it
        after = sorted((ms, item) for item, ms in r.commits.items() if ms >= end_ms - 50)
        if not after:
            continue
        ms, item = after[0]
        commit_delay.append(ms - end_ms)
        if item in r.stopped:
            stop_lag.append(r.stopped[item] - end_ms)
        if item in r.decided_ms:
            decide.append(r.decided_ms[item])
    return stop_lag, commit_delay, decide


def print_table(rows: list[tuple[str, str, str, str]]) -> None:
    """Print the measures as a Markdown table."""
    width = max(len(r[0]) for r in rows)
    print(f"| {'measure':<{width}} | {'value':<22} | {'target':<7} | {'':<6} |")
    print(f"|{'-' * (width + 2)}|{'-' * 24}|{'-' * 9}|{'-' * 8}|")
    for name, value, target, verdict in rows:
        print(f"| {name:<{width}} | {value:<22} | {target:<7} | {verdict:<6} |")


def print_problems(results: list[CaseResult], leaks: list[tuple[str, str]], wrong: list[CaseResult]) -> None:
    """Print the leaked replies, the cases that did not settle, and the wrongly sorted cases."""
    for case_id, leak in leaks:
        print(f"LEAK {case_id}: {leak}")
    unsettled = [r.case.id for r in results if r.timed_out or r.open_turn]
    if unsettled:
        print(f"\nnot settled within the timeout (counted as they stood): {', '.join(unsettled)}")
    if wrong:
        print("\nwrong cases:")
        for r in wrong:
            print_case(r)


def breakdown(results: list[CaseResult]) -> None:
    """Success by kind, source and SNR."""
    groups: dict[tuple[str, str], list[CaseResult]] = defaultdict(list)
    snr_groups: dict[tuple[str, str], list[CaseResult]] = defaultdict(list)
    for r in results:
        label = f"{r.case.kind}/{r.case.expect}"
        groups[(label, r.case.source)].append(r)
        snr_groups[(label, "clean" if r.case.snr_db is None else f"{r.case.snr_db:.0f} dB")].append(r)
    print("\nas labelled, by source and by SNR (a backchannel alone may be answered: 'either'):")
    for title, table in (("source", groups), ("SNR", snr_groups)):
        for (label, key), group in sorted(table.items()):
            if label.endswith("either"):
                shown = f"{sum(bool(r.answers) for r in group)} of {len(group)} answered"
            else:
                shown = rate(sum(outcome(r)[0] for r in group), len(group))
            print(f"  {label:<18} {title:<6} {key:<12} {shown}")


def print_case(r: CaseResult) -> None:
    """One line per case, then one per segment with its decision and reasons."""
    ok, what = outcome(r)
    snr = "clean" if r.case.snr_db is None else f"{r.case.snr_db:.0f}dB"
    print(f"  {'ok ' if ok else 'BAD'} {r.case.id:<34} {r.case.label:<11} {snr:<6} {what}")
    for s in r.segments:
        if s.get("decision") == "text":
            continue
        print(f"        {s['decision']:<5} {s.get('speech_ms', 0):>6.0f} ms p={s.get('mean_probability')} "
              f"+{s.get('level_above_floor_db')} dB ns={s.get('no_speech_prob')} lp={s.get('avg_logprob')} "
              f"{s.get('transcript')!r}: {'; '.join(s['reasons'])}")


async def run_all(cases: list[Case], folder: Path, args: argparse.Namespace) -> list[CaseResult]:
    """Every case, ``--concurrency`` sessions at a time, sharing one VAD and one recogniser."""
    from bargein.engines.transcribe.whisper_asr import load_whisper

    vad = await asyncio.to_thread(SileroVad)
    whisper = await asyncio.to_thread(load_whisper, args.asr_model)
    asr = TimedRecognizer(whisper)
    gate = asyncio.Semaphore(args.concurrency)

    async def one(case: Case) -> CaseResult:
        async with gate:
            case_tag.set(case.id)  # this task's sessions' recognitions are timed as this case's
            ask = read_wav(folder / case.ask) if case.ask else None
            result = await run_case(case, read_wav(folder / case.file), vad, asr, speed=args.speed,
                                    timeline_speed=args.timeline_speed, language=args.language, ask=ask)
        if args.verbose:
            print_case(result)
        return result

    # timelines first: they are the long ones, so the run ends on short segments
    ordered = sorted(cases, key=lambda c: c.kind != "timeline")
    try:
        return list(await asyncio.gather(*(one(c) for c in ordered)))
    finally:
        await whisper.aclose()


def dump(results: list[CaseResult], path: Path) -> None:
    """Every case with its label, outcome and segment decisions (features and reasons)."""
    rows = [{"case": asdict(r.case), "ok": outcome(r)[0], "outcome": outcome(r)[1], "segments": r.segments,
             "replies": [asdict(reply) for reply in r.replies.values()], "paused": r.paused, "resumed": r.resumed,
             "cut": r.cut, "asked_by_voice": r.asked_by_voice, "stream_ms": r.stream_ms, "started": r.started,
             "stopped": r.stopped,
             "speculation": asdict(r.counts)} for r in results]
    path.write_text(json.dumps(rows, indent=1, default=str))
    print(f"dump: {path}")


def plot(results: list[CaseResult], path: Path) -> None:
    """Success share by SNR for each kind of case."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = sorted({f"{r.case.kind}/{r.case.expect}" for r in results if r.case.expect != "either"})
    snrs = ["clean", "20 dB", "10 dB", "5 dB"]
    fig, ax = plt.subplots(figsize=(8, 4))
    for offset, label in enumerate(labels):
        shares = []
        for snr in snrs:
            oks = [outcome(r)[0] for r in results if f"{r.case.kind}/{r.case.expect}" == label
                   and ("clean" if r.case.snr_db is None else f"{r.case.snr_db:.0f} dB") == snr]
            shares.append(100 * sum(oks) / len(oks) if oks else math.nan)
        ax.bar([i + offset * 0.2 for i in range(len(snrs))], shares, width=0.2, label=label)
    ax.set_xticks([i + 0.3 for i in range(len(snrs))], snrs)
    ax.set_ylabel("cases as labelled (%)")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=8, loc="lower left")
    ax.set_title("bargein turn quality by signal-to-noise ratio")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", choices=("held_out", "train", "kokoro"), default="held_out",
                        help="the family set's held-out or training families, or the one-voice Kokoro set")
    parser.add_argument("--quick", action="store_true", help="the Kokoro set's small subset (about a minute)")
    parser.add_argument("--set", type=Path, help="the listening set's folder (generated there if missing)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--asr-model", default="tiny.en")
    parser.add_argument("--language", help="force the recogniser's language (for a multilingual model: en)")
    parser.add_argument("--speed", type=float, default=3.0, help="segments: times real time")
    parser.add_argument("--timeline-speed", type=float, default=1.0, help="timelines: times real time")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--only", help="run only cases whose id contains this")
    parser.add_argument("--verbose", action="store_true", help="every case, every segment's decision and reasons")
    parser.add_argument("--plot", type=Path, help="draw a PNG here")
    parser.add_argument("--dump", type=Path, help="write every case's result here as JSON (for offline analysis)")
    args = parser.parse_args()
    if args.split == "kokoro":
        args.set = args.set or default_dir(quick=args.quick)
        cases = build(args.set, seed=args.seed, quick=args.quick)
    else:
        args.set = args.set or make_family_set.CACHE / args.split
        cases = make_family_set.build(args.split, seed=args.seed, out=args.set)
    if args.only:
        cases = [c for c in cases if args.only in c.id]
    started = time.monotonic()
    results = asyncio.run(run_all(cases, args.set, args))
    if args.split == "kokoro":
        report(results, time.monotonic() - started, args)
    else:
        load = os.getloadavg()
        families.report(results, f"turn quality, {args.split} families: {len(results)} cases ({args.set}), Whisper "
                                 f"{args.asr_model}, Silero VAD, server_vad 500 ms, timelines at "
                                 f"{args.timeline_speed:g}x, {args.concurrency} sessions at once, "
                                 f"{time.monotonic() - started:.0f} s, load average {load[0]:.2f} {load[1]:.2f}")
        cut_stages.report([r.stages for r in results if r.stages is not None and r.case.category == "command"
                           and families.went_right(r)])
        wrong = families.wrong_cases(results)
        if wrong:
            print("\nwrong cases:")
            for r in wrong:
                print_case(r)
    if args.dump:
        dump(results, args.dump)
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
