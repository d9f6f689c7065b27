"""First audio when several sessions ask at the same moment, measured by the official ``openai`` client.

    python -m bench.capacity.concurrent_first_audio                                  # 1 session, then 4 at once
    python -m bench.capacity.concurrent_first_audio --ladder 1 2 4 6 8 --rounds 4    # how many talk within 1.5 s p95
    python -m bench.capacity.concurrent_first_audio --server-args="--llm-sequences 1"   # against one sequence at a time
    python -m bench.capacity.concurrent_first_audio --server-args="--workers 2 --engines-per-worker"   # against shared

One server (default engines unless ``--engines``), ``N`` sessions, each a real-time microphone
(:class:`bench.harness.realtime_harness.Microphone`). In every round each session speaks a different LibriVox
question, started so that all of them **end at the same moment**. After ``--warmup-rounds`` unmeasured
rounds of one session, first audio is, per session, from the chunk holding the last sample of its
speech leaving the client to the client receiving the reply's first non-silent sample (as in
:mod:`bench.latency.first_audio`). Each step of the ladder runs ``--rounds`` rounds and prints p50, p95 and max
first audio, p95 against the one-session step's p95, the 1-minute load average, and the server
ledger's per-stage medians (``bargein.turn.metrics``), which show which stage the sessions queue at.
The largest step with first audio p95 <= ``--target-ms`` is reported. With a server of its own (no
``--url``) the embedded LLM logs every job (``BARGEIN_LLM_TRACE=1``), and each step also prints what its
jobs waited (:mod:`bench.harness.llm_trace`): first clauses, tool rounds, prefills and how each ended, and the
server's processes and memory (PSS and RSS summed over the process tree).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("BARGEIN_LLM_TRACE", "1")  # the server started here inherits it

from bench.harness.llm_trace import log_size, summarise
from bench.harness.realtime_harness import (
    WIRE_RATE,
    Microphone,
    SpeechClip,
    append_sender,
    load_clips,
    percentile,
    tree_memory,
)
from bench.harness.session_observer import Observer

LEDGER_KEYS = ("endpoint_ms", "asr_final_ms", "llm_first_token_ms", "tts_first_audio_ms", "first_audio_ms")


@dataclass
class Talker:
    """One open session: its connection, event reader and microphone."""

    connection: Any
    observer: Observer
    mic: Microphone
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)


async def open_talker(client: Any, stack: contextlib.AsyncExitStack) -> Talker:
    """Connect a session with ledger events on and start its microphone."""
    connection = await stack.enter_async_context(client.realtime.connect(
        model="bargein-bench", max_retries=0, extra_query={"bargein_events": "1"}))
    observer = Observer()
    talker = Talker(connection, observer, Microphone(append_sender(connection)))
    talker.tasks.append(asyncio.create_task(observer.read(connection)))
    await observer.wait_event("session.created", timeout=30)
    talker.tasks.append(asyncio.create_task(talker.mic.run()))
    return talker


async def ask(talker: Talker, clip: SpeechClip, delay_s: float,
              args: argparse.Namespace) -> tuple[float, str] | None:
    """Speak ``clip`` after ``delay_s``; first audio in ms and the reply's id (None if no audible reply
    came), after the reply has played out."""
    await asyncio.sleep(delay_s)
    start = talker.mic.play(clip.pcm)
    end_pos = start + clip.end
    end_at = await talker.mic.wait_sent(end_pos)
    started = talker.observer.last_speech_started(before_ms=1000 * end_pos / WIRE_RATE)
    if started is None:
        return None
    try:
        reply = await talker.observer.wait_audible_reply(after=started, timeout=args.reply_timeout_s)
    except TimeoutError:
        return None
    assert reply.audible_at is not None
    first_ms = 1000 * (reply.audible_at - end_at)
    with contextlib.suppress(TimeoutError):
        await talker.observer.wait_done(reply.response_id, timeout=args.max_reply_s)
    play_end = reply.audible_at + min(reply.audio_ms / 1000, args.max_reply_s)
    await asyncio.sleep(max(0.0, play_end - time.monotonic()))
    return first_ms, reply.response_id


async def one_round(talkers: list[Talker], clips: list[SpeechClip], offset: int,
                    args: argparse.Namespace) -> list[tuple[float, str] | None]:
    """Every session asks a different question, all ending together."""
    chosen = [clips[(offset + i) % len(clips)] for i in range(len(talkers))]
    last_end = max(clip.end for clip in chosen)
    results = await asyncio.gather(*(ask(talker, clip, (last_end - clip.end) / WIRE_RATE, args)
                                     for talker, clip in zip(talkers, chosen, strict=True)))
    await asyncio.sleep(args.pause_s)
    return list(results)


def ledger_medians(talkers: list[Talker], since: list[int]) -> dict[str, float]:
    """Per-stage medians of the ledger events that arrived during one step."""
    values: dict[str, list[float]] = {}
    for talker, seen in zip(talkers, since, strict=False):
        for metrics in talker.observer.turn_metrics[seen:]:
            for key in LEDGER_KEYS:
                if isinstance(value := metrics.get(key), int | float) and not isinstance(value, bool):
                    values.setdefault(key, []).append(float(value))
    return {key: statistics.median(found) for key, found in values.items()}


def slowest_ledger(talkers: list[Talker], response_id: str) -> str:
    """The ledger stages of one reply, as the server reported them."""
    for talker in talkers:
        for metrics in talker.observer.turn_metrics:
            if metrics.get("response_id") == response_id:
                return ", ".join(f"{key} {metrics[key]:.0f}" for key in LEDGER_KEYS
                                 if isinstance(metrics.get(key), int | float))
    return "no ledger event for it"


async def run(host_port: str, args: argparse.Namespace, server_log: Path | None = None,
              server_pid: int | None = None) -> None:
    """Climb the ladder of simultaneous talkers on one server (``server_pid``: its memory is printed)."""
    from openai import AsyncOpenAI

    clips = load_clips()
    client = AsyncOpenAI(api_key="sk-local", websocket_base_url=f"ws://{host_port}/v1", max_retries=0)
    talkers: list[Talker] = []
    baseline: float | None = None
    within: int | None = None
    async with contextlib.AsyncExitStack() as stack:
        try:
            if args.warmup_rounds:
                talkers.append(await open_talker(client, stack))
                for index in range(args.warmup_rounds):  # the first turns of a fresh server load lazily
                    await one_round(talkers[:1], clips, index, args)
            print_memory(server_pid, "after the warm-up")
            for step in args.ladder:
                while len(talkers) < step:
                    talkers.append(await open_talker(client, stack))
                await asyncio.sleep(1.0)
                seen = [len(t.observer.turn_metrics) for t in talkers]
                log_from = log_size(server_log)
                firsts: list[float] = []
                slowest: tuple[float, str] | None = None
                missed = 0
                for index in range(args.rounds):
                    results = await one_round(talkers[:step], clips, index * step, args)
                    answered = [r for r in results if r is not None]
                    firsts += [first for first, _id in answered]
                    slowest = max([*answered, *([slowest] if slowest else [])], default=None)
                    missed += len(results) - len(answered)
                p95 = percentile(firsts, 95)
                baseline = p95 if baseline is None else baseline
                if p95 <= args.target_ms:
                    within = step
                stages = ledger_medians(talkers[:step], seen)
                print(f"{step:3d} at once: first audio p50 {percentile(firsts, 50):6.0f} ms, p95 {p95:6.0f} ms, "
                      f"max {max(firsts, default=float('nan')):6.0f} ms ({len(firsts)} replies, {missed} missed); "
                      f"p95 {p95 / baseline:.2f}x the first step's; load average {os.getloadavg()[0]:.2f}",
                      flush=True)
                print("     ledger medians: " + ", ".join(f"{k} {v:.0f}" for k, v in stages.items()), flush=True)
                if slowest is not None:
                    ledger = slowest_ledger(talkers, slowest[1])
                    print(f"     slowest turn ({slowest[0]:.0f} ms): {ledger}", flush=True)
                for line in summarise(server_log, log_from):
                    print(f"     llm {line}", flush=True)
                print_memory(server_pid, f"after {step} at once")
        finally:
            for talker in talkers:
                talker.mic.stop()
                for task in talker.tasks:
                    task.cancel()
    print(f"most sessions asking at once with first audio p95 <= {args.target_ms:.0f} ms: "
          f"{within if within is not None else 'none'} (steps tried: {' '.join(map(str, args.ladder))})")


def print_memory(server_pid: int | None, when: str) -> None:
    """The server's processes and their memory (RSS double-counts pages the processes share; PSS does not)."""
    if server_pid is None:
        return
    count, rss_mb, pss_mb = tree_memory(server_pid)
    print(f"     server memory {when}: {count} processes, PSS {pss_mb:.0f} MB, RSS {rss_mb:.0f} MB", flush=True)


def main() -> None:
    """Parse flags, start a server (or use ``--url``) and climb the ladder."""
    from bench.harness.realtime_harness import ServerProcess

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", default="default", choices=["default", "fake", "instant"])
    parser.add_argument("--url", help="host:port of a running server (then no server is started)")
    parser.add_argument("--server-args", default="", help="extra `bargein serve` arguments, one string")
    parser.add_argument("--ladder", type=int, nargs="+", default=[1, 4], help="sessions asking at once, per step")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per step")
    parser.add_argument("--warmup-rounds", type=int, default=1, help="unmeasured one-session rounds first")
    parser.add_argument("--target-ms", type=float, default=1500.0)
    parser.add_argument("--pause-s", type=float, default=1.0, help="silence after every reply played, per round")
    parser.add_argument("--reply-timeout-s", type=float, default=60.0)
    parser.add_argument("--max-reply-s", type=float, default=8.0)
    args = parser.parse_args()
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
    if args.url:
        asyncio.run(run(args.url.removeprefix("ws://").removeprefix("http://").split("/")[0], args))
    else:
        with ServerProcess(args.engines, extra_args=shlex.split(args.server_args)) as server:
            print(f"server: bargein serve --engines {args.engines} on {server.host_port} (log {server.log_path})",
                  flush=True)
            asyncio.run(run(server.host_port, args, server.log_path, server.pid))
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
