"""The duplex machine's transitions on listening decisions: what a committed segment's verdict does (cut the live
reply and answer, resume it, keep it paused, ignore the segment) and what a speculative guess does (cut a paused
reply on a command heard at the first pause, prefetch a reply to a query).

Functions of the machine (:class:`~bargein.session.core.machine.DuplexMachine`); the verdict itself comes from
the segment book, and *why* a segment is a query or noise is the listening policy's to say."""

from __future__ import annotations

from typing import Literal

from bargein.session.core import vocabulary as v
from bargein.session.core.listening.classifier import ListenDecision
from bargein.session.core.machine_state import MachineState
from bargein.session.core.verdicts import Owed


def on_classified(m: MachineState, item_id: str, decision: Literal["query", "noise"],
                  verdict: ListenDecision | None) -> None:
    """The verdict on ``item_id`` arrived (``verdict``: with its evidence, reported; ``None`` from a timeline)."""
    if (owed := m.awaiting.settle(item_id)) is None:
        return  # cleared, or decided already: a late answer changes nothing
    reply = m.reply
    confirm_ignores = owed.untold or (owed.during_reply and reply is not None and not reply.paused
                                      and m.storm.mode == "confirm")
    kept = decision == "query" and owed.unended and not owed.cut_early  # no pause ended it: no answer
    # the reply is gone once the segment cut it early: dropping the segment would leave silence
    if (decision == "noise" and not owed.cut_early) or confirm_ignores or kept or owed.not_owed:
        _unanswered(m, item_id, decision, verdict, owed, confirm_ignores=confirm_ignores, kept=kept)
        return
    m.answer_owed = True
    # a turn begun while the reply played out its last stretch is judged as one after it, but it paused the reply
    cuts = (reply is not None and (owed.during_reply or (reply.paused and reply.playing_out))
            and m.settings.interruption.enabled)
    if verdict is not None:
        m.emit(v.ReportSegment(item_id, verdict, "cut the reply and answer" if cuts else
                               "answer (it cut the reply at its first pause)" if owed.cut_early else "answer"))
    if cuts and owed.during_reply:
        m.barge_in()
    elif cuts:  # words over the last stretch the client played: an answer overlapping it, no barge-in to count
        m.cancel_active("turn_detected")
    m.maybe_answer()


def _unanswered(m: MachineState, item_id: str, decision: Literal["query", "noise"], verdict: ListenDecision | None,
                owed: Owed, *, confirm_ignores: bool, kept: bool) -> None:
    """A verdict that owes no answer: the segment is reported and dropped (a query kept in the conversation stays),
    and a reply it paused resumes once nothing else is being judged."""
    answered_elsewhere = owed.not_owed if decision == "query" else None  # kept in the conversation, not answered
    reply = m.reply
    resumes = reply is not None and reply.paused and m.turn is None and not m.awaiting
    if verdict is not None:
        m.emit(v.ReportSegment(item_id, verdict, answered_elsewhere or ignored_action(
            reply is not None and reply.paused, resumes, confirm_ignores, kept=kept)))
    if not kept and not answered_elsewhere:
        m.emit(v.DiscardSegment(item_id))
    if resumes:
        assert reply is not None
        m.resume(reply)
    m.maybe_answer()


def on_guess(m: MachineState, event: v.GuessTranscribed) -> None:
    """A speculative transcript of the turn being spoken (plain or primed) came back at a pause."""
    settings, reply = m.settings, m.reply
    if (reply is not None and reply.paused and settings.interruption.enabled and m.storm.mode == "normal"
            and not m.awaiting.untold(event.item_id)  # the client never heard of that speech
            and m.segments.spots_command(event.item_id, event.transcript, event.primed)):
        m.barge_in()  # "stop" heard at the first pause (either way): cut now, not after the endpoint
        m.awaiting.mark_cut_early(event.item_id)
    if event.primed is not None or event.transcript is None or not (
            settings.vad and settings.create_response and settings.speculation.prefetch_reply):
        return  # (the plain guess, which a reply would quote, came first and was weighed then)
    verdict = m.segments.guess(event.item_id, event.transcript, during_reply=m.over_reply)
    # over a paused reply too: a query will cancel it at the cut point the prompt is built with
    if verdict is not None and verdict.decision == "query" and (m.reply is None or m.reply.paused):
        tiers, turn = settings.endpointing.tiers, m.turn
        weighs = (tiers is not None and tiers.text_end_below is not None and settings.endpointing.eagerness is None
                  and turn is not None and turn.item_id == event.item_id)
        words = event.transcript.text.strip()
        if weighs and turn is not None:
            turn.heard.ask_text_end(words)  # the endpoint may wait for it (re-checked when it comes)
        m.emit(v.PrefetchReply(event.item_id, words, estimate_end=weighs))


def ignored_action(paused: bool, resumes: bool, confirm_ignores: bool, *, kept: bool = False) -> str:
    """How a segment that does not get an answer is reported (``bargein.listen.segment``'s ``action``); ``kept``:
    a query committed at the longest turn, kept in the conversation but not answered."""
    if kept:
        then = "; resume the reply" if resumes else "; keep the reply paused" if paused else ""
        return f"keep, unanswered (no pause ended it){then}"
    if resumes or paused:
        return "resume the reply" if resumes else "keep the reply paused"
    return "ignore (confirm mode: too short to interrupt)" if confirm_ignores else "ignore"
