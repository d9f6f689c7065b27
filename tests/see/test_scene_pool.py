"""The scene reader's threads run below the server's own priority, so a spoken turn's engines win the cores."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import ClassVar

import numpy as np

from bargein.engines.fair import current_owner, owner
from bargein.see.detectors import TextLine
from bargein.see.scene_pool import SCENE_NICENESS, ScenePool
from tests.see.test_note_age import frame_of


class PriorityDetectors:
    """Detectors that find nothing and note the priority of the thread that ran them."""

    seen: ClassVar[list[int]] = []

    def read_text(self, pixels: np.ndarray) -> list[TextLine]:
        PriorityDetectors.seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return []

    def count_faces(self, pixels: np.ndarray) -> int:
        return 0


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
