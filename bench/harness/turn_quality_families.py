"""The family set's report: held-out voice families, per category, condition and family, with Wilson intervals.

Used by ``bench/quality/turn_quality.py`` when it runs the family set (``testdata/make_family_set.py``). A
case went as labelled when a command or query cut the reply it landed on (after the sound began) and
was answered, or when a backchannel, vocal sound or noise let the reply go on (not cut, nothing
answered). The headline rows pool the ``room`` and ``talker`` conditions; the telephone channel (the
talker mix through G.711) has rows of its own, with its own targets.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from bench.harness.turn_quality_runner import CaseResult

Z95 = 1.959964
MAIN_CONDITIONS = ("room", "talker")


def wilson(hits: int, total: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95 % by default); (0, 1) for no trials."""
    if total == 0:
        return 0.0, 1.0
    p = hits / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return max(0.0, centre - half), min(1.0, centre + half)


def went_right(result: CaseResult) -> bool:
    """Whether a family-set case did what its category asks."""
    case = result.case
    if case.expect == "cut":
        cut_at = result.stream_ms.get("cut")
        return result.cut and bool(result.answers) and cut_at is not None and cut_at >= 1000 * case.event_start_s
    return not result.cut and not result.answers


def decision_ms(result: CaseResult) -> float | None:
    """From the end of the sound to the reply's fate: ``response.done`` cancelled, or ``bargein.reply.resumed``."""
    what = "cut" if result.case.expect == "cut" else "resumed"
    at = result.stream_ms.get(what)
    return None if at is None or not went_right(result) else at - 1000 * result.case.event_end_s


def split_by_endpoint(results: list[CaseResult], silence_ms: float = 500.0) -> tuple[list[float], list[float]]:
    """End-of-command-to-cut times, split by whether the cut came before the turn's endpoint silence ran out
    (a command spotted in the speculative transcript) or after it (the final transcript decided)."""
    early: list[float] = []
    late: list[float] = []
    for r in results:
        ms = decision_ms(r) if r.case.category == "command" else None
        if ms is None:
            continue
        start_ms, end_ms = 1000 * r.case.event_start_s, 1000 * r.case.event_end_s
        stops = [stop for item, stop in r.stopped.items()
                 if r.started.get(item, 0.0) <= end_ms + 150 and stop >= start_ms - 150]
        if stops:
            (early if r.stream_ms["cut"] < stops[0] + silence_ms else late).append(ms)
    return early, late


def cell(results: list[CaseResult], *, invert: bool = False) -> str:
    """``hits/total  pct  [low, high]``; ``invert`` counts the failures (a false-trigger rate)."""
    total = len(results)
    hits = sum(went_right(r) != invert for r in results)
    if not total:
        return "-"
    low, high = wilson(hits, total)
    return f"{hits}/{total}  {100 * hits / total:5.1f} %  [{100 * low:.1f}, {100 * high:.1f}]"


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else math.nan


def _pick(results: Iterable[CaseResult], test: Callable[[CaseResult], bool]) -> list[CaseResult]:
    return [r for r in results if test(r)]


Target = tuple[str, list[CaseResult], bool, str, Callable[[float, float], bool]]


def headline(results: list[CaseResult]) -> list[Target]:
    """(name, cases, counts failures, target, met(rate, lower bound)) for each target of issue 10."""
    main = _pick(results, lambda r: r.case.condition in MAIN_CONDITIONS)
    phone = _pick(results, lambda r: r.case.condition == "phone")

    def of(cases: list[CaseResult], *categories: str) -> list[CaseResult]:
        return _pick(cases, lambda r: r.case.category in categories)

    return [
        ("commands / short questions: interrupt recall", of(main, "command"), False, ">= 98 % (low >= 95)",
         lambda rate, low: rate >= 0.98 and low >= 0.95),
        ("full queries: interrupt recall", of(main, "query"), False, ">= 98 %", lambda rate, low: rate >= 0.98),
        ("backchannels + vocal sounds: rejected", of(main, "backchannel", "vocal"), False, ">= 95 %",
         lambda rate, low: rate >= 0.95),
        ("noise: false triggers", of(main, "noise"), True, "<= 2 %", lambda rate, low: rate <= 0.02),
        ("telephone + talker: command recall", of(phone, "command"), False, ">= 95 %", lambda rate, low: rate >= 0.95),
        ("telephone + talker: backchannels + vocal rejected", of(phone, "backchannel", "vocal"), False, ">= 90 %",
         lambda rate, low: rate >= 0.90),
        ("telephone + talker: full queries recall", of(phone, "query"), False, "", lambda rate, low: True),
        ("telephone + talker: noise false triggers", of(phone, "noise"), True, "", lambda rate, low: True),
    ]


def report(results: list[CaseResult], header: str) -> dict[str, Any]:
    """Print the held-out table and the breakdowns; return the headline figures."""
    print(f"\n{header}\n")
    rows: list[tuple[str, str, str, str]] = []
    figures: dict[str, Any] = {}
    for name, cases, invert, target, met in headline(results):
        total = len(cases)
        hits = sum(went_right(r) != invert for r in cases)
        rate = hits / total if total else math.nan
        low, _ = wilson(sum(went_right(r) for r in cases), total)
        verdict = "" if not target or not total else ("ok" if met(rate, low) else "MISSED")
        rows.append((name, cell(cases, invert=invert), target, verdict))
        figures[name] = (hits, total)
    command_ms = [ms for r in results if r.case.category == "command" and (ms := decision_ms(r)) is not None]
    resume_ms = [ms for r in results if r.case.expect == "resume" and r.paused and (ms := decision_ms(r)) is not None]
    p50 = _median(command_ms)
    rows.append((f"end of command -> response.done cancelled, p50 ({len(command_ms)} cuts)", f"{p50:.0f} ms",
                 "<= 300 ms", "ok" if p50 <= 300 else "MISSED"))
    rows.append((f"end of sound -> reply.resumed, p50 ({len(resume_ms)} resumes)", f"{_median(resume_ms):.0f} ms",
                 "", ""))
    early, late = split_by_endpoint(results)
    rows.append((f"  of which cut before the endpoint ({len(early)}; spotted at the first pause), p50",
                 f"{_median(early):.0f} ms", "", ""))
    rows.append((f"  of which cut after the endpoint and final recognition ({len(late)}), p50",
                 f"{_median(late):.0f} ms", "", ""))
    figures["command_decision_p50_ms"] = p50
    width = max(len(r[0]) for r in rows)
    print(f"| {'held-out measure':<{width}} | {'cases  rate  [95 % Wilson]':<30} | {'target':<19} |        |")
    print(f"|{'-' * (width + 2)}|{'-' * 32}|{'-' * 21}|--------|")
    for name, value, target, verdict in rows:
        print(f"| {name:<{width}} | {value:<30} | {target:<19} | {verdict:<6} |")
    breakdowns(results)
    return figures


def breakdowns(results: list[CaseResult]) -> None:
    """As labelled, by category x condition and by family x category."""
    by_condition: dict[tuple[str, str], list[CaseResult]] = defaultdict(list)
    by_family: dict[tuple[str, str], list[CaseResult]] = defaultdict(list)
    for r in results:
        by_condition[(r.case.category, r.case.condition)].append(r)
        by_family[(r.case.family, r.case.category)].append(r)
    early = [r for r in results if r.cut and r.stream_ms.get("cut", math.inf) < 1000 * r.case.event_start_s]
    print(f"\nreplies cut before the case's sound began (by the background talker alone): {len(early)} of "
          f"{len(results)} cases")
    print("\nas labelled (cut for command/query; went on for the rest), by category and condition:")
    for (category, condition), group in sorted(by_condition.items()):
        print(f"  {category:<12} {condition:<7} {cell(group)}")
    print("\nby family and category (all conditions):")
    for (family, category), group in sorted(by_family.items()):
        print(f"  {family:<18} {category:<12} {cell(group)}")


def wrong_cases(results: list[CaseResult]) -> list[CaseResult]:
    """The cases that did not go as labelled."""
    return [r for r in results if not went_right(r)]
