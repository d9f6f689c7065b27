"""Soak: many sessions talking and barging in for minutes; does the server's memory, fds or task count grow?

    python -m bench.robustness.soak                               (50 sessions, --engines instant, 10 minutes)
    python -m bench.robustness.soak --engines default --sessions 3 --minutes 10
    python -m bench.robustness.soak --url ws://host:port   (a server you started; RSS etc. read from its /metrics,
                                                            with BARGEIN_METRICS_KEY if it has keys)

Each simulated user connects, streams real speech at real-time pace (a 20 ms append every 20 ms,
silence between clips, through the official ``openai`` client), waits for the reply to start, and then
either lets it play out and pauses, or (``--barge-in`` share of turns) cuts in with its next clip; after
10 to 20 turns it hangs up and connects again, so state left behind by closed sessions would show as
growth. Every ``--sample-s`` the server's ``/metrics`` is read: resident memory, open file descriptors,
asyncio tasks, and the event loop's lag (p99 of the interval, as a histogram bucket bound). After the
warm-up, each series' slope is the median of the slopes between every two samples (Theil-Sen).
Targets: the anonymous memory read after each upkeep pass grows <= 1 MB/min, no growth in fds or tasks,
stable lag.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import numpy as np

from bench.harness.realtime_harness import Microphone, SpeechClip, append_sender, load_clips, server_or_url
from bench.harness.server_scrape import metrics_headers

_SAMPLE = re.compile(r'^(\w+)(?:\{([^}]*)\})? ([0-9.eE+-]+|NaN|\+Inf)$')


@dataclass
class ClientCounts:
    """What the sessions did."""

    connections: int = 0
    turns: int = 0
    replies: int = 0
    barge_ins: int = 0
    errors: int = 0
    missing_replies: int = 0
    dropped: int = 0
    """Connections that failed (refused, dropped, timed out); the user reconnects."""
    failures: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Sample:
    """One reading of the server's ``/metrics``."""

    at_s: float
    rss_mb: float
    fds: float
    tasks: float
    sessions: float
    lag_p99_ms: float
    lag_mean_ms: float
    worker_rss_mb: float = 0.0
    """The LLM worker process's resident memory (0 with fake engines or an in-process LLM)."""
    settled_rss_mb: float = float("nan")
    """The server's resident memory right after its last memory upkeep pass (collection and trim)."""
    settled_anonymous_mb: float = float("nan")
    """The anonymous part of that (heaps, arenas, buffers; no mapped files' pages): what a leak raises."""
    settled_heap_kblocks: float = float("nan")
    """Thousands of blocks the server's Python allocator held right after that pass: Python objects left
    behind raise this, native memory does not."""


@dataclass
class SoakReport:
    """The samples and the fitted slopes after warm-up."""

    samples: list[Sample]
    warmup_s: float
    counts: ClientCounts
    load: str

    def steady(self) -> list[Sample]:
        """Samples after the warm-up."""
        return [s for s in self.samples if s.at_s >= self.warmup_s]

    def slope_without_step_per_min(self, name: str) -> float:
        """:meth:`slope_per_min` once the largest rise between two consecutive readings is taken out (every later
        reading lowered by it). A one-off step (an arena that grows once) is then flat, where a fit over the
        whole stretch reads it as a slope; a leak loses one reading's worth of rise and keeps its slope."""
        steady = [s for s in self.steady() if np.isfinite(getattr(s, name))]
        if len(steady) < 2:
            return float("nan")
        values = np.array([getattr(s, name) for s in steady])
        rises = np.diff(values)
        at = int(np.argmax(rises))
        if rises[at] > 0:
            values[at + 1:] -= rises[at]
        return _theil_sen([replace(s, **{name: float(v)}) for s, v in zip(steady, values, strict=True)], name)

    def slope_per_min(self, name: str) -> float:
        """Theil-Sen slope of a series after warm-up, per minute: the median of the slopes between every
        two samples. Resident memory dips by a few MB at each memory upkeep pass and jumps for a sample when
        several replies are in flight; a least-squares line follows those (the last sample, taken as the
        users hang up, alone moved it by 0.5 MB/min), the median of pairwise slopes does not. Samples
        without a reading of the series (NaN) are left out."""
        return _theil_sen(self.steady(), name)

    def growth(self, name: str) -> float:
        """Last steady value minus the first."""
        steady = self.steady()
        return float(getattr(steady[-1], name) - getattr(steady[0], name)) if len(steady) >= 2 else float("nan")


def _parse_metrics(text: str) -> dict[str, list[tuple[str, float]]]:
    series: dict[str, list[tuple[str, float]]] = {}
    for line in text.splitlines():
        if line.startswith("#") or not (match := _SAMPLE.match(line)):
            continue
        series.setdefault(match.group(1), []).append((match.group(2) or "", float(match.group(3))))
    return series


def _one(series: dict[str, list[tuple[str, float]]], name: str) -> float:
    values = series.get(name)
    return values[0][1] if values else float("nan")


def _lag_buckets(series: dict[str, list[tuple[str, float]]]) -> list[tuple[float, float]]:
    buckets = []
    for labels, value in series.get("bargein_event_loop_lag_seconds_bucket", []):
        bound = labels.split('le="')[1].rstrip('"')
        buckets.append((float("inf") if bound == "+Inf" else float(bound), value))
    return sorted(buckets)


class MetricsReader:
    """Reads ``/metrics`` and turns the cumulative lag histogram into per-interval figures."""

    def __init__(self, host_port: str) -> None:
        self.url = f"http://{host_port}/metrics"
        self._last_buckets: list[tuple[float, float]] = []
        self._last_sum_count = (0.0, 0.0)

    async def sample(self, http: httpx.AsyncClient, at_s: float) -> Sample:
        """One reading."""
        series = _parse_metrics((await http.get(self.url, headers=metrics_headers(), timeout=10)).text)
        buckets = _lag_buckets(series)
        previous = dict(self._last_buckets)
        deltas = [(bound, count - previous.get(bound, 0.0)) for bound, count in buckets]
        total = deltas[-1][1] if deltas else 0.0
        p99 = next((bound for bound, count in deltas if count >= 0.99 * total), float("nan")) if total else 0.0
        lag_sum, lag_count = _one(series, "bargein_event_loop_lag_seconds_sum"), \
            _one(series, "bargein_event_loop_lag_seconds_count")
        mean = (lag_sum - self._last_sum_count[0]) / max(1.0, lag_count - self._last_sum_count[1])
        self._last_buckets, self._last_sum_count = buckets, (lag_sum, lag_count)
        return Sample(at_s, _one(series, "process_resident_memory_bytes") / 2**20, _one(series, "process_open_fds"),
                      _one(series, "bargein_asyncio_tasks"), _one(series, "bargein_sessions"), 1000 * p99,
                      1000 * mean, _one(series, "bargein_llm_worker_resident_memory_bytes") / 2**20,
                      _one(series, "bargein_resident_memory_after_upkeep_bytes") / 2**20 or float("nan"),
                      _one(series, "bargein_anonymous_memory_after_upkeep_bytes") / 2**20 or float("nan"),
                      _one(series, "bargein_python_heap_blocks_after_upkeep") / 1000 or float("nan"))


async def _session(host_port: str, clips: list[SpeechClip], stop_at: float, barge_in: float, seed: int,
                   counts: ClientCounts, turns_per_connection: int) -> None:
    """One simulated user: connects, talks for some turns, hangs up, comes back, until ``stop_at``."""
    rng = random.Random(seed)
    await asyncio.sleep(rng.uniform(0, 3))  # users do not all start at once
    turn = seed
    while time.monotonic() < stop_at:
        try:
            turn = await _connection(host_port, clips, stop_at, barge_in, rng, counts, turn,
                                     rng.randint(max(1, turns_per_connection // 2), max(1, turns_per_connection)))
        except Exception as error:  # a dropped or refused connection: count it, come back like a user would
            counts.dropped += 1
            if len(counts.failures) < 5:
                counts.failures.append(f"{type(error).__name__}: {error}"[:200])
            await asyncio.sleep(1.0)


async def _connection(host_port: str, clips: list[SpeechClip], stop_at: float, barge_in: float, rng: random.Random,
                      counts: ClientCounts, turn: int, turns: int) -> int:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key="sk-local", websocket_base_url=f"ws://{host_port}/v1", max_retries=0)
    async with client.realtime.connect(model="bargein-soak") as connection:
        counts.connections += 1
        started = asyncio.Event()
        done = asyncio.Event()

        send = append_sender(connection)

        async def talk() -> None:
            nonlocal turn
            for _ in range(turns):
                if time.monotonic() >= stop_at:
                    break
                clip = clips[turn % len(clips)]
                turn += 1
                started.clear()
                start = mic.play(clip.pcm)
                await mic.wait_sent(start + clip.samples - 1)
                counts.turns += 1
                try:
                    await asyncio.wait_for(started.wait(), 10)
                except TimeoutError:
                    counts.missing_replies += 1
                    continue
                if rng.random() < barge_in:
                    await asyncio.sleep(rng.uniform(0.2, 0.8))
                    counts.barge_ins += 1
                    continue  # the next clip cuts into the reply
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), 20)
                await asyncio.sleep(rng.uniform(0.5, 1.5))

        mic = Microphone(send)
        tasks = [asyncio.create_task(talk()), asyncio.create_task(mic.run()), asyncio.create_task(
            _count_events(connection, counts, started, done))]
        try:
            finished, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if tasks[0] not in finished:  # the microphone or the reader stopped: the connection is gone
                why = next((t.exception() for t in finished if t.exception() is not None), None)
                raise ConnectionError(f"connection lost mid-conversation ({type(why).__name__}: {why})")
            tasks[0].result()
        finally:
            mic.stop()
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
    return turn


async def _count_events(connection: Any, counts: ClientCounts, started: asyncio.Event, done: asyncio.Event) -> None:
    """Read the server's events for ever: count replies and errors, and mark each reply's start and end."""
    while True:
        head = (await connection.recv_bytes())[:48]  # "type" comes first: no need to parse audio
        if b'"response.created"' in head:
            counts.replies += 1
            started.set()
            done.clear()
        elif b'"response.done"' in head:
            done.set()
        elif b'"type":"error"' in head:
            counts.errors += 1


def load_average() -> str:
    """The load average, quoted with every figure."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cores)"


async def soak(host_port: str, *, sessions: int, seconds: float, warmup_s: float, sample_s: float,
               barge_in: float, turns_per_connection: int = 20, verbose: bool = True) -> SoakReport:
    """Run the sessions against a running server and sample its metrics; returns the report."""
    clips = load_clips()
    counts = ClientCounts()
    began = time.monotonic()
    stop_at = began + seconds
    reader = MetricsReader(host_port)
    samples: list[Sample] = []
    workers = [asyncio.create_task(_session(host_port, clips, stop_at, barge_in, seed, counts, turns_per_connection))
               for seed in range(sessions)]
    if verbose:
        print(f"{'t s':>6} {'RSS MB':>8} {'fds':>5} {'tasks':>6} {'sess':>5} {'lag p99 ms':>10} {'mean ms':>8} "
              f"{'turns':>6} {'barge':>6} {'err':>4} {'LLM MB':>7} {'settled':>8} {'anon':>7}", flush=True)
    async with httpx.AsyncClient() as http:
        await reader.sample(http, 0.0)  # the lag histogram's baseline
        while time.monotonic() < stop_at:
            await asyncio.sleep(min(sample_s, max(0.0, stop_at - time.monotonic())))
            sample = await reader.sample(http, time.monotonic() - began)
            samples.append(sample)
            if verbose:
                print(f"{sample.at_s:6.0f} {sample.rss_mb:8.1f} {sample.fds:5.0f} {sample.tasks:6.0f} "
                      f"{sample.sessions:5.0f} {sample.lag_p99_ms:10.0f} {sample.lag_mean_ms:8.2f} "
                      f"{counts.turns:6d} {counts.barge_ins:6d} {counts.errors:4d} {sample.worker_rss_mb:7.1f} "
                      f"{sample.settled_rss_mb:8.1f} {sample.settled_anonymous_mb:7.1f}", flush=True)
    outcomes = await asyncio.gather(*workers, return_exceptions=True)
    counts.failures += [f"{type(o).__name__}: {o}"[:200] for o in outcomes if isinstance(o, BaseException)][:3]
    return SoakReport(samples, warmup_s, counts, load_average())


def _by_minute(samples: list[Sample], name: str, spec: str) -> str:
    """The series' last reading in each minute of ``samples``: a step and a ramp read differently."""
    last: dict[int, float] = {}
    for sample in samples:
        if np.isfinite(value := getattr(sample, name)):
            last[int(sample.at_s // 60)] = value
    return " ".join(format(value, spec) for _, value in sorted(last.items())) or "-"


def _theil_sen(samples: list[Sample], name: str) -> float:
    """The median of the slopes, per minute, between every two of ``samples`` that read ``name``."""
    read = [s for s in samples if np.isfinite(getattr(s, name))]
    if len(read) < 2:
        return float("nan")
    minutes = np.array([s.at_s / 60 for s in read])
    values = np.array([getattr(s, name) for s in read])
    first, second = np.triu_indices(len(read), 1)
    apart = minutes[second] - minutes[first]
    usable = apart > 0
    return float(np.median((values[second] - values[first])[usable] / apart[usable])) if usable.any() else float("nan")


def summarize(report: SoakReport) -> str:
    """The verdict lines."""
    steady = report.steady()
    lags = [s.lag_p99_ms for s in steady]
    lines = [
        f"after {report.warmup_s:.0f} s warm-up ({len(steady)} samples; load average {report.load}):",
        f"  RSS slope {report.slope_per_min('rss_mb'):+.2f} MB/min, "
        f"{steady[0].rss_mb:.1f} -> {steady[-1].rss_mb:.1f} MB" if steady else "  no steady samples",
        f"  RSS after upkeep slope {report.slope_per_min('settled_rss_mb'):+.2f} MB/min, "
        f"by minute: {_by_minute(steady, 'settled_rss_mb', '.1f')} MB",
        f"  anonymous memory after upkeep slope {report.slope_per_min('settled_anonymous_mb'):+.2f} MB/min "
        f"({report.slope_without_step_per_min('settled_anonymous_mb'):+.2f} without its largest step; "
        f"target <= 1), by minute: {_by_minute(steady, 'settled_anonymous_mb', '.1f')} MB",
        f"  Python heap after upkeep slope {report.slope_per_min('settled_heap_kblocks'):+.2f} thousand blocks/min, "
        f"by minute: {_by_minute(steady, 'settled_heap_kblocks', '.0f')}",
        f"  LLM worker RSS slope {report.slope_per_min('worker_rss_mb'):+.2f} MB/min\n"
        f"  open fds {report.growth('fds'):+.0f}, asyncio tasks slope {report.slope_per_min('tasks'):+.1f}/min "
        f"(growth {report.growth('tasks'):+.0f})",
        f"  loop lag p99 per interval: median {np.median(lags) if lags else float('nan'):.0f} ms, "
        f"max {max(lags) if lags else float('nan'):.0f} ms",
        f"  client: {report.counts.connections} connections, {report.counts.turns} turns, "
        f"{report.counts.replies} replies, {report.counts.barge_ins} "
        f"barge-ins, {report.counts.missing_replies} without reply, {report.counts.errors} error events, "
        f"{report.counts.dropped} failed connections"
        + (f", failures: {report.counts.failures}" if report.counts.failures else ""),
    ]
    return "\n".join(lines)


def main() -> None:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", choices=["instant", "fake", "default"], default="instant")
    parser.add_argument("--sessions", type=int, help="default 50 (instant/fake) or 3 (default engines)")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--warmup-s", type=float, help="default: a fifth of the run, at most 120 s")
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--barge-in", type=float, default=0.3, help="share of turns that cut into the reply")
    parser.add_argument("--turns-per-connection", type=int, default=20,
                        help="a user hangs up after 10 to this many turns and connects again (session churn)")
    parser.add_argument("--url", help="a running server instead of starting one")
    args = parser.parse_args()
    sessions = args.sessions or (3 if args.engines == "default" else 50)
    seconds = 60 * args.minutes
    warmup = args.warmup_s if args.warmup_s is not None else min(120.0, seconds / 5)
    print(f"soak: {sessions} sessions, --engines {args.engines}, {args.minutes:g} min, load average {load_average()}",
          flush=True)
    # every simulated user connects from 127.0.0.1: lift the per-address session cap for this run
    extra = ["--max-connections-per-client", "100000"]
    with server_or_url(args.engines, args.url, extra_args=extra) as (host_port, _pid):
        report = asyncio.run(soak(host_port, sessions=sessions, seconds=seconds, warmup_s=warmup,
                                  sample_s=args.sample_s, barge_in=args.barge_in,
                                  turns_per_connection=args.turns_per_connection))
    print(summarize(report), flush=True)


if __name__ == "__main__":
    main()

