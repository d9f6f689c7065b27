"""Capacity: how many real-time sessions one server carries before it falls behind the audio.

    python -m bench.capacity.sessions                       # instant engines, listening then talking, <10 min
    python -m bench.capacity.sessions --steps 4,8,16 --measure-s 10 --modes listening
    python -m bench.capacity.sessions --engines default --modes talking --steps 1,2,4

It starts ``bargein serve`` on loopback (``--engines``, default ``instant``: fake ASR/LLM/TTS that answer
at once, and the real Silero VAD, which always runs), then ramps the number of sessions N (``--steps``, default
4,8,16,32,64,128). For each N it starts ``--procs`` load-generator processes (default 2;
``bench/capacity/capacity_worker.py``), each streaming its share of the sessions in real time on one asyncio loop
through the official ``openai`` client, and measures for ``--measure-s`` (15) after ``--warmup-s`` (4):

* **listening** sessions: ``turn_detection.create_response: false``; a clip, 1 to 2.5 s of silence, the next
  clip: VAD, endpointing and transcription run, no reply.
* **talking** sessions: the server answers every turn; the session lets the reply play out, pauses 0.3 to 1 s,
  speaks again. Sessions start at random phases so their speech is spread over time.

Per step it prints:

* **inbound frame lag** p50/p99: the round trip of a no-op ``session.update`` probe every 0.5 s per session.
  The server handles a connection's messages in order, so the answer leaves only after every audio
  append sent before the probe was processed (decoded, resampled, VAD'ed). An idle server answers in
  about a millisecond; a server that falls behind the audio answers late. (``speech_started`` lag
  against the onset VAD frame, ``onset99``, is shown too, not judged: one sample per utterance, and it includes
  the resampler's fixed hold-back.)
* **first audio p95** (talking): last energy-detected speech sample sent to first audible reply sample.
* **CPU per session**: the server process's CPU time over the window / window / N (psutil; % of one core), and
  the server's and the generators' total CPU (cores).
* **RSS per session**: (peak server RSS in the window - RSS before the step) / N (Python rarely returns memory,
  so later steps read low).
* errors; ``gen99``, the generators' own timer lag p99; ``late``, chunks a generator sent more than 40 ms after
  the previous one; ``miss``, replies that never came; ``srv99``, the server's own event-loop lag p99 from its
  ``/metrics``; and the load average.

A step passes when lag p99 <= ``--lag-limit-ms`` (20 ms, the target; 32 ms is one VAD frame), every
session connected and no session saw an error. A failing step is run once more (``--retries``) and the better run
kept, because on a shared machine one stall by someone else's job fails a p99. The answer is the largest passing
N, also per core of the machine and per fully used core (1 / CPU per session). A ramp stops at its first failing
step; steps that would overrun ``--budget-s`` (540 s) are skipped, so the whole run stops by itself within it. The
plot (``--plot``, default ``capacity.png``) shows lag p99, first audio p95, CPU and RSS per session against N.

``--barge-turns K`` adds, in each step's window, one measured session (:mod:`bench.latency.first_audio`) that
interrupts every reply: its barge-in stop p99 (``barge99``, ``n`` samples) beside the N others, and whether the
best passing step meets the target (<= 50 ms). Its K turns must fit the window (about 5 s a turn): the script
warns when they outlast it, since the last turns then ran with fewer sessions beside them. ``--workers N`` serves
with N session worker processes (CPU and RSS then cover all of them); ``--server-args="..."`` passes flags to
``bargein serve`` (``--plain-silence``, for instance).

The issue's targets (>= 50 listening and >= 25 talking sessions per core at lag p99 <= 20 ms, barge-in stop p99
<= 50 ms beside them): run each on an otherwise idle machine, one after the other, and quote ``uptime`` before
and after (about 2 minutes per step with the retry):

    python -m bench.capacity.sessions --workers 2 --barge-turns 6 --warmup-s 5 --measure-s 35 --budget-s 3600 \
        --steps 16,32,64,100,128,160,200 --plot capacity_w2.png --json capacity_w2.json
    python -m bench.capacity.sessions --workers 1 --barge-turns 6 --warmup-s 5 --measure-s 35 --budget-s 3600 \
        --steps 16,32,64,100,128,160,200 --plot capacity_w1.png --json capacity_w1.json

Caveat: the load generator runs on the same cores as the server, so at high N the generator starves too (``gen99``
grows); the script says so when that happened at the failing step.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import multiprocessing
import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import psutil

from bench.capacity.capacity_plot import plot
from bench.capacity.capacity_worker import StepPlan, run_worker
from bench.harness.realtime_harness import fmt_ms, percentile, server_or_url
from bench.harness.server_scrape import lag_p99_ms, read_server, scored_share

LAG_LIMIT_MS = 20.0
"""The default pass limit on inbound frame lag p99 (``--lag-limit-ms``)."""
BARGE_LIMIT_MS = 50.0
"""The target for the measured session's barge-in stop p99."""


@dataclass
class StepFigures:
    """The figures of one ramp step."""

    mode: str
    sessions: int
    connected: int
    lag_p50: float
    lag_p99: float
    onset_lag_p99: float
    first_audio_p95: float
    cpu_per_session: float
    """Fraction of one core per session."""
    server_cpu: float
    """Cores the server used."""
    client_cpu: float
    """Cores the load generators used."""
    rss_per_session_mb: float
    errors: int
    late_chunks: int
    missing_replies: int
    generator_lag_p99: float
    """p99 oversleep of a 10 ms timer in the load generators (their own starvation)."""
    load_average: float
    """The machine's 1-minute load average at the end of the step (other work on a shared machine)."""
    barge_p99: float = math.nan
    """Barge-in stop p99 (ms) of one measured session that interrupts every reply (``--barge-turns``)."""
    barge_n: int = 0
    server_lag_p99: float = math.nan
    """The server's own event-loop lag p99 (ms, bucket upper bound; from its ``/metrics``): how much of
    the probe lag is the server's, not the load generators' or the machine's."""
    lag_limit: float = LAG_LIMIT_MS
    scored: float = math.nan
    """The share of the end-of-turn scores asked in the window that ran (the rest were shed: those pauses
    waited plain silence); NaN when none was asked."""

    @property
    def passed(self) -> bool:
        """Lag p99 within the limit, every session connected, no session saw an error."""
        return self.lag_p99 <= self.lag_limit and self.connected == self.sessions and self.errors == 0

    def row(self) -> str:
        """One line of the table."""
        return (f"{self.mode:9s} {self.sessions:4d} {self.connected:4d} {fmt_ms(self.lag_p50)} {fmt_ms(self.lag_p99)} "
                f"{fmt_ms(self.onset_lag_p99)} {fmt_ms(self.first_audio_p95)} {100 * self.cpu_per_session:7.2f} "
                f"{self.server_cpu:6.2f} {self.client_cpu:6.2f} {self.rss_per_session_mb:7.2f} {self.errors:4d} "
                f"{fmt_ms(self.generator_lag_p99)} {self.load_average:5.1f} {fmt_ms(self.barge_p99)} {self.barge_n:3d} "
                f"{fmt_ms(self.server_lag_p99)} {self.late_chunks:5d} {self.missing_replies:4d} "
                f"{'-' if math.isnan(self.scored) else f'{100 * self.scored:.0f}%':>6s}"
                f"  {'pass' if self.passed else 'FAIL'}")


HEADER = (f"{'mode':9s} {'N':>4s} {'conn':>4s} {'lag50':>6s} {'lag99':>6s} {'onset99':>6s} {'fa95':>6s} "
          f"{'cpu%/s':>7s} {'srvCPU':>6s} {'cliCPU':>6s} {'MB/sess':>7s} {'err':>4s} {'gen99':>6s} {'load':>5s}"
          f" {'barge99':>6s} {'n':>3s} {'srv99':>6s} {'late':>5s} {'miss':>4s} {'scored':>6s}  verdict")
"""Columns: lag50/lag99 inbound frame lag (ms), onset99 speech_started lag, fa95 first audio p95, cpu%/s
server CPU per session (% of a core), srvCPU/cliCPU cores used by the server and the load generators,
gen99 the generators' own timer lag p99, load the 1-minute load average, barge99/n the measured session's
barge-in stop p99 and its count, srv99 the server's own loop lag p99 (bucket bound), late chunks the
generators sent over 40 ms after the previous one, miss replies that never came (talking), scored the share of
end-of-turn scores that ran (the rest shed: those pauses waited plain silence)."""


def run_step(host_port: str, pid: int | None, mode: str, sessions: int, args: argparse.Namespace,
             seed: int) -> StepFigures:
    """Run N sessions in ``args.procs`` processes and measure one window."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    procs = max(1, min(args.procs, sessions))
    connect_s = 2.0 + 0.03 * sessions
    start_at = time.monotonic() + connect_s
    shares = [sessions // procs + (1 if i < sessions % procs else 0) for i in range(procs)]
    workers = [context.Process(target=run_worker, args=(StepPlan(
        host_port, mode, share, start_at, args.warmup_s, args.measure_s, args.probe_s, seed * 100 + i,
        args.silence_ms), results),
        daemon=True) for i, share in enumerate(shares)]
    server = psutil.Process(pid) if pid else None
    rss_before = _rss(server)
    for worker in workers:
        worker.start()
    window_start = start_at + args.warmup_s
    window_end = window_start + args.measure_s
    _sleep_until(window_start)
    barges: list[float] = []
    measured = threading.Thread(target=_measured_barge_ins, args=(host_port, args.barge_turns, barges), daemon=True)
    if args.barge_turns > 0:
        measured.start()
    barge_window_end = window_start + args.measure_s
    clients = [psutil.Process(w.pid) for w in workers if w.pid]
    cpu0 = _cpu(server)
    reading0 = read_server(host_port)
    client0 = sum(_cpu(c) for c in clients)
    rss_peak = rss_before
    while time.monotonic() < window_end:
        if server:
            rss_peak = max(rss_peak, _rss(server))
        time.sleep(0.5)
    server_cpu = (_cpu(server) - cpu0) / args.measure_s
    reading1 = read_server(host_port)
    if measured.is_alive() or args.barge_turns > 0:
        measured.join(timeout=60)
        if time.monotonic() > barge_window_end + 5.0:
            print(f"  the measured barge-in session outlasted the {args.measure_s:.0f} s window: its last turns had "
                  "fewer sessions beside them (raise --measure-s or lower --barge-turns)", flush=True)
    client_cpu = (sum(_cpu(c) for c in clients) - client0) / args.measure_s
    merged = _collect_reports(results, workers)
    for failure in merged.get("failures", []):
        print(f"  a {mode} session failed: {failure}", flush=True)
    lags = merged.get("probe_lag_ms", [])
    return StepFigures(
        mode, sessions, merged.get("sessions_connected", 0), percentile(lags, 50), percentile(lags, 99),
        percentile(merged.get("onset_lag_ms", []), 99), percentile(merged.get("first_audio_ms", []), 95),
        server_cpu / sessions, server_cpu, client_cpu, (rss_peak - rss_before) / sessions / 2**20,
        merged.get("errors", 0), merged.get("late_chunks", 0), merged.get("missing_replies", 0),
        percentile(merged.get("loop_lag_ms", []), 99), os.getloadavg()[0], percentile(barges, 99), len(barges),
        lag_p99_ms(reading0, reading1), args.lag_limit_ms, scored_share(reading0, reading1))


def _collect_reports(results: Any, workers: list[Any]) -> dict[str, Any]:
    """Sum the load generators' reports (counts added, lists joined; a minute for all of them), then end them."""
    merged: dict[str, Any] = {}
    deadline = time.monotonic() + 60
    for index in range(len(workers)):
        try:
            part = results.get(timeout=max(1.0, deadline - time.monotonic()))
        except queue.Empty:
            print(f"  {len(workers) - index} load generator(s) did not report back", flush=True)
            break
        for key, value in part.items():
            merged[key] = merged.get(key, 0 if isinstance(value, int) else []) + value
    for worker in workers:
        worker.join(timeout=10)
        if worker.is_alive():
            worker.terminate()
    return merged


def _measured_barge_ins(host_port: str, turns: int, into: list[float]) -> None:
    """One session of ``bench/latency/first_audio.py`` that interrupts every reply; its barge-in stop times."""
    from bench.harness.spoken_session import run_session

    plan = argparse.Namespace(turns=turns, barge_every=1, silence_ms=None, semantic=False, reply_timeout_s=30.0,
                              max_reply_s=3.0)
    try:
        results, _observer, _silence = asyncio.run(run_session(host_port, plan))
    except Exception as error:  # the step's figures stand without it
        print(f"  the measured barge-in session failed: {type(error).__name__}: {error}", flush=True)
        return
    into.extend(r.barge_in_ms for r in results if r.barge_in_ms is not None)


def _cpu(process: psutil.Process | None) -> float:
    """CPU seconds of the process and its children (the session workers of ``--workers N``)."""
    if process is None:
        return 0.0
    total = 0.0
    try:
        family = [process, *process.children(recursive=True)]
    except psutil.Error:
        return 0.0
    for member in family:
        try:
            times = member.cpu_times()
        except psutil.Error:
            continue
        total += float(times.user + times.system)
    return total


def _rss(process: psutil.Process | None) -> int:
    if process is None:
        return 0
    try:
        return sum(member.memory_info().rss for member in [process, *process.children(recursive=True)])
    except psutil.Error:
        return 0


def _sleep_until(at: float) -> None:
    time.sleep(max(0.0, at - time.monotonic()))


def ramp(host_port: str, pid: int | None, args: argparse.Namespace, began: float) -> list[StepFigures]:
    """Every mode's ramp, each stopping at its first failing step or when the time budget runs out."""
    steps: list[StepFigures] = []
    step_s = args.warmup_s + args.measure_s + 8.0
    print(HEADER, flush=True)
    for mode in args.modes.split(","):
        for sessions in (int(n) for n in args.steps.split(",")):
            if time.monotonic() - began + step_s + 0.03 * sessions > args.budget_s:
                print(f"{mode:9s} {sessions:4d}  skipped: the {args.budget_s:.0f} s budget would run out", flush=True)
                break
            figures = run_step(host_port, pid, mode, sessions, args, seed=len(steps))
            print(figures.row(), flush=True)
            if not figures.passed and args.retries > 0:
                # on a shared machine one stall by someone else's job fails a p99: try again, keep the better
                time.sleep(1.0)
                again = run_step(host_port, pid, mode, sessions, args, seed=len(steps) + 50)
                print(again.row() + " (retry)", flush=True)
                figures = min(figures, again, key=lambda f: (not f.passed, f.lag_p99))
            steps.append(figures)
            if not figures.passed:
                break
            time.sleep(1.0)  # let the server close the step's sessions
    return steps


def report(steps: list[StepFigures], cores: int) -> None:
    """The answer: the largest passing N per mode, per machine and per core."""
    print()
    for mode in dict.fromkeys(s.mode for s in steps):
        ramp_steps = [s for s in steps if s.mode == mode]
        passing = [s for s in ramp_steps if s.passed]
        if not passing:
            print(f"{mode}: no step passed (lag p99 <= {ramp_steps[0].lag_limit:.0f} ms)")
            continue
        best = max(passing, key=lambda s: s.sessions)
        bounded = "" if any(not s.passed for s in ramp_steps) else " (never failed: the ramp ended first)"
        per_busy_core = 1 / best.cpu_per_session if best.cpu_per_session > 0 else math.inf
        failed = next((s for s in ramp_steps if not s.passed), None)
        if failed is not None and failed.generator_lag_p99 > failed.lag_limit:
            print(f"{mode}: at N={failed.sessions} the load generators were themselves starved (timer lag p99 "
                  f"{failed.generator_lag_p99:.0f} ms, load average {failed.load_average:.1f}): the machine, not "
                  "only the server, set this limit")
        print(f"{mode}: {best.sessions} sessions with lag p99 <= {best.lag_limit:.0f} ms{bounded} = "
              f"{best.sessions / cores:.1f} sessions per core on this {cores}-core machine; the server used "
              f"{best.server_cpu:.2f} cores there, {100 * best.cpu_per_session:.2f} % of a core per session "
              f"(~{per_busy_core:.0f} sessions per fully used core), {best.rss_per_session_mb:.2f} MB RSS per session")
        if best.barge_n:
            verdict = "meets" if best.barge_p99 <= BARGE_LIMIT_MS else "misses"
            print(f"{mode}: barge-in stop p99 of the measured session beside {best.sessions} others: "
                  f"{best.barge_p99:.0f} ms over {best.barge_n} interruptions ({verdict} the "
                  f"{BARGE_LIMIT_MS:.0f} ms target)")


def _finite(row: dict[str, Any]) -> dict[str, Any]:
    """NaN (no samples) as null, so the file is strict JSON."""
    return {key: None if isinstance(value, float) and math.isnan(value) else value for key, value in row.items()}


def main() -> None:
    """Parse flags, start the server, ramp, print and plot."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", default="instant", choices=["default", "fake", "instant"])
    parser.add_argument("--url", help="host:port of a running server (CPU/RSS are then not measured)")
    parser.add_argument("--modes", default="listening,talking")
    parser.add_argument("--steps", default="4,8,16,32,64,128")
    parser.add_argument("--procs", type=int, default=2, help="load-generator processes")
    parser.add_argument("--warmup-s", type=float, default=4.0)
    parser.add_argument("--measure-s", type=float, default=15.0)
    parser.add_argument("--probe-s", type=float, default=0.5)
    parser.add_argument("--retries", type=int, default=1, help="rerun a failing step this many times (0 or 1)")
    parser.add_argument("--budget-s", type=float, default=540.0, help="the whole run stays under this")
    parser.add_argument("--plot", default="capacity.png")
    parser.add_argument("--json", help="also write every step's figures here")
    parser.add_argument("--workers", type=int, default=1, help="session worker processes of the server")
    parser.add_argument("--server-args", default="", help="more flags for `bargein serve`, e.g. '--ws wsproto'")
    parser.add_argument("--silence-ms", type=int,
                        help="load sessions set silence_duration_ms: plain silence, so the end-of-turn model "
                             "(Smart Turn) is never run for them (default: the tiered endpoint, which scores each "
                             "pause); the measured barge-in session keeps the default")
    parser.add_argument("--lag-limit-ms", type=float, default=LAG_LIMIT_MS, help="a step passes below this lag p99")
    parser.add_argument("--barge-turns", type=int, default=0,
                        help="per step, also run one measured session that interrupts every reply (this many turns)")
    args = parser.parse_args()
    if args.silence_ms is not None and args.silence_ms < 0:
        parser.error("--silence-ms must be 0 or more")
    began = time.monotonic()
    cores = psutil.cpu_count() or 1
    print(f"machine: {cores} cores, load average {' '.join(f'{v:.2f}' for v in os.getloadavg())} before the run",
          flush=True)
    # every load-generator session comes from 127.0.0.1: lift the per-address session cap for this run
    extra = (["--workers", str(args.workers)] if args.workers > 1 else []) + args.server_args.split()
    extra += ["--max-connections-per-client", "100000"]
    with server_or_url(args.engines, args.url, extra_args=extra) as (host_port, pid):
        steps = ramp(host_port, pid, args, began)
    report(steps, cores)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "engines": args.engines, "cores": cores, "silence_ms": args.silence_ms,
            "steps": [_finite(dataclasses.asdict(s)) for s in steps]}, indent=1))
    if steps:
        plot(steps, args.plot, f"bargein capacity, engines={args.engines}, {cores} cores (shared with the "
                                f"load generator)")
    print(f"total {time.monotonic() - began:.0f} s; load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
