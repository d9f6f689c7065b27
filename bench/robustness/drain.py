"""The graceful drain's timeline: a real server process, a live reply, a real SIGTERM.

    python -m bench.robustness.drain [--drain-s 10] [--reply-chars 300]

Starts ``bargein serve --engines fake --drain-s D``, opens a session, asks for a reply whose audio
lasts ``--reply-chars`` x 60 ms (the fake TTS), sends SIGTERM once the first audio arrived, and prints
when (ms after the signal) each step was seen from outside: ``/healthz`` 503, a new connection refused
(1013), the live reply's ``response.done``, the final ``error``, the 1001 close, the process exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from bench.harness.realtime_harness import ServerProcess


@dataclass
class DrainTimeline:
    """What a client and a health checker saw after the signal (seconds after it)."""

    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    """The live session's events from the signal on."""
    close_code: int | None = None
    closed_at: float | None = None
    health_503_at: float | None = None
    health_body: dict[str, Any] = field(default_factory=dict)
    refused_event: dict[str, Any] | None = None
    refused_code: int | None = None
    refused_at: float | None = None
    exit_code: int | None = None
    exited_at: float | None = None

    def first(self, kind: str) -> tuple[float, dict[str, Any]] | None:
        """The first event of a type, with its time."""
        return next(((at, e) for at, e in self.events if e["type"] == kind), None)

    def rows(self) -> list[tuple[str, float | None]]:
        """(step, seconds after SIGTERM) in order."""
        done = self.first("response.done")
        final = self.events[-1] if self.events and self.events[-1][1]["type"] == "error" else None
        return [("/healthz answers 503 draining", self.health_503_at),
                (f"a new session is refused ({self.refused_code})", self.refused_at),
                (f"live reply's response.done ({done[1]['response']['status'] if done else 'none'})",
                 done[0] if done else None),
                ("final error server_shutting_down", final[0] if final else None),
                (f"WebSocket closed ({self.close_code})", self.closed_at),
                (f"server process exited (code {self.exit_code})", self.exited_at)]


async def _read(ws: Any, started: float, timeline: DrainTimeline) -> None:
    try:
        while True:
            timeline.events.append((time.monotonic() - started, json.loads(await ws.recv())))
    except ConnectionClosed as closed:
        timeline.close_code = closed.rcvd.code if closed.rcvd else None
        timeline.closed_at = time.monotonic() - started


async def _start_reply(ws: Any, reply_chars: int) -> None:
    assert json.loads(await ws.recv())["type"] == "session.created"
    await ws.send(json.dumps({"type": "session.update", "session": {
        "type": "realtime", "audio": {"input": {"turn_detection": None}}}}))
    text = ("please read this back to me " * (reply_chars // 28 + 1))[:reply_chars]
    await ws.send(json.dumps({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}))
    await ws.send(json.dumps({"type": "response.create"}))
    while json.loads(await ws.recv())["type"] != "response.output_audio.delta":
        pass


async def _watch_health(host: str, started: float, timeline: DrainTimeline) -> None:
    async with httpx.AsyncClient() as http:
        while timeline.health_503_at is None:
            response = await http.get(f"http://{host}/healthz", timeout=2)
            if response.status_code == 503:
                timeline.health_503_at = time.monotonic() - started
                timeline.health_body = response.json()
                return
            await asyncio.sleep(0.01)


async def _try_late_session(host: str, started: float, timeline: DrainTimeline) -> None:
    while timeline.health_503_at is None:  # noqa: ASYNC110 (waits for the health watcher's finding)
        await asyncio.sleep(0.01)
    async with connect(f"ws://{host}/v1/realtime") as late:
        timeline.refused_event = json.loads(await late.recv())
        try:
            await late.recv()
        except ConnectionClosed as closed:
            timeline.refused_code = closed.rcvd.code if closed.rcvd else None
            timeline.refused_at = time.monotonic() - started


async def drain_timeline(drain_s: float, reply_chars: int, workers: int = 1) -> DrainTimeline:
    """Run the scenario once against a fresh server process (``workers``: its session worker processes)."""
    timeline = DrainTimeline()
    args = ["--drain-s", str(drain_s), "--workers", str(workers)]
    with ServerProcess("fake", extra_args=args, ready_timeout_s=120) as server:
        assert server.process is not None
        if workers > 1:  # one worker answered: wait until every one answers (each request finds any of them)
            await _all_workers_ready(server.host_port)
        async with connect(f"ws://{server.host_port}/v1/realtime") as ws:
            await _start_reply(ws, reply_chars)
            started = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            await asyncio.gather(_read(ws, started, timeline), _watch_health(server.host_port, started, timeline),
                                 _try_late_session(server.host_port, started, timeline))
        timeline.exit_code = await asyncio.to_thread(server.process.wait, 60)
        timeline.exited_at = time.monotonic() - started
    return timeline


async def _all_workers_ready(host_port: str, in_a_row: int = 20) -> None:
    async with httpx.AsyncClient() as client:
        ready = 0
        while ready < in_a_row:
            response = await client.get(f"http://{host_port}/healthz", timeout=5)
            ready = ready + 1 if response.status_code == 200 else 0
            await asyncio.sleep(0.05)


def main() -> None:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drain-s", type=float, default=10.0)
    parser.add_argument("--reply-chars", type=int, default=300, help="reply length (x 60 ms of fake speech)")
    parser.add_argument("--workers", type=int, default=1, help="session worker processes (bargein serve --workers)")
    args = parser.parse_args()
    timeline = asyncio.run(drain_timeline(args.drain_s, args.reply_chars, args.workers))
    one, five, fifteen = os.getloadavg()
    print(f"drain timeline (--drain-s {args.drain_s:g}, a reply of about {args.reply_chars * 0.06:.0f} s of audio; "
          f"load average {one:.2f} {five:.2f} {fifteen:.2f})")
    print("  SIGTERM sent                                          0 ms")
    for step, at in timeline.rows():
        print(f"  {step:52s} {'-' if at is None else f'{1000 * at:6.0f} ms'}")


if __name__ == "__main__":
    main()
