"""The session's timers: the idle timer, the false-interruption timer of a paused reply, the play-out timer of a
reply playing out its last stretch and the timer of a closed reply the client still plays.

They turn the machine's ``Arm…`` actions into events fed back after a delay; the machine checks on
arrival whether a timer is stale, so disarming is only housekeeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from bargein.session.core import vocabulary as v


class Timers:
    """The idle timer, the pause timers, the play-out timers and the closed replies' timers of one session."""

    def __init__(self, feed: Callable[[v.Event], None], stream_ms: Callable[[], float]) -> None:
        self.feed = feed
        self.stream_ms = stream_ms
        self._idle: asyncio.TimerHandle | None = None
        self._pauses: dict[str, asyncio.TimerHandle] = {}
        self._play_outs: dict[str, asyncio.TimerHandle] = {}
        self._closed: dict[str, asyncio.TimerHandle] = {}

    def arm_idle(self, delay_ms: int) -> None:
        """Fire ``IdleTimerFired`` after ``delay_ms`` (replacing any armed idle timer)."""
        self.disarm_idle()
        self._idle = asyncio.get_running_loop().call_later(
            delay_ms / 1000, lambda: self.feed(v.IdleTimerFired(self.stream_ms())))

    def disarm_idle(self) -> None:
        """Forget the idle timer."""
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def arm_pause(self, response_id: str, delay_ms: int) -> None:
        """Fire ``PauseTimerFired`` for a paused reply after ``delay_ms``."""
        self._arm(self._pauses, response_id, delay_ms, v.PauseTimerFired(response_id))

    def disarm_pause(self, response_id: str) -> None:
        """Forget a reply's pause timer (it resumed or ended)."""
        self._forget(self._pauses, response_id)

    def arm_play_out(self, response_id: str, delay_ms: int, arm: int) -> None:
        """Fire ``PlayOutTimerFired`` (with ``arm``) for a reply playing out after ``delay_ms``."""
        self._arm(self._play_outs, response_id, delay_ms, v.PlayOutTimerFired(response_id, arm))

    def disarm_reply(self, response_id: str) -> None:
        """Forget a reply's pause and play-out timers (it ended)."""
        self.disarm_pause(response_id)
        self._forget(self._play_outs, response_id)

    def arm_closed_playback(self, response_id: str, delay_ms: float, arm: int) -> None:
        """Fire ``ClosedPlaybackTimerFired`` (with ``arm``) for a closed reply the client still plays after
        ``delay_ms`` (replacing its timer)."""
        self._arm(self._closed, response_id, delay_ms, v.ClosedPlaybackTimerFired(response_id, arm))

    def disarm_closed_playback(self, response_id: str) -> None:
        """Forget a closed reply's timer (its playback ended)."""
        self._forget(self._closed, response_id)

    def _arm(self, timers: dict[str, asyncio.TimerHandle], response_id: str, delay_ms: float,
             fired: v.Event) -> None:
        """Feed ``fired`` after ``delay_ms``, replacing the reply's timer in ``timers`` (which forgets it as it
        fires)."""
        self._forget(timers, response_id)
        timers[response_id] = asyncio.get_running_loop().call_later(delay_ms / 1000, self._fire, timers,
                                                                    response_id, fired)

    def _fire(self, timers: dict[str, asyncio.TimerHandle], response_id: str, fired: v.Event) -> None:
        timers.pop(response_id, None)
        self.feed(fired)

    @staticmethod
    def _forget(timers: dict[str, asyncio.TimerHandle], response_id: str) -> None:
        if (timer := timers.pop(response_id, None)) is not None:
            timer.cancel()

    def close(self) -> None:
        """Cancel everything (the session is ending)."""
        self.disarm_idle()
        for timers in (self._pauses, self._play_outs, self._closed):
            for timer in timers.values():
                timer.cancel()
            timers.clear()
