"""Scripted timelines for the pure duplex machine: VAD frames of 32 ms fed in stream time, every action kept.

Shared by the core's, the listening policy's and the drain's tests."""

from __future__ import annotations

import itertools

from bargein.session import core as dx

FRAME_MS = 32.0
NO_CLASSIFIER = dx.TurnSettings(listening=dx.Listening(classify=False))
"""These timelines test turn-taking without the listening classifier (its own tests follow)."""


class Timeline:
    """Feeds VAD frames of 32 ms at given probabilities and keeps every action."""

    def __init__(self, settings: dx.TurnSettings = NO_CLASSIFIER) -> None:
        counter = itertools.count(1)
        self.machine = dx.DuplexMachine(lambda prefix: f"{prefix}_{next(counter)}", settings)
        self.now_ms = 0.0
        self.actions: list[dx.Action] = []

    def frames(self, probability: float, duration_ms: float, energy_db: float = -100.0) -> list[dx.Action]:
        """``duration_ms`` of 32 ms frames at one speech probability and level; the actions they caused."""
        new: list[dx.Action] = []
        for _ in range(round(duration_ms / FRAME_MS)):
            self.machine.feed(dx.VadFrame(self.now_ms, self.now_ms + FRAME_MS, probability, energy_db))
            self.now_ms += FRAME_MS
            new += self.machine.take_actions()
        self.actions += new
        return new

    def speech(self, duration_ms: float) -> list[dx.Action]:
        """Frames the VAD hears as speech."""
        return self.frames(0.9, duration_ms)

    def silence(self, duration_ms: float) -> list[dx.Action]:
        """Frames the VAD hears as silence."""
        return self.frames(0.05, duration_ms)

    def feed(self, event: dx.Event) -> list[dx.Action]:
        """One event to the machine; the actions it took."""
        self.machine.feed(event)
        new = self.machine.take_actions()
        self.actions += new
        return new


def of(actions: list[dx.Action], kind: type) -> list:
    """The actions of one kind, in order."""
    return [a for a in actions if isinstance(a, kind)]


class Listening(Timeline):
    """A timeline with the listening classifier on (the default)."""

    def __init__(self, settings: dx.TurnSettings | None = None) -> None:
        super().__init__(settings or dx.TurnSettings())

    def segment(self, speech_ms: float = 640) -> str:
        """Speech then the endpoint silence; returns the committed item awaiting its verdict."""
        self.speech(speech_ms)
        waiting = of(self.silence(544), dx.AwaitClassification)
        assert waiting, "the endpoint must commit the segment and wait for the classifier"
        return str(waiting[0].item_id)

    def agent_speaking(self) -> str:
        """A query answered and its first audio forwarded; returns the reply's id."""
        item = self.segment()
        reply = of(self.feed(dx.SegmentClassified(item, "query")), dx.StartReply)[0].response_id
        assert self.feed(dx.ReplyAudio(reply, "a0")) == [dx.ForwardAudio(reply, "a0")]
        return reply
