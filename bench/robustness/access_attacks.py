"""Attacks on who may connect: a page of another origin, a rebound DNS name, a forged forwarded address, an empty
API key, the API docs left public. Each is refused at the handshake or at start-up, before any session."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from bench.robustness.attack_target import Outcome, Target, attack_url


async def refused(url: str, **kwargs: Any) -> str:
    """How the server answered a handshake: ``HTTP <status>`` if refused, else ``accepted (<first event>)``."""
    try:
        async with connect(url, open_timeout=5, **kwargs) as ws:
            return f"accepted ({json.loads(await asyncio.wait_for(ws.recv(), 5))['type']})"
    except InvalidStatus as error:
        return f"HTTP {error.response.status_code}"


async def cross_origin(target: Target) -> Outcome:
    """A web page at another origin opens a session to the local server."""
    evil = await refused(attack_url(target), origin="http://evil.example")  # type: ignore[arg-type]
    own = await refused(attack_url(target), origin=f"http://{target.host_port}")  # type: ignore[arg-type]
    return Outcome(evil.startswith("HTTP 403") and own.startswith("accepted"),
                   f"evil.example: {evil}; own origin: {own}")


async def dns_rebinding(target: Target) -> Outcome:
    """A page whose name was rebound to 127.0.0.1: same-origin to the browser, wrong Host to us."""
    port = target.host_port.split(":")[1]
    verdict = await refused(attack_url(target), origin=f"http://evil.example:{port}",  # type: ignore[arg-type]
                             additional_headers={"Host": f"evil.example:{port}"})
    return Outcome(verdict.startswith("HTTP 403"), verdict)


async def forwarded_loopback(target: Target) -> Outcome:
    """From another address, claiming 127.0.0.1 in X-Forwarded-For (server run with FORWARDED_ALLOW_IPS=*)."""
    if target.outside_ip is None:
        return Outcome(True, "skipped: no non-loopback address on this machine")
    port = target.host_port.split(":")[1]
    url = f"ws://{target.outside_ip}:{port}/v1/realtime"
    forged = await refused(url, additional_headers={"X-Forwarded-For": "127.0.0.1"})
    plain = await refused(url)
    return Outcome(forged.startswith("HTTP 403") and plain.startswith("HTTP 403"),
                   f"forged: {forged}; plain (auth before accept): {plain}")


async def empty_api_key(target: Target) -> Outcome:
    """``bargein serve --api-key ""``."""
    command = [sys.executable, "-m", "bargein", "serve", "--engines", "instant", "--port", "1", "--api-key", ""]
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=60,
                                   env={**os.environ, "HF_HUB_OFFLINE": "1"})
    said = done.stderr.strip().splitlines()[-1][:90] if done.stderr.strip() else ""
    return Outcome(done.returncode != 0 and "empty" in done.stderr, f"exit {done.returncode}: {said}")


async def public_docs(target: Target) -> Outcome:
    """GET /docs and /openapi.json."""
    async with httpx.AsyncClient() as client:
        codes = [(await client.get(f"http://{target.host_port}{path}")).status_code
                 for path in ("/docs", "/openapi.json")]
    return Outcome(codes == [404, 404], f"/docs {codes[0]}, /openapi.json {codes[1]}")
