"""Two ``bench/quality/turn_quality.py --dump`` runs side by side: per category and condition, the cases that went
as labelled, the replies paused, and the barge-in onsets heard over the reply.

    python -m bench.quality.turn_quality_pauses BEFORE.json AFTER.json

For a change to when a turn begins over a reply (the half-hop onset stream): a pause is the reply stopping for a
segment to be judged, which a listener hears even when the reply resumes; on noise, backchannels and vocal sounds
it is the false interruption the change could add. ``onsets`` counts every ``speech_started`` of a case from 100 ms
before its sound begins on (the timeline's own spoken request, which started the reply, is not one). A case pairs
with the same case id in the other dump; cases in one dump only are left out and counted.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any


def onsets_over_reply(row: dict[str, Any]) -> int:
    """``speech_started`` onsets from 100 ms before the sound the case is about (its event's start, stream ms) on."""
    event_ms = 1000.0 * float(row["case"]["event_start_s"])
    return sum(1 for ms in row["started"].values() if float(ms) >= event_ms - 100.0)


def tally(rows: list[dict[str, Any]]) -> dict[tuple[str, str], list[int]]:
    """(category, condition) -> [cases, as labelled, paused, onsets]."""
    table: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for row in rows:
        cell = table[(row["case"]["category"], row["case"]["condition"])]
        cell[0] += 1
        cell[1] += bool(row["ok"])
        cell[2] += bool(row["paused"])
        cell[3] += onsets_over_reply(row)
    return table


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args()
    before, after = (json.loads(path.read_text()) for path in (args.before, args.after))
    shared = {row["case"]["id"] for row in before} & {row["case"]["id"] for row in after}
    left_out = len(before) + len(after) - 2 * len(shared)
    old = tally([row for row in before if row["case"]["id"] in shared])
    new = tally([row for row in after if row["case"]["id"] in shared])
    print(f"{len(shared)} cases in both dumps ({left_out} in one only, left out)")
    print(f"{'category':<12} {'condition':<8} {'n':>4}  {'as labelled':>15}  {'paused':>11}  {'onsets':>11}")
    totals = [[0, 0, 0, 0], [0, 0, 0, 0]]
    for key in sorted(old):
        a, b = old[key], new[key]
        for total, cell in zip(totals, (a, b), strict=True):
            for index in range(4):
                total[index] += cell[index]
        print(f"{key[0]:<12} {key[1]:<8} {a[0]:>4}  {a[1]:>6} -> {b[1]:>5}  {a[2]:>4} -> {b[2]:>4}  "
              f"{a[3]:>4} -> {b[3]:>4}")
    a, b = totals
    print(f"{'all':<12} {'':<8} {a[0]:>4}  {a[1]:>6} -> {b[1]:>5}  {a[2]:>4} -> {b[2]:>4}  {a[3]:>4} -> {b[3]:>4}")
    changed = sorted(row_id for row_id in shared if _ok(before, row_id) != _ok(after, row_id))
    print(f"cases whose outcome changed ({len(changed)}): " + ", ".join(
        f"{row_id} ({'right' if _ok(after, row_id) else 'wrong'} after)" for row_id in changed))


def _ok(rows: list[dict[str, Any]], case_id: str) -> bool:
    return next(bool(row["ok"]) for row in rows if row["case"]["id"] == case_id)


if __name__ == "__main__":
    main()
