"""Per-turn stage timestamps: stream time (position in the input audio) beside wall time.

Stream time is the truth for latency: speech onsets and ends are positions in the input, and every
later stage is recorded in wall time next to the wall time at which that position arrived.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

STAGES = ("speech_start", "speech_end", "commit", "asr_final", "reply_start", "llm_first_token",
          "tts_first_audio", "first_delta_sent", "barge_in", "response_done")


@dataclass(frozen=True)
class Mark:
    """When a stage happened: stream position (ms, if it has one) and wall clock (s)."""

    wall_s: float
    stream_ms: float | None = None


@dataclass
class TurnLedger:
    """The marks of one turn (a user item and the reply to it). The first mark of a stage wins."""

    item_id: str | None = None
    response_id: str | None = None
    clock: Callable[[], float] = time.monotonic
    marks: dict[str, Mark] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)

    def mark(self, stage: str, *, stream_ms: float | None = None, wall_s: float | None = None) -> None:
        """Record a stage once; later marks of the same stage are ignored."""
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}")
        if stage not in self.marks:
            self.marks[stage] = Mark(self.clock() if wall_s is None else wall_s, stream_ms)

    def add(self, counter: str, amount: float) -> None:
        """Accumulate a count (tokens, audio seconds produced or heard)."""
        self.counters[counter] = self.counters.get(counter, 0.0) + amount

    def elapsed_ms(self, start: str, end: str) -> float | None:
        """Wall milliseconds from one stage to another, if both happened."""
        if start in self.marks and end in self.marks:
            return 1000.0 * (self.marks[end].wall_s - self.marks[start].wall_s)
        return None

    def summary(self) -> dict[str, Any]:
        """Stage latencies in ms (``None`` where a stage did not happen) and the turn's counters.

        ``first_audio_ms`` is the server-side view of first audio: from the wall time the last sample of
        speech arrived to the first delta leaving the socket (the client adds its network and playout).
        """
        span = self.elapsed_ms
        llm_start = "reply_start"
        if "asr_final" in self.marks and "reply_start" in self.marks \
                and self.marks["asr_final"].wall_s > self.marks["reply_start"].wall_s:
            llm_start = "asr_final"
        return {
            "item_id": self.item_id,
            "response_id": self.response_id,
            "speech_start_ms": self.marks["speech_start"].stream_ms if "speech_start" in self.marks else None,
            "speech_end_ms": self.marks["speech_end"].stream_ms if "speech_end" in self.marks else None,
            "endpoint_ms": _round(span("speech_end", "commit")),
            "asr_final_ms": _round(span("commit", "asr_final")),
            "llm_first_token_ms": _round(span(llm_start, "llm_first_token")),
            "tts_first_audio_ms": _round(span("llm_first_token", "tts_first_audio")),
            "first_delta_sent_ms": _round(span("reply_start", "first_delta_sent")),
            "first_audio_ms": _round(span("speech_end", "first_delta_sent")),
            **{key: round(value, 3) for key, value in self.counters.items()},
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
