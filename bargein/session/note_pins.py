"""Which scene note a turn's reply quotes, and how old it is: pinned at the turn's silence, so the speculative reply
and the reply read the same note (the reply adopts the speculative one even when a newer note comes in between).

The reply's prompt pins the note whose camera message the model has already read after this history, where the
newest note says something else and the read one is young enough
(:func:`~bargein.session.camera_warms.quotes_read_note`), so the silence's end-of-sentence estimate and head start
read only the user's words; else the newest. A request to read, quoted without the model, pins the newest. A note's
age counts from the last frame that showed it: while it is the newest, the session's own clock of it; once a newer
note replaced it, when the camera last showed it then.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bargein.see.scene import SceneNote
from bargein.session.camera_warms import quotes_read_note

Seen = tuple[SceneNote, float]
"""A note and its age (s)."""

MAX_PIN_S = 5.0
"""Longest a note stays pinned for a turn's reply (a turn that led to no reply does not keep it)."""


@dataclass
class NotePins:
    """A session's pinned notes and the note its model last read (the caller tells it what happens)."""

    newest: Callable[[], Seen | None]
    """The newest note and its age now."""
    message_of: Callable[[SceneNote, float], str]
    """The camera message a note of that age makes."""
    clock: Callable[[], float]
    reader_behind: Callable[[], bool] = lambda: False
    """Whether the scene reader is behind the camera now: the camera has shown a newer scene than the newest note's."""
    pinned: Seen | None = None
    """The note a reply's prompt quotes from the turn's silence, and its age then."""
    pinned_newest: Seen | None = None
    """The newest note at the turn's silence, and its age then: what a quoted reading quotes."""
    pinned_s: float = 0.0
    read: tuple[SceneNote, float, str] | None = None
    """The note whose camera message the model last read after the history as it stands, when the camera last
    showed it (while it is the newest, :attr:`newest` says), and the message."""

    def turn_note(self, pinned: Seen | None = None) -> Seen | None:
        """The note a reply's prompt quotes, with its age: the one pinned at the silence (with ``pinned``, that
        pin's: :attr:`pinned_newest`), while the pin holds, else the newest."""
        pinned = self.pinned if pinned is None else pinned
        if pinned is not None and self.clock() - self.pinned_s <= MAX_PIN_S:
            return pinned
        return self.newest()

    def pin(self) -> None:
        """The turn fell silent: pin the newest note for a quoted reading, and for the reply's prompt the note the
        model has already read where :func:`quotes_read_note` says so, else the newest."""
        newest = self.pinned_newest = self.pinned = self.newest()
        self.pinned_s = self.clock()
        if newest is None or self.read is None:
            return
        note, shown_s, message = self.read
        read_age_s = newest[1] if note is newest[0] else self.pinned_s - shown_s
        behind = self.reader_behind()
        if (quotes_read_note(self.message_of(*newest), message, read_age_s, newest[1], reader_behind=behind)
                and self.message_of(note, read_age_s) == message):  # not grown stale since it was read
            self.pinned = (note, read_age_s)

    def unpin(self) -> None:
        """The turn went on, or its reply has its prompt: the next prompts read the newest note again."""
        self.pinned = self.pinned_newest = None

    def ages_now(self) -> tuple[float | None, float | None]:
        """How old the note the reply's prompt quotes and the one a quoted reading quotes are now (one figure where
        they are one note: read from the clock twice, they would differ, and the ledger would report both)."""
        quoted = self._age_now(self.pinned)
        return quoted, quoted if self.pinned is self.pinned_newest else self._age_now(self.pinned_newest)

    def _age_now(self, pinned: Seen | None) -> float | None:
        seen, newest = self.turn_note(pinned), self.newest()
        if seen is None or newest is None:
            return None
        if seen[0] is newest[0]:
            return newest[1]
        return seen[1] + self.clock() - self.pinned_s  # pinned, and no longer the newest

    def replacing(self, newest: SceneNote | None, seen_s: float) -> None:
        """A newer note replaces ``newest``, which the camera last showed at ``seen_s``."""
        if self.read is not None and self.read[0] is newest:
            self.read = (self.read[0], seen_s, self.read[2])

    def follow_read(self, warmed: str | None) -> None:
        """Follow the message the model last read after this history (``CameraWarms.warmed``) with its note."""
        if warmed is None:
            self.read = None
        elif (self.read is None or self.read[2] != warmed) and (seen := self.turn_note()) is not None:
            self.read = (seen[0], self.clock() - seen[1], warmed)
