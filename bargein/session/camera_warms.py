"""When the camera message is warmed into the model's prompt cache: at most once per stretch between two replies'
prompts (and once as the session's first note comes), never because a scene note changed while the user speaks.

The model reads a turn's camera message (the note's facts, about 25 tokens) before the user's words. Warming it
when a reply completes (the next turn's history is known then) and again when the turn's speech starts, only where
the message changed since (and once as the session's first note comes, with the guidance, read once a session,
unless a turn is between its silence and its reply), leaves the model free while the user speaks: with a new scene
in every frame a warm on each new note kept the model busy for more than a second of every turn (4.3 warms and
114 tokens a turn against 1.2 and 18 with the camera off), slowing the turn's recogniser and end-of-turn model
beside it on two cores, and the reply then waited for the warm's running chunk. The core's own warm (a partial of
the words) still reads the newest message.

Which note a turn's reply quotes (:func:`quotes_read_note`): the one whose message the model has already read after
this history, where the newest differs from it and it is young enough at the silence: not older than
:data:`READ_NOTE_MAX_AGE_S`, or, while the scene reader lags behind the camera, not older than the newest by more than
:data:`READ_NOTE_MAX_LAG_S`.
The speculative reply and the end-of-sentence estimate at the silence then read only the user's words (7 to 10
tokens), where a note that changed while the user spoke made them read its facts too (26 to 53 tokens, the reply
waiting 150 to 514 ms for them on a quiet machine).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bargein.session.core import vocabulary as v

READ_NOTE_MAX_AGE_S = 1.5
"""Oldest (since the camera last showed it) the note the model has read may be at a turn's silence for the reply to
quote it instead of a newer one, however old the newest is: past it (and past :data:`READ_NOTE_MAX_LAG_S`) the reply
reads the newest note's facts after the silence (about 25 tokens)."""
READ_NOTE_MAX_LAG_S = 1.25
"""How much older than the newest note the read one may be for the reply to quote it, whatever its own age. With a
new scene in every frame the scene reader lags: a read takes some 0.4 s of a core at half duty, so a note comes every
0.8 s or so, for a frame 0.5 or 1 s newer than the last note's at 2 fps. Every note is then older than
:data:`READ_NOTE_MAX_AGE_S` by the silence, and that bound alone had the reply read a new note's facts there in half
the turns. The camera last showed the note quoted instead at most this long before it last showed the newest. Only
while the reader is behind the camera (it has shown a scene newer than the newest note's, not read yet), when the
newest note is out of date too: with a scene held in view (its later frames near-duplicates) the reader keeps up,
and a scene that came after the turn's last warm is quoted as soon as its note is made."""


def quotes_read_note(newest: str, read: str | None, read_age_s: float | None, newest_age_s: float, *,
                     reader_behind: bool, max_age_s: float = READ_NOTE_MAX_AGE_S,
                     max_lag_s: float = READ_NOTE_MAX_LAG_S) -> bool:
    """Whether a turn's reply quotes the camera message the model has read (``read``, its note ``read_age_s`` old)
    rather than the newest (``newest``, ``newest_age_s`` old): where they differ and the read one is at most
    ``max_age_s`` old, or, while the scene reader is behind the camera, at most ``max_lag_s`` older than the newest
    (the same words cost nothing either way, and the newest note is the younger)."""
    bound = max(max_age_s, newest_age_s + max_lag_s) if reader_behind else max_age_s
    return read is not None and read != newest and read_age_s is not None and read_age_s <= bound


@dataclass
class CameraWarms:
    """Decides, from the machine's actions, when a session's camera message is warmed (no I/O: the caller warms)."""

    message: Callable[[], str | None]
    """The camera message a reply's prompt would quote now (None: no note)."""
    replies_follow: Callable[[], bool]
    """Whether the session's turns get replies of their own (a client that asks for its replies itself is not
    warmed for: the core does not warm its turns either)."""
    reach_model: Callable[[], bool] = lambda: True
    """Whether a warm asked for now reaches a model that keeps what it read (one that cannot evaluate a prompt ahead
    reads nothing, so no message counts as read; a warm asked for while the model serves a reply is skipped and
    changes nothing the model has read, so no reply quotes a note for a warm that never ran)."""
    warmed: str | None = None
    """The camera message the model last read after the history as it stands (None: none since the history last
    changed, or no warm yet)."""
    silent: bool = False
    """Whether a turn is between its silence and its reply's start (or its speech going on)."""
    live: set[str] = field(default_factory=set)
    """Replies started and not yet completed or cancelled (at most a few: the core closes each): while one is live
    the next turn's history is not known yet."""

    def on_action(self, action: v.Action) -> bool:
        """Note ``action``; whether to warm the next turn's prompt now with the camera message and no words: only a
        turn's speech start does, and only when the message is not the one the model last read after this
        history."""
        if isinstance(action, v.StartReply):
            self.live.add(action.response_id)
            self.warmed = None  # the reply's words join the history
        elif isinstance(action, v.CompleteReply | v.CancelReply):
            self.live.discard(action.response_id)
        elif isinstance(action, v.CommitBuffer):
            self.warmed = None  # the user's turn joins the history
        elif isinstance(action, v.WarmPrompt) and self.reach_model():
            self.warmed = self.message()  # the newest message, the words so far (a skipped warm changes nothing)
        if isinstance(action, v.SilenceBegan):
            self.silent = True
        elif isinstance(action, v.SpeechStarted | v.SpeechResumed | v.SegmentAbandoned | v.StartReply):
            self.silent = False
        return isinstance(action, v.SpeechStarted) and self._due()

    def on_first_note(self) -> bool:
        """The session's first note came: whether to warm the next turn's prompt now, so the model reads the
        guidance that comes with the first note (and its example exchange: some 70 tokens, once per session) while
        the user has not finished the turn, rather than at its silence (a turn that began before the camera's first
        note has no warm at its speech start). Not from a turn's silence to its reply's start: that is the turn's
        critical path, and the reply's prompt is not known yet."""
        return not self.silent and self._due()

    def on_reply_completed(self) -> bool:
        """A reply completed: whether to warm the next turn's prompt (the history is known up to its words)."""
        return self._due()

    def _due(self) -> bool:
        message = self.message()
        if (message is None or self.live or message == self.warmed or not self.replies_follow()
                or not self.reach_model()):
            return False
        self.warmed = message
        return True
