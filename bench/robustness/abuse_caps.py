"""Attacks of ``bench/robustness/abuse.py`` on caps that multiply: memory counted in characters, and per-client
caps counted per worker (issue 47, findings 2 and 6).

``wide-string history``: one attacker address opens four sessions and sends each four 7 MiB ``input_text`` items
with one emoji in each. CPython stores such a string at 4 bytes a character (28 MiB), so a cap counted in
characters (32 M) keeps 112 MiB per session; counted in memory it keeps one item per session, and the
address's history budget (``BARGEIN_MAX_HISTORY_BYTES_PER_CLIENT``, lowered to 64 MiB by the bench) refuses the
rest with ``history_budget_exceeded``. The table's RSS column is the figure that tells.

``sessions across workers``: starts its own ``bargein serve --workers 2`` with ``--max-connections-per-client``
4 and opens 20 sessions from one address: counted per worker, 8 get in; counted per server, 4.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidMessage, InvalidStatus

from bench.robustness.attack_target import ATTACKER, Attack, Outcome, Target, open_as_attacker

HISTORY_PER_CLIENT = 64 * 1024 * 1024
"""The attacker address's history budget on the bench's server (set in its environment by abuse.py)."""
WIDE_SESSIONS = 4
WIDE_ITEMS = 4
WORKERS_CAP = 4


def _wide_item(session: int, item: int) -> str:
    text = "a" * (7 * 1024 * 1024 - 8) + "\U0001f600" + f"{session}-{item}"
    return json.dumps({"type": "conversation.item.create", "event_id": f"w{session}-{item}", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}})


async def _answer(ws: ClientConnection) -> str:
    """What the server did with the item just sent: kept it, or the error's code (notices of the event rate's
    delay are not an answer)."""
    while True:
        event = json.loads(await asyncio.wait_for(ws.recv(), 60))
        if event["type"] == "conversation.item.added":
            return "kept"
        if event["type"] == "error" and event["error"]["code"] != "rate_limit_exceeded":
            return str(event["error"]["code"])


async def _keep_awake(ws: ClientConnection) -> None:
    with contextlib.suppress(ConnectionClosed):
        while True:
            await asyncio.sleep(1.0)
            await ws.send('{"type":"session.update","session":{}}')


async def _resident_mib(target: Target) -> float:
    """The server's resident memory from its ``/metrics`` (the bench's server is local-only: loopback reads it)."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"http://{target.host_port}/metrics", timeout=5)).text
    line = next(line for line in text.splitlines() if line.startswith("process_resident_memory_bytes"))
    return float(line.split()[-1]) / 2**20


async def wide_string_history(target: Target) -> Outcome:
    """Four sessions from one address, each with four 7 MiB one-emoji text items (one item in flight at a time)."""
    before = await _resident_mib(target)
    sessions = [await open_as_attacker(target, max_queue=None) for _ in range(WIDE_SESSIONS)]
    answers: list[str] = []
    awake = [asyncio.create_task(_keep_awake(ws)) for ws in sessions]  # the bench's idle timeout is 4 s
    try:
        for ws in sessions:
            await asyncio.wait_for(ws.recv(), 10)  # session.created
        for item in range(WIDE_ITEMS):
            for number, ws in enumerate(sessions):
                await ws.send(_wide_item(number, item))
                answers.append(await _answer(ws))
        await asyncio.sleep(1.0)  # let the RSS sampler see what the server holds while the sessions are open
        held = await _resident_mib(target) - before
    finally:
        for task in awake:
            task.cancel()
        for ws in sessions:
            await ws.close()
    counts = ", ".join(f"{answers.count(kind)}x {kind}" for kind in dict.fromkeys(answers))
    return Outcome("history_budget_exceeded" in answers,
                   f"{len(answers)} items of 28 MiB in memory each: {counts}; RSS +{held:.0f} MiB with the sessions "
                   "open")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _workers_up(port: int, deadline: float) -> bool:
    async with httpx.AsyncClient() as client:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if "bargein_workers 2.0" in (await client.get(f"http://127.0.0.1:{port}/metrics", timeout=2)).text:
                    return True
            await asyncio.sleep(0.3)
    return False


async def _sessions_from_one_address(port: int, attempts: int) -> tuple[int, int]:
    opened: list[ClientConnection] = []
    refused = 0
    for _ in range(attempts):
        try:
            ws = await connect(f"ws://127.0.0.1:{port}/v1/realtime", local_addr=(ATTACKER, 0), open_timeout=10)
        except (InvalidStatus, InvalidMessage, OSError):
            refused += 1
            continue
        with contextlib.suppress(ConnectionClosed):
            if json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "session.created":
                opened.append(ws)
                continue
        refused += 1
        await ws.close()
    for ws in opened:
        await ws.close()
    return len(opened), refused


async def sessions_across_workers(target: Target) -> Outcome:
    """20 sessions from one address against two workers capped at 4 per client."""
    port = _free_port()
    command = [sys.executable, "-m", "bargein", "serve", "--engines", "instant", "--workers", "2", "--port", str(port),
               "--max-connections-per-client", str(WORKERS_CAP), "--log-level", "warning"]
    server = await asyncio.create_subprocess_exec(*command, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not await _workers_up(port, time.monotonic() + 90):
            return Outcome(False, "the two workers did not come up")
        accepted, refused = await _sessions_from_one_address(port, 20)
    finally:
        server.terminate()
        await asyncio.wait_for(server.wait(), 30)
    return Outcome(accepted <= WORKERS_CAP, f"{accepted} accepted, {refused} refused (cap {WORKERS_CAP} per client, "
                                            "2 workers)")


CAP_ATTACKS: dict[str, Attack] = {
    "wide-string history": wide_string_history,
    "sessions across workers": sessions_across_workers,
}


def server_environment() -> dict[str, Any]:
    """What the bench's server needs in its environment for these attacks."""
    return {"BARGEIN_MAX_HISTORY_BYTES_PER_CLIENT": str(HISTORY_PER_CLIENT)}
