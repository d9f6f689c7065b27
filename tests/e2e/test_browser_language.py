"""The page's language choice: Mandarin reaches the session, and a server that cannot honour it says so."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer
from bargein.engines.listen.silero_vad import SileroVad
from bargein.languages import MANDARIN
from tests.e2e.test_browser import CHROMIUM, chromium_args
from tests.support.server import running_server

pytestmark = pytest.mark.slow


def _engines(languages: frozenset[str]) -> Engines:
    return Engines(SileroVad(), FakeRecognizer(("你好",), languages=languages), FakeLanguageModel(), FakeSynthesizer())


@pytest.mark.parametrize("languages", [frozenset({"en", "zh"}), frozenset({"en"})], ids=["multilingual", "english"])
def test_the_page_asks_for_mandarin(languages: frozenset[str]) -> None:
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (the test set-up does)")
    from playwright.sync_api import sync_playwright

    with running_server(_engines(languages)) as address, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=chromium_args(Path(os.devnull)))
        try:
            page = browser.new_page()
            page.goto(f"http://{address}/")
            page.select_option("#language", "zh")
            page.click("#connect")
            if "zh" in languages:
                page.wait_for_function(
                    "window.bargeinTest.session?.audio?.input?.transcription?.language === 'zh'", timeout=15_000)
                assert page.evaluate("window.bargeinTest.session.instructions") == MANDARIN.instructions
                assert page.evaluate("window.bargeinTest.errors") == []
            else:
                page.wait_for_function("window.bargeinTest.errors.length > 0", timeout=15_000)
                error = page.evaluate("window.bargeinTest.errors[0]")
                assert error["code"] == "unsupported_language", error
                assert page.locator("#errors").inner_text().count("does not support language") == 1
        finally:
            browser.close()
