"""The scene reader's threads run below the server's own priority, so a spoken turn's engines win the cores."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import ClassVar

import numpy as np

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
