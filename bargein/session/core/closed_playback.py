"""Closed replies the client still plays: when the playback of each ends, and how much of it was heard.

A reply's ``response.done`` can go out while the client still holds audio of it (a longer output lead, a client whose
deltas are slow to leave, a failed reply). How much of it was heard is then not known: the user may still cut it.
The machine keeps such replies (at most :data:`MAX_PLAYING`) and tells how much of each was heard, once
(``ReplyHeard``):

- in full, once all its deltas have left and the client has had time to play the last sample: the shell's playback
  estimate runs at real time once nothing more leaves, so a timer armed for what it says is left ends it;
- where the user cut it: the client's truncate, or the server's own estimate when no truncate follows within
  :data:`CUT_GRACE_MS` (an OpenAI client truncates once it has stopped its playback, after ``speech_started``);
- pushed out past the bound, or when the session closes: as far as its cut, else as far as it had played (which
  only the shell's playback estimate can say, so ``ReplyHeard`` leaves it to the shell).

Whether speech cuts a closed reply or finds it played out (:func:`speech_cuts`), and which replies the idle timeout
counts from the end of (:meth:`ClosedPlayback.playing_to_end`), are decided here too: the shell only measures.

A reply has at most one timer (its play-out, or its cut's grace, which replaces it); a firing of a timer replaced
since, or for a reply told already, is stale and changes nothing. Pure: the machine arms, the shell's timer fires.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bargein.session.core.work_vocabulary import (
    ArmClosedPlaybackTimer,
    ClosedPlaybackTimerFired,
    ClosedReplyCut,
    ClosedReplyPlaying,
    ClosedReplySent,
    ClosedReplyTruncated,
    ReplyHeard,
    SessionClosing,
)

MAX_PLAYING = 8
"""Closed replies kept waiting for their playback to end; an older one (whose deltas a cut purged, say) is then
told as heard as far as it had played (or as far as its cut), so a session's count stays bounded."""
CUT_GRACE_MS = 2000.0
"""How long after the server's own estimate of a cut the client's truncate may still say where it really stopped
(an OpenAI client sends it once it has stopped its playback, after ``speech_started``)."""
SLACK_MS = 1.0
"""Audio within this of the end counts as sent, or as played."""


def speech_cuts(sent_ms: float, heard_ms: float) -> bool:
    """The user spoke with the client's playback ``heard_ms`` into a closed reply of which ``sent_ms`` had left for
    it: True when that cuts the reply, False when the client had played all it was sent (within :data:`SLACK_MS`),
    so the reply played out."""
    return heard_ms < sent_ms - SLACK_MS


Emit = Callable[[ArmClosedPlaybackTimer | ReplyHeard], None]


@dataclass
class ClosedReply:
    """One closed reply the client still plays."""

    item_id: str
    audio_ms: float
    cut_ms: float | None = None
    """Where the user spoke over it by the server's estimate: its cut's grace runs (None: not cut)."""
    arm: int | None = None
    """The arming of its timer that may still end it (its play-out, or its cut's grace); None while none runs."""


@dataclass
class ClosedPlayback:
    """The closed replies whose playback has not ended, oldest first, each told once when it does."""

    replies: dict[str, ClosedReply] = field(default_factory=dict)
    arms: int = 0

    def feed(self, event: ClosedReplyPlaying | ClosedReplySent | ClosedReplyCut | ClosedPlaybackTimerFired
             | SessionClosing, emit: Emit) -> None:
        """Take one event of the closed replies' playback; what is due goes to ``emit``."""
        match event:
            case ClosedReplyPlaying(response_id, item_id, audio_ms, sent_ms, left_ms):
                self.replies[response_id] = ClosedReply(item_id, audio_ms)
                while len(self.replies) > MAX_PLAYING:
                    self._stopped(next(iter(self.replies)), emit)
                self._watch(response_id, sent_ms, left_ms, emit)
            case ClosedReplySent(response_id, sent_ms, left_ms):
                self._watch(response_id, sent_ms, left_ms, emit)
            case ClosedReplyCut(response_id, heard_ms):
                if (reply := self.replies.get(response_id)) is not None:
                    reply.cut_ms = heard_ms  # its play-out timer is replaced: it no longer plays to its end
                    self._arm(response_id, reply, CUT_GRACE_MS, emit)
            case ClosedPlaybackTimerFired(response_id, arm):
                reply = self.replies.get(response_id)
                if reply is not None and reply.arm == arm:
                    # a cut's grace ended with no truncate, or the client has had time to play the last sample
                    self._heard(response_id, reply.cut_ms if reply.cut_ms is not None else reply.audio_ms, emit)
            case SessionClosing():
                for response_id in list(self.replies):
                    self._stopped(response_id, emit)

    def playing_to_end(self) -> frozenset[str]:
        """The replies the client may still play to their end (not one the user cut): the idle timeout counts from
        the end of the one it finishes last, a cut one's playback having stopped at the cut."""
        return frozenset(response_id for response_id, reply in self.replies.items()
                         if reply.cut_ms is None or reply.cut_ms >= reply.audio_ms)

    def truncated(self, event: ClosedReplyTruncated, emit: Emit) -> bool:
        """The client truncated ``event.item_id``: a reply held here was cut there, for good. True when it was one
        the server had not already taken as stopped where the user spoke (its playback ended now, not where its
        audio ends: the idle timeout counts from now)."""
        cut = False
        for response_id, reply in list(self.replies.items()):
            if reply.item_id == event.item_id:
                cut = cut or reply.cut_ms is None
                self._heard(response_id, event.heard_ms, emit)
        return cut

    def _watch(self, response_id: str, sent_ms: float, left_ms: float, emit: Emit) -> None:
        """Once all of the reply has left, it is heard in full when the client has had time to play its last
        sample (nothing to decide while its timer runs: its play-out's, or its cut's grace)."""
        reply = self.replies.get(response_id)
        if reply is None or reply.arm is not None or sent_ms < reply.audio_ms - SLACK_MS:
            return  # told already, timed already, or some deltas still wait in the outbound queue
        if left_ms <= SLACK_MS:
            self._heard(response_id, reply.audio_ms, emit)
        else:
            self._arm(response_id, reply, left_ms, emit)

    def _arm(self, response_id: str, reply: ClosedReply, delay_ms: float, emit: Emit) -> None:
        self.arms += 1
        reply.arm = self.arms
        emit(ArmClosedPlaybackTimer(response_id, delay_ms, self.arms))

    def _stopped(self, response_id: str, emit: Emit) -> None:
        """The client stops playing the reply now (pushed out past the bound, or the session ends): heard as far as
        its cut if the user cut it (the estimate's clock runs on past the cut, as if the client had kept playing),
        else as far as it had played."""
        reply = self.replies[response_id]
        cut = reply.cut_ms if reply.cut_ms is not None and reply.cut_ms < reply.audio_ms else None
        self._heard(response_id, cut, emit)

    def _heard(self, response_id: str, heard_ms: float | None, emit: Emit) -> None:
        """The reply's playback ended with ``heard_ms`` played (None: as far as it had played): told once."""
        if self.replies.pop(response_id, None) is not None:
            emit(ReplyHeard(response_id, heard_ms))
