"""Counting the endpoint silence from the voice's fade: how much sooner turns end, and which pauses it cuts.

    python -m bench.quality.voice_fade [--json figures.json] [--quick]

Replays the real :class:`~bargein.session.core.machine.DuplexMachine` (plain 500 ms ``server_vad``, which is also
the tiered default's middle tier) over the endpoint set (``testdata.endpoint_set``, built on first use), with real
Silero probabilities and frame levels, twice: the silence counted from Silero's offset (``voice_fade`` off, as
before) and from where the voice fell to the room's level, within 12 dB of the noise floor (on, the default).
Per split (the held-out voices of ``training.endpoint_tiers``: Flite ``slt`` and real recorded speech;
``CLEAR_VOICE_DB`` was chosen with
``--clear-db`` on the training voices, whose rows are shown for comparison) and per room:

* **complete clips**: the commit's delay after the last word's end (the set's ``speech_end_s``), and clips
  committed more than 50 ms before it (cut);
* **paused clips** with the pause trimmed to 300, 400, 500 and 600 ms of true silence (the set's 600 to
  1,200 ms pauses, shortened in their middle): the share committed inside the pause (a false cut-off).

``--clear-db`` sets how far clear of the floor a voice must stand for the rule to apply.

Rooms: the set as recorded (a -65 dBFS hiss), and white noise 20 and 10 dB under the speech's level (at 10 and
20 dB the voice does not stand ``CLEAR_VOICE_DB`` clear of the floor, so the fade should change nothing there).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from bargein.engines.listen.silero_vad import SileroModel
from bargein.session.core import vocabulary as v
from bargein.session.core import voice_fade
from bargein.session.core.machine import DuplexMachine
from bargein.session.core.settings import TurnSettings
from bench.harness.endpoint_runs import wilson
from testdata.endpoint_clips import Clip, held_out, load
from testdata.endpoint_set import DEFAULT_DIR, build

RATE = 16_000
FRAME = 512
PAUSES_MS = (300, 400, 500, 600)
ROOMS: dict[str, float | None] = {"as recorded": None, "noise 20 dB under": 20.0, "noise 10 dB under": 10.0}
Frames = list[tuple[float, float, float, float]]


def vad_frames(model: SileroModel, audio: npt.NDArray[np.float32]) -> Frames:
    """(start ms, end ms, probability, level dBFS) of every 32 ms frame, as the session computes them."""
    count = len(audio) // FRAME
    context = np.zeros((1, 64), np.float32)
    state = np.zeros((2, 1, 128), np.float32)
    out: Frames = []
    for index in range(count):
        frame = audio[index * FRAME:(index + 1) * FRAME][None, :]
        probability, state = model.step(frame, context, state)
        context = frame[:, -64:]
        level = 10.0 * math.log10(float(np.mean(np.square(frame))) + 1e-10)
        out.append((index * 32.0, (index + 1) * 32.0, float(probability[0]), level))
    return out


def commits(frames: Frames, *, fade: bool) -> list[float]:
    """Stream times (ms) at which the machine commits a turn."""
    counter = itertools.count()
    settings = TurnSettings()
    settings = replace(settings, endpointing=replace(settings.endpointing, voice_fade=fade))
    machine = DuplexMachine(lambda prefix: f"{prefix}_{next(counter)}", settings)
    found: list[float] = []
    for start, end, probability, level in frames:
        machine.feed(v.VadFrame(start, end, probability, level))
        found += [action.end_ms for action in machine.take_actions() if isinstance(action, v.CommitBuffer)]
    return found


def with_room(audio: npt.NDArray[np.float32], under_db: float | None, seed: int) -> npt.NDArray[np.float32]:
    """The clip with white noise ``under_db`` below its speech level (the loud frames' RMS)."""
    if under_db is None:
        return audio
    frames = audio[:len(audio) // 160 * 160].reshape(-1, 160)
    levels = np.sqrt(np.mean(np.square(frames), axis=1))
    speech_rms = float(np.sqrt(np.mean(np.square(levels[levels >= np.percentile(levels, 70)]))))
    noise = np.random.default_rng(seed).normal(0.0, speech_rms * 10 ** (-under_db / 20), len(audio))
    return (audio + noise).astype(np.float32)


def trimmed(audio: npt.NDArray[np.float32], clip: Clip, pause_ms: int) -> tuple[npt.NDArray[np.float32], float]:
    """A paused clip with its pause cut to ``pause_ms`` in the middle; and where its second part now starts (ms)."""
    start = int(clip.pause_start_s * RATE)
    cut = int((clip.pause_ms - pause_ms) * RATE / 1000)
    middle = start + int(clip.pause_ms * RATE / 2000) - cut // 2
    return np.concatenate([audio[:middle], audio[middle + cut:]]), clip.pause_start_s * 1000 + pause_ms


def run(clips: list[Clip], model: SileroModel) -> dict[str, Any]:
    """Every clip in every room, both ways: the tallies per split, room and policy."""
    tallies: dict[tuple[str, str, bool], dict[str, list[float]]] = {}
    for number, clip in enumerate(clips):
        audio = load(DEFAULT_DIR, clip)
        split = ("held out: real speech" if clip.family == "librivox" else "held out: Flite slt" if held_out(clip)
                 else "training")
        for room, under in ROOMS.items():
            cases: list[tuple[str, npt.NDArray[np.float32], float]] = []
            if clip.kind == "complete":
                cases.append(("complete", audio, clip.speech_end_s * 1000))
            else:
                cases += [(f"pause {ms}", *trimmed(audio, clip, ms)) for ms in PAUSES_MS if ms <= clip.pause_ms]
            for kind, samples, mark_ms in cases:
                frames = vad_frames(model, with_room(samples, under, number))
                for fade in (False, True):
                    found = commits(frames, fade=fade)
                    tally = tallies.setdefault((split, room, fade), {})
                    if kind == "complete":
                        first = next((c for c in found if c >= mark_ms - 50), None)
                        cut = any(c < mark_ms - 50 for c in found)
                        tally.setdefault("cut", []).append(float(cut))
                        if first is not None and not cut:
                            tally.setdefault("delay", []).append(first - mark_ms)
                    else:
                        inside = any(clip.pause_start_s * 1000 <= c < mark_ms for c in found)
                        tally.setdefault(kind, []).append(float(inside))
    return {f"{split} | {room} | {'fade' if fade else 'silero'}": figures(tally)
            for (split, room, fade), tally in sorted(tallies.items())}


def figures(tally: dict[str, list[float]]) -> dict[str, Any]:
    """Medians and rates (with Wilson intervals) of one tally."""
    out: dict[str, Any] = {}
    delays = tally.get("delay", [])
    if delays:
        out["delay_p50_ms"] = statistics.median(delays)
        out["delay_mean_ms"] = statistics.fmean(delays)
        out["complete"] = len(tally["cut"])
        out["cut_complete_pct"] = 100 * sum(tally["cut"]) / len(tally["cut"])
    for ms in PAUSES_MS:
        hits = tally.get(f"pause {ms}", [])
        if hits:
            out[f"pause_{ms}_cut_pct"] = 100 * sum(hits) / len(hits)
            out[f"pause_{ms}_ci"] = [round(x, 1) for x in wilson(int(sum(hits)), len(hits))]
            out[f"pause_{ms}_n"] = len(hits)
    return out


def main() -> None:
    """Build or load the set, replay it both ways, print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--quick", action="store_true", help="every fourth clip")
    parser.add_argument("--clear-db", type=float, default=voice_fade.CLEAR_VOICE_DB,
                        help="replay with this CLEAR_VOICE_DB (how it was chosen: "
                             "docs/results/2026-12-03-voice-fade.md)")
    args = parser.parse_args()
    voice_fade.CLEAR_VOICE_DB = args.clear_db  # read at every frame: the replay's machines use this value
    clips = build(DEFAULT_DIR)
    clips = clips[::4] if args.quick else clips
    result = run(clips, SileroModel())
    header = "| split / room / silence from | delay p50 / mean | cut complete |" + "".join(
        f" pause {ms} ms cut |" for ms in PAUSES_MS)
    print(header)
    print("| --- |" + " ---: |" * (2 + len(PAUSES_MS)))
    for name, row in result.items():
        cells = [f"{row.get('delay_p50_ms', math.nan):.0f} / {row.get('delay_mean_ms', math.nan):.0f}",
                 f"{row.get('cut_complete_pct', math.nan):.1f} %"]
        cells += [f"{row[f'pause_{ms}_cut_pct']:.1f} % ({row[f'pause_{ms}_ci'][0]:.0f} to "
                  f"{row[f'pause_{ms}_ci'][1]:.0f}, n {row[f'pause_{ms}_n']})" if f"pause_{ms}_cut_pct" in row else "-"
                  for ms in PAUSES_MS]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
