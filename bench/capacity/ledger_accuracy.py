"""Does the cost ledger account for the CPU the server really spent? Issue 46's figure: the ledger's CPU seconds per
stage, summed over a 10-turn run, within 10 % of the processes' total CPU time.

    python -m bench.capacity.ledger_accuracy                       # real models, 10 spoken turns
    python -m bench.capacity.ledger_accuracy --turns 10 --barge-every 3 --json ledger_accuracy.json

A server with the real models (``--engines default``: the LLM, Whisper and Kokoro in their worker processes, the
VAD and Smart Turn in the server process) takes ``--turns`` spoken turns through the benchmark harness
(:mod:`bench.harness.spoken_session`; every ``--barge-every``-th reply cut by the next clip). Around the run the
bench reads the server's ledger export (``GET /v1/ledger/export``) and the CPU time (user + system, from
``/proc/<pid>/stat``) of the server process and each of its worker processes, and compares the deltas:

- per worker stage: the ledger's CPU of ``llm``, ``asr``, ``tts`` (requests' shares and the worker's background)
  against that worker process's own CPU;
- the whole: every stage the ledger counts (the ``session`` stage included: each session's own steps on the event
  loop, the WebSocket, JSON, base64, resampling, the turn machine) against all the processes' CPU. What the server
  process spent beyond its stages (the loop's own machinery, WebSocket frames parsed before a session's task reads
  them, the threads reading the workers' pipes) is printed as ``unattributed``, with the server's CPU by thread
  and the number of session steps metered (the measuring costs a few microseconds a step).

The ledger export is also what ``bargein capacity --ledger`` reads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

from bench.harness.realtime_harness import server_or_url
from bench.harness.server_scrape import metrics_headers
from bench.harness.spoken_session import run_session

STEPS = "session_steps"
WORKER_STAGES = ("llm", "asr", "tts")
"""The worker processes' labels (the last word of their command line) are their stages."""


def _stat(pid: int) -> tuple[int, float] | None:
    """A process's parent and CPU seconds (utime + stime) from ``/proc/<pid>/stat``; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after the command name, which may hold spaces
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of the server (``server``) and each worker by its label, from ``/proc``."""
    stats = {int(entry.name): stat for entry in Path("/proc").iterdir()
             if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None}
    family, grew = {pid}, True
    while grew:
        grown = family | {child for child, (parent, _) in stats.items() if parent in family}
        grew, family = grown != family, grown
    cpu: dict[str, float] = {}
    for member in family:
        if member not in stats:
            continue
        try:
            line = Path(f"/proc/{member}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [word.decode(errors="replace") for word in line if word]
        label = "server" if member == pid else words[-1] if words and words[-1] in WORKER_STAGES else "other"
        cpu[label] = cpu.get(label, 0.0) + stats[member][1]
    return cpu


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of the server process's threads, from ``/proc/<pid>/task``: the event loop's (the main thread),
    the others by their kernel name (Python's threads all carry the process's; digits dropped): which threads the
    unattributed remainder ran on."""
    cpu: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = "event loop (main thread)" if task.name == str(pid) else \
                (task / "comm").read_text().strip().rstrip("0123456789_-") or "?"
            text = (task / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        cpu[name] = cpu.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return cpu


def ledger_cpu(host_port: str) -> dict[str, float]:
    """The ledger export's CPU seconds per stage (requests' shares plus background), and under ``session_steps``
    how many session steps the ``session`` stage has metered (what its measuring costs is per step)."""
    import httpx

    export = httpx.get(f"http://{host_port}/v1/ledger/export", headers=metrics_headers(), timeout=10).json()
    cpu = {stage: float(figures["cpu_s"]) + float(figures["background_cpu_s"])
           for stage, figures in export["stages"].items()}
    cpu[STEPS] = float(export["stages"].get("session", {}).get("requests", 0))
    return cpu


def step_overhead_us(steps: int = 100_000) -> dict[str, float]:
    """What measuring costs, in microseconds: one ``time.thread_time()`` (a system call), and one task step run
    metered (:mod:`bargein.metrics.loop_cpu`) less the same step plain, on this machine now."""
    import contextvars
    import time
    import timeit

    from bargein.metrics import loop_cpu
    from bargein.metrics.cost_meter import current_meter
    from bargein.session.turn_ledger import TurnLedgers

    async def yields(count: int) -> None:
        for _ in range(count):
            await asyncio.sleep(0)

    async def timed() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        loop_cpu.install(loop)
        context = contextvars.copy_context()
        context.run(current_meter.set, TurnLedgers(lambda: 0.0, lambda status, summary: None))
        started = time.process_time()
        await loop.create_task(yields(steps))
        plain = time.process_time() - started
        started = time.process_time()
        await loop.create_task(yields(steps), context=context)
        return plain, time.process_time() - started

    clock = timeit.Timer(time.thread_time, timer=time.process_time).timeit(number=steps) / steps  # CPU, not wall
    plain, metered = asyncio.run(timed())
    return {"thread_time_us": round(clock * 1e6, 2), "metered_step_extra_us": round((metered - plain) / steps * 1e6, 2)}


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {key: after[key] - before.get(key, 0.0) for key in after}


def compare(ledger: dict[str, float], processes: dict[str, float]) -> dict[str, Any]:
    """The figures (module docstring) from the two deltas."""
    rows = {stage: {"ledger_s": round(ledger.get(stage, 0.0), 3), "process_s": round(processes.get(stage, 0.0), 3),
                    "ratio": round(ledger.get(stage, 0.0) / processes[stage], 4) if processes.get(stage) else None}
            for stage in WORKER_STAGES}
    in_server = sum(value for stage, value in ledger.items() if stage not in WORKER_STAGES)
    ledger_total = sum(ledger.values())
    process_total = sum(processes.values())
    return {"workers": rows, "in_server_ledger_s": round(in_server, 3),
            "server_process_s": round(processes.get("server", 0.0), 3),
            "unattributed_s": round(processes.get("server", 0.0) - in_server, 3),
            "ledger_total_s": round(ledger_total, 3), "process_total_s": round(process_total, 3),
            "ratio_all": round(ledger_total / process_total, 4) if process_total else None,
            "worker_ratio": round(sum(ledger.get(s, 0.0) for s in WORKER_STAGES)
                                  / max(1e-9, sum(processes.get(s, 0.0) for s in WORKER_STAGES)), 4)}


def main() -> None:
    """Run the session between two readings and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", default="default", choices=["default", "fake", "instant"])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--barge-every", type=int, default=3, help="cut every k-th reply with the next clip")
    parser.add_argument("--reply-timeout-s", type=float, default=60.0)
    parser.add_argument("--max-reply-s", type=float, default=12.0)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    args.clips, args.silence_ms, args.semantic = "librivox", None, False
    with server_or_url(args.engines, None) as (host_port, pid):
        assert pid is not None
        load_before = os.getloadavg()
        ledger_before, cpu_before, threads_before = ledger_cpu(host_port), process_cpu(pid), thread_cpu(pid)
        results, _observer, _silence = asyncio.run(run_session(host_port, args))
        ledger_after, cpu_after, threads_after = ledger_cpu(host_port), process_cpu(pid), thread_cpu(pid)
        load_after = os.getloadavg()
    ledger = _delta(ledger_after, ledger_before)
    steps = ledger.pop(STEPS, 0.0)
    figures = compare(ledger, _delta(cpu_after, cpu_before))
    figures.update(turns=len(results), answered=sum(r.response_id is not None for r in results),
                   load_before=[round(v, 2) for v in load_before], load_after=[round(v, 2) for v in load_after],
                   ledger_stages=ledger, session_steps=int(steps),
                   server_threads={name: round(spent, 2)
                                   for name, spent in _delta(threads_after, threads_before).items() if spent > 0},
                   measuring=step_overhead_us())
    print(json.dumps(figures, indent=2))
    print(f"ledger / processes: {figures['ratio_all']} over all processes (the server's CPU in no stage: "
          f"{figures['unattributed_s']} s), {figures['worker_ratio']} over the worker processes; "
          f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=2)


if __name__ == "__main__":
    main()
