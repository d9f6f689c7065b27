"""The duplex machine's answers to the client's own requests: an explicit commit, ``response.create``,
``response.cancel``, ``input_audio_buffer.clear`` (the turn it abandons), a ``conversation.item.truncate`` that cuts
a reply's playback short (the idle timer) and a ``session.update`` of the turn settings.

Functions of the machine (:class:`~bargein.session.core.machine.DuplexMachine`), whose ``feed`` dispatches to them;
each moves the sub-states listed in the machine module's header."""

from __future__ import annotations

from bargein.session.core import rejections
from bargein.session.core import vocabulary as v
from bargein.session.core.machine_state import MachineState
from bargein.session.core.settings import TurnSettings

MIN_COMMIT_MS = 100.0
"""Shortest buffer a commit accepts (the OpenAI Realtime API's rule)."""


def on_commit(m: MachineState, event: v.ClientCommit) -> None:
    """``input_audio_buffer.commit``: the client says the buffer is a turn (no classification); a reply the
    speech paused is cancelled."""
    m.tell_speech()  # the client says it is a turn: it hears of the speech first
    turn, m.turn = m.turn, None
    if event.buffered_ms < MIN_COMMIT_MS and turn is None:
        m.emit(v.Reject(rejections.commit_too_small(MIN_COMMIT_MS, event.buffered_ms, event.event_id)))
        return
    item_id = turn.item_id if turn else m.new_id("item")
    if turn is not None:
        m.segments.forget(turn.item_id)
        m.emit(v.SpeechStopped(item_id, m.last_ms))
    if m.reply is not None and m.reply.paused:
        m.cancel_active("turn_detected")  # the client says the speech that paused it is a turn
    m.heard_from_ms = m.last_ms
    m.emit(v.CommitBuffer(item_id, None, None, event_id=event.event_id))
    if m.settings.vad:
        m.answer_owed = True
        m.maybe_answer()


def on_create(m: MachineState, event: v.ClientResponseCreate) -> None:
    """``response.create``: a reply starts, unless one is live (rejected); one only playing out is done."""
    if m.reply is not None and m.reply.playing_out and not m.reply.paused:
        m.complete(m.reply, failed=False)  # only played out, its words all said: done, as clients expect
    if m.reply is not None:
        m.emit(v.Reject(rejections.reply_in_progress(m.reply.response_id, event.event_id)))
        return
    m.start_reply("client", event.params)


def on_cancel(m: MachineState, event: v.ClientResponseCancel) -> None:
    """``response.cancel``: the live reply is cancelled (rejected with none, or another one named)."""
    reply = m.reply
    if reply is None or (event.response_id is not None and event.response_id != reply.response_id):
        m.emit(v.Reject(rejections.nothing_to_cancel(event.response_id, event.event_id)))
        return
    m.answer_owed = False  # a query waiting behind it is dropped: the client stopped the agent talking
    if not m.settings.interruption.enabled:  # ... and so is one still being judged
        m.awaiting.owe_nothing("not answered: the client cancelled the reply it waited behind",
                               only_during_reply=True)
    m.awaiting.answer_cancelled(reply.response_id)
    m.cancel_active("client_cancelled")
    if not m.tools.owed:  # the agent's turn is over as surely as when a reply ends by itself
        m.idle_again()


def on_playback_cut(m: MachineState) -> None:
    """``conversation.item.truncate`` of a reply the client still played: a running idle timer counts from now."""
    # the timer armed at the reply's end counts from where its audio would have finished playing; the user
    # stopped it now, so the silence the idle timeout measures began now
    if m.settings.vad and (arm := m.idle.restart(m.settings.idle_prompt_ms)) is not None:
        m.emit(arm)


def on_settings(m: MachineState, settings: TurnSettings) -> None:
    """``session.update`` of the turn settings: the storm guard's limits, manual turns (the turn being spoken is
    abandoned), a new idle delay."""
    idle_was_ms, m.settings = m.settings.idle_prompt_ms, settings
    m.storm.capacity = settings.listening.storm_barge_ins
    m.storm.window_ms = settings.listening.storm_window_ms
    if not settings.vad:
        abandon_turn(m, then=v.DisarmIdleTimer())
        m.idle.stop()
    elif (retimed := m.idle.retime(idle_was_ms, settings.idle_prompt_ms)) is not None:
        m.emit(retimed)


def abandon_turn(m: MachineState, *, then: v.Action) -> None:
    """The turn being spoken will never reach an endpoint: its recognition and score stop (``then`` follows),
    and a paused reply resumes, unless a committed segment is still being judged (then its verdict decides);
    an answer that waited only for this turn to end starts."""
    turn, m.turn = m.turn, None
    if turn is not None:
        m.segments.forget(turn.item_id)
        m.emit(v.SegmentAbandoned(turn.item_id))
    m.emit(then)
    if turn is not None and (reply := m.reply) is not None and reply.paused and not m.awaiting:
        m.resume(reply)
    m.maybe_answer()  # an answer that waited for this turn to end, or the idle timer it disarmed
