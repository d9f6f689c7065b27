"""Hostile and careless clients against a live server, each with an honest session beside it.

    python -m bench.robustness.abuse                     # every attack, about 5 minutes on 2 cores
    python -m bench.robustness.abuse --only "silent client" --only "DNS rebinding"

Starts ``bargein serve --engines instant`` (the real Silero VAD, instant fake ASR/LLM/TTS) listening on
all interfaces in local-only mode, with ``FORWARDED_ALLOW_IPS=*`` in its environment (which must change
nothing), a 4 s idle timeout, a 3 s handshake timeout and a 5 s rate-limit tolerance, so that those attacks
finish quickly, a 3 s limit on a WebRTC call's connecting (:mod:`bench.robustness.webrtc_attacks`), and a 64 MiB
history budget per client address (:mod:`bench.robustness.abuse_caps`). A
separate process keeps one honest session open from 127.0.0.1 and measures round trips (a no-op
``session.update`` every 50 ms to its ``session.updated``); the attacks run one after another from
127.0.0.2 (:mod:`bench.robustness.abuse_attacks`). Two attacks start a server of their own: the caps across
workers (:mod:`bench.robustness.abuse_caps`) and the cross-session cache probe, which needs the embedded LLM
(:mod:`bench.robustness.abuse_cache`). For each attack the table gives whether the defence held (the
attack's own check, RSS growth <= 150 MB, honest round-trip p99 <= 100 ms, server alive after), the
server's peak RSS growth over its RSS when the attack began, the cores the server used, the p99 of
the server's own event-loop lateness (its /metrics histogram; on a busy machine this includes waiting
for a CPU), and the honest session's round-trip p99 during the attack. The ``(baseline: no attack)``
row is the same figures with nobody attacking: on a shared machine, compare against it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing
import os
import resource
import socket
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.synchronize import Event as EventType
from typing import Any

import httpx

try:
    import psutil
except ImportError:  # not in every environment: the server's RSS and CPU are read from /proc (Linux) instead
    psutil = None

from bargein.config import Settings
from bench.harness.realtime_harness import ServerProcess, percentile
from bench.robustness.abuse_attacks import ATTACKS as BASE_ATTACKS
from bench.robustness.abuse_attacks import Target
from bench.robustness.abuse_cache import CACHE_ATTACKS, CACHE_TIMEOUT_S
from bench.robustness.abuse_caps import CAP_ATTACKS, server_environment
from bench.robustness.webrtc_attacks import WEBRTC_ATTACKS

ATTACKS = {**BASE_ATTACKS, **WEBRTC_ATTACKS, **CAP_ATTACKS, **CACHE_ATTACKS}

RSS_LIMIT_MB = 150.0
RTT_LIMIT_MS = 100.0
IDLE_TIMEOUT_S = 4.0
HANDSHAKE_TIMEOUT_S = 3.0
RATE_SUSTAIN_S = 5.0
PER_CLIENT = 16
WEBRTC_CONNECT_TIMEOUT_S = 3.0


@dataclass
class Row:
    """One line of the table."""

    attack: str
    held: bool
    rss_growth_mb: float
    server_cpu: float
    """Cores the server used during the attack."""
    loop_lag_p99_ms: float
    """The server's own event-loop lateness (its 50 ms timer; an upper bucket bound)."""
    rtt_p99_ms: float
    rtt_samples: int
    note: str


def honest_session(host_port: str, stop: EventType, results: Any) -> None:
    """A well-behaved client: one round trip every 50 ms until ``stop``; sends ``(wall time, ms or NaN)`` pairs."""
    from websockets.asyncio.client import connect

    samples: list[tuple[float, float]] = []

    async def run() -> None:
        while not stop.is_set():
            try:
                async with connect(f"ws://{host_port}/v1/realtime?model=honest", max_size=None) as ws:
                    json.loads(await ws.recv())
                    while not stop.is_set():
                        began = time.perf_counter()
                        await ws.send('{"type":"session.update","session":{}}')
                        while json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] != "session.updated":
                            pass
                        samples.append((time.time(), 1000 * (time.perf_counter() - began)))
                        await asyncio.sleep(0.05)
            except Exception:  # a lost session is a failed round trip
                samples.append((time.time(), math.nan))
                await asyncio.sleep(0.2)

    asyncio.run(run())
    results.put(samples)


def rss_bytes(pid: int) -> int:
    """The resident memory of process ``pid``."""
    if psutil is not None:
        return int(psutil.Process(pid).memory_info().rss)
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cpu_s(pid: int) -> float:
    """The user and system CPU seconds process ``pid`` has used."""
    if psutil is not None:
        return float(sum(psutil.Process(pid).cpu_times()[:2]))
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RssPeak:
    """Samples a process's RSS every 20 ms in a thread; :meth:`reset` starts a new peak."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def reset(self) -> int:
        """Current RSS, which is also the new peak."""
        self.peak = rss_bytes(self.pid)
        return self.peak

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            with contextlib.suppress(Exception):  # the server went away: the run reports it
                self.peak = max(self.peak, rss_bytes(self.pid))

    def close(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join()


def loop_lag_buckets(host_port: str) -> dict[float, float]:
    """The cumulative bucket counts of ``bargein_event_loop_lag_seconds`` from /metrics."""
    text = httpx.get(f"http://{host_port}/metrics", timeout=5).text
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith("bargein_event_loop_lag_seconds_bucket"):
            bound = line.split('le="')[1].split('"')[0]
            buckets[math.inf if bound == "+Inf" else float(bound)] = float(line.rsplit(" ", 1)[1])
    return buckets


def lag_p99_ms(before: dict[float, float], after: dict[float, float]) -> float:
    """The p99 of the lags observed between two scrapes, as the upper bound of its bucket."""
    counts = {bound: after[bound] - before.get(bound, 0.0) for bound in sorted(after)}
    total = counts.get(math.inf, 0.0)
    if total <= 0:
        return math.nan
    return next(1000 * bound for bound, count in counts.items() if count >= 0.99 * total)


def offer_refill_s() -> float:
    """How long the server's WebRTC offer rate takes to refill an address's burst (its defaults, or the
    environment's ``BARGEIN_WEBRTC_OFFER*``)."""
    settings = Settings()
    return settings.webrtc_offer_burst / settings.webrtc_offers_per_s


def outside_address() -> str | None:
    """A non-loopback IPv4 address of this machine, if it has one."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the outgoing interface
        address = str(probe.getsockname()[0])
        return None if address.startswith("127.") else address
    return None


def run_attack(name: str, target: Target) -> tuple[float, float, Any]:
    """Run one attack; returns (start, end, outcome or the exception)."""
    began = time.time()
    try:
        timeout_s = CACHE_TIMEOUT_S if name in CACHE_ATTACKS else 120.0
        outcome: Any = asyncio.run(asyncio.wait_for(ATTACKS[name](target), timeout_s))
    except Exception as error:  # an attack that crashes is reported, the run goes on
        traceback.print_exc()
        outcome = error
    time.sleep(1.0)  # memory released late still counts
    return began, time.time(), outcome


def main() -> None:
    """Run the attacks and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", help="run only this attack (repeatable)")
    parser.add_argument("--duration-s", type=float, default=8.0, help="how long each flood lasts")
    args = parser.parse_args()
    names = args.only or list(ATTACKS)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4096)), hard))
    os.environ["FORWARDED_ALLOW_IPS"] = "*"
    os.environ.update(server_environment())
    os.environ["BARGEIN_WEBRTC_CONNECT_TIMEOUT_S"] = str(WEBRTC_CONNECT_TIMEOUT_S)
    print(f"load average before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}", flush=True)
    extra = ["--host", "0.0.0.0", "--idle-timeout", str(IDLE_TIMEOUT_S),
             "--handshake-timeout", str(HANDSHAKE_TIMEOUT_S), "--max-connections-per-client", str(PER_CLIENT),
             "--rate-limit-sustain", str(RATE_SUSTAIN_S)]
    with ServerProcess("instant", extra_args=extra) as server:
        target = Target(server.host_port, outside_address(), IDLE_TIMEOUT_S, HANDSHAKE_TIMEOUT_S, PER_CLIENT,
                        args.duration_s, webrtc_connect_timeout_s=WEBRTC_CONNECT_TIMEOUT_S,
                        offer_refill_s=offer_refill_s())
        context = multiprocessing.get_context("spawn")
        stop, results = context.Event(), context.Queue()
        honest = context.Process(target=honest_session, args=(server.host_port, stop, results), daemon=True)
        honest.start()
        time.sleep(3.0)
        rss = RssPeak(server.pid)
        windows: list[tuple[str, float, float, Any, float, float, float]] = []
        for name in names:
            print(f"-- {name}", flush=True)
            before = rss.reset()
            lags, cpu = loop_lag_buckets(target.host_port), cpu_s(server.pid)
            began, ended, outcome = run_attack(name, target)
            cores = (cpu_s(server.pid) - cpu) / max(1e-3, ended - began)
            windows.append((name, began, ended, outcome, (rss.peak - before) / 2**20, cores,
                            lag_p99_ms(lags, loop_lag_buckets(target.host_port))))
        rss.close()
        stop.set()
        samples: list[tuple[float, float]] = results.get(timeout=30)
        honest.join(timeout=10)
        alive = httpx.get(f"http://{server.host_port}/healthz", timeout=5).status_code == 200
    rows = []
    for name, began, ended, outcome, growth, cores, lag in windows:
        rtts = [ms for t, ms in samples if began <= t <= ended]
        p99 = math.inf if any(math.isnan(ms) for ms in rtts) else percentile(rtts, 99)
        own = not isinstance(outcome, Exception) and outcome.held
        note = outcome.note if not isinstance(outcome, Exception) else f"attack failed: {outcome!r}"[:120]
        held = own and growth <= RSS_LIMIT_MB and (not rtts or p99 <= RTT_LIMIT_MS)
        rows.append(Row(name, held, growth, cores, lag, p99, len(rtts), note))
    print(f"\n{'attack':28s} {'held':5s} {'RSS+ MB':>8s} {'cores':>5s} {'lag99':>6s} {'RTT p99':>8s} {'n':>4s}"
          "  what happened")
    for row in rows:
        print(f"{row.attack:28s} {'yes' if row.held else 'NO':5s} {row.rss_growth_mb:8.1f} {row.server_cpu:5.2f} "
              f"{row.loop_lag_p99_ms:6.0f} {row.rtt_p99_ms:8.1f} {row.rtt_samples:4d}  {row.note}")
    print(f"\nserver alive and serving afterwards: {alive}; held {sum(r.held for r in rows)}/{len(rows)}; "
          f"limits: RSS growth <= {RSS_LIMIT_MB:.0f} MB, honest round trip p99 <= {RTT_LIMIT_MS:.0f} ms; "
          f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
