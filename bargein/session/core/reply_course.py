"""The duplex machine's transitions on the live reply's own course, as the shell reports it: the input a reply
answers is known (:class:`~bargein.session.core.reply_vocabulary.ReplyInputReady`), or the client truncated the
reply's item (:class:`~bargein.session.core.reply_vocabulary.ReplyTruncated`).

Functions of the machine (:class:`~bargein.session.core.machine.DuplexMachine`), seen through
:class:`~bargein.session.core.machine_state.MachineState`; the ``reply`` sub-state is what they move."""

from __future__ import annotations

from bargein.session.core import vocabulary as v
from bargein.session.core.machine_state import MachineState

DIDNT_CATCH = "Sorry, I didn't catch that. Could you say it again?"
"""What a reply to the user's turn says when the recogniser lost the turn's words (it failed or timed out)."""


def on_input_ready(m: MachineState, event: v.ReplyInputReady) -> None:
    """The reply's input is known. A reply to the user's turn answers their words: with none (a wordless sound) it
    has nothing to answer and ends; with words lost, it says it did not catch them. Any other runs its pipeline."""
    reply = m.reply
    if reply is None or reply.response_id != event.response_id:
        return  # it was cancelled while it waited for the words
    answers_the_turn = reply.trigger == "turn_detected"
    if answers_the_turn and event.user_words == "none":
        if reply.paused:
            reply.generation_done = True  # it completes once resumed, or is cancelled
        else:
            m.complete(reply, failed=False)
        return
    lost = answers_the_turn and event.user_words == "lost"
    m.emit(v.GenerateReply(reply.response_id, DIDNT_CATCH if lost else None))


def on_truncated(m: MachineState, event: v.ReplyTruncated) -> None:
    """The client cut the reply's item short. A reply only playing out its last stretch was stopped by the client: it
    ends now, so a ``response.create`` sent right behind the truncate finds no reply in progress. A paused one waits
    for its verdict, and one still generating goes on."""
    reply = m.reply
    if reply is not None and reply.response_id == event.response_id and reply.playing_out and not reply.paused:
        m.complete(reply, failed=False)
