"""How long a reply whose words are all out stays live while the client plays its last stretch.

Pacing sends a reply's end up to the output lead before the client plays it. The reply stays live meanwhile, so
speech there still pauses it (a cough resumes it from the cut, a question cancels it where it was heard), until the
shell reports the last sample played (``ReplyFinished``) or the play-out timer runs out, whichever comes first.
Pauses are not counted: a reply paused there waits for its verdict, and one that resumes sends its tail again, so its
timer is armed afresh. A firing of a timer armed before (the reply paused, resumed, ended or was replaced since) is
stale and changes nothing. Pure: the machine arms, the shell's timer fires.
"""

from __future__ import annotations

from dataclasses import dataclass

from bargein.session.core.turn_records import Reply
from bargein.session.core.work_vocabulary import ArmPlayOutTimer, PlayOutTimerFired


@dataclass
class PlayOutWait:
    """The play-out timer's armings: only the latest may end the reply it was armed for."""

    arms: int = 0

    def arm(self, reply: Reply, wait_ms: int) -> ArmPlayOutTimer | None:
        """The timer for ``reply``'s last stretch, armed now: None while it is not playing out, or paused (its
        resume arms it)."""
        if not reply.playing_out or reply.paused:
            return None
        self.arms += 1
        return ArmPlayOutTimer(reply.response_id, wait_ms, self.arms)

    def due(self, fired: PlayOutTimerFired, reply: Reply | None) -> bool:
        """True when ``fired`` ends the live ``reply``: the latest arming, for it, while it plays out unpaused."""
        return (reply is not None and reply.response_id == fired.response_id and fired.arm == self.arms
                and reply.playing_out and not reply.paused)
