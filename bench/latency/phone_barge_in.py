"""Barge-in over the phone serializer: how soon ``clear`` follows the caller's speech, and whether the history
matches the marks.

    python -m bench.latency.phone_barge_in --rounds 20       # about 2 minutes

A scripted Twilio provider (``bench/harness/phone_provider.py``) calls, through ``/v1/telephony/twilio``, a real
uvicorn server on loopback (in a
thread of this process, so the history can be read: it is not on the phone line) with the real Silero VAD and
instant fakes for the rest (the ``instant`` engine set, with a reply long enough to interrupt and a recogniser
that hears every interruption as a question, so each one cuts the reply). The caller talks in real time (20 ms
mu-law frames); the phone plays the server's audio in real time and echoes its marks. Each round: once the phone
has played ``--play-ms`` of the reply, the caller says an espeak-ng sentence (8 kHz mu-law) over it. Measured per round:

- **clear**: from the caller frame holding the speech onset (by level) leaving the provider to the ``clear``
  arriving at it (docs/design.md's barge-in stop, with the ``clear`` in place of ``speech_started``);
- **heard**: the cut item's ``heard_ms`` against the last mark the phone echoed as played before the ``clear``:
  the same (within 1 ms), or one frame short (that echo was still on its way when the server sent the ``clear``,
  which takes the newest echo it has received).

Speech onsets are at least ``--gap-s`` (5.5 s) apart, so no three barge-ins fall within 10 s and the storm guard
never enters confirm mode, where a pause waits for 600 ms of speech by design. Prints a table and the load
average; ``--json`` writes the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import websockets

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer
from bargein.engines.listen.silero_vad import SileroVad
from bargein.server.app import ServerState
from bench.harness.phone_provider import (
    FRAME_S,
    MULAW_SILENCE,
    ScriptedProvider,
    phone_server,
    speech_onset_frame,
    spoken_mulaw,
)
from bench.harness.realtime_harness import percentile

INTERRUPTION = "Wait, what time is it right now?"
OPENING = "Hello, can you tell me a story?"
FILLER = " ".join(["and here is one more thing I would like to tell you about the weather"] * 12)


@dataclass
class Round:
    """One barge-in's figures."""

    clear_ms: float | None
    heard_mark_ms: float | None
    item_heard_ms: float | None
    matches: bool
    """The history ends at the phone's last played mark (within 1 ms)."""
    within_frame: bool
    """... or at the one before it: that echo was still on the wire when the server sent the ``clear``."""


def engines() -> Engines:
    """Silero VAD, instant fakes for the rest; a long reply; every interruption heard as a question."""
    return Engines(SileroVad(), FakeRecognizer((OPENING.lower(), INTERRUPTION.lower())),
                   FakeLanguageModel(filler=FILLER), FakeSynthesizer(ms_per_char=60))


def heard_of(state: ServerState, item_id: str) -> float | None:
    """The item's ``heard_ms`` in the live session's history (None: not cut, or not found)."""
    for session in list(state.registry.live):
        for item in session.conversation:
            if item.id == item_id:
                return item.heard_ms
    return None


async def one_round(phone: ScriptedProvider, state: ServerState, speech: bytes, onset: int,
                    args: argparse.Namespace, not_before: float) -> tuple[Round, float]:
    """Let the reply play ``play_ms`` (and wait until ``not_before``), speak over it, time the clear, check the
    history; the round's figures and when its speech began."""
    played_before = len(phone.log.played)
    await phone.wait_played_ms((played_before * FRAME_S * 1000) + args.play_ms, timeout=60)
    await asyncio.sleep(max(0.0, not_before - time.monotonic()))
    first = phone.say(speech + MULAW_SILENCE * 60)
    onset_at = await phone.wait_sent(first + onset)
    return await judged(phone, state, onset_at), onset_at


async def judged(phone: ScriptedProvider, state: ServerState, onset_at: float) -> Round:
    """The clear after the speech that began at ``onset_at``, and the history against the phone's marks."""
    try:
        cleared_at = await phone.wait_clear(onset_at, timeout=5)
    except TimeoutError:
        return Round(None, None, None, False, False)
    mark = phone.log.last_played_mark_before(cleared_at)
    await asyncio.sleep(1.5)  # the verdict, the cut reply's response.done
    if mark is None:
        return Round(1000 * (cleared_at - onset_at), None, None, False, False)
    item_id, _, reached = mark.rpartition("@")
    heard = heard_of(state, item_id)
    exact = heard is not None and abs(heard - float(reached)) <= 1.0
    near = heard is not None and float(reached) - 21.0 <= heard <= float(reached) + 1.0
    return Round(1000 * (cleared_at - onset_at), float(reached), heard, exact, near)


async def run(args: argparse.Namespace) -> list[Round]:
    """Serve, call, and barge in ``--rounds`` times."""
    interruption = spoken_mulaw(INTERRUPTION)
    onset = speech_onset_frame(interruption)
    rounds: list[Round] = []
    with phone_server(engines()) as (host, state):
        async with websockets.connect(f"ws://{host}/v1/telephony/twilio") as ws:
            phone = ScriptedProvider(ws)
            await phone.begin()
            phone.say(MULAW_SILENCE * 25 + spoken_mulaw(OPENING) + MULAW_SILENCE * 40)
            last_onset = -1e9
            for index in range(args.rounds):
                result, last_onset = await one_round(phone, state, interruption, onset, args, last_onset + args.gap_s)
                rounds.append(result)
                clear = "none" if result.clear_ms is None else f"{result.clear_ms:.1f} ms"
                print(f"round {index + 1:2d}: clear {clear}, mark {result.heard_mark_ms}, "
                      f"history {result.item_heard_ms}, matches {result.matches}", flush=True)
            await phone.stop()
    return rounds


def main() -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--play-ms", type=float, default=800.0, help="reply played before each barge-in")
    parser.add_argument("--gap-s", type=float, default=5.5,
                        help="least time between speech onsets: any three span over 10 s (the storm guard)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    load_before = os.getloadavg()
    rounds = asyncio.run(run(args))
    load_after = os.getloadavg()
    clears = [r.clear_ms for r in rounds if r.clear_ms is not None]
    summary = {
        "rounds": len(rounds), "clears": len(clears),
        "clear_ms_p50": percentile(clears, 50), "clear_ms_p99": percentile(clears, 99),
        "clear_ms_max": max(clears, default=None),
        "heard_matches_marks": sum(r.matches for r in rounds),
        "heard_within_one_frame": sum(r.within_frame for r in rounds),
        "load_average_before": load_before, "load_average_after": load_after, "cpus": os.cpu_count(),
    }
    print(json.dumps(summary, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps({"summary": summary, "rounds": [asdict(r) for r in rounds]}, indent=2))
    return 0 if clears and len(clears) == len(rounds) else 1


if __name__ == "__main__":
    sys.exit(main())
