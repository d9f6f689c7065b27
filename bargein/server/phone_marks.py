"""What the caller heard, from the provider's mark echoes: the playback truth of a phone call.

Every 20 ms frame the server plays is followed by a mark named after the reply's item and how far into its audio
the frame reaches (``item_…@1240``). The provider echoes a mark once the audio before it has played, so the newest
echo says exactly how much of the item the caller heard. A ``clear`` (barge-in) makes the provider drop what it has
not played and echo those marks as well: they were never heard, so every mark outstanding at the clear is forgotten
and its late echo is ignored, as is a name the server never sent.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

MAX_OUTSTANDING = 1024
"""Marks awaiting their echo (20 s of audio at one a frame; the pacer keeps about 1 s ahead of playback)."""


@dataclass(frozen=True)
class Heard:
    """How far the caller heard one reply item, by the newest echoed mark."""

    item_id: str
    audio_end_ms: float


class MarkLedger:
    """The marks sent and not yet echoed, and the newest one echoed (bounded)."""

    def __init__(self, max_outstanding: int = MAX_OUTSTANDING) -> None:
        self.max_outstanding = max_outstanding
        self._outstanding: OrderedDict[str, Heard] = OrderedDict()
        self.heard: Heard | None = None
        """The newest echoed mark's position: what the caller has heard of the item playing (or played last)."""
        self.playing_item: str | None = None
        """The item whose audio was sent last (what a ``clear`` cuts)."""
        self.ignored_echoes = 0

    def sent(self, item_id: str, audio_end_ms: float) -> str:
        """A frame of ``item_id`` reaching ``audio_end_ms`` was sent: the name of the mark that follows it."""
        name = f"{item_id}@{audio_end_ms:.0f}"
        self.playing_item = item_id
        self._outstanding[name] = Heard(item_id, audio_end_ms)
        self._outstanding.move_to_end(name)
        while len(self._outstanding) > self.max_outstanding:  # a provider that never echoes: forget the oldest
            self._outstanding.popitem(last=False)
        return name

    @property
    def outstanding(self) -> int:
        """Marks sent and not yet echoed: audio the provider still holds."""
        return len(self._outstanding)

    def echoed(self, name: str) -> Heard | None:
        """The provider echoed ``name``: the position heard, or None for a mark not outstanding (cleared, unknown)."""
        heard = self._outstanding.get(name)
        if heard is None:
            self.ignored_echoes += 1
            return None
        while self._outstanding:  # echoes come in order: every earlier mark has played too
            earlier, _ = self._outstanding.popitem(last=False)
            if earlier == name:
                break
        self.heard = heard
        return heard

    def clear(self) -> Heard | None:
        """A ``clear`` was sent: forget what was outstanding; the position heard of the item that was playing
        (``0`` ms when none of its marks came back), or None when nothing was playing."""
        item_id = self.playing_item
        self._outstanding.clear()
        self.playing_item = None
        if item_id is None:
            return None
        if self.heard is not None and self.heard.item_id == item_id:
            return self.heard
        return Heard(item_id, 0.0)
