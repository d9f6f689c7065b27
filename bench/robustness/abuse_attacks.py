"""The attacks of ``bench/robustness/abuse.py``: each one client (or one client address) misbehaving against a
live server.

Every attack connects from 127.0.0.2 (still loopback, so local-only mode lets it in) while the honest
session of the benchmark uses 127.0.0.1: per-address limits then bite the attacker, as they would
on a real network. Each returns whether the server's defence held and a short note of what was seen.
The attacks on who may connect are in ``access_attacks.py``; :data:`ATTACKS` lists them all, in the order run.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import time
from collections.abc import Callable
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidMessage, InvalidStatus

from bench.robustness.access_attacks import cross_origin, dns_rebinding, empty_api_key, forwarded_loopback, public_docs
from bench.robustness.attack_target import (
    ATTACKER,
    Attack,
    Outcome,
    Target,
    attack_url,
    next_event_of,
    open_as_attacker,
)


async def baseline(target: Target) -> Outcome:
    """No attack: the honest session's round trips on this machine as it is (the load average shows)."""
    await asyncio.sleep(target.duration_s)
    return Outcome(True, f"nothing for {target.duration_s:g} s")


async def _flood_unread(target: Target, message: Callable[[int], str], rate: float | None) -> Outcome:
    """Send ``message(i)`` (``rate`` per second, or as fast as possible), never reading; reconnect when closed."""
    closes: list[str] = []
    sent = 0
    end = time.monotonic() + target.duration_s
    while time.monotonic() < end:
        try:
            ws = await open_as_attacker(target, max_queue=1)  # the client library stops reading once one event waits
        except (InvalidStatus, OSError, TimeoutError) as error:
            closes.append(f"refused ({type(error).__name__})")
            await asyncio.sleep(0.2)
            continue
        try:
            began = time.monotonic()
            while time.monotonic() < end:
                await asyncio.wait_for(ws.send(message(sent)), 5)
                sent += 1
                if rate is not None:
                    await asyncio.sleep(max(0.0, began + sent / rate - time.monotonic()))
        except (ConnectionClosed, TimeoutError, OSError):
            pass
        code = ws.close_code
        closes.append(str(code) if code is not None else "open")
        ws.transport.abort()
    summary = ", ".join(f"{closes.count(c)}x {c}" for c in dict.fromkeys(closes))
    return Outcome(True, f"{sent} sent; connections ended: {summary}")


async def unread_big_ids(target: Target) -> Outcome:
    """Unknown events with a 60 KB event_id, as fast as possible, never reading."""
    big = "x" * 60_000
    return await _flood_unread(target, lambda i: json.dumps({"type": "nope", "event_id": f"{i}{big}"}), None)


async def unread_big_ids_under_rate(target: Target) -> Outcome:
    """The same just under the event-rate limit (150/s), so only the outbound budget can stop it."""
    big = "x" * 60_000
    return await _flood_unread(target, lambda i: json.dumps({"type": "nope", "event_id": f"{i}{big}"}), 150.0)


async def invalid_json_unread(target: Target) -> Outcome:
    """Invalid JSON as fast as possible, never reading."""
    return await _flood_unread(target, lambda i: "{not json" + str(i), None)


async def rate_flood_reading(target: Target) -> Outcome:
    """Valid no-op events as fast as possible while reading: served at most at the event rate, told, and
    closed (policy) once held back for the tolerance (unless the server itself is slower than the rate)."""
    ws = await open_as_attacker(target)
    codes: set[str] = set()
    answers = 0

    async def drain() -> None:
        nonlocal answers
        with contextlib.suppress(ConnectionClosed):
            async for raw in ws:
                event = json.loads(raw)
                answers += event["type"] == "session.updated"
                if event["type"] == "error":
                    codes.add(event["error"]["code"])

    reader = asyncio.create_task(drain())
    began = time.monotonic()
    with contextlib.suppress(ConnectionClosed):
        while time.monotonic() - began < target.duration_s:
            await asyncio.wait_for(ws.send('{"type":"session.update","session":{}}'), target.duration_s)
    await ws.close()
    await asyncio.wait_for(reader, 30)
    took = time.monotonic() - began  # answers to events queued in TCP buffers keep coming after the last send
    rate = answers / took
    closed = ws.close_code == 1008 and "rate_limit_exceeded" in codes
    return Outcome(closed or rate <= 1.1 * target.events_per_s,
                   f"served {rate:.0f}/s for {took:.1f} s; close {ws.close_code}; errors {sorted(codes)}")


async def pcmu_buffer_fill(target: Target) -> Outcome:
    """G.711 input, manual turns: fill the input buffer to its cap (15 MiB of wire audio)."""
    async with await open_as_attacker(target) as ws:
        await ws.send(json.dumps({"type": "session.update", "session": {"audio": {"input": {
            "format": {"type": "audio/pcmu"}, "turn_detection": None}}}}))
        await next_event_of(ws, "session.updated")
        chunk = base64.b64encode(bytes([0x55]) * (1 << 20)).decode()
        codes: list[str] = []
        with contextlib.suppress(ConnectionClosed):
            for i in range(16):
                await ws.send(json.dumps({"type": "input_audio_buffer.append", "event_id": f"a{i}", "audio": chunk}))
            await ws.send('{"type":"session.update","session":{},"event_id":"probe"}')
            while True:
                event = json.loads(await asyncio.wait_for(ws.recv(), 60))
                if event["type"] == "error":
                    codes.append(event["error"]["code"])
                if event["type"] == "session.updated":
                    break
            await asyncio.sleep(1.0)  # let the RSS sampler see the buffer while it is held
    refused = ", ".join(f"{codes.count(c)}x {c}" for c in dict.fromkeys(codes))
    return Outcome(True, f"16 x 1 MiB of pcmu sent; errors: {refused or 'none'}; close {ws.close_code}")


async def huge_text_items(target: Target) -> Outcome:
    """Ten 7 MiB text items, then response.create."""
    async with await open_as_attacker(target) as ws:
        text = "word " * (7 * (1 << 20) // 5)
        errors = []
        with contextlib.suppress(ConnectionClosed):
            for i in range(10):
                await ws.send(json.dumps({"type": "conversation.item.create", "event_id": f"t{i}", "item": {
                    "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}))
            await ws.send('{"type":"response.create"}')
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                event = json.loads(await asyncio.wait_for(ws.recv(), 60))
                if event["type"] == "error":
                    errors.append(event["error"]["code"])
                if event["type"] == "response.done":
                    break
    how = f"closed {ws.close_code}" if ws.close_code not in (None, 1000) else "reply done"
    return Outcome(True, f"{how}; errors {sorted(set(errors))}")


async def long_history(target: Target) -> Outcome:
    """400 history items of 500 characters, then response.create."""
    async with await open_as_attacker(target) as ws:
        for i in range(400):
            await ws.send(json.dumps({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user" if i % 2 else "assistant",
                "content": [{"type": "input_text" if i % 2 else "output_text", "text": f"{i} " + "a" * 498}]}}))
        await ws.send('{"type":"response.create","response":{"output_modalities":["text"]}}')
        await next_event_of(ws, "response.done", 60)
    return Outcome(True, "reply done")


async def deep_tools(target: Target) -> Outcome:
    """A session.update with tools nested 300 deep, then an ordinary session.update."""
    nested: dict[str, Any] = {}
    inner = nested
    for _ in range(300):
        inner["a"] = {}
        inner = inner["a"]
    async with await open_as_attacker(target) as ws:
        await next_event_of(ws, "session.created")
        await ws.send(json.dumps({"type": "session.update", "session": {"tools": [nested]}}))
        first = await next_event_of(ws, "error")
        await ws.send(json.dumps({"type": "session.update", "session": {"instructions": "Be brief."}}))
        updated = await next_event_of(ws, "session.updated")
    held = updated["session"]["instructions"] == "Be brief."
    return Outcome(held, f"deep update: {first['error']['code']}; next update applied: {held}")


async def silent_client(target: Target) -> Outcome:
    """Connects, answers pings, sends nothing."""
    began = time.monotonic()
    async with await open_as_attacker(target) as ws:
        code = None
        with contextlib.suppress(ConnectionClosed, TimeoutError):
            error = await next_event_of(ws, "error", target.idle_timeout_s + 5)
            code = error["error"]["code"]
        with contextlib.suppress(ConnectionClosed, TimeoutError):
            await asyncio.wait_for(ws.recv(), 5)
    waited = time.monotonic() - began
    held = code == "session_idle" and ws.close_code == 1001 and waited <= target.idle_timeout_s + 3
    return Outcome(held, f"error {code}, closed {ws.close_code} after {waited:.1f} s")


async def half_open_handshakes(target: Target) -> Outcome:
    """1,000 connections that start an HTTP request and never finish it."""
    host, port = target.host_port.split(":")
    loop = asyncio.get_running_loop()
    sockets: list[socket.socket] = []
    for _ in range(1000):
        sock = socket.socket()
        sock.setblocking(False)
        sock.bind((ATTACKER, 0))
        with contextlib.suppress(OSError):
            await asyncio.wait_for(loop.sock_connect(sock, (host, int(port))), 2)
            await loop.sock_sendall(sock, b"GET /v1/realtime HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n")
        sockets.append(sock)
    async with httpx.AsyncClient() as client:
        health = (await client.get(f"http://{target.host_port}/healthz", timeout=5)).status_code
    async with connect(attack_url(target), open_timeout=5) as honest:  # from 127.0.0.1
        fresh = json.loads(await asyncio.wait_for(honest.recv(), 5))["type"]
    await asyncio.sleep(target.handshake_timeout_s + 1.5)
    still_open = 0
    for sock in sockets:
        try:
            still_open += sock.recv(1) != b""  # b"": the server closed it
        except BlockingIOError:  # nothing to read, not closed
            still_open += 1
        except OSError:
            pass
        sock.close()
    held = health == 200 and fresh == "session.created" and still_open == 0
    return Outcome(held, f"/healthz {health} and a new session ({fresh}) during; "
                         f"{still_open} still open after {target.handshake_timeout_s + 1.5:.1f} s")


async def sessions_per_address(target: Target) -> Outcome:
    """40 sessions at once from one address."""
    opened: list[ClientConnection] = []
    refused = 0
    for _ in range(40):
        try:
            ws = await open_as_attacker(target)
        except (InvalidStatus, InvalidMessage, OSError):  # refused while handshaking
            refused += 1
            continue
        event = json.loads(await asyncio.wait_for(ws.recv(), 5))
        if event["type"] == "session.created":
            opened.append(ws)
        else:
            refused += 1
            await ws.close()
    for ws in opened:
        await ws.close()
    return Outcome(len(opened) <= target.per_client, f"{len(opened)} accepted, {refused} refused")


async def malformed_events(target: Target) -> Outcome:
    """(held before) 200 malformed events, bad audio and a 9 MiB message, reading every answer."""
    bad = ["{oops", "[1]", '{"type": 5}', '{"type":"input_audio_buffer.append","audio":"%%%"}',
           json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(b"\x01\x02\x03").decode()})]
    async with await open_as_attacker(target) as ws:
        await next_event_of(ws, "session.created")
        errors = 0
        for i in range(200):
            await ws.send(bad[i % len(bad)])
            errors += json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "error"
        await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": "A" * (9 << 20)}))
        await ws.send('{"type":"session.update","session":{}}')
        codes = []
        while (event := json.loads(await asyncio.wait_for(ws.recv(), 30)))["type"] != "session.updated":
            codes.append(event["error"]["code"] if event["type"] == "error" else event["type"])
    return Outcome(errors == 200 and "message_too_large" in codes,
                   f"{errors}/200 answered with error; 9 MiB: {codes}; then session.updated")


async def response_create_x1000(target: Target) -> Outcome:
    """(held before) 1,000 response.create in a row."""
    async with await open_as_attacker(target) as ws:
        await next_event_of(ws, "session.created")
        for _ in range(1000):
            await ws.send('{"type":"response.create","response":{"output_modalities":["text"]}}')
        await ws.send('{"type":"session.update","session":{},"event_id":"probe"}')
        await next_event_of(ws, "session.updated", 60)
    return Outcome(ws.close_code in (None, 1000), f"session alive after the burst (close {ws.close_code})")


async def abrupt_disconnects(target: Target) -> Outcome:
    """(held before) 20 clients that drop the TCP connection in the middle of a reply."""
    for i in range(20):
        ws = await open_as_attacker(target)
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": f"tell me a story {i}"}]}}))
        await ws.send('{"type":"response.create"}')
        await next_event_of(ws, "response.output_audio.delta")
        ws.transport.abort()
    await asyncio.sleep(1.0)
    async with httpx.AsyncClient() as client:
        sessions = (await client.get(f"http://{target.host_port}/healthz")).json()["sessions"]
    return Outcome(sessions <= 1, f"sessions left on the server: {sessions} (the honest one)")


ATTACKS: dict[str, Attack] = {
    "(baseline: no attack)": baseline,
    "unread, 60 KB ids": unread_big_ids,
    "unread, 60 KB ids, 150/s": unread_big_ids_under_rate,
    "unread, invalid JSON": invalid_json_unread,
    "event flood (reading)": rate_flood_reading,
    "pcmu buffer fill": pcmu_buffer_fill,
    "10 x 7 MiB text items": huge_text_items,
    "400 history items": long_history,
    "tools 300 deep": deep_tools,
    "silent client": silent_client,
    "1000 half-open handshakes": half_open_handshakes,
    "40 sessions, one address": sessions_per_address,
    "cross-origin page": cross_origin,
    "DNS rebinding": dns_rebinding,
    "forwarded 127.0.0.1": forwarded_loopback,
    "empty --api-key": empty_api_key,
    "public /docs": public_docs,
    "malformed events (held)": malformed_events,
    "1000 response.create (held)": response_create_x1000,
    "drop mid-reply (held)": abrupt_disconnects,
}
