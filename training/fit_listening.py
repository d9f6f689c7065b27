"""Fit the interruption model on the TRAINING voice families, and write ``bargein/session/core/listening/weights.json``.

    python -m bench.quality.turn_quality --split train --timeline-speed 1.5 --dump train.json   # features, ~30 min
    python -m training.fit_listening train.json [--write]

Every ``bargein.listen.segment`` of the dump is a row: its features (``bargein/session/core/listening/features.py``)
and a label. A segment that overlaps the case's sound (from ``speech_started`` to ``speech_stopped``)
is labelled by the case's category (command or query: 1; backchannel, vocal sound, noise: 0); a segment
that does not (the background talker, alone) is 0. Only segments heard while the agent was speaking
are used: that is where the model decides.

The model is an L2-regularised logistic regression (Newton's method, numpy: no scikit-learn anywhere)
with the classes weighed so that a missed interruption costs :data:`MISS_COST` false ones. The
regularisation and the threshold are chosen by **leave-one-family-out** cross-validation over the
training families (each family is predicted by a model fitted on the others), which is also what is
printed as the expected error; the held-out families of ``testdata/listening_split.json`` are never
read here. Words the recogniser wrote for a command in the training families that are not yet in the
lexicon are listed, as candidates for :data:`bargein.session.core.listening.lexicon.MISHEARD`.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bargein.session.core.listening.decide import by_rule, command_model_keeps
from bargein.session.core.listening.features import NAMES, vector, words_of
from bargein.session.core.listening.lexicon import BACKCHANNELS, COMMAND_WORDS, MISHEARD, QUESTION_WORDS
from bargein.session.core.listening.model import WEIGHTS, InterruptionModel
from testdata.make_family_set import split_families

MISS_COST = 3.0
"""A command ignored is worse than a reply paused for nothing: it weighs three false interruptions."""
PENALTIES = (0.01, 0.1, 1.0, 10.0)
SLOP_MS = 150.0
Rows = tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], list[str], list[dict[str, Any]]]


def rows(dump: list[dict[str, Any]], families: set[str], *, ruled: bool = False) -> Rows:
    """Features, labels, family and the segment itself, for every judged segment heard over a reply
    (with ``ruled`` False, only those the rules leave to the model)."""
    xs, ys, fams, segs = [], [], [], []
    for row in dump:
        case = row["case"]
        if case["family"] not in families and case["family"] != "noise":
            continue
        start_ms, end_ms = 1000 * case["event_start_s"], 1000 * case["event_end_s"]
        for segment in row["segments"]:
            if segment.get("decision") == "text" or not segment.get("during_reply"):
                continue
            item = segment["item_id"]
            seg_start = row["started"].get(item, 0.0)
            seg_end = row["stopped"].get(item, float("inf"))
            overlaps = seg_start <= end_ms + SLOP_MS and seg_end >= start_ms - SLOP_MS
            if not ruled and by_rule(segment) is not None:
                continue
            xs.append(vector(segment))
            ys.append(float(overlaps and case["category"] in ("command", "query")))
            fams.append(case["family"] if case["family"] != "noise" else f"noise-{case['source']}")
            segs.append({**segment, "case": case["id"], "category": case["category"], "label": ys[-1]})
    return np.array(xs), np.array(ys), fams, segs


def fit(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], penalty: float) -> InterruptionModel:
    """Weighted L2 logistic regression by Newton's method on standardised features."""
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-6] = 1.0
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    weight = np.where(y > 0.5, MISS_COST, 1.0)
    beta = np.zeros(z.shape[1])
    ridge = np.full(z.shape[1], penalty)
    ridge[-1] = 0.0  # the intercept is not shrunk
    for _ in range(50):
        p = 1 / (1 + np.exp(-np.clip(z @ beta, -40, 40)))
        gradient = z.T @ (weight * (p - y)) + ridge * beta
        hessian = (z * (weight * p * (1 - p))[:, None]).T @ z + np.diag(ridge + 1e-9)
        step = np.linalg.solve(hessian, gradient)
        beta -= step
        if np.max(np.abs(step)) < 1e-8:
            break
    return InterruptionModel(NAMES, mean, scale, beta[:-1], float(beta[-1]), 0.5)


def cross_validated(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], fams: list[str],
                    penalty: float) -> npt.NDArray[np.float64]:
    """Each training family's probabilities from a model fitted on the other families (noise pooled in)."""
    out = np.zeros(len(y))
    groups = np.array([f if not f.startswith("noise-") else "noise" for f in fams])
    for family in sorted(set(groups)):
        held = groups == family
        model = fit(x[~held], y[~held], penalty)
        out[held] = [model.probability_of(v) for v in x[held]]
    return out


def cost(p: npt.NDArray[np.float64], y: npt.NDArray[np.float64], threshold: float) -> float:
    """Weighted errors at ``threshold``."""
    said = p >= threshold
    return float(MISS_COST * np.sum((y > 0.5) & ~said) + np.sum((y < 0.5) & said))


def choose(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], fams: list[str]) -> tuple[float, float]:
    """The penalty and threshold with the least cross-validated cost."""
    best = (float("inf"), 1.0, 0.5)
    for penalty in PENALTIES:
        p = cross_validated(x, y, fams, penalty)
        for threshold in np.arange(0.05, 0.96, 0.025):
            best = min(best, (cost(p, y, float(threshold)), penalty, float(threshold)))
    return best[1], best[2]


def summary(p: npt.NDArray[np.float64], y: npt.NDArray[np.float64], fams: list[str], threshold: float) -> None:
    """Per-family recall and false-interruption rate of cross-validated predictions."""
    by: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for prob, label, fam in zip(p, y, fams, strict=True):
        cell = by[fam]
        if label > 0.5:
            cell[0] += prob >= threshold
            cell[1] += 1
        else:
            cell[2] += prob >= threshold
            cell[3] += 1
    print(f"{'family (left out)':<22} {'interruptions kept':>20} {'others cut':>14}")
    for fam, (hit, pos, false, neg) in sorted(by.items()):
        print(f"{fam:<22} {f'{hit}/{pos}':>20} {f'{false}/{neg}':>14}")


def pipeline(dump: list[dict[str, Any]], families: set[str], segs: list[dict[str, Any]],
             p: npt.NDArray[np.float64], threshold: float) -> None:
    """Case by case, rules then the left-one-family-out model: as labelled, by category and condition."""
    model_says = {(seg["case"], seg["item_id"]): prob >= threshold for seg, prob in zip(segs, p, strict=True)}
    tally: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for row in dump:
        case = row["case"]
        if case["family"] not in families and case["family"] != "noise":
            continue
        cut = False
        for segment in row["segments"]:
            if segment.get("decision") == "text" or not segment.get("during_reply"):
                continue
            ruled = by_rule(segment)
            cut |= ruled[0] == "query" if ruled else (model_says.get((case["id"], segment["item_id"]), False)
                                                      and not command_model_keeps(segment))
        cell = tally[(case["category"], case["condition"])]
        cell[0] += cut == (case["expect"] == "cut")
        cell[1] += 1
    print("cases as labelled, rules + left-one-family-out model + the spoken-command model's keep "
          "(segments judged as dumped; primed recognitions not re-judged):")
    for (category, condition), (ok, total) in sorted(tally.items()):
        print(f"  {category:<12} {condition:<7} {ok}/{total}")


def misheard(segs: list[dict[str, Any]]) -> Counter[str]:
    """Words in command segments that no lexicon knows: candidates for MISHEARD."""
    known = COMMAND_WORDS | QUESTION_WORDS | MISHEARD | BACKCHANNELS
    seen: Counter[str] = Counter()
    for seg in segs:
        words = words_of(str(seg.get("transcript") or ""))
        if seg["category"] == "command" and seg["label"] > 0.5 and words and not any(w in known for w in words[:3]):
            seen.update(words[:3])
    return seen


def main() -> None:
    """Command line."""
    global MISS_COST
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dumps", type=Path, nargs="+", help="bench/quality/turn_quality.py --split train --dump files")
    parser.add_argument("--write", action="store_true", help=f"write {WEIGHTS}")
    parser.add_argument("--miss-cost", type=float, default=3.0, help="a missed interruption, in false ones (3)")
    args = parser.parse_args()
    MISS_COST = args.miss_cost
    train, _ = split_families("train")
    dump = [row for path in args.dumps for row in json.loads(path.read_text())]
    x, y, fams, segs = rows(dump, set(train))
    print(f"{len(y)} segments over a reply from {len(set(fams))} training families and noise; "
          f"{int(y.sum())} interruptions")
    penalty, threshold = choose(x, y, fams)
    print(f"chosen by leave-one-family-out: L2 penalty {penalty:g}, threshold {threshold:.3f}")
    summary(cross_validated(x, y, fams, penalty), y, fams, threshold)
    model = fit(x, y, penalty)
    model = InterruptionModel(model.names, model.mean, model.scale, model.coef, model.intercept, threshold)
    for name, weight in sorted(zip(NAMES, model.coef, strict=True), key=lambda item: -abs(item[1])):
        print(f"  {name:<26} {weight:+.3f}")
    pipeline(dump, set(train), segs, cross_validated(x, y, fams, penalty), threshold)
    print("words in training command segments that no list knows:", misheard(segs).most_common(20))
    if args.write:
        WEIGHTS.write_text(model.to_json(
            fitted_on=sorted(train), method="L2 logistic regression, Newton's method (training/fit_listening.py)",
            penalty=penalty, miss_cost=MISS_COST, segments=len(y), interruptions=int(y.sum())))
        print(f"wrote {WEIGHTS}")


if __name__ == "__main__":
    main()
