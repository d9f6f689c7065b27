"""The listening family set's over-reply sounds heard as a session hears them, with the encoder's view of each.

    python -m training.command_encodings --split train --seeds 7,8,9 --rows rows_en.json

What ``python -m training.fit_keyword_en`` fits the English spoken-command model on. Each case of
the family set (``testdata/make_family_set.py``: a command, a full query, a backchannel, a vocal sound or
a noise landing on a live reply, in a room, over a background talker or on a telephone line) goes through
the Silero VAD as the session's endpointing would (``bench.quality.over_reply_probe``); the segment holding the
case's sound is cut to its *loud stretch* (the user's own voice, :func:`~bargein.session.core.listening.over_reply.
loud_stretch`, with 150 ms either side) and recognised by Whisper tiny.en primed with the vocabulary, as
the session's second recognition is at the endpoint. The row keeps what the session's decision would
read: the loud stretch's voiced encoding (:mod:`bargein.engines.transcribe.voiced_encoding`), the
segment's speech, the loud stretch's level above the room, and both transcripts. (Over a paused reply a
session usually takes the primed recognition made at the first pause, whose clip ends where the audio
heard so far ends: its margin after the stretch can be shorter.) Another ``--seeds`` value renders every
voice, bed, SNR and talker placement afresh (the families and texts stay those of the split).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bargein.engines.listen.silero_vad import FRAME_SAMPLES, SileroModel
from bargein.engines.transcribe.whisper_asr import load_whisper
from bargein.engines.transcribe.whisper_decode import FINAL, WhisperCore
from bargein.session.core.listening.over_reply import loud_level_db, loud_stretch, vocabulary_prompt
from bargein.session.core.listening.thresholds import SPAN_MARGIN_MS
from bench.harness.offline_segments import FRAME_MS, PADDING_MS, RATE, floor_db, load_wav, segments, vad_frames
from testdata.make_family_set import CACHE, build

LABELS = {"command": 1, "query": 1, "backchannel": 0, "vocal": 0, "noise": 0}
"""Must the sound cut the reply (1) or let it go on (0)?"""
ENCODED = replace(FINAL, encoding_languages=frozenset({"en"}))


def folder_of(split: str, seed: int) -> Path:
    """Where the split's set rendered with ``seed`` lives (the benchmark's own set for seed 7)."""
    return CACHE / (split if seed == 7 else f"{split}-seed{seed}")


def case_row(core: WhisperCore, vad: SileroModel, folder: Path, case: dict[str, Any]) -> dict[str, Any]:
    """One case as the session would hear it over a reply (no ``encoding`` when the VAD found nothing)."""
    row: dict[str, Any] = {key: case.get(key) for key in ("id", "category", "condition", "family", "text")}
    row["label"] = LABELS[case["category"]]
    audio = load_wav(folder / case["file"])
    probabilities, levels = vad_frames(vad, audio)
    start, end = case["event_start_s"] * 1000 / FRAME_MS, case["event_end_s"] * 1000 / FRAME_MS
    found = [s for s in segments(probabilities) if s[0] < end and s[1] > start]
    if not found:
        return row
    first, last = found[0]
    stretch = loud_stretch(levels[first:last], FRAME_MS) or (0, last - first)
    margin = int(SPAN_MARGIN_MS * RATE / 1000)
    lo = max(0, (first + stretch[0]) * FRAME_SAMPLES - margin)
    hi = min(len(audio), (first + stretch[1]) * FRAME_SAMPLES + margin)
    primed = core.transcribe(audio[lo:hi], language="en", prompt=vocabulary_prompt("en"), options=ENCODED)
    clip_first = max(0, first - int(PADDING_MS / FRAME_MS))
    plain = core.transcribe(audio[clip_first * FRAME_SAMPLES:last * FRAME_SAMPLES + int(0.2 * RATE)],
                            language="en")
    row.update(speech_ms=FRAME_MS * sum(p >= 0.5 for p in probabilities[first:last]),
               loud_ms=FRAME_MS * (stretch[1] - stretch[0]),
               loud_above_floor_db=round(loud_level_db(levels[first:last]) - floor_db(probabilities, levels,
                                                                                        first), 1),
               plain=plain.text.strip(), primed=primed.text.strip(), primed_avg_logprob=round(primed.avg_logprob, 3),
               encoding=list(primed.voiced_encoding))
    return row


def recognise_rows(split: str, seeds: list[int], keep: Path | None) -> list[dict[str, Any]]:
    """Every case of ``split`` rendered with each seed, heard; rows already in ``keep`` are reused and the
    file is rewritten as each seed ends."""
    rows: list[dict[str, Any]] = json.loads(keep.read_text()) if keep is not None and keep.is_file() else []
    done = {(row["split"], row["seed"]) for row in rows}
    core = load_whisper("tiny.en").core
    vad = SileroModel()
    for seed in seeds:
        if (split, seed) in done:
            continue
        folder = folder_of(split, seed)
        build(split, seed=seed, out=folder)
        cases = [c for c in json.loads((folder / "manifest.json").read_text())["cases"] if c["category"] in LABELS]
        began = time.monotonic()
        for case in cases:
            rows.append({"split": split, "seed": seed, **case_row(core, vad, folder, case)})
        print(f"  {split} seed {seed}: {len(cases)} cases in {time.monotonic() - began:.0f} s", flush=True)
        if keep is not None:
            keep.write_text(json.dumps(rows))
    return rows


def main() -> None:
    """Hear the cases and write the rows."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=("train", "held_out"), default="train")
    parser.add_argument("--seeds", default="7", help="comma-separated; 7 is the benchmark's own rendering")
    parser.add_argument("--rows", type=Path, required=True, help="the rows file (reused, extended)")
    args = parser.parse_args()
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
    rows = recognise_rows(args.split, [int(s) for s in args.seeds.split(",")], args.rows)
    print(f"{len(rows)} rows in {args.rows}")


if __name__ == "__main__":
    main()
