"""Many lossy WebRTC turns in a row, to make a rare unanswered turn frequent enough to study (issue 45, part d).

    python -m bench.latency.webrtc_loss_turns --sessions 6 --turns 10 --loss 0.15
    python -m bench.latency.webrtc_loss_turns --whisper --sessions 3 --loss 0.05

One server (``bench/harness/engine_server.py``: the instant engines, or Whisper tiny.en with ``--whisper``), then
``--sessions`` calls one after the other, each through a relay of its own (``bench/harness/udp_relay.py``) whose loss
pattern has a seed of its own (the session's index plus ``--seed``), each speaking ``--turns`` clips as part d does
(no barge-ins: every reply is cancelled 0.8 s after it became audible). Prints one line per session, and for every
turn that got no reply audio the server events that followed its speech (with their arrival times), so a failure
can be read; ``--json`` keeps every turn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from bench.harness.engine_server import engine_server
from bench.harness.question_clips import question_clips
from bench.harness.udp_relay import Impairment
from bench.latency.webrtc_links import WebRtcLink
from bench.latency.webrtc_turns import even_levels, event_trail, run_turns, voiced_runs

INSTANT = "bench.latency.webrtc_engines:instant_engines"
WHISPER = "bench.latency.webrtc_engines:whisper_engines"


def load() -> str:
    """``uptime``'s three load averages."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


async def one_session(host_port: str, impairment: Impairment, seed: int, turns: int,
                      always_trail: bool = False) -> dict[str, Any]:
    """One call through a relay seeded ``seed``: its turns, and the trail of every unanswered one."""
    link = await WebRtcLink.open(host_port, relay=impairment, seed=seed)
    retransmits = watch_retransmissions(link)
    try:
        results = await run_turns(link, even_levels(question_clips()), turns, barge=False, quiet=True)
        failures = [{"turn": figures.index, "clip": figures.clip, "summary": figures.unanswered}
                    for figures in results if not figures.completed]
        begun = link.received.events[0][0] if link.received.events else 0.0
        clips = [(started.result(), f"[clip {index} starts]") for index, started in enumerate(link.mic._started)
                 if started.done()]  # the microphone's own record of when each clip began
        trail = event_trail(link.received, begun - 0.001, float("inf"), clips) if failures or always_trail else []
        return {"seed": seed, "completed": sum(r.completed for r in results), "turns": len(results),
                "first_audio_ms": [r.first_audio_ms for r in results],
                "reply_wire_s": [round(end - start, 2)
                                 for start, end in voiced_runs(link.received.wire, 0.0, float("inf"), 0.6)],
                "failures": failures, "trail": trail, "relay": link.relay_summary,
                "client_sctp_t3": retransmits,
                "segments": [{key: value for key, value in event.items() if key != "type"}
                             for _at, event in link.received.events_of("bargein.listen.segment")]}
    finally:
        await link.close()


def watch_retransmissions(link: WebRtcLink) -> list[tuple[float, float]]:
    """Every expiry of the client's SCTP retransmission timer (T3): (when, its RTO in seconds), filled in as they
    happen. aiortc's ``RTCSctpTransport`` is private here: a client event (``response.cancel``) whose packet was
    lost waits one RTO before it is sent again."""
    expiries: list[tuple[float, float]] = []
    sctp = link.peer.pc.sctp
    expire = sctp._t3_expired

    def counted() -> None:
        expiries.append((time.monotonic(), float(sctp._rto)))
        expire()

    sctp._t3_expired = counted
    return expiries


def main() -> None:
    """Run the sessions and print what failed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--loss", type=float, default=0.15)
    parser.add_argument("--delay-ms", type=float, default=80.0)
    parser.add_argument("--jitter-ms", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--whisper", action="store_true", help="Whisper tiny.en hears the user (as part d)")
    parser.add_argument("--client-rto-s", type=float,
                        help="hold the client's SCTP retransmission timeout at least this long (aiortc's minimum is "
                             "1 s; a loaded, jittery path was seen to raise it past 5 s), so a lost client event "
                             "arrives that late")
    parser.add_argument("--trail", action="store_true", help="print every session's trail, not only a failing one's")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    impairment = Impairment(args.delay_ms, args.jitter_ms, args.loss)
    if args.client_rto_s is not None:
        from aiortc import rtcsctptransport

        rtcsctptransport.SCTP_RTO_MIN = rtcsctptransport.SCTP_RTO_INITIAL = args.client_rto_s
    runs = []
    with engine_server(WHISPER if args.whisper else INSTANT) as (host_port, _pid):
        for index in range(args.sessions):
            print(f"-- session {index}, seed {args.seed + index}: load average {load()}", flush=True)
            run = asyncio.run(one_session(host_port, impairment, args.seed + index, args.turns,
                                          args.trail))
            runs.append(run)
            slowest = max((ms for ms in run["first_audio_ms"] if ms is not None), default=float("nan"))
            longest = max(run["reply_wire_s"], default=float("nan"))
            t3 = run["client_sctp_t3"]
            print(f"   client SCTP retransmission timeouts: {len(t3)}, RTOs {[round(rto, 2) for _at, rto in t3]}")
            print(f"   {run['completed']}/{run['turns']} answered, slowest first audio {slowest:.0f} ms, longest reply "
                  f"on the wire {longest:.2f} s (cancelled 0.8 s after it was heard); "
                  f"{run['relay']}", flush=True)
            for failure in run["failures"]:
                print(f"   UNANSWERED turn {failure['turn']} {failure['clip']}: {failure['summary']}")
            if run["trail"]:
                print("   " + "\n   ".join(run["trail"]), flush=True)
    done = sum(run["completed"] for run in runs)
    total = sum(run["turns"] for run in runs)
    print(f"{done}/{total} turns answered under {args.delay_ms:g} +- {args.jitter_ms:g} ms, "
          f"{100 * args.loss:g} % loss; load average {load()}")
    if args.json is not None:
        args.json.write_text(json.dumps(runs, indent=2))


if __name__ == "__main__":
    main()
