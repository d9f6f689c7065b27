"""What the half-hop onset stream costs: Silero's CPU per second of audio with and without it, one session.

    python -m bench.latency.onset_probe_cost [--seconds 60] [--rounds 3]

One :class:`~bargein.session.audio_input.AudioInput` on the real Silero hears a recorded read speech clip in 20 ms
packets at 16 kHz (as the WebRTC path hands them over), once with the main stream alone and once with the half-hop
stream on (``onset_probe``, as a session runs it while a reply is live), in turn, ``--rounds`` times. It prints the
process CPU per second of audio and per main frame (the whole listen path's: buffering, framing, the level and the
inference; with the half-hop stream, its frame too, each in a batch of its own since a session awaits its frames one
at a time), and the batches run. Quote the load average: the figures are CPU time, less sensitive to the other
processes than wall time, but not immune to a busy cache.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import numpy as np
import numpy.typing as npt

from bargein.audio.codecs import AudioFormat
from bargein.engines.listen.silero_vad import SileroVad
from bargein.session.audio_input import AudioInput
from testdata.speech import librivox_clip

PACKET = 320


def speech(seconds: float) -> npt.NDArray[np.float32]:
    """``seconds`` of read speech (the clip repeated)."""
    clip = librivox_clip("0870")
    repeats = int(np.ceil(seconds * 16_000 / len(clip)))
    return np.tile(clip, repeats)[:int(seconds * 16_000)].astype(np.float32)


async def one_run(audio: npt.NDArray[np.float32], *, probe: bool) -> tuple[float, int, int]:
    """Process CPU seconds, main frames heard and batches run for ``audio`` heard by one session."""
    vad = SileroVad()
    audio_in = AudioInput(vad, AudioFormat())
    await audio_in.hear(audio[:16_000], onset_probe=probe)  # warm: onnxruntime's first runs are slow
    started, batches = time.process_time(), vad.batches_run
    mains = 0
    for first in range(16_000, len(audio), PACKET):
        frames = await audio_in.hear(audio[first:first + PACKET], onset_probe=probe)
        mains += sum(1 for frame in frames if type(frame).__name__ == "VadFrame")
    spent = time.process_time() - started
    audio_in.close()
    await vad.aclose()
    return spent, mains, vad.batches_run - batches


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    audio = speech(args.seconds + 1.0)
    print(f"load average at the start {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    totals: dict[bool, list[float]] = {False: [], True: []}
    for round_index in range(args.rounds):
        for probe in (False, True):
            spent, mains, batches = asyncio.run(one_run(audio, probe=probe))
            totals[probe].append(spent / mains)
            print(f"round {round_index + 1}, {'with' if probe else 'without'} the half-hop stream: "
                  f"{1000 * spent / args.seconds:.2f} ms CPU per s of audio, {1e6 * spent / mains:.0f} us per main "
                  f"frame ({mains} frames, {batches} batches)")
    alone, both = (float(np.median(totals[p])) for p in (False, True))
    print(f"median per main frame: {1e6 * alone:.0f} us alone, {1e6 * both:.0f} us with the half-hop stream "
          f"(x{both / alone:.2f}); load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
