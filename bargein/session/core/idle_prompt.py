"""The duplex machine's idle timer as it last set it: plain bookkeeping, the rules stay in the machine.

A reply that ends arms the timer; the user beginning to speak disarms it, but the prompt stays owed until that
turn leads to a reply. A turn that ends in nothing (noise, a cleared buffer, no automatic reply) leaves the
session as idle as before, so the machine arms the timer again."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bargein.session.core import vocabulary as v


@dataclass
class IdlePrompt:
    """Whether the idle prompt is owed: ``off`` (no reply has ended since the last one started, or turns are
    manual), ``armed`` (the timer runs) or ``suspended`` (a turn disarmed it and has not led to a reply yet)."""

    state: Literal["off", "armed", "suspended"] = "off"

    def arm(self, delay_ms: int) -> v.ArmIdleTimer:
        """The action that runs the timer (again) for ``delay_ms``."""
        self.state = "armed"
        return v.ArmIdleTimer(delay_ms)

    def suspend(self) -> None:
        """The user began to speak (the timer is disarmed): owed again if the turn ends in nothing."""
        if self.state == "armed":
            self.state = "suspended"

    def stop(self) -> None:
        """A reply started (its end arms the timer), or turns became manual: no prompt is owed now."""
        self.state = "off"
