"""Re-judge a ``bench/turn_quality.py --dump`` with the current listening classifier, in a second.

    python -m bench.turn_quality_replay DUMP.json

Recognition is the slow part of the bench and does not depend on the classifier, so the features of
every segment (speech duration, level above the noise floor, transcript, no-speech probability,
average log-probability, whether a reply was playing) are enough to try a threshold or a lexicon:
the replay rebuilds each segment's statistics from them and prints the headline rates as the live
bench would have. The session's own machinery (pause timer, speculation) is not replayed: a case
counts as a false trigger or a hit when any of its segments is judged a query; over a reply (a case that
expects a cut or the reply to go on) only the segments heard while the reply played count, not the user's
own request that started it (the family set's timelines begin with one). The event rounds the
features to three decimals, so a value exactly at a threshold may come out the other way.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bargein.engines.base import Transcript
from bargein.listening_model.decide import decide_over_reply, primed_features
from bargein.session.core.classifier import SegmentStats, classify

FRAME_MS = 32.0
SPEECH_LEVEL_DB = -20.0


def judge(segment: dict[str, Any]) -> str:
    """The current classifier's decision on one dumped ``bargein.listen.segment``."""
    if segment.get("during_reply"):  # over a reply the decision reads the event's features alone
        return decide_over_reply(segment, primed_of(segment))[0]
    stats = SegmentStats()
    for _ in range(round(segment["speech_ms"] / FRAME_MS)):
        stats.add(0.9, SPEECH_LEVEL_DB, FRAME_MS)
    transcript = None if segment["transcript"] is None else Transcript(
        segment["transcript"], no_speech_prob=segment["no_speech_prob"] or 0.0,
        avg_logprob=segment["avg_logprob"] or 0.0)
    return classify(stats, transcript, during_reply=segment["during_reply"],
                    noise_floor_db=SPEECH_LEVEL_DB - segment["level_above_floor_db"]).decision


def primed_of(segment: dict[str, Any]) -> dict[str, Any] | None:
    """The primed recognition's decision fields, rebuilt from the event (at the user's level: the event does
    not carry the loud stretch's own)."""
    if segment.get("primed_transcript") is None:
        return None
    primed = Transcript(segment["primed_transcript"], no_speech_prob=segment.get("primed_no_speech_prob") or 0.0,
                        avg_logprob=segment.get("primed_avg_logprob") or 0.0)
    level = segment.get("user_level_above_floor_db", segment["level_above_floor_db"])
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
