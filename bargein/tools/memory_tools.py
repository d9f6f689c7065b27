"""The memory tools: ``remember``, ``forget`` and ``recall``, bound to one session's scope.

They run on the server for every session, beside a client's own tools too, and write through the session's
:class:`~bargein.memory.session_memory.SessionMemory` (so its scope, decided by the server owner, is the only
one they can reach). Their answers are quoted data for the model, never instructions.
"""

from __future__ import annotations

import json
from typing import Any

from bargein.memory.extract import Forget, Remember, extract
from bargein.memory.recall import memory_context
from bargein.memory.session_memory import SessionMemory, forget_finding
from bargein.memory.store import MemoryStoreError
from bargein.tools.registry import Tool

RECALL_LIMIT = 8


def _object(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


def _unused(arguments: dict[str, Any]) -> str:
    raise ValueError("this tool runs asynchronously")


def memory_tools(memory: SessionMemory) -> tuple[Tool, ...]:
    """The three memory tools of one session; a session that turned memory off (``memory: false``) reads and
    writes nothing through them."""

    def check_on() -> None:
        if not memory.enabled():
            raise ValueError("memory is off in this session: nothing is remembered, forgotten or recalled")

    async def remember(arguments: dict[str, Any]) -> str:
        check_on()
        fact = str(arguments["fact"]).strip()
        if not fact:
            raise ValueError("there is nothing to remember: say the fact")
        findings = [f for f in extract(fact) if isinstance(f, Remember)] or \
            [Remember("note " + " ".join(fact.lower().split()[:4]), f"The user asked to remember: {fact}")]
        try:
            for finding in findings:
                await memory.store.remember(memory.scope, finding.topic, finding.text)
            await memory.refresh()
        except MemoryStoreError as error:
            raise ValueError(str(error)) from None
        return json.dumps({"remembered": [finding.text for finding in findings]})

    async def forget(arguments: dict[str, Any]) -> str:
        check_on()
        what = str(arguments["what"]).strip()
        found = [f for f in extract(f"forget {what}") if isinstance(f, Forget)]
        try:
            gone = sum([await forget_finding(memory.store, memory.scope, f) for f in found])
            await memory.refresh()
        except MemoryStoreError as error:
            raise ValueError(str(error)) from None
        return json.dumps({"forgotten": gone})

    async def recall(arguments: dict[str, Any]) -> str:
        check_on()
        try:
            found = await memory.store.recall(memory.scope, str(arguments.get("about") or ""), RECALL_LIMIT)
        except MemoryStoreError as error:
            raise ValueError(str(error)) from None
        return memory_context("What is remembered about the user:", found) if found else \
            json.dumps({"remembered": []})

    return (
        Tool("remember", "Remember a fact the user tells about themselves or asks you to remember, for later "
             "conversations.", _object({"fact": {"type": "string", "description": "the fact, in the user's words"}},
                                       "fact"), _unused, remember, beside_client_tools=True),
        Tool("forget", "Forget what is remembered about something, when the user asks you to forget it.",
             _object({"what": {"type": "string", "description": "what to forget, e.g. my address"}}, "what"),
             _unused, forget, beside_client_tools=True),
        Tool("recall", "What is remembered about the user from earlier conversations.",
             _object({"about": {"type": "string", "description": "what to look for (empty: everything)"}}),
             _unused, recall, beside_client_tools=True),
    )
