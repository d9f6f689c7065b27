"""The page's "server default" language choice really returns a session to the server's own language."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer
from bargein.engines.listen.silero_vad import SileroVad
from bargein.languages import ENGLISH, MANDARIN
from tests.e2e.test_browser import CHROMIUM, chromium_args
from tests.support.server import free_port, running_server

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("server_language", "other", "instructions"),
                         [("en", "zh", ENGLISH.instructions), ("zh", "en", MANDARIN.instructions)],
                         ids=["english-server", "mandarin-server"])
def test_choosing_server_default_again_restores_the_server_language(
        server_language: str, other: str, instructions: str) -> None:
    """A session.update with an empty ``transcription`` object changes nothing, so the page must name the
    server's language (as ``session.created`` showed it) to go back to it."""
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (the test set-up does)")
    from playwright.sync_api import sync_playwright

    engines = Engines(SileroVad(), FakeRecognizer(("hello",), languages=frozenset({"en", "zh"})),
                      FakeLanguageModel(), FakeSynthesizer())
    port = free_port()
    with running_server(engines, Settings(port=port, language=server_language)) as address, \
            sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=chromium_args(Path(os.devnull)))
        try:
            page = browser.new_page()
            page.goto(f"http://{address}/")
            page.select_option("#language", other)
            page.click("#connect")
            page.wait_for_function(
                f"window.bargeinTest.session?.audio?.input?.transcription?.language === '{other}'", timeout=15_000)
            updates = page.evaluate("window.bargeinTest.events['session.updated']")
            page.select_option("#language", "")  # "server default"
            page.wait_for_function(f"window.bargeinTest.events['session.updated'] > {updates}", timeout=15_000)
            session = page.evaluate("window.bargeinTest.session")
            assert (session["audio"]["input"]["transcription"].get("language") or "en") == server_language, session
            assert session["instructions"] == instructions
            assert page.evaluate("window.bargeinTest.errors") == []
        finally:
            browser.close()
