"""The client's playback of a reply's last stretch: a live reply waits for it, and closed spoken replies the client may
still be playing are followed until it has played each or the user cut it.

Pacing sends a reply's end up to ``output_lead_ms`` before it is played; its handle keeps the reply live meanwhile
(:meth:`~bargein.session.reply_handle.ReplyHandle.played_out`; the machine's play-out timer,
:mod:`bargein.session.core.play_out`, bounds that wait), so speech there still pauses it. A reply's ``response.done``
can still go out while the client holds audio of it (a longer output lead, a client whose deltas are slow to leave,
a failed reply). How much of it was heard is then not known: the user may still cut it. :class:`PlayingOut` keeps
such replies and tells how much of each was heard once: in full when the client has had time to play its last
sample, else where the user cut it (the client's truncate, or the server's playback estimate when no truncate follows
within a grace period), else what it had played when the session ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from bargein.session.reply_handle import ReplyHandle

MAX_PLAYING = 8
"""Closed replies kept waiting for their playback to end; an older one (whose deltas a cut purged, say) is then
told as heard as far as it had played (or as far as its cut), so a session's count stays bounded."""
CUT_GRACE_S = 2.0
"""How long after the server's own estimate of a cut the client's truncate may still say where it really stopped
(an OpenAI client sends it once it has stopped its playback, after ``speech_started``)."""
Heard = Callable[[str, float], None]
"""``(response_id, heard_ms)``: a reply closed while the client played it was played out or cut."""


class PlayingOut:
    """The closed replies whose playback has not ended, each told to ``heard`` once when it does."""

    def __init__(self, heard: Heard | None) -> None:
        self.heard = heard
        self.replies: dict[str, ReplyHandle] = {}
        self._due: dict[str, asyncio.TimerHandle] = {}
        self._cut: set[str] = set()
        """Replies held here whose playback the server already took as stopped where the user spoke."""

    def add(self, reply: ReplyHandle) -> None:
        """``reply`` closed not cut short: it is heard in full only once the client has played it all."""
        self.replies[reply.response_id] = reply
        while len(self.replies) > MAX_PLAYING:
            oldest = next(iter(self.replies.values()))
            self.played(oldest, _so_far(oldest))
        self.watch(reply)

    def watch(self, reply: ReplyHandle) -> None:
        """Once all of ``reply`` has left (call again as its deltas leave), it is heard in full when the client
        has had time to play its last sample."""
        if reply.response_id not in self.replies or reply.response_id in self._due:
            return
        audio_ms = reply.state.item.audio_ms
        if reply.playback.sent_ms < audio_ms - 1.0:
            return  # some deltas still wait in the outbound queue
        left_ms = reply.audio_left_ms()
        if left_ms <= 1.0:
            self.played(reply, audio_ms)
        else:
            self._due[reply.response_id] = asyncio.get_running_loop().call_later(left_ms / 1000.0, self._due_now,
                                                                                 reply)

    def _due_now(self, reply: ReplyHandle) -> None:
        self._due.pop(reply.response_id, None)
        self.watch(reply)  # the estimate has reached the end by now (it moves only as deltas leave)

    def cut(self, reply: ReplyHandle, heard_ms: float) -> None:
        """The user spoke over ``reply`` about ``heard_ms`` into it (the server's estimate): told after
        :data:`CUT_GRACE_S`, unless the client's truncate says first where its playback stopped."""
        if reply.response_id not in self.replies:
            return
        if (due := self._due.pop(reply.response_id, None)) is not None:
            due.cancel()  # a play-out timer: the reply no longer plays to its end
        self._cut.add(reply.response_id)
        self._due[reply.response_id] = asyncio.get_running_loop().call_later(CUT_GRACE_S, self.played, reply,
                                                                             heard_ms)

    def played(self, reply: ReplyHandle, heard_ms: float) -> None:
        """The client's playback of ``reply`` ended (played out or cut) with ``heard_ms`` played: told once."""
        if self.replies.pop(reply.response_id, None) is None:
            return
        self._cut.discard(reply.response_id)
        if (due := self._due.pop(reply.response_id, None)) is not None:
            due.cancel()
        if self.heard is not None:
            self.heard(reply.response_id, heard_ms)

    def left_ms(self) -> float:
        """How long the client may still play the replies it holds (0 for one the user cut): the idle timeout
        counts from the end of the agent's audio, not from its ``response.done``."""
        return max((reply.audio_left_ms() for reply in self.replies.values()
                    if reply.state.item.heard_ms is None or reply.state.item.heard_ms >= reply.state.item.audio_ms),
                   default=0.0)

    def truncated(self, item_id: str) -> bool:
        """The client truncated ``item_id`` to its playback cursor: a reply it was playing was cut there. True when
        it was one of the replies held here and the server had not already taken its playback as stopped where the
        user spoke (its playback ended now, not where its audio ends: the idle timeout counts from now)."""
        cut = False
        for reply in list(self.replies.values()):
            if reply.state.item.id == item_id and reply.state.item.heard_ms is not None:
                cut = cut or reply.response_id not in self._cut
                self.played(reply, reply.state.item.heard_ms)
        return cut

    def close(self) -> None:
        """The session ends and the client stops playing: each reply was heard as far as it had played (a cut one
        as far as the cut: :meth:`cut` waits with the estimate the history already holds)."""
        for reply in list(self.replies.values()):
            self.played(reply, _so_far(reply))


def _so_far(reply: ReplyHandle) -> float:
    """How much of ``reply`` was heard if its playback stopped now: to its cut if the user cut it (the estimate's
    clock runs on past the cut, as if the client had kept playing), else as far as it had played."""
    item, cut_at = reply.state.item, reply.state.item.heard_ms
    return cut_at if cut_at is not None and cut_at < item.audio_ms else min(item.audio_ms, reply.playback.heard_ms())
