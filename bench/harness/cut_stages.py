"""Where the time goes between the end of a command and the reply's ``response.done`` (cancelled).

Used by ``bench/quality/turn_quality.py`` on the family set. Every session gets a :class:`StageClock` (an observer
of its duplex machine) that notes the wall time of what the machine does with each segment, and all of
them share a :class:`TimedRecognizer` that notes, for every recognition, when it was asked for, when the
recogniser's worker began it and when it ended (the wait in the recogniser's queue, then its own time).
:func:`report` prints, for every command that cut its reply, the medians of:

* **vad lag**: the true end of the command to the pause the deciding recognition was asked at: Silero's
  first silent frame, or, over a talker, the frame the user's loud stretch was found over
  (``VoiceEnded``); for a cut after the endpoint, the pause that began the endpoint silence;
* **to the pause**: that frame's start to the machine's action (a frame's length plus the time the
  session took to hear it);
* **queue** and **recognise**: the wait of the recognition that decided, and its run;
* **endpoint**: for a cut after the endpoint, from the pause to the commit (the endpoint silence);
* **decide**: from that recognition's end to ``CancelReply`` (the decision and any wait for another
  recognition), and **to response.done**.

The path is the transcript that decided: a guess at a pause (plain, or the loud stretch primed), or the
committed segment's, plain or primed (after the endpoint).
"""

from __future__ import annotations

import contextvars
import statistics
import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from bargein.engines.base import ASRCapabilities, SpeechRecognizer
from bargein.session.core import vocabulary as v
from bargein.session.observers import QuietObserver
from bargein.values import Float32Audio, Transcript

case_tag: contextvars.ContextVar[str | None] = contextvars.ContextVar("bench_case", default=None)
"""The case a recognition is asked for (set by the task that runs the case; its session's tasks inherit it)."""


@dataclass
class Recognition:
    """One recognition as the bench saw it (wall times, ``time.monotonic``)."""

    case: str | None
    partial: bool
    samples: int
    asked: float
    began: float | None = None
    ended: float | None = None


class TimedRecognizer(SpeechRecognizer):
    """Wraps a shared :class:`~bargein.engines.transcribe.whisper_asr.WhisperRecognizer` to time its jobs."""

    def __init__(self, whisper: Any) -> None:
        self.inner = whisper
        self.calls: list[Recognition] = []
        self._runs: list[tuple[int, float, float]] = []
        self._lock = threading.Lock()
        core = whisper.core
        run = core.transcribe

        def timed(audio: Float32Audio, **kwargs: Any) -> Transcript:
            began = time.monotonic()
            try:
                return run(audio, **kwargs)  # type: ignore[no-any-return]
            finally:
                with self._lock:
                    self._runs.append((len(audio), began, time.monotonic()))

        core.transcribe = timed

    @property
    def capabilities(self) -> ASRCapabilities:
        """The wrapped recogniser's."""
        capabilities: ASRCapabilities = self.inner.capabilities
        return capabilities

    @property
    def queue_depth(self) -> int | None:
        """The wrapped recogniser's."""
        depth: int | None = self.inner.queue_depth
        return depth

    @property
    def description(self) -> str:
        """The wrapped recogniser's."""
        return str(self.inner.description)

    async def aclose(self) -> None:
        """Close the wrapped recogniser."""
        await self.inner.aclose()

    async def transcribe(self, audio: Float32Audio, **kwargs: Any) -> Transcript:
        """Recognise (timed)."""
        return await self._timed(False, audio, self.inner.transcribe(audio, **kwargs))

    async def transcribe_partial(self, audio: Float32Audio, *, key: Hashable | None = None,
                                 **kwargs: Any) -> Transcript:
        """A partial (timed)."""
        return await self._timed(True, audio, self.inner.transcribe_partial(audio, key=key, **kwargs))

    async def _timed(self, partial: bool, audio: Float32Audio, call: Any) -> Transcript:
        record = Recognition(case_tag.get(), partial, len(audio), time.monotonic())
        self.calls.append(record)
        result: Transcript = await call
        record.ended = time.monotonic()
        with self._lock:  # the run of the same length that ended last before the answer came
            runs = [r for r in self._runs if r[0] == record.samples and record.asked <= r[1] and r[2] <= record.ended]
        if runs:
            record.began = max(runs, key=lambda r: r[2])[1]
        return result

    def of(self, case: str, asked_after: float, asked_before: float) -> Recognition | None:
        """The first non-partial recognition of ``case`` asked for in that window."""
        return next((c for c in self.calls if c.case == case and not c.partial
                     and asked_after - 0.005 <= c.asked <= asked_before + 0.005), None)


@dataclass
class StageClock(QuietObserver):
    """Wall times of what one session's machine did, per segment."""

    pauses: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    """Item -> (wall, stream ms) of each ``SilenceBegan`` and ``VoiceEnded`` (recognition asked for)."""
    heard: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    """Item -> (wall, which) of each transcript that reached the machine."""
    committed: dict[str, float] = field(default_factory=dict)
    cancelled: dict[str, float] = field(default_factory=dict)
    """Response id -> wall of its ``CancelReply``."""
    cut_item: str | None = None
    """The segment being spoken or awaited when the first reply was cancelled."""
    _latest: str | None = None

    def on_event(self, event: v.Event) -> None:
        """Transcripts as they reach the machine."""
        if isinstance(event, v.GuessTranscribed):
            which = "pause, plain" if event.primed is None else "pause, primed"
        elif isinstance(event, v.SegmentTranscribed):
            which = "endpoint, plain" if event.primed is None else "endpoint, primed"
        else:
            return
        self.heard.setdefault(event.item_id, []).append((time.monotonic(), which))

    def on_action(self, action: v.Action) -> None:
        """The pauses, the commit and the cut."""
        now = time.monotonic()
        match action:
            case v.SpeechStarted(item_id):
                self._latest = item_id
            case v.SilenceBegan(item_id, at_ms) | v.VoiceEnded(item_id, at_ms):
                self.pauses.setdefault(item_id, []).append((now, at_ms))
            case v.CommitBuffer(item_id):
                self.committed[item_id] = now
            case v.CancelReply(response_id):
                if not self.cancelled:
                    self.cut_item = self._latest
                self.cancelled.setdefault(response_id, now)
            case _:
                pass


@dataclass
class CutStages:
    """One cut's stages, in ms (``None``: the stage did not happen or could not be timed)."""

    path: str
    stages: dict[str, float | None]


def stages_of(clock: StageClock, asr: TimedRecognizer, case: str, response_id: str, done_wall: float,
              stream_start: float, offset_ms: float, speed: float, end_ms: float) -> CutStages | None:
    """The stages of the cut of ``response_id`` (the case's reply), ``end_ms`` the command's true end.

    The path is the transcript that decided (the last to reach the machine before the cut): a guess at a
    pause (plain, or the loud stretch primed) or the committed segment's (after the endpoint)."""
    item, cancelled = clock.cut_item, clock.cancelled.get(response_id)
    if item is None or cancelled is None:
        return None
    heard = [h for h in clock.heard.get(item, []) if h[0] <= cancelled + 0.001]
    pauses = [p for p in clock.pauses.get(item, []) if p[0] <= cancelled]
    if not heard or not pauses:
        return None
    decided, path = heard[-1]
    committed = clock.committed.get(item)
    if path.startswith("endpoint") and committed is not None:
        pauses = [p for p in pauses if p[0] <= committed]
    pause_wall, pause_at = pauses[-1]
    pause_stream = pause_at - offset_ms
    done = [c for c in asr.calls if c.case == case and not c.partial and c.ended is not None
            and c.ended <= decided + 0.005]
    recognition = max(done, key=lambda c: c.ended or 0.0) if done else None

    def ms(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else 1000 * (b - a)

    stages: dict[str, float | None] = {
        "vad lag": (pause_stream - end_ms) / speed,
        "to the pause": (pause_wall - stream_start) * 1000 - pause_stream / speed,
        "queue": ms(recognition.asked, recognition.began) if recognition else None,
        "recognise": ms(recognition.began, recognition.ended) if recognition else None,
        "endpoint": ms(pause_wall, committed) if path.startswith("endpoint") else None,
        "decide": ms(recognition.ended if recognition else None, cancelled),
        "to response.done": ms(cancelled, done_wall),
        "total": ms(stream_start + end_ms / 1000 / speed, done_wall),
    }
    return CutStages(path, stages)


def report(cuts: list[CutStages]) -> None:
    """Median of each stage (wall ms: stream time is divided by the timeline speed), for all cuts and by path."""
    if not cuts:
        return
    names = list(cuts[0].stages)
    print("\nwhere the time goes, end of command -> response.done cancelled (median ms; n = cuts with the stage):")
    print(f"  {'path':<14} {'cuts':>4}  " + "  ".join(f"{n:>16}" for n in names))
    for path in ("all", "pause, plain", "pause, primed", "endpoint, plain", "endpoint, primed"):
        group = [c for c in cuts if path in ("all", c.path)]
        if not group:
            continue
        cells = []
        for name in names:
            values = [s for c in group if (s := c.stages.get(name)) is not None]
            cells.append(f"{statistics.median(values):8.0f} (n={len(values):3d})" if values else f"{'-':>16}")
        print(f"  {path:<14} {len(group):>4}  " + "  ".join(cells))
