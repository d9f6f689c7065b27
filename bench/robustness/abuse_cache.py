"""The cross-session cache probe of ``bench/robustness/abuse.py`` (issue 47, finding 3).

The embedded LLM keeps what it evaluated (its context, and saved snapshots) to answer the next turn sooner, and
every session sees its own first-token time. Were the saved prompts shared across sessions, an attacker could
open a session whose first message is a guess at another session's opening: a right guess would be answered
sooner, because the model would reuse the other session's evaluation. Since the fix, a prompt is reused across
sessions only up to its public prefix (the instructions and tool descriptions, which no user wrote).

The probe starts its own ``bargein serve`` with the embedded LLM (the real default model, text replies only, so
Whisper and the voice load but never run) and, in each round, from fresh sessions:

* a victim (127.0.0.1) sends its private opening (100 words) and waits for the reply;
* the attacker (127.0.0.2) opens a session with that opening guessed word for word, another with an unrelated
  text of the same length drawn from the same words, and times the first token of each (``response.create`` sent
  to the first ``response.output_text.delta``), in alternating order;
* the victim asks again in its own session (the positive control: what a reuse looks like).

``python -m bench.robustness.abuse_cache`` runs it alone (the rest of the abuse bench starts other servers). The
attack holds when the guessed text is not answered sooner than the unrelated one beyond the noise (the
spread of either's first-token times over the rounds).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import statistics
import time
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from bench.harness.realtime_harness import ServerProcess
from bench.robustness.attack_target import ATTACKER, Attack, Outcome, Target

ROUNDS = 3
OPENING_WORDS = 100
"""About 130 tokens: a reuse would spare their evaluation (seconds on a busy machine), yet the victim's first
reply stays within the LLM's 15 s first-token deadline on a loaded 2-core machine."""
REPLY_TOKENS = 4
"""Replies are cut after a few tokens: only the first one is timed."""
_VOCABULARY = ("account", "after", "april", "bank", "before", "bring", "call", "car", "change", "children", "city",
               "close", "company", "contract", "daughter", "dentist", "doctor", "during", "evening", "family",
               "friday", "garden", "house", "insurance", "invoice", "january", "kitchen", "letter", "library",
               "london", "lawyer", "march", "meeting", "monday", "money", "morning", "mother", "neighbour", "number",
               "office", "order", "paris", "parcel", "password", "payment", "pharmacy", "phone", "plumber", "price",
               "private", "project", "receipt", "rent", "repair", "school", "secret", "september", "sister",
               "street", "surgery", "tax", "thursday", "ticket", "train", "tuesday", "visit", "wedding", "window")


def opening(seed: int) -> str:
    """A private-looking opening of :data:`OPENING_WORDS` words (the same words, in an order set by ``seed``)."""
    chooser = random.Random(seed)
    words = [chooser.choice(_VOCABULARY) for _ in range(OPENING_WORDS)]
    sentences = [" ".join(words[start:start + 10]).capitalize() + "." for start in range(0, len(words), 10)]
    return "Please remember this for me. " + " ".join(sentences)


async def _first_token_ms(ws: ClientConnection) -> float:
    """Ask for a short text reply; the milliseconds from the request to its first text, after reading it all."""
    await ws.send(json.dumps({"type": "response.create", "response": {
        "output_modalities": ["text"], "max_output_tokens": REPLY_TOKENS}}))
    began = time.perf_counter()
    first: float | None = None
    while True:
        event: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), 120))
        if event["type"] == "response.output_text.delta" and first is None:
            first = 1000 * (time.perf_counter() - began)
        elif event["type"] == "error":
            raise RuntimeError(f"the server answered {event['error']}")
        elif event["type"] == "response.done":
            if first is None:
                raise RuntimeError(f"a reply without text: {event['response'].get('status_details')}")
            return first


async def _session(host_port: str, text: str, *, attacker: bool) -> ClientConnection:
    """A new session whose first message is ``text`` (from the attacker's address or the victim's)."""
    ws = await connect(f"ws://{host_port}/v1/realtime?model=cache-probe", max_size=None, open_timeout=30,
                       local_addr=(ATTACKER, 0) if attacker else None)
    while json.loads(await asyncio.wait_for(ws.recv(), 30))["type"] != "session.created":
        pass
    await ws.send(json.dumps({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}))
    return ws


async def _probe(host_port: str, text: str) -> float:
    """The attacker's first-token time for a session opening with ``text``."""
    ws = await _session(host_port, text, attacker=True)
    try:
        return await _first_token_ms(ws)
    finally:
        await ws.close()


async def _round(host_port: str, number: int) -> tuple[float, float, float]:
    """One round from fresh sessions: (guessed, unrelated, the victim's own second ask) first-token times, ms."""
    secret = opening(1000 + number)
    victim = await _session(host_port, secret, attacker=False)
    try:
        await _first_token_ms(victim)  # the victim's turn: its prompt is evaluated and kept
        if number % 2 == 0:
            guessed = await _probe(host_port, secret)
            unrelated = await _probe(host_port, opening(2000 + number))
        else:
            unrelated = await _probe(host_port, opening(2000 + number))
            guessed = await _probe(host_port, secret)
        await victim.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "And again?"}]}}))
        own = await _first_token_ms(victim)
    finally:
        await victim.close()
    return guessed, unrelated, own


def _reuse(log: str) -> str:
    """The prompt tokens the model reused for each kind of request, from the LLM worker's job lines in the server's
    log; empty where the log does not say. Sessions first appear in the order of the rounds (the victim, then the
    two probes), and a victim's second job is its own next turn."""
    jobs = re.findall(r"job session=(?!-)(\S+) kind=reply .*?prompt=(\d+) reused=(\d+)", log)
    sessions = list(dict.fromkeys(session for session, _, _ in jobs))
    if len(sessions) != 3 * ROUNDS:
        return ""
    seen: dict[str, list[str]] = {}
    for session, prompt, reused in jobs:
        seen.setdefault(session, []).append(f"{reused}/{prompt}")
    kinds: dict[str, list[str]] = {"guessed": [], "unrelated": [], "own": []}
    for number in range(ROUNDS):
        victim, first, second = sessions[3 * number:3 * number + 3]
        guess, other = (first, second) if number % 2 == 0 else (second, first)
        kinds["guessed"] += seen[guess][:1]
        kinds["unrelated"] += seen[other][:1]
        kinds["own"] += seen[victim][1:2]
    return "; prompt tokens reused: " + "; ".join(f"{kind} {', '.join(values)}" for kind, values in kinds.items())


def _figures(label: str, values: list[float]) -> str:
    return f"{label} {statistics.median(values):.0f} ms ({', '.join(f'{v:.0f}' for v in values)})"


async def cross_session_cache(_target: Target | None = None) -> Outcome:
    """Does a right guess at another session's opening get its first token sooner than an unrelated text?"""
    server = ServerProcess("default", extra_args=["--tts", "flite"])
    try:
        await asyncio.to_thread(server.__enter__)
        rounds = [await _round(server.host_port, number) for number in range(ROUNDS)]
    except SystemExit as error:  # the harness's word for a server that did not start
        return Outcome(False, f"the server with the embedded LLM did not start: {str(error)[:200]}")
    finally:
        await asyncio.to_thread(server.stop)
    guessed, unrelated, own = ([row[index] for row in rounds] for index in range(3))
    noise = max(max(guessed) - min(guessed), max(unrelated) - min(unrelated))
    gap = statistics.median(unrelated) - statistics.median(guessed)
    beyond = abs(gap) > noise
    note = (f"first token: {_figures('guessed', guessed)}; {_figures('unrelated', unrelated)}; "
            f"{_figures('own session (a reuse)', own)}; guessed sooner by {gap:.0f} ms against noise {noise:.0f} ms: "
            f"{'differ beyond noise' if beyond else 'within noise'}"
            f"{_reuse(server.log_path.read_text(errors='replace'))}")
    print(f"   {note}", flush=True)
    return Outcome(not (beyond and gap > 0), note)


CACHE_TIMEOUT_S = 600.0
"""The probe loads the embedded models and evaluates a dozen long prompts: more than the other attacks' 120 s."""
CACHE_ATTACKS: dict[str, Attack] = {
    "cross-session cache probe": cross_session_cache,
}


def main() -> None:
    """Run the probe alone (``python -m bench.robustness.abuse_cache``): it needs none of the bench's other parts."""
    print(f"load average before: {' '.join(f'{load:.2f}' for load in os.getloadavg())}", flush=True)
    outcome = asyncio.run(cross_session_cache())
    print(f"held: {'yes' if outcome.held else 'NO'}; load average after: "
          f"{' '.join(f'{load:.2f}' for load in os.getloadavg())}")


if __name__ == "__main__":
    main()
