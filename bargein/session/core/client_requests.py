"""The duplex machine's answers to the client's own requests: an explicit commit, ``response.create``,
``response.cancel``, ``input_audio_buffer.clear`` (the turn it abandons), a ``conversation.item.truncate`` that cuts
a reply's playback short (the idle timer) and a ``session.update`` of the turn settings. Each is a transition of the
machine's state (:class:`~bargein.session.core.machine_base.MachineBase`); the machine's ``feed`` dispatches to
them."""

from __future__ import annotations

from bargein.session.core import rejections
from bargein.session.core import vocabulary as v
from bargein.session.core.machine_base import MachineBase
from bargein.session.core.settings import TurnSettings

MIN_COMMIT_MS = 100.0
"""Shortest buffer a commit accepts (the OpenAI Realtime API's rule)."""


class ClientRequests(MachineBase):
    """The transitions the client's requests make (the rest of the machine is :class:`~bargein.session.core.
    machine.DuplexMachine`)."""

    def _on_client_commit(self, event: v.ClientCommit) -> None:
        self._tell_speech()  # the client says it is a turn: it hears of the speech first
        turn, self._turn = self._turn, None
        if event.buffered_ms < MIN_COMMIT_MS and turn is None:
            self._emit(v.Reject(rejections.commit_too_small(MIN_COMMIT_MS, event.buffered_ms, event.event_id)))
            return
        item_id = turn.item_id if turn else self.new_id("item")
        if turn is not None:
            self.segments.forget(turn.item_id)
            self._emit(v.SpeechStopped(item_id, self._last_ms))
        if self._reply is not None and self._reply.paused:
            self._cancel_active("turn_detected")  # the client says the speech that paused it is a turn
        self._heard_from_ms = self._last_ms
        self._emit(v.CommitBuffer(item_id, None, None, event_id=event.event_id))
        # an explicit commit is the client saying "this is a turn": no classification
        if self.settings.vad:
            self._unanswered = True
            self._maybe_answer()

    def _on_client_create(self, event: v.ClientResponseCreate) -> None:
        if self._reply is not None and self._reply.playing_out and not self._reply.paused:
            self._complete(self._reply, failed=False)  # only played out, its words all said: done, as clients expect
        if self._reply is not None:
            self._emit(v.Reject(rejections.reply_in_progress(self._reply.response_id, event.event_id)))
            return
        self._start_reply("client", event.params)

    def _on_client_cancel(self, event: v.ClientResponseCancel) -> None:
        reply = self._reply
        if reply is None or (event.response_id is not None and event.response_id != reply.response_id):
            self._emit(v.Reject(rejections.nothing_to_cancel(event.response_id, event.event_id)))
            return
        self._unanswered = False  # a query waiting behind it is dropped: the client stopped the agent talking
        if not self.settings.interruption.enabled:  # ... and so is one still being judged
            self._awaiting.owe_nothing("not answered: the client cancelled the reply it waited behind",
                                       only_during_reply=True)
        self._awaiting.answer_cancelled(reply.response_id)
        self._cancel_active("client_cancelled")
        if not self._tool_wait:  # the agent's turn is over as surely as when a reply ends by itself
            self._idle_again()

    def _on_playback_cut(self) -> None:
        # the timer armed at the reply's end counts from where its audio would have finished playing; the user
        # stopped it now, so the silence the idle timeout measures began now
        if self.settings.vad and (arm := self._idle.restart(self.settings.idle_prompt_ms)) is not None:
            self._emit(arm)

    def _on_settings(self, settings: TurnSettings) -> None:
        idle_was_ms, self.settings = self.settings.idle_prompt_ms, settings
        self.storm.capacity = settings.listening.storm_barge_ins
        self.storm.window_ms = settings.listening.storm_window_ms
        if not settings.vad:
            self._abandon_turn(then=v.DisarmIdleTimer())
            self._idle.stop()
        elif (retimed := self._idle.retime(idle_was_ms, settings.idle_prompt_ms)) is not None:
            self._emit(retimed)

    def _abandon_turn(self, *, then: v.Action) -> None:
        """The turn being spoken will never reach an endpoint: its recognition and score stop (``then`` follows),
        and a paused reply resumes, unless a committed segment is still being judged (then its verdict decides);
        an answer that waited only for this turn to end starts."""
        turn, self._turn = self._turn, None
        if turn is not None:
            self.segments.forget(turn.item_id)
            self._emit(v.SegmentAbandoned(turn.item_id))
        self._emit(then)
        if turn is not None and (reply := self._reply) is not None and reply.paused and not self._awaiting:
            self._resume(reply)
        self._maybe_answer()  # an answer that waited for this turn to end, or the idle timer it disarmed
