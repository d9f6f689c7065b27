"""Whether the duplex machine owes the user an idle prompt (``idle_timeout_ms``), and when it is due; the machine
says what happened (a reply ended or was cancelled, the user spoke, the timer ran out, the delay changed), this
record says what follows.

A reply that ends (by itself or cancelled by the client) arms the timer (the shell counts it from the end of the
reply's playback, so a client that cuts that playback short has it armed again from the cut); the user beginning to
speak disarms it, but the prompt stays owed until that turn leads to a reply. A turn that ends in nothing (noise, a
cleared buffer) leaves the session as idle as before, so the timer is armed again; a turn left to the client to answer
(automatic replies off) owes none. A new ``idle_timeout_ms`` applies to a timer that runs at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bargein.session.core import vocabulary as v


@dataclass
class IdlePrompt:
    """Whether the idle prompt is owed: ``off`` (no reply has ended since the last one started, or turns are
    manual), ``armed`` (the session is idle since a reply ended: the timer runs, if there is a delay),
    ``suspended`` (owed, but a turn is being spoken or judged: armed if it leads to no reply) or ``client`` (a turn
    is left to the client to answer, automatic replies being off: the silence is the client's until a reply
    starts)."""

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
        if self.state == "client":
            return None
        if user_busy:
            self.owe()
            return None
        if not delay_ms:
            self.state = "armed"  # idle with no timer: a delay set later starts one (:meth:`retime`)
            return None
        return self.arm(delay_ms)

    def restart(self, delay_ms: int) -> v.ArmIdleTimer | None:
        """The agent's audio stopped sooner than the running timer assumed (the client cut a reply it was still
        playing): the timer armed again for ``delay_ms``, counted from now; None when no timer runs (a reply or the
        user's turn arms it when it ends, from the playback left then)."""
        return self.arm(delay_ms) if self.state == "armed" and delay_ms else None

    def retime(self, old_ms: int, new_ms: int) -> v.ArmIdleTimer | v.DisarmIdleTimer | None:
        """The delay changed from ``old_ms`` to ``new_ms`` (0: no idle prompt): the idle session's timer is armed
        again with the new delay, counted from now (the machine has no clock to count from the reply's end), or
        disarmed; None when the delay is the same (the count goes on) or no timer is due now (a reply or the user's
        turn arms it when it ends, with the new delay)."""
        if self.state != "armed" or new_ms == old_ms:
            return None
        return v.ArmIdleTimer(new_ms) if new_ms else v.DisarmIdleTimer()

    def due(self, delay_ms: int, *, user_busy: bool, agent_busy: bool) -> bool:
        """The timer ran out: True when the idle prompt is due now. Not when the timer is stale (idle prompts
        switched off since, ``delay_ms`` 0; disarmed since, or no longer owed), when the user speaks or is being
        judged (owed for when that turn ends in nothing), or when the agent is busy (a reply, a tool's output owed:
        their end arms it again)."""
        if not delay_ms or self.state != "armed":
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
