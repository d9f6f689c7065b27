"""Fit the English spoken-command model on the TRAINING voice families; report it on the HELD-OUT ones.

    python -m training.fit_keyword_en --rows rows_en.json            # hear the cases (~20 min), fit, report
    python -m training.fit_keyword_en --rows rows_en.json --write    # ... and write keyword_en.json

The rows are the listening family set's over-reply cases as a session hears them
(``training.command_encodings``: the loud stretch of the segment, recognised primed, with its voiced
encoding): the training families (``testdata/listening_split.json``) rendered with three seeds (7, the
benchmark's own, and 8 and 9: fresh voice variants, beds, SNRs and talker placements), and the held-out
families with seed 7. A command or a full query must cut (1); a backchannel, a vocal sound or a noise must
not (0). Only rows the model would judge in a session are used: 150 ms to the language's longest speech
(:data:`bargein.session.core.listening.keyword.MODELS`), the loud stretch at least 8 dB above the room (the
probe knows no user level, so the session's "not 6 dB under the user" gate is not applied).

The model is :mod:`training.fit_keyword`'s L2 logistic regression. Its penalty and threshold are chosen by
leave-one-family-out over the training families: the pair that leaves the most backchannels, vocal sounds
and noises under the threshold while scoring at most :data:`MAX_MISSED_SHARE` of the commands and queries
under it. The model only ever lets a reply go on that the recall-first interruption model would cut, so
a command it scores low is a "stop" the agent may talk through (unless a rule cuts it anyway, which the
share does not discount: it bounds the loss from above). How the bound came to be none is in
docs/results/2026-12-01-keyword-en-runs-11-15.md. The held-out families are read only to print the figures, after the
model is fixed.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from bargein.session.core.listening.keyword import MODELS
from bargein.session.core.listening.thresholds import SPOKEN_COMMAND_MIN_LEVEL_DB, SPOKEN_COMMAND_MIN_SPEECH_MS
from testdata.make_family_set import SPLIT_FILE
from training.command_encodings import recognise_rows
from training.fit_keyword import PENALTIES, Array, fit, out_of_fold

TRAIN_SEEDS = (7, 8, 9)
MAX_MISSED_SHARE = 0.0
"""Out of fold, at most this share of the training commands and queries may score "no command" (none: at
1 % the held-out sessions lost three commands for nine false cuts saved,
docs/results/2026-12-01-keyword-en-runs-11-15.md)."""


def judged(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows a session's model would judge (an encoding, and speech of a length it reads)."""
    return [row for row in rows if row.get("encoding") and row["loud_above_floor_db"] >= SPOKEN_COMMAND_MIN_LEVEL_DB
            and SPOKEN_COMMAND_MIN_SPEECH_MS <= row["speech_ms"] <= MODELS["en"].max_speech_ms]


def choose(scored: dict[float, Array], y: Array, thresholds: list[float]) -> tuple[float, float]:
    """The (penalty, threshold) keeping the most non-commands under it within :data:`MAX_MISSED_SHARE`."""
    allowed = MAX_MISSED_SHARE * float(np.sum(y > 0.5))

    def kept(pair: tuple[float, float]) -> tuple[float, float, float]:
        p = scored[pair[0]]
        missed = float(np.sum((p < pair[1]) & (y > 0.5)))
        return (float(np.sum((p < pair[1]) & (y < 0.5))) if missed <= allowed else -1.0, -missed, pair[0])

    return max(((pen, t) for pen in scored for t in thresholds), key=kept)


def table(rows: list[dict[str, Any]], probabilities: Array, threshold: float) -> None:
    """Cut / heard per category and condition."""
    counts: Counter[tuple[str, str, bool]] = Counter()
    for row, p in zip(rows, probabilities, strict=True):
        counts[(row["category"], row["condition"], bool(p >= threshold))] += 1
    for category in ("command", "query", "backchannel", "vocal", "noise"):
        cells = [f"{condition} {counts[(category, condition, True)]}/"
                 f"{counts[(category, condition, True)] + counts[(category, condition, False)]}"
                 for condition in ("room", "talker", "phone")]
        print(f"    {category:12s} cut " + "   ".join(cells))


def main() -> None:
    """Hear (or reuse ``--rows``), choose, fit on the training families, report the held-out ones, maybe write."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=Path, required=True, help="heard rows: reused, extended")
    parser.add_argument("--write", action="store_true", help="write bargein/session/core/listening/keyword_en.json")
    args = parser.parse_args()
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
    split = json.loads(SPLIT_FILE.read_text())
    recognise_rows("train", list(TRAIN_SEEDS), args.rows)
    rows = recognise_rows("held_out", [7], args.rows)
    train = judged([row for row in rows if row["split"] == "train"])
    held = judged([row for row in rows if row["split"] == "held_out"])
    x = np.array([row["encoding"] for row in train], float)
    y = np.array([row["label"] for row in train], float)
    families = [row["family"] for row in train]
    scored = {penalty: out_of_fold(x, y, families, penalty) for penalty in PENALTIES}
    thresholds = [float(t) for t in np.round(np.arange(0.05, 0.81, 0.05), 2)]
    penalty, threshold = choose(scored, y, thresholds)
    print(f"leave-one-family-out over the {len(set(families))} training families ({len(y)} rows, seeds "
          f"{', '.join(map(str, TRAIN_SEEDS))}): penalty {penalty:g}, threshold {threshold:.2f}")
    table(train, scored[penalty], threshold)
    model = fit(x, y, penalty, threshold)
    held_p = np.array([model.probability(row["encoding"]) for row in held], float)
    print(f"HELD-OUT families {', '.join(split['held_out'])} (never fitted on; {len(held)} rows):")
    table(held, held_p, threshold)
    if args.write:
        MODELS["en"].path.write_text(model.to_json(
            fitted_on=split["train"], held_out=split["held_out"], penalty=penalty, seeds=list(TRAIN_SEEDS),
            recogniser="tiny.en", clip="the segment's loud stretch, primed",
            fitted_by="python -m training.fit_keyword_en"))
        print(f"wrote {MODELS['en'].path.name}")
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
