"""What Ray Serve adds to first audio: the same turns against in-process and Ray-served stages.

    python -m bench.latency.ray_overhead                    # instant engines, 3 rounds of 6 turns each way
    python -m bench.latency.ray_overhead --rounds 2 --turns 4

Starts a local Ray head (``ray start --head``), deploys every stage (``bargein ray-deploy --engines
instant``: fake ASR/LLM/TTS that answer at once, the real Silero VAD batched with ``@serve.batch``), and
three servers: all stages in process; ASR, LLM and TTS on Ray (VAD in process); all four on Ray. The
rounds alternate between the servers so the shared machine's load falls on each alike; each turn is
``bench/latency/first_audio.py``'s (first audio from the last speech sample sent; beyond-endpoint: what is left
after the endpoint silence). Prints medians side by side, the Ray servers' difference to in process,
and the load average. ``ray stop`` at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.harness.realtime_harness import ServerProcess
from bench.harness.spoken_session import run_session

LAYOUTS = {"in process": [], "asr,llm,tts on Ray": ["--ray-stages", "asr,llm,tts"],
           "all on Ray": ["--ray-stages", "vad,asr,llm,tts"]}


@contextlib.contextmanager
def ray_head(engines: str) -> Iterator[None]:
    """A local Ray head with every stage deployed; stopped afterwards."""
    ray = str(Path(sys.executable).with_name("ray"))
    subprocess.run([ray, "start", "--head", "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats"],
                   check=True, capture_output=True)
    try:
        subprocess.run([sys.executable, "-m", "bargein", "ray-deploy", "--engines", engines, "--ray-address", "auto",
                        "--log-level", "warning"], check=True)
        yield
    finally:
        subprocess.run([ray, "stop", "--force"], capture_output=True)


def main() -> None:
    """Run the rounds and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", default="instant", choices=["instant", "fake", "default"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=6)
    args = parser.parse_args()
    session_args = argparse.Namespace(turns=args.turns, barge_every=0, silence_ms=None, semantic=False,
                                      reply_timeout_s=60.0, max_reply_s=3.0)
    first: dict[str, list[float]] = {name: [] for name in LAYOUTS}
    beyond: dict[str, list[float]] = {name: [] for name in LAYOUTS}
    loads = [os.getloadavg()[0]]
    with ray_head(args.engines), contextlib.ExitStack() as stack:
        servers = {name: stack.enter_context(ServerProcess(
            args.engines, extra_args=[*extra, "--ray-address", "auto"] if extra else [])) for name, extra in
            LAYOUTS.items()}
        for round_index in range(args.rounds):
            for name, server in servers.items():
                print(f"round {round_index + 1}: {name}", flush=True)
                results, _observer, _silence = asyncio.run(run_session(server.host_port, session_args))
                first[name] += [r.first_audio_ms for r in results if r.first_audio_ms is not None]
                beyond[name] += [r.beyond_endpoint_ms for r in results if r.beyond_endpoint_ms is not None]
                loads.append(os.getloadavg()[0])
    base_first = statistics.median(first["in process"])
    base_beyond = statistics.median(beyond["in process"])
    print(f"\nengines {args.engines}; load average {min(loads):.1f} to {max(loads):.1f} during the run")
    print(f"{'layout':22s} {'turns':>5s} {'first audio p50':>16s} {'vs in process':>14s} "
          f"{'beyond endpoint p50':>20s} {'vs in process':>14s}")
    for name in LAYOUTS:
        f50, b50 = statistics.median(first[name]), statistics.median(beyond[name])
        print(f"{name:22s} {len(first[name]):5d} {f50:16.0f} {f50 - base_first:+14.0f} {b50:20.0f} "
              f"{b50 - base_beyond:+14.0f}")


if __name__ == "__main__":
    main()
