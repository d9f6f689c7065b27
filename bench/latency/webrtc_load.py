"""Many calls at once (``bench.latency.webrtc``'s part e): barge-in stop and the server's CPU per call, WebRTC
beside the WebSocket.

Each call speaks a question, lets the reply play ``PLAY_BEFORE_CUT_S``, cuts in with a second question (the stop is
measured as in :mod:`bench.latency.webrtc_turns`), and hangs up once that reply has played a moment. The calls
start ``--stagger-s`` apart in total and run in ``processes`` client processes (Opus, SRTP and DTLS for fifty peers
are more than one interpreter can carry in real time). The server process's CPU over the window
from the first call's start to the last call's end, divided by the calls (and by that window: cores), is the CPU
a call costs.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from dataclasses import dataclass

from bench.harness.question_clips import question_clips
from bench.latency.webrtc_turns import even_levels, run_turns

CALL_TIMEOUT_S = 90.0
"""A call's two turns take about 15 s; one that has not finished in this is counted as not completed."""


@dataclass
class LoadFigures:
    """One transport's run."""

    transport: str
    calls: int
    not_connected: int
    """Calls the server refused (it sheds load once its event loop lags) or that failed to connect."""
    stops_ms: list[float]
    """Onset to the interrupted reply's last audio reaching the client (its last RTP packet over WebRTC)."""
    started_ms: list[float]
    """Onset to ``input_audio_buffer.speech_started`` (docs/design.md's barge-in stop for the WebSocket)."""
    completed_turns: int
    turns: int
    server_cpu_s_per_call: float
    """The server's CPU seconds over the run, divided by the calls."""
    server_cores_per_call: float
    """The same divided by the run's length: the cores one call kept busy on average."""
    window_s: float


async def _calls(host_port: str, transport: str, count: int, offset: int, stagger_s: float) -> list[list[float]]:
    """``count`` calls from this process; per call, [stop ms, speech_started ms, completed turns, 1 if refused]
    (NaN: not measured)."""
    from bench.latency.webrtc_links import WebRtcLink, WebSocketLink

    clips = even_levels(question_clips())

    async def one(index: int) -> list[float]:
        await asyncio.sleep(stagger_s * index)
        ours = [clips[(offset + index) % len(clips)], clips[(offset + index + 3) % len(clips)]]
        try:
            link = await (WebRtcLink.open(host_port) if transport == "webrtc" else WebSocketLink.open(host_port))
        except Exception as error:  # refused (the server sheds load past its loop lag) or failed to connect
            print(f"call {offset + index} not connected: {str(error)[:160]}", flush=True)
            return [float("nan"), float("nan"), 0.0, 1.0]
        try:
            results = await asyncio.wait_for(run_turns(link, ours, 2, quiet=True), CALL_TIMEOUT_S)
        except (TimeoutError, ConnectionError) as error:  # a call that died on an overloaded machine
            print(f"call {offset + index} broke off: {type(error).__name__}", flush=True)
            return [float("nan"), float("nan"), 0.0, 0.0]
        finally:
            await link.close()
        cut = results[1] if len(results) > 1 else None
        stop = cut.stop_ms if cut is not None and cut.stop_ms is not None else float("nan")
        started = cut.started_ms if cut is not None and cut.started_ms is not None else float("nan")
        return [stop, started, float(sum(r.completed for r in results)), 0.0]

    return list(await asyncio.gather(*(one(i) for i in range(count))))


def _client_process(host_port: str, transport: str, count: int, offset: int, stagger_s: float) -> list[list[float]]:
    return asyncio.run(_calls(host_port, transport, count, offset, stagger_s))


def process_cpu_s(pid: int) -> float:
    """User and system CPU seconds process ``pid`` has used (``/proc``; the benchmark server has no children)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_load(host_port: str, server_pid: int, transport: str, calls: int, processes: int,
             stagger_s: float) -> LoadFigures:
    """Run ``calls`` calls over ``transport`` and measure the server's CPU meanwhile."""
    def cpu() -> float:
        return process_cpu_s(server_pid)

    share = [calls // processes + (1 if i < calls % processes else 0) for i in range(processes)]
    offsets = [sum(share[:i]) for i in range(processes)]
    step = stagger_s / max(1, calls)
    began, cpu_before = time.monotonic(), cpu()
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        results = pool.starmap(_client_process, [(host_port, transport, n, offsets[i], step * processes)
                                                 for i, n in enumerate(share) if n])
    window, spent = time.monotonic() - began, cpu() - cpu_before
    per_call = [row for chunk in results for row in chunk]
    stops = [row[0] for row in per_call if row[0] == row[0]]
    started = [row[1] for row in per_call if row[1] == row[1]]
    return LoadFigures(transport, calls, int(sum(row[3] for row in per_call)), stops, started,
                       int(sum(row[2] for row in per_call)), 2 * calls,
                       spent / calls, spent / max(1e-6, window) / calls, window)
