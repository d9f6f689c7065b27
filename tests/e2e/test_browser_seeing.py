"""The page's camera end to end: Chromium's fake camera plays a generated video of a printed sign, the page streams
its frames, the server's offline scene reader (real OCR) reads the sign, the page shows the note, and a spoken
question is answered by a model that got the note as context.

The model is a fake that answers with the user's words and the camera message it was given, so the answer shows
exactly what a model would read.
Needs Debian's ``chromium`` and ``playwright`` (which drives the system Chromium; no browser download).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.see.shared import Seeing
from bargein.see.vision import VisionSettings
from bargein.values import CancelToken, ChatMessage, GenerationOptions
from tests.e2e.test_browser import CHROMIUM, chromium_args, write_fake_microphone
from tests.support.pictures import sign
from tests.support.server import running_server

pytestmark = pytest.mark.slow

QUESTION = "what does the sign say"


def write_fake_camera(path: Path, image: Image.Image, frames: int = 10, fps: int = 5) -> None:
    """A .y4m video (4:2:0, what Chromium's fake capture reads) showing ``image`` still."""
    rgb = np.asarray(image.convert("RGB"), dtype=np.float32)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    y = 0.299 * r + 0.587 * g + 0.114 * b
    u = (b - y) * 0.564 + 128
    v = (r - y) * 0.713 + 128
    planes = [np.clip(y, 0, 255).astype(np.uint8)] + [
        np.clip(c.reshape(c.shape[0] // 2, 2, c.shape[1] // 2, 2).mean(axis=(1, 3)), 0, 255).astype(np.uint8)
        for c in (u, v)]
    height, width = y.shape
    with path.open("wb") as out:
        out.write(f"YUV4MPEG2 W{width} H{height} F{fps}:1 Ip A1:1 C420jpeg\n".encode())
        for _ in range(frames):
            out.write(b"FRAME\n" + b"".join(p.tobytes() for p in planes))


class CameraEcho(FakeLanguageModel):
    """The fake model, adding the system message just before the question (the camera's) to its answer."""

    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        async for piece in super().stream(messages, cancel=cancel, options=options):
            yield piece
        if len(messages) > 1 and messages[-2].role == "system":
            yield " Camera: " + messages[-2].content


@pytest.fixture
def server() -> Iterator[str]:
    engines = Engines(FakeVad(), FakeRecognizer([QUESTION]), CameraEcho(), FakeSynthesizer(),
                      description={"vad": "fake", "asr": "fake", "llm": "fake", "tts": "fake"},
                      see=Seeing.offline(VisionSettings("notes")))
    with running_server(engines) as address:
        yield address


def test_the_page_streams_the_camera_and_the_answer_reads_the_sign(server: str, tmp_path: Path) -> None:
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (the test set-up does)")
    from playwright.sync_api import sync_playwright

    microphone, camera = tmp_path / "microphone.wav", tmp_path / "camera.y4m"
    write_fake_microphone(microphone)
    write_fake_camera(camera, sign("PLATFORM 4", text_size=72))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=[
            *chromium_args(microphone), f"--use-file-for-fake-video-capture={camera}"])
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.goto(f"http://{server}/?frame_ms=500")
            page.wait_for_function("document.getElementById('server-ready').dataset.state === 'ready'")
            page.click("#camera")
            page.check("#send-frames")
            page.click("#connect")
            page.wait_for_function("window.bargeinTest.sceneNotes.length > 0", timeout=20_000)
            assert "PLATFORM" in page.inner_text("#scene-note").upper()
            page.wait_for_function(
                "window.bargeinTest.transcripts.agent.some((a) => (a.text || '').includes('PLATFORM'))",
                timeout=30_000)
            answer = page.evaluate(
                "window.bargeinTest.transcripts.agent.find((a) => (a.text || '').includes('PLATFORM')).text")
            # a request to read is answered by quoting the note (the model would have the question and the note:
            # tests/see/test_scene.py)
            assert answer.startswith('It says: "PLATFORM')
            assert page.evaluate("window.bargeinTest.errors") == []
        finally:
            browser.close()
