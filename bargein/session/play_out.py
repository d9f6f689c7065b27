"""The client's playback of closed spoken replies, as the shell sees it: the replies' handles and their playback
clocks, reported to the machine, which decides when each playback ends and how much was heard.

Pacing sends a reply's end up to ``output_lead_ms`` before it is played; its handle keeps the reply live meanwhile
(:meth:`~bargein.session.reply_handle.ReplyHandle.played_out`; the machine's play-out timer,
:mod:`bargein.session.core.play_out`, bounds that wait), so speech there still pauses it. A reply's ``response.done``
can still go out while the client holds audio of it (a longer output lead, a client whose deltas are slow to leave,
a failed reply). :class:`PlayingOut` keeps such replies' handles, tells the machine how their playback goes
(``ClosedReplyPlaying``, ``ClosedReplySent``, ``ClosedReplyCut``, ``SessionClosing``) and carries out its
``ReplyHeard``; the decisions (played out, the cut's grace, the client's truncate, the bound, the replies the idle
timeout waits for) are :mod:`bargein.session.core.closed_playback`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from bargein.session.core import vocabulary as v
from bargein.session.reply_handle import ReplyHandle

Heard = Callable[[str, float], None]
"""``(response_id, heard_ms)``: a reply closed while the client played it was played out or cut."""


class PlayingOut:
    """The handles of the closed replies whose playback the machine follows, each told to ``heard`` once when the
    machine says it ended."""

    def __init__(self, heard: Heard | None, feed: Callable[[v.Event], None]) -> None:
        self.heard = heard
        self.feed = feed
        self.replies: dict[str, ReplyHandle] = {}
        """As many as the machine holds (at most :data:`~bargein.session.core.closed_playback.MAX_PLAYING`): each
        leaves at its ``ReplyHeard``."""

    def add(self, reply: ReplyHandle) -> None:
        """``reply`` closed not cut short while the client may still play it."""
        self.replies[reply.response_id] = reply
        self.feed(v.ClosedReplyPlaying(reply.response_id, reply.state.item.id, reply.state.item.audio_ms,
                                       reply.playback.sent_ms, reply.audio_left_ms()))

    def sent(self, reply: ReplyHandle) -> None:
        """A delta of ``reply`` left for the client (its playback estimate has counted it)."""
        if reply.response_id in self.replies:
            self.feed(v.ClosedReplySent(reply.response_id, reply.playback.sent_ms, reply.audio_left_ms()))

    def cut(self, reply: ReplyHandle, heard_ms: float) -> None:
        """The user spoke over ``reply`` about ``heard_ms`` into it (the server's estimate, which its item keeps)."""
        if reply.response_id in self.replies:
            self.feed(v.ClosedReplyCut(reply.response_id, heard_ms))

    def played(self, response_id: str, heard_ms: float | None) -> None:
        """The machine's ``ReplyHeard``: the client's playback of the reply ended with ``heard_ms`` played (None: as
        far as its playback estimate has reached, at most its audio)."""
        if (reply := self.replies.pop(response_id, None)) is None:
            return
        if heard_ms is None:
            heard_ms = min(reply.state.item.audio_ms, reply.playback.heard_ms())
        if self.heard is not None:
            self.heard(response_id, heard_ms)

    def left_ms(self, counted: Collection[str]) -> float:
        """How long the client may still play the replies ``counted`` (the machine's
        :meth:`~bargein.session.core.closed_playback.ClosedPlayback.playing_to_end`: not one the user cut), by
        their playback estimates: the idle timeout counts from the end of the agent's audio, not from its
        ``response.done``."""
        return max((reply.audio_left_ms() for response_id, reply in self.replies.items() if response_id in counted),
                   default=0.0)

    def close(self) -> None:
        """The session ends and the client stops playing: the machine tells how much of each reply was heard."""
        if self.replies:
            self.feed(v.SessionClosing())
