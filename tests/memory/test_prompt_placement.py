"""Where recalled notes sit in a reply's prompt: each turn's prompt only appends to the one before (so the model's
KV cache keeps the conversation and its notes), a note is given once, and a forgotten or corrected note leaves."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bargein.memory.session_memory import MAX_GIVEN, SessionMemory
from bargein.memory.sqlite_store import SqliteMemoryStore
from bargein.values import ChatMessage

QUESTIONS = ("Tell me about the garden.", "What about the river?", "And the old house?", "Shall we walk to the market?")


async def _filled(path: Path) -> SqliteMemoryStore:
    store = SqliteMemoryStore(str(path))
    await store.remember("me", "allergy", "The user is allergic to peanuts.")
    for index, subject in enumerate(("garden", "river", "old house", "market") * 10):
        await store.remember("me", f"note {index}", f"The user once mentioned the {subject} (note {index}).")
    return store


async def _after_turn(memory: SessionMemory) -> None:
    memory.on_reply_closed("r", "completed", 1000.0, 1000.0)
    await asyncio.wait_for(memory.settled(), 5)


async def test_each_turns_prompt_extends_the_last_and_gives_each_note_once(tmp_path: Path) -> None:
    store = await _filled(tmp_path / "m.sqlite3")
    history: list[ChatMessage] = []
    memory = SessionMemory(store, "me", lambda: list(history))
    warmed: list[int] = []
    memory.on_given = lambda: warmed.append(len(memory.blocks))  # the session warms the model's cache then
    await memory.refresh()  # the session's start
    before: list[ChatMessage] = []
    for number, question in enumerate(QUESTIONS):
        prompt = memory.prompt([ChatMessage("system", "Be brief."), *history, ChatMessage("user", question)])
        assert prompt[:len(before)] == before  # the last prompt and its reply are a prefix: nothing to evaluate again
        assert prompt[-1].content.endswith(question) and "never instructions" in prompt[-1].content
        assert len(memory.blocks) == number + 1  # this turn's notes are new ones (the test is not vacuous)
        history += [ChatMessage("user", question), ChatMessage("assistant", f"Answer {number}.")]
        before = [*prompt, history[-1]]
        await _after_turn(memory)
    given = [note.id for block in memory.blocks for note in block.notes]
    assert len(given) == len(set(given)) <= MAX_GIVEN
    assert warmed == list(range(1, len(memory.blocks) + 1))  # once per new block, not when nothing is new
    await store.close()


async def test_a_forgotten_or_corrected_note_leaves_every_later_prompt(tmp_path: Path) -> None:
    store = await _filled(tmp_path / "m.sqlite3")
    await store.remember("me", "home", "The user lives in Lisbon.")
    history: list[ChatMessage] = []
    memory = SessionMemory(store, "me", lambda: list(history))
    await memory.refresh()
    assert any("Lisbon" in note.text for block in memory.blocks for note in block.notes)
    history += [ChatMessage("user", "Actually I'm allergic to shellfish, not peanuts. Forget where I live."),
                ChatMessage("assistant", "Done.")]
    await _after_turn(memory)
    text = " ".join(m.content for m in memory.prompt([*history, ChatMessage("user", "What am I allergic to?")]))
    assert "The user lives in Lisbon." not in text and "The user is allergic to peanuts." not in text
    assert "allergic to shellfish" in " ".join(note.text for block in memory.blocks for note in block.notes)
    await store.close()


async def test_the_first_notes_are_warmed_only_once_the_client_was_heard_and_only_with_memory_on(
        tmp_path: Path) -> None:
    store = await _filled(tmp_path / "m.sqlite3")
    for memory_on in (True, False):
        on = [True]
        memory = SessionMemory(store, "me", list, enabled=lambda on=on: on[0])
        warmed: list[int] = []
        memory.on_given = lambda warmed=warmed: warmed.append(1)
        memory.hold_warm = True  # as a server session starts: its client has not spoken yet
        await memory.refresh()
        assert memory.blocks and warmed == []  # recalled, not warmed
        on[0] = memory_on  # the client's first message: session.update memory true or false
        memory.client_heard()
        memory.client_heard()
        assert warmed == ([1] if memory_on else [])
    await store.close()


async def test_notes_open_the_users_question_not_the_camera_guidances_example(tmp_path: Path) -> None:
    """The camera's guidance is followed by a private example exchange (``eyes.GUIDANCE_EXAMPLE``): its question is
    no user message of the conversation, so the notes given for the first turn open the user's own question."""
    from bargein.session.eyes import GUIDANCE, GUIDANCE_EXAMPLE

    store = await _filled(tmp_path / "m.sqlite3")
    memory = SessionMemory(store, "me", lambda: [])
    await memory.refresh()
    prompt = memory.prompt([ChatMessage("system", "Be brief."), GUIDANCE, *GUIDANCE_EXAMPLE,
                            ChatMessage("user", QUESTIONS[0])])
    assert prompt[2:5] == list(GUIDANCE_EXAMPLE), "the example stays as it is (the prompt cache keeps it)"
    assert "never instructions" in prompt[-1].content and prompt[-1].content.endswith(QUESTIONS[0])
    await store.close()
