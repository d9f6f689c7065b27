"""Re-judge a ``bench/quality/turn_quality.py --dump`` with the current listening classifier, in a second.

    python -m bench.quality.turn_quality_replay DUMP.json

Recognition is the slow part of the bench and does not depend on the classifier, so the features of
every segment (speech duration, level above the noise floor, transcript, no-speech probability,
average log-probability, whether a reply was playing) are enough to try a threshold or a lexicon:
the replay rebuilds each segment's statistics from them and prints the headline rates as the live
bench would have. The session's own machinery (pause timer, speculation) is not replayed: a case
counts as a false trigger or a hit when any of its segments is judged a query; over a reply (a case that
expects a cut or the reply to go on) only the segments heard while the reply played count, not the user's
own request that started it (the family set's timelines begin with one). The event rounds the
features to three decimals, so a value exactly at a threshold may come out the other way.

The event does not say which language a segment was heard in, and its ``command_probability`` is whichever
spoken-command model judged it: the English one (over a reply, a low score lets the reply go on) or the
Mandarin one (a high score cuts a segment the rules would keep). The replay takes a transcript with Han
characters as Mandarin and keeps that probability under ``command_probability_zh``, so it is never read
against the English model's threshold, and judges such a segment as the live classifier did: by the rules,
with the Mandarin model's cut.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bargein.languages import has_han
from bargein.session.core.listening import keyword
from bargein.session.core.listening.classifier import classify
from bargein.session.core.listening.decide import decide_over_reply, primed_features
from bargein.session.core.listening.segment_stats import SegmentStats
from bargein.values import Transcript

FRAME_MS = 32.0
SPEECH_LEVEL_DB = -20.0
SHARED_KEY = "command_probability"
"""Where the event puts either model's probability; over a reply the English keep reads it."""
MANDARIN_KEY = "command_probability_zh"
"""Where the replay keeps the Mandarin model's."""


def judge(segment: dict[str, Any]) -> str:
    """The current classifier's decision on one dumped ``bargein.listen.segment``."""
    segment = keyed(segment)
    spoken_in = language_of(segment)
    if segment.get("during_reply") and spoken_in == "en":  # English over a reply: the event's features alone
        return decide_over_reply(segment, primed_of(segment))[0]
    stats = SegmentStats()
    for _ in range(round(segment["speech_ms"] / FRAME_MS)):
        stats.add(0.9, SPEECH_LEVEL_DB, FRAME_MS)
    transcript = None if segment["transcript"] is None else Transcript(
        segment["transcript"], language=spoken_in, no_speech_prob=segment["no_speech_prob"] or 0.0,
        avg_logprob=segment["avg_logprob"] or 0.0)
    decision = classify(stats, transcript, during_reply=segment["during_reply"],
                        noise_floor_db=SPEECH_LEVEL_DB - segment["level_above_floor_db"]).decision
    # the dump has no encodings to score again: the Mandarin model's cut is replayed from its probability
    spoken, model = segment.get(MANDARIN_KEY), keyword.load("zh")
    if decision == "noise" and segment.get("during_reply") and transcript is not None and spoken is not None \
            and model is not None and float(spoken) >= model.threshold:
        return "query"
    return decision


def language_of(segment: dict[str, Any]) -> str:
    """``zh`` for a segment heard as Mandarin (Han characters in its transcript), else ``en``."""
    return "zh" if has_han(str(segment.get("transcript") or "")) else "en"


def keyed(segment: dict[str, Any]) -> dict[str, Any]:
    """``segment`` with its spoken-command probability under its own language's key: only the English model's
    stays under :data:`SHARED_KEY`, a Mandarin segment's moves to :data:`MANDARIN_KEY`."""
    if language_of(segment) != "zh" or SHARED_KEY not in segment:
        return segment
    moved = {key: value for key, value in segment.items() if key != SHARED_KEY}
    moved.setdefault(MANDARIN_KEY, segment[SHARED_KEY])
    return moved


def primed_of(segment: dict[str, Any]) -> dict[str, Any] | None:
    """The primed recognition's decision fields, rebuilt from the event: at its loud stretch's level where the
    event carries it (``loud_level_db``, ``loud_below_user_db``), else at the user's words' level (older dumps)."""
    if segment.get("primed_transcript") is None:
        return None
    primed = Transcript(segment["primed_transcript"], no_speech_prob=segment.get("primed_no_speech_prob") or 0.0,
                        avg_logprob=segment.get("primed_avg_logprob") or 0.0)
    level = segment.get("user_level_above_floor_db", segment["level_above_floor_db"])
    if segment.get("loud_level_db") is not None and segment.get("user_level_db") is not None:
        floor_db = float(segment["user_level_db"]) - float(level)
        return primed_features(segment, primed, float(segment["loud_level_db"]) - floor_db,
                               segment.get("loud_below_user_db"))
    return primed_features(segment, primed, float(level), segment.get("below_user_db"))


def replay(rows: list[dict[str, Any]], *, verbose: bool = False) -> dict[str, tuple[int, int]]:
    """(wrong, total) for false triggers and missed queries, (resumed, paused) for the resume rate."""
    tally = {"false_trigger": [0, 0], "missed_query": [0, 0], "resume": [0, 0]}
    for row in rows:
        case = row["case"]
        over_reply = case["expect"] in ("cut", "resume")  # what the sound does to the reply is what counts
        decisions = [judge(s) for s in row["segments"]
                     if s.get("decision") != "text" and (s.get("during_reply") or not over_reply)]
        query = "query" in decisions
        if case["expect"] in ("no_reply", "resume"):
            tally["false_trigger"][0] += query
            tally["false_trigger"][1] += 1
            if case["expect"] == "resume" and row["paused"]:
                tally["resume"][0] += not query
                tally["resume"][1] += 1
        elif case["expect"] in ("reply", "cut"):
            tally["missed_query"][0] += not query
            tally["missed_query"][1] += 1
        wrong = (query and case["expect"] in ("no_reply", "resume")) or (
            not query and case["expect"] in ("reply", "cut"))
        if verbose and wrong:
            texts = [s["transcript"] for s in row["segments"] if s.get("decision") != "text"]
            print(f"  BAD {case['id']:<34} {' / '.join(decisions) or 'no segment'} {texts}")
    return {name: (wrong, total) for name, (wrong, total) in tally.items()}


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dump", type=Path)
    parser.add_argument("--verbose", action="store_true", help="list the cases judged wrongly")
    args = parser.parse_args()
    result = replay(json.loads(args.dump.read_text()), verbose=args.verbose)
    for name, (count, total) in result.items():
        print(f"{name:<14} {count}/{total} ({100 * count / total if total else 0:.1f} %)")


if __name__ == "__main__":
    main()
