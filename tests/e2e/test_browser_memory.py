"""The page's memory panel in Chromium: it lists what the server remembers about the local user (and nothing of
another scope), and an item's Forget button forgets that item in the store.

Instant (fake) engines; local-only mode, where the loopback page may read the one local scope.
Needs Debian's ``chromium`` and ``playwright`` (which drives the system Chromium; no browser download).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.memory.sqlite_store import SqliteMemoryStore
from bargein.memory.store import LOCAL_SCOPE, Memory
from tests.e2e.test_browser import CHROMIUM, chromium_args, write_fake_microphone
from tests.support.server import free_port, running_server

pytestmark = pytest.mark.slow

FACTS = {"name": "The user's name is Ana.", "allergy": "The user is allergic to peanuts."}


async def _store(path: Path, facts: dict[str, str], other: str | None = None) -> list[Memory]:
    store = SqliteMemoryStore(str(path))
    for topic, text in facts.items():
        await store.remember(LOCAL_SCOPE, topic, text)
    if other is not None:
        await store.remember("bound:someone-else", "name", other)
    kept = await store.entries(LOCAL_SCOPE)
    await store.close()
    return kept


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    asyncio.run(_store(tmp_path / "memory.sqlite3", FACTS, other="The user's name is Zoe."))
    engines = Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer(),
                      description={"vad": "fake", "asr": "fake", "llm": "fake", "tts": "fake"})
    port = free_port()
    with running_server(engines, Settings(port=port, memory=True, data_dir=str(tmp_path))) as address:
        yield address


def test_the_panel_lists_the_local_users_memories_and_forgets_one(server: str, tmp_path: Path) -> None:
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (the test set-up does)")
    from playwright.sync_api import sync_playwright

    microphone = tmp_path / "microphone.wav"
    write_fake_microphone(microphone)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=chromium_args(microphone))
        try:
            page = browser.new_page()
            page.goto(f"http://{server}/")
            page.wait_for_function("document.querySelectorAll('#memories li').length === 2", timeout=20_000)
            rows = page.locator("#memories li").all_inner_texts()
            assert sorted(text.split(" (")[0] for text in rows) == sorted(FACTS.values())
            assert all("Zoe" not in row for row in rows)  # another scope's memory is never shown
            page.locator("#memories li", has_text="peanuts").get_by_role("button", name="Forget").click()
            page.wait_for_function("document.querySelectorAll('#memories li').length === 1", timeout=10_000)
            assert "Ana" in page.inner_text("#memories")
        finally:
            browser.close()
    left = asyncio.run(_store(tmp_path / "memory.sqlite3", {}))
    assert [memory.text for memory in left] == [FACTS["name"]]  # forgotten in the store, not only on the page
