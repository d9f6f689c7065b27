"""The scene reader's threads run below the server's own priority, so a spoken turn's engines win the cores."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import ClassVar

import numpy as np
import pytest

from bargein.engines.fair import current_owner, owner
from bargein.see.detectors import ReadStopped, TextLine
from bargein.see.scene_pool import SCENE_NICENESS, ScenePool, _Waiting
from tests.see.test_note_age import frame_of


class PriorityDetectors:
    """Detectors that find nothing and note the priority of the thread that ran them."""

    seen: ClassVar[list[int]] = []

    def read_text(self, pixels: np.ndarray) -> list[TextLine]:
        PriorityDetectors.seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return []

    def count_faces(self, pixels: np.ndarray) -> int:
        return 0

    def begin(self) -> None:
        """Nothing to reset: these detectors cannot stop a read."""

    def stop(self) -> None:
        """These detectors cannot stop a read."""


async def test_scenes_are_read_at_a_lower_priority_than_the_server() -> None:
    pool = ScenePool(PriorityDetectors)
    noted: list[object] = []
    pool.submit("session", frame_of(2, 0.0), None, noted.append)
    for _ in range(200):
        await asyncio.sleep(0.005)
        if noted:
            break
    ours = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert PriorityDetectors.seen == [min(19, ours + SCENE_NICENESS)]
    await pool.aclose()


async def wait_for(noted: list[object], seconds: float) -> bool:
    for _ in range(int(seconds / 0.01)):
        if noted:
            return True
        await asyncio.sleep(0.01)
    return bool(noted)


async def test_no_read_starts_while_a_turn_holds_the_reads_until_its_reply_is_out() -> None:
    pool = ScenePool(PriorityDetectors, max_hold_s=30.0)
    noted: list[object] = []
    pool.hold("speaking session")  # its user stopped speaking: its guess and reply are on the critical path
    pool.submit("camera session", frame_of(2, 0.0), None, noted.append)
    assert not await wait_for(noted, 0.3) and pool.held
    pool.release("speaking session")  # the reply's first audio went out
    assert await wait_for(noted, 5.0)
    await pool.aclose()


async def test_a_hold_ends_by_itself_when_no_reply_comes() -> None:
    pool = ScenePool(PriorityDetectors, max_hold_s=0.2)
    noted: list[object] = []
    pool.hold("a turn that was noise")
    pool.submit("camera session", frame_of(2, 0.0), None, noted.append)
    assert await wait_for(noted, 5.0) and not pool.held
    await pool.aclose()


async def test_a_session_holds_from_its_silence_to_its_first_audio() -> None:
    from bargein.see.shared import Seeing
    from bargein.see.vision import VisionSettings
    from bargein.session.core import vocabulary as v
    from bargein.session.eyes import SessionEyes

    pool = ScenePool(PriorityDetectors)
    eyes = SessionEyes(Seeing(VisionSettings("notes"), pool))
    eyes.on_action(v.SilenceBegan("item_1", 1200.0))
    assert pool.held
    eyes.on_action(v.SpeechResumed("item_1"))
    assert not pool.held
    eyes.on_action(v.SilenceBegan("item_1", 2000.0))
    eyes.on_action(v.ForwardAudio("resp_1", v.AudioPiece(b"\0\0", 0.04, ())))
    assert not pool.held
    await pool.aclose()


async def test_a_note_reaches_its_session_in_the_sessions_own_context() -> None:
    """What a new note asks of the engines (a warm of the turn's prompt) is the session's own: the LLM serves it in
    that session's fair share and KV cache, not as an ownerless job that evicts the session's cache."""
    pool = ScenePool(PriorityDetectors)
    owners: list[object] = []

    async def session() -> None:
        current_owner.set("session 1")
        pool.submit("session 1", frame_of(3, 0.0), None, lambda note: owners.append(owner()))

    await asyncio.create_task(session())
    for _ in range(200):
        await asyncio.sleep(0.005)
        if owners:
            break
    assert owners == ["session 1"]
    await pool.aclose()


class StoppableDetectors:
    """Detectors whose text step runs until it is stopped (as PP-OCR's ONNX runs end when told), counting reads."""

    def __init__(self) -> None:
        self.begun = threading.Event()
        self.stopped = threading.Event()
        self.finish = threading.Event()
        self.reads = 0

    def begin(self) -> None:
        self.stopped.clear()

    def stop(self) -> None:
        self.stopped.set()

    def read_text(self, pixels: np.ndarray) -> list[TextLine]:
        self.reads += 1
        self.begun.set()
        while not self.finish.wait(0.005):
            if self.stopped.is_set():
                raise ReadStopped
        return [TextLine("EXIT 12", 0.9, 40)]

    def count_faces(self, pixels: np.ndarray) -> int:
        return 0


async def test_a_hold_stops_the_read_running_at_the_silence_and_its_frame_is_read_after_it() -> None:
    """A read already running when a turn falls silent would take a core (and the memory bandwidth) from the turn's
    engines until its end, up to half a second of CPU: it is stopped, and read again once the reply is out."""
    detectors = StoppableDetectors()
    pool = ScenePool(lambda: detectors, max_hold_s=30.0)
    noted: list[object] = []
    pool.submit("camera session", frame_of(2, 0.0), None, noted.append)
    assert await asyncio.to_thread(detectors.begun.wait, 5.0) and pool.reading == 1
    pool.hold("camera session")  # its user stopped speaking, the read still running
    for _ in range(200):
        if pool.reading == 0:
            break
        await asyncio.sleep(0.005)
    assert pool.reading == 0 and pool.stopped == 1 and noted == []
    detectors.finish.set()
    assert not await wait_for(noted, 0.2)  # nothing read while the turn holds
    pool.release("camera session")
    assert await wait_for(noted, 5.0) and detectors.reads == 2  # the same frame, read after the hold
    await pool.aclose()


async def test_a_read_that_would_begin_under_a_hold_does_not() -> None:
    detectors = StoppableDetectors()
    detectors.finish.set()
    pool = ScenePool(lambda: detectors, max_hold_s=30.0)
    pool._holding = True  # a hold told as the read was handed to its thread
    with pytest.raises(ReadStopped):
        pool._read(_Waiting(frame_of(2, 0.0), None, lambda note: None))
    assert detectors.reads == 0
    await pool.aclose()


async def test_a_read_stopped_after_its_session_ended_is_not_read_again() -> None:
    """A session that ended while its frame was being read has nothing to read it for: when another session's hold
    stops that read, the frame is dropped, not queued to be read (and noted) after the hold."""
    detectors = StoppableDetectors()
    pool = ScenePool(lambda: detectors, max_hold_s=30.0)
    noted: list[object] = []
    pool.submit("ended session", frame_of(2, 0.0), None, noted.append)
    assert await asyncio.to_thread(detectors.begun.wait, 5.0) and pool.reading == 1
    pool.forget("ended session")
    pool.hold("speaking session")
    for _ in range(200):
        if pool.reading == 0:
            break
        await asyncio.sleep(0.005)
    assert pool.reading == 0 and pool.stopped == 1
    assert pool.waiting == 0, "no frame of the ended session waits"
    detectors.finish.set()
    pool.release("speaking session")
    assert not await wait_for(noted, 0.3) and detectors.reads == 1
    await pool.aclose()
