"""WebRTC against the WebSocket: first audio, barge-in stop, heard text, jitter and loss, and fifty calls at once.

    python -m bench.latency.webrtc                      # every part, about 8 minutes on 2 cores
    python -m bench.latency.webrtc --parts a b c --turns 20 --plot webrtc.png
    python -m bench.latency.webrtc --parts e --calls 50

One server of its own per part (``bench/harness/engine_server.py``, a child process, so its CPU is its own): the
real Silero VAD and instant fakes (the clips' questions as transcripts, a reply of about 20 s, a synthesiser
whose words the client can count: ``bench/latency/webrtc_engines.py``), or, for part d, the embedded Whisper
tiny.en hearing the user. The clips are the held-out finished questions of ``bench/harness/question_clips.py``,
streamed in real time (20 ms frames). The turns are measured by :mod:`bench.latency.webrtc_turns`:

- **a.** first audio over the WebSocket and over WebRTC, the same clips in the same run, one after the other
  (target: WebRTC p50 within +30 ms of the WebSocket's);
- **b.** barge-in stop over WebRTC: the client's frame holding the interrupting speech's onset leaving, to the
  last audible frame of the interrupted reply arriving (target p99 <= 60 ms); ``speech_started`` beside it;
- **c.** heard text after barge-in: the words of the cut reply the client played against the words its history
  item kept (target: within one word);
- **d.** through the lossy relay (80 +- 30 ms, 5 % loss, ``bench/harness/udp_relay.py``) against the same relay
  clean, with Whisper: every turn completes, and the WER of the recognised user turns (target within +5 points);
- **e.** ``--calls`` concurrent calls, WebRTC and then the WebSocket, with the instant engines: barge-in stop p99
  (target <= 80 ms over WebRTC) and the server's CPU per call side by side (:mod:`bench.latency.webrtc_load`).

Prints the load average with every part; ``--json`` writes every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from bench.harness.engine_server import engine_server
from bench.harness.plotting import pyplot
from bench.harness.question_clips import question_clips, question_turns
from bench.harness.realtime_harness import percentile
from bench.harness.udp_relay import CLEAN, Impairment
from bench.latency.webrtc_links import WebRtcLink, WebSocketLink
from bench.latency.webrtc_onset import TRACE_ENV
from bench.latency.webrtc_onset import report as onset_report
from bench.latency.webrtc_turns import even_levels, run_turns, summary_of, transcripts_in_order

INSTANT = "bench.latency.webrtc_engines:instant_engines"
TRACED = "bench.latency.webrtc_onset:traced_instant_engines"
WHISPER = "bench.latency.webrtc_engines:whisper_engines"


def load() -> str:
    """``uptime``'s three load averages."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def _row(label: str, values: list[float]) -> str:
    cells = " ".join(f"{percentile(values, q):7.1f}" for q in (50, 95, 99))
    return f"  {label:44s} n={len(values):3d}  p50/p95/p99 {cells}  max {max(values, default=float('nan')):7.1f}"


async def _session(link_factory: Any, turns: int, barge: bool = True) -> tuple[dict[str, Any], Any]:
    link = await link_factory()
    try:
        results = await run_turns(link, even_levels(question_clips()), turns, barge=barge)
    finally:
        await link.close()
    return summary_of(results), link


def parts_abc(args: argparse.Namespace) -> dict[str, Any]:
    """First audio on both transports, barge-in stop and heard text over WebRTC (the stop traced term by term)."""
    with tempfile.TemporaryDirectory() as scratch:
        trace = Path(scratch) / "onset-trace.jsonl"
        os.environ[TRACE_ENV] = str(trace)  # the server's child process inherits it
        try:
            with engine_server(TRACED) as (host_port, _pid):
                print(f"-- a, b, c: load average {load()}", flush=True)
                ws, _ = asyncio.run(_session(lambda: WebSocketLink.open(host_port), args.turns))
                rtc, _ = asyncio.run(_session(lambda: WebRtcLink.open(host_port), args.turns))
        finally:
            os.environ.pop(TRACE_ENV, None)
        terms = onset_report(trace, rtc["cuts"])
    rtc["terms"] = [t.__dict__ for t in terms]
    difference = percentile(rtc["first"], 50) - percentile(ws["first"], 50)
    wire_difference = percentile(rtc["first_wire"], 50) - percentile(ws["first"], 50)
    print(f"a. first audio (ms), load average {load()}:")
    print(_row("WebSocket", ws["first"]))
    print(_row("WebRTC, out of the client's jitter buffer", rtc["first"]))
    print(_row("WebRTC, first voiced packet at the client", rtc["first_wire"]))
    print(f"  WebRTC p50 - WebSocket p50: {difference:+.1f} ms ({'meets' if difference <= 30 else 'misses'} "
          f"the +30 ms target); at the wire {wire_difference:+.1f} ms")
    print("b. barge-in stop (ms):")
    print(_row("WebRTC: onset to the last reply packet", rtc["stop"]))
    print(_row("WebRTC: onset to the last reply audio played", rtc["stop_heard"]))
    print(_row("WebRTC: onset to speech_started", rtc["started"]))
    print(_row("WebSocket: onset to speech_started", ws["started"]))
    if terms:
        print(_row("WebRTC: onset to the first voiced VAD frame's end", [t.speech for t in terms]))
    stop99 = percentile(rtc["stop"], 99)
    print(f"  WebRTC stop p99 {stop99:.1f} ms ({'meets' if stop99 <= 60 else 'misses'} the 60 ms target)")
    within = sum(off <= 1 for off in rtc["heard_off"])
    print(f"c. heard text: the history within one word of the words played in {within}/{len(rtc['heard_off'])} cuts "
          f"(off by {rtc['heard_off']})")
    return {"websocket": ws, "webrtc": rtc, "first_audio_p50_difference_ms": difference,
            "first_wire_p50_difference_ms": wire_difference}


def part_d(args: argparse.Namespace) -> dict[str, Any]:
    """Whisper hears the same turns through the relay, clean and lossy."""
    from bargein.engines.transcribe.wer import word_error_rate

    references = [turn.text for turn in question_turns()]
    figures: dict[str, Any] = {}
    with engine_server(WHISPER) as (host_port, _pid):
        lossy = Impairment(args.relay_delay_ms, args.relay_jitter_ms, args.relay_loss)
        for name, impairment in (("clean", CLEAN), ("lossy", lossy)):
            print(f"-- d, {name} relay: load average {load()}", flush=True)
            summary, link = asyncio.run(_session(
                lambda i=impairment: WebRtcLink.open(host_port, relay=i, seed=args.relay_seed), args.turns,
                barge=False))
            heard = transcripts_in_order(link.received)
            wanted = [references[i % len(references)] for i in range(args.turns)]
            wer = word_error_rate([" ".join(wanted)], [" ".join(heard)])
            figures[name] = {**summary, "wer": wer, "transcripts": heard, "relay": link.relay_summary}
            stops = summary["cancel_stop"]
            print(f"  {name}: {summary['completed']}/{summary['turns']} turns answered, WER {100 * wer:.1f} %; "
                  f"a cancelled reply's last packet {max(stops, default=float('nan')):.0f} ms after the cancel at "
                  f"the latest ({summary['cancel_never_stopped']} played on); relay: {link.relay_summary}")
    gap = 100 * (figures["lossy"]["wer"] - figures["clean"]["wer"])
    every = figures["lossy"]["completed"] == figures["lossy"]["turns"]
    relay = f"{args.relay_delay_ms:g} +- {args.relay_jitter_ms:g} ms and {100 * args.relay_loss:g} % loss"
    print(f"d. under {relay}: every turn answered: {every}; WER {gap:+.1f} points over the clean "
          f"run ({'meets' if gap <= 5 and every else 'misses'} the target)")
    return figures


def part_e(args: argparse.Namespace) -> dict[str, Any]:
    """Concurrent calls on both transports."""
    from bench.latency.webrtc_load import run_load

    figures: dict[str, Any] = {}
    room = max(64, 2 * args.calls)
    with engine_server(INSTANT, max_sessions=room, max_connections_per_client=room,
                       max_loop_lag_ms=args.max_loop_lag_ms) as (host_port, pid):
        for transport in ("webrtc", "websocket"):
            print(f"-- e, {args.calls} {transport} calls: load average {load()}", flush=True)
            run = run_load(host_port, pid, transport, args.calls, args.processes, args.stagger_s)
            figures[transport] = run.__dict__
            print(_row(f"{transport}: onset to the last reply audio", run.stops_ms))
            print(_row(f"{transport}: onset to speech_started", run.started_ms))
            print(f"  {transport}: {run.calls - run.not_connected}/{run.calls} calls connected, "
                  f"{run.completed_turns}/{run.turns} turns answered; server CPU "
                  f"{run.server_cpu_s_per_call:.2f} s per call, {100 * run.server_cores_per_call:.1f} % of a core per "
                  f"call over {run.window_s:.0f} s; load average {load()}")
    stop99 = percentile(figures["webrtc"]["stops_ms"], 99)
    print(f"e. {args.calls} WebRTC calls: barge-in stop p99 {stop99:.1f} ms "
          f"({'meets' if stop99 <= 80 else 'misses'} the 80 ms target)")
    return figures


def main() -> None:
    """Run the parts asked for and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", nargs="+", default=["a", "b", "c", "d", "e"], choices=list("abcde"))
    parser.add_argument("--turns", type=int, default=10, help="turns per session (parts a-d)")
    parser.add_argument("--calls", type=int, default=50, help="concurrent calls (part e)")
    parser.add_argument("--relay-delay-ms", type=float, default=80.0, help="the lossy relay's delay (part d)")
    parser.add_argument("--relay-jitter-ms", type=float, default=30.0, help="its jitter, +- (part d)")
    parser.add_argument("--relay-loss", type=float, default=0.05, help="the fraction it drops (part d)")
    parser.add_argument("--relay-seed", type=int, default=0, help="the seed of its delays and losses (part d)")
    parser.add_argument("--processes", type=int, default=4, help="client processes carrying the calls (part e)")
    parser.add_argument("--max-loop-lag-ms", type=float, default=200.0,
                        help="the server refuses new sessions past this loop lag (part e; its default 200)")
    parser.add_argument("--stagger-s", type=float, default=15.0, help="the calls' starts spread over this (part e)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--plot", help="draw first audio and barge-in stop (parts a, b) as a PNG here")
    args = parser.parse_args()
    print(f"load average at the start: {load()}; {os.cpu_count()} CPUs", flush=True)
    figures: dict[str, Any] = {}
    if {"a", "b", "c"} & set(args.parts):
        figures["abc"] = parts_abc(args)
    if "d" in args.parts:
        figures["d"] = part_d(args)
    if "e" in args.parts:
        figures["e"] = part_e(args)
    print(f"load average at the end: {load()}")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2, default=str))
    if args.plot and "abc" in figures:
        _plot(args.plot, figures["abc"])


def _plot(path: str, figures: dict[str, Any]) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, axis = plt.subplots(figsize=(7, 4))
    for label, values in (("first audio, WebSocket", figures["websocket"]["first"]),
                          ("first audio, WebRTC", figures["webrtc"]["first"]),
                          ("barge-in stop, WebRTC", figures["webrtc"]["stop"])):
        if values:
            ordered = sorted(values)
            axis.step(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], where="post",
                      label=f"{label} (p50 {percentile(values, 50):.0f} ms)")
    axis.set_xlabel("ms")
    axis.set_ylabel("fraction of turns")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
