"""When the camera message is warmed into the model's prompt cache: at most once per stretch between two replies'
prompts, never because a scene note changed while the user speaks.

The model reads a turn's camera message (the note's facts, about 30 tokens) before the user's words. Warming it
when a reply completes (the next turn's history is known then) and again when the turn's speech starts, only where
the message changed since, leaves the model free while the user speaks: with a new scene in every frame a warm on
each new note kept the model busy for more than a second of every turn (4.3 warms and 114 tokens a turn against
1.2 and 18 with the camera off), slowing the turn's recogniser and end-of-turn model beside it on two cores, and
the reply then waited for the warm's running chunk. The core's own warm (a partial of the words) still reads the
newest message.

Which note a turn's reply quotes (:func:`quotes_read_note`): the one whose message the model has already read after
this history, where the newest differs from it and it is not older than :data:`READ_NOTE_MAX_AGE_S` at the silence.
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
quote it instead of a newer one: past it the reply reads the newest note's facts after the silence (about 30 tokens)."""


def quotes_read_note(newest: str, read: str | None, read_age_s: float | None,
                     max_age_s: float = READ_NOTE_MAX_AGE_S) -> bool:
    """Whether a turn's reply quotes the camera message the model has read (``read``, its note ``read_age_s`` old)
    rather than the newest (``newest``): where they differ and the read one is not too old (the same words cost
    nothing either way, and the newest note is the younger)."""
    return read is not None and read != newest and read_age_s is not None and read_age_s <= max_age_s


@dataclass
class CameraWarms:
    """Decides, from the machine's actions, when a session's camera message is warmed (no I/O: the caller warms)."""

    message: Callable[[], str | None]
    """The camera message a reply's prompt would quote now (None: no note)."""
    replies_follow: Callable[[], bool]
    """Whether the session's turns get replies of their own (a client that asks for its replies itself is not
    warmed for: the core does not warm its turns either)."""
    reach_model: Callable[[], bool] = lambda: True
    """Whether a warm reaches a model that keeps what it read (one that cannot evaluate a prompt ahead reads
    nothing: no message counts as read, so every reply quotes the newest note)."""
    warmed: str | None = None
    """The camera message the model last read after the history as it stands (None: none since the history last
    changed, or no warm yet)."""
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
        elif isinstance(action, v.WarmPrompt):
            self.warmed = self.message() if self.reach_model() else None  # the newest message, the words so far
        elif isinstance(action, v.SpeechStarted):
            return self._due()
        return False

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
