"""Whether the duplex machine owes the user an idle prompt (``idle_timeout_ms``), and when it is due; the machine
says what happened (a reply ended, the user spoke, the timer ran out), this record says what follows.

A reply that ends arms the timer; the user beginning to speak disarms it, but the prompt stays owed until that
turn leads to a reply. A turn that ends in nothing (noise, a cleared buffer) leaves the session as idle as
before, so the timer is armed again; a turn left to the client to answer (automatic replies off) owes none."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bargein.session.core import vocabulary as v


@dataclass
class IdlePrompt:
    """Whether the idle prompt is owed: ``off`` (no reply has ended since the last one started, or turns are
    manual), ``armed`` (the timer runs), ``suspended`` (owed, but a turn is being spoken or judged: armed if it
    leads to no reply) or ``client`` (a turn is left to the client to answer, automatic replies being off: the
    silence is the client's until a reply starts)."""

    state: Literal["off", "armed", "suspended", "client"] = "off"

    def arm(self, delay_ms: int) -> v.ArmIdleTimer:
        """The action that runs the timer (again) for ``delay_ms``."""
        self.state = "armed"
        return v.ArmIdleTimer(delay_ms)

    def suspend(self) -> None:
        """The user began to speak (the timer is disarmed): owed again if the turn ends in nothing."""
        if self.state == "armed":
            self.state = "suspended"

    def again(self, delay_ms: int, *, user_busy: bool) -> v.ArmIdleTimer | None:
        """The agent owes nothing any more: the timer to arm now, or None (no idle prompt: ``delay_ms`` 0; the
        user speaks or is being judged: owed, armed if that turn leads to no reply)."""
        if not delay_ms or self.state == "client":
            return None
        if user_busy:
            self.owe()
            return None
        return self.arm(delay_ms)

    def due(self, delay_ms: int, *, user_busy: bool, agent_busy: bool) -> bool:
        """The timer ran out: True when the idle prompt is due now. Not when idle prompts were switched off since
        (``delay_ms`` 0: stopped), when the timer is stale (disarmed since, or no longer owed), when the user
        speaks or is being judged (owed for when that turn ends in nothing), or when the agent is busy (a reply,
        a tool's output owed: their end arms it again)."""
        if not delay_ms:
            self.stop()
            return False
        if self.state != "armed":
            return False
        if user_busy:
            self.owe()
            return False
        return not agent_busy

    def owe(self) -> None:
        """The session fell idle while the user spoke (or was being judged): armed once that turn leads to no
        reply (unless the client owes an answer)."""
        if self.state != "client":
            self.state = "suspended"

    def leave_to_client(self) -> None:
        """A turn is the client's to answer (automatic replies are off): no idle prompt until a reply starts."""
        self.state = "client"

    def stop(self) -> None:
        """A reply started (its end arms the timer), or turns became manual: no prompt is owed now."""
        self.state = "off"
