"""The memory tools: remember, forget and recall in the session's scope, offered beside a client's own tools."""

from __future__ import annotations

import json
from pathlib import Path

from bargein.memory.session_memory import SessionMemory
from bargein.memory.sqlite_store import SqliteMemoryStore
from bargein.protocol.session_config import SessionConfig
from bargein.session.tool_use import tool_setup
from bargein.tools.memory_tools import memory_tools
from bargein.tools.registry import default_registry

CLIENT_TOOL = {"type": "function", "name": "book_table", "description": "Book a table.",
               "parameters": {"type": "object", "properties": {}}}


async def test_remember_recall_and_forget_stay_in_the_sessions_scope(tmp_path: Path) -> None:
    store = SqliteMemoryStore(str(tmp_path / "m.sqlite3"))
    await store.remember("other", "name", "The user's name is Zoe.")
    memory = SessionMemory(store, "mine", lambda: [])
    tools = default_registry(extra=memory_tools(memory))
    remembered = await tools.run_async("remember", json.dumps({"fact": "my name is Ana"}))
    assert remembered.ok and "The user's name is Ana." in remembered.output
    assert "Ana" in " ".join(note.text for note in memory.notes)  # the next reply's notes already hold it
    recalled = await tools.run_async("recall", json.dumps({"about": "name"}))
    assert "Ana" in recalled.output and "Zoe" not in recalled.output
    forgotten = await tools.run_async("forget", json.dumps({"what": "my name"}))
    assert json.loads(forgotten.output) == {"forgotten": 1}
    assert await store.entries("mine") == []
    assert [m.text for m in await store.entries("other")] == ["The user's name is Zoe."]
    assert not (await tools.run_async("remember", json.dumps({"fact": "  "}))).ok
    await store.close()


def test_memory_tools_are_offered_beside_a_clients_own_tools(tmp_path: Path) -> None:
    memory = SessionMemory(SqliteMemoryStore(":memory:"), "mine", lambda: [])
    registry = default_registry(extra=memory_tools(memory))
    setup = tool_setup(SessionConfig(tools=[CLIENT_TOOL]), None, registry)
    names = [tool["name"] for tool in setup.tools]
    assert names == ["book_table", "remember", "forget", "recall"]
    assert setup.server_side is not None and "remember" in setup.server_side and "book_table" not in setup.server_side
    assert "get_current_time" in [tool["name"] for tool in tool_setup(SessionConfig(), None, registry).tools]
    assert tool_setup(SessionConfig(tools=[CLIENT_TOOL]), None, default_registry()).server_side is None


async def test_a_session_that_turned_memory_off_reads_and_writes_nothing_through_the_tools(tmp_path: Path) -> None:
    store = SqliteMemoryStore(str(tmp_path / "m.sqlite3"))
    await store.remember("mine", "name", "The user's name is Ana.")
    memory = SessionMemory(store, "mine", lambda: [], enabled=lambda: False)
    tools = default_registry(extra=memory_tools(memory))
    for name, arguments in (("remember", {"fact": "I live in Lisbon"}), ("recall", {"about": "name"}),
                            ("forget", {"what": "my name"})):
        answer = await tools.run_async(name, json.dumps(arguments))
        assert not answer.ok and "Ana" not in answer.output and "memory is off" in answer.output
    assert [m.text for m in await store.entries("mine")] == ["The user's name is Ana."]
    await store.close()
