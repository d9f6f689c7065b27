"""Per-turn stage timestamps: stream time (position in the input audio) beside wall time.

Stream time is the truth for latency: speech onsets and ends are positions in the input, and every
later stage is recorded in wall time next to the wall time at which that position arrived.
:class:`TurnLedgers` keeps them by observing a session (its machine's events and actions, its replies'
progress and what left the socket) and reports each turn when its reply closes (a reply that closed with none of
its output sent yet, when its first delta leaves). The audio heard of a reply the client still plays at its close
is known only once its playback ends (played out or cut): the report then says it is not final
(``audio_heard_final``), and the final figure follows (``bargein.turn.heard``) and reaches the metrics then.
It is also the session's cost meter (:mod:`bargein.metrics.cost_meter`): each turn's CPU per stage, tokens, audio
and waste (:mod:`bargein.metrics.turn_cost`) go out with the turn (``bargein.turn.cost``) and into the session's
totals.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bargein.metrics.cost_meter import Bill, speculation
from bargein.metrics.ledger_export import session_began
from bargein.metrics.tracing import export_turn
from bargein.metrics.turn_cost import PROCESS_COST, SessionCost, TurnCost, cost_fields, waste
from bargein.session.core import vocabulary as v
from bargein.session.core.verdicts import answers_the_user

if TYPE_CHECKING:
    from bargein.metrics.prometheus import ServerMetrics
    from bargein.session.outbound import Outgoing

MAX_LEDGERS = 64
"""Turn ledgers kept per session (the newest); older turns live on only in the metrics."""

STAGES = ("speech_start", "speech_end", "commit", "asr_final", "reply_start", "llm_first_token",
          "first_clause", "tts_first_audio", "first_delta_sent", "barge_in", "response_done")

COUNTED = ("tokens", "image_tokens", "prompt_tokens", "cached_tokens", "scene_note_age_ms", "scene_newest_age_ms",
           "scene_read_at_silence")
"""Progress reports that are counts, summed in the turn's summary, not stages (``scene_note_age_ms``: the age of the
camera's note the reply quotes when the turn was committed; ``scene_newest_age_ms``: the newest note's then, only
where the reply quotes an older one, which the model had read; ``scene_read_at_silence``: 1 when a scene read was
running as the turn's last silence began; each reported once by the reply's prompt)."""


@dataclass(frozen=True)
class Mark:
    """When a stage happened: stream position (ms, if it has one) and wall clock (s)."""

    wall_s: float
    stream_ms: float | None = None


@dataclass
class TurnLedger:
    """The marks of one turn (a user item and the reply to it). The first mark of a stage wins."""

    item_id: str | None = None
    response_id: str | None = None
    clock: Callable[[], float] = time.monotonic
    marks: dict[str, Mark] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    reply_order: int = -1
    """Which of the session's replies this turn's is (in start order; -1: none started)."""
    reported: bool = False
    """The turn's summary went out: what comes later (a cancelled reply's tokens) reaches only the metrics."""
    heard_pending_s: float | None = None
    """The heard audio told at the reply's close while the client still played it (all of it, unless cut later):
    the metrics count the heard audio only once the playback has ended."""
    silence_at_ms: float | None = None
    """Where the silence the turn is in began (stream ms; ``None`` while the user speaks): what speculation heard."""
    guess_wall_s: float | None = None
    """When the plain speculative recognition made at that silence came back (wall clock), if before the commit."""
    turn_end_probability: float | None = None
    """The end-of-turn model's score of that silence, if it came before the commit."""
    text_end_wall_s: float | None = None
    """When the language model's end-of-sentence estimate for that guess came back (wall clock), before the commit."""
    text_end_probability: float | None = None
    """That estimate (the tiers' plain or short silence becomes the long one under their ``text_end_below``)."""
    cost: TurnCost = field(default_factory=TurnCost)
    """The CPU its engine calls were charged."""

    def silence(self, at_ms: float | None) -> None:
        """A silence began at ``at_ms`` (``None``: the one the turn was in is over); before the commit only, what was
        said of an earlier silence no longer counts."""
        if "commit" not in self.marks:
            self.silence_at_ms, self.guess_wall_s, self.turn_end_probability = at_ms, None, None
            self.text_end_wall_s, self.text_end_probability = None, None

    def mark(self, stage: str, *, stream_ms: float | None = None, wall_s: float | None = None) -> None:
        """Record a stage once; later marks of the same stage are ignored."""
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}")
        if stage not in self.marks:
            self.marks[stage] = Mark(self.clock() if wall_s is None else wall_s, stream_ms)

    def add(self, counter: str, amount: float) -> None:
        """Accumulate a count (tokens, audio seconds produced or heard)."""
        self.counters[counter] = self.counters.get(counter, 0.0) + amount

    def elapsed_ms(self, start: str, end: str) -> float | None:
        """Wall milliseconds from one stage to another, if both happened."""
        if start in self.marks and end in self.marks:
            return 1000.0 * (self.marks[end].wall_s - self.marks[start].wall_s)
        return None

    def summary(self) -> dict[str, Any]:
        """Stage latencies in ms (``None`` where a stage did not happen) and the turn's counters.

        ``first_audio_ms`` is the server-side view of first audio: from the wall time the last sample of
        speech arrived to the first delta leaving the socket (the client adds its network and playout).
        """
        span = self.elapsed_ms
        llm_start = "reply_start"
        if "asr_final" in self.marks and "reply_start" in self.marks \
                and self.marks["asr_final"].wall_s > self.marks["reply_start"].wall_s:
            llm_start = "asr_final"
        return {
            "item_id": self.item_id,
            "response_id": self.response_id,
            "speech_start_ms": self.marks["speech_start"].stream_ms if "speech_start" in self.marks else None,
            "speech_end_ms": self.marks["speech_end"].stream_ms if "speech_end" in self.marks else None,
            "commit_stream_ms": self.marks["commit"].stream_ms if "commit" in self.marks else None,
            "endpoint_ms": _round(span("speech_end", "commit")),
            "asr_final_ms": _round(span("commit", "asr_final")),
            "llm_first_token_ms": _round(span(llm_start, "llm_first_token")),
            "tts_first_audio_ms": _round(span("llm_first_token", "tts_first_audio")),
            # its two parts: the LLM writing the rest of the first clause, then the TTS speaking it (or a clause
            # spoken before the commit being handed over)
            "first_clause_ms": _round(span("llm_first_token", "first_clause")),
            "tts_synth_ms": _round(span("first_clause", "tts_first_audio")),
            "first_delta_sent_ms": _round(span("reply_start", "first_delta_sent")),
            "first_audio_ms": _round(span("speech_end", "first_delta_sent")),
            # before the commit: how long after the speech end the plain guess made at the silence the turn ended in
            # came back (a reply may be prefetched from it), and what the end-of-turn model said: with the words,
            # that decides which tier the endpoint took
            "guess_ms": _round(1000.0 * (self.guess_wall_s - self.marks["speech_end"].wall_s)
                               if self.guess_wall_s is not None and "speech_end" in self.marks else None),
            "turn_end_probability": _round(self.turn_end_probability, 3),
            # and the language model's end-of-sentence estimate for that guess: when it came back, and what it said
            "text_end_ms": _round(1000.0 * (self.text_end_wall_s - self.marks["speech_end"].wall_s)
                                  if self.text_end_wall_s is not None and "speech_end" in self.marks else None),
            "text_end_probability": _round(self.text_end_probability, 4),
            **{key: round(value, 3) for key, value in self.counters.items()},
            **{f"cpu_{stage}_s": round(value, 4) for stage, value in self.cost.cpu_s.items()},
            # False: the client still played the reply, and a follow-up tells what it heard once it is known
            "audio_heard_final": self.heard_pending_s is None,
        }


class TurnLedgers:
    """The ledgers of one session's recent turns, kept as an observer of the session.

    ``stream_ms()`` is the session's stream clock; ``report(status, summary)`` receives each finished
    turn (the session sends it to the client as ``bargein.turn.metrics``); ``heard(fields)``, the final heard audio
    of a turn reported while the client still played its reply (``bargein.turn.heard``).
    """

    def __init__(self, stream_ms: Callable[[], float], report: Callable[[str, dict[str, Any]], None], *,
                 metrics: ServerMetrics | None = None, heard: Callable[[dict[str, Any]], None] | None = None,
                 cost: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.stream_ms = stream_ms
        self.report = report
        self.report_cost = cost
        self.session_cost = SessionCost(PROCESS_COST)
        session_began()
        self.heard = heard
        self.metrics = metrics
        self.ledgers: dict[str, TurnLedger] = {}
        self.current: TurnLedger | None = None
        self.replies_started = 0
        self.committed: deque[TurnLedger] = deque(maxlen=MAX_LEDGERS)
        """User turns committed since the last reply that answers the user started, oldest first (noise left out)."""
        self.unsent: dict[str, tuple[str, TurnLedger]] = {}
        """Replies closed while their first output delta still waited in the outbound queue: ``(status, ledger)``
        by response id, reported once that delta leaves (or a later reply's delta shows it never will)."""
        self.playing: dict[str, TurnLedger] = {}
        """Replies closed while the client still played them, by response id, until their playback ends."""

    def bill(self) -> Bill:
        """A bill for engine work starting now: charged to the turn current now (to the session only once that
        turn was reported, or when there is none yet). Work for a speculative job counts in that job's CPU too."""
        ledger = self.current
        work = speculation.get()
        if work is not None and ledger is not None and not ledger.reported:
            ledger.cost.speculating(work)

        def charge(stage: str, cpu_s: float) -> None:
            self.session_cost.charge(stage, cpu_s)
            if work is not None:
                work.cpu_s += cpu_s
            if ledger is not None and not ledger.reported:
                ledger.cost.add(stage, cpu_s)

        return charge

    def get(self, key: str) -> TurnLedger | None:
        """The ledger of a user item (or of a reply that had no user item)."""
        return self.ledgers.get(key)

    def for_reply(self, response_id: str) -> TurnLedger | None:
        """The ledger a reply belongs to."""
        return next((ledger for ledger in reversed(self.ledgers.values()) if ledger.response_id == response_id),
                    None)

    def _keep(self, key: str, ledger: TurnLedger) -> TurnLedger:
        self.ledgers[key] = ledger
        while len(self.ledgers) > MAX_LEDGERS:
            self.ledgers.pop(next(iter(self.ledgers)))
        return ledger

    def on_event(self, event: v.Event) -> None:
        """A committed segment's final transcript is the ``asr_final`` stage; before the commit, the guess and the
        end-of-turn score of the turn's latest silence are noted."""
        if isinstance(event, v.SegmentTranscribed) and event.transcript is not None \
                and (ledger := self.ledgers.get(event.item_id)) is not None:
            ledger.mark("asr_final")
        elif isinstance(event, v.GuessTranscribed | v.TurnEndScored) \
                and (ledger := self.ledgers.get(event.item_id)) is not None \
                and "commit" not in ledger.marks and event.at_ms == ledger.silence_at_ms:
            if isinstance(event, v.TurnEndScored):
                ledger.turn_end_probability = event.probability
            elif event.transcript is not None and ledger.guess_wall_s is None:  # the plain guess, not the primed
                ledger.guess_wall_s = ledger.clock()
        elif isinstance(event, v.TextEndEstimate) and event.probability is not None and (ledger := self.ledgers.get(
                event.item_id)) is not None and "commit" not in ledger.marks and ledger.guess_wall_s is not None:
            ledger.text_end_wall_s, ledger.text_end_probability = ledger.clock(), event.probability

    def on_action(self, action: v.Action) -> None:
        """Stages the machine's decisions mark."""
        match action:
            case v.SpeechStarted(item_id, start_ms):
                self.current = self._keep(item_id, TurnLedger(item_id=item_id))
                self.current.mark("speech_start", stream_ms=start_ms)
            case v.SilenceBegan(item_id, at_ms):
                if (ledger := self.ledgers.get(item_id)) is not None:
                    ledger.silence(at_ms)
            case v.SpeechResumed(item_id) | v.SegmentAbandoned(item_id):
                # the silence is over: a commit without a new one (the longest turn, a client's commit) had none
                if (ledger := self.ledgers.get(item_id)) is not None:
                    ledger.silence(None)
            case v.SpeechStopped(item_id, end_ms):
                if ledger := self.ledgers.get(item_id):
                    # the last speech sample arrived (stream_now - end) ago for a client streaming in real time
                    lag_s = max(0.0, self.stream_ms() - end_ms) / 1000.0
                    ledger.mark("speech_end", stream_ms=end_ms, wall_s=ledger.clock() - lag_s)
            case v.CommitBuffer(item_id):
                ledger = self.ledgers.get(item_id) or self._keep(item_id, TurnLedger(item_id=item_id))
                self.current = ledger
                ledger.mark("commit", stream_ms=self.stream_ms())
                self.committed.append(ledger)
            case v.StartReply(response_id, trigger, params):
                ledger = self._unanswered_turn() if answers_the_user(trigger, params) else None
                if ledger is None:
                    # a reply to typed input, a second reply to one turn, a reply started while the user still
                    # speaks, an idle prompt or an out-of-band reply gets a ledger of its own
                    ledger = self._keep(response_id, TurnLedger())
                ledger.response_id = response_id
                ledger.reply_order = self.replies_started
                self.replies_started += 1
                ledger.mark("reply_start")
            case v.DiscardSegment(item_id):  # noise: no reply answers it
                self.committed = deque((ledger for ledger in self.committed if ledger.item_id != item_id),
                                       maxlen=MAX_LEDGERS)
            case v.CancelReply(response_id, "turn_detected") | v.PauseReply(response_id):
                self._mark_barge_in(response_id)
            case v.HoldReplyOutput(response_id):  # a half-hop onset stopped its audio: confirmed, or released
                if (ledger := self.for_reply(response_id)) is not None:
                    ledger.add("onset_holds", 1)
            case v.ReleaseReplyOutput(response_id):  # no barge-in followed: a hiccup where the transport stopped
                if (ledger := self.for_reply(response_id)) is not None:
                    ledger.add("onset_holds_released", 1)
            case _:
                pass

    def _unanswered_turn(self) -> TurnLedger | None:
        """The newest user turn committed since the last reply that answers the user started, not dropped as noise:
        the turn such a reply answers (a cough judged meanwhile is passed over; turns committed before the last
        such reply's start were that reply's to answer)."""
        newest = self.committed[-1] if self.committed else None
        self.committed.clear()
        return newest

    def _mark_barge_in(self, response_id: str) -> None:
        """The reply stopped for the current speech: how far into that speech (stream ms) it stopped."""
        ledger = self.for_reply(response_id)
        if ledger is None or "barge_in" in ledger.marks or self.current is None:
            return
        start = self.current.marks.get("speech_start")
        onset = start.stream_ms or 0.0 if start is not None else 0.0
        ledger.mark("barge_in", stream_ms=onset)
        ledger.add("barge_in_detect_ms", self.stream_ms() - onset)

    def on_sent(self, item: Outgoing) -> None:
        """The first delta of a reply's output (audio, or a text-only reply's text) leaving the socket; a reply
        that closed before it is reported now.

        Replies run one at a time and the queue is FIFO, so a delta of a later reply leaving means an earlier
        waiting reply's deltas all left before it or were purged: that reply is reported as it stands.
        """
        if not item.is_output or item.response_id is None or (ledger := self.for_reply(item.response_id)) is None:
            return
        ledger.mark("first_delta_sent")
        for response_id, (status, waiting) in list(self.unsent.items()):
            if waiting is ledger or waiting.reply_order < ledger.reply_order:
                del self.unsent[response_id]
                self._report(status, waiting)

    def on_reply_progress(self, response_id: str, stage: str, count: int) -> None:
        """Pipeline stages (``llm_first_token``, ``first_clause``, ``tts_first_audio``) and token counts (``tokens``
        generated, ``image_tokens`` the prompt's images cost)."""
        if (ledger := self.for_reply(response_id)) is None:
            return
        if stage in COUNTED:
            if ledger.reported:  # a cancelled reply's pipeline counts its tokens after its response.done
                if self.metrics is not None and count > 0 and stage == "tokens":
                    self.metrics.tokens.inc(count)
            else:
                ledger.add(stage, count)
        else:
            ledger.mark(stage)

    def on_reply_closed(self, response_id: str, status: str, sent_ms: float, heard_ms: float, *,
                        output_queued: bool | None = None, playing: bool = False) -> None:
        """The turn is over: report its summary to the client, the metrics and the tracer.

        A reply whose output is still queued, none of it sent yet, is reported once its first delta leaves, so its
        ``first_delta_sent_ms`` and ``first_audio_ms`` are those of the socket, not missing. ``playing``: the
        client still plays it; its heard audio reaches the metrics when :meth:`on_reply_heard` tells it.
        """
        ledger = self.for_reply(response_id) or TurnLedger(response_id=response_id)
        ledger.mark("response_done")
        ledger.add("audio_sent_s", sent_ms / 1000.0)
        ledger.add("audio_heard_s", heard_ms / 1000.0)
        if playing:
            ledger.heard_pending_s = heard_ms / 1000.0
            self.playing[response_id] = ledger
        if (sent_ms > 0 if output_queued is None else output_queued) and "first_delta_sent" not in ledger.marks:
            self.unsent[response_id] = (status, ledger)
            while len(self.unsent) > MAX_LEDGERS:
                self._report(*self.unsent.pop(next(iter(self.unsent))))
            return
        self._report(status, ledger)

    def on_reply_heard(self, response_id: str, heard_ms: float) -> None:
        """A reply the client still played at its close was played out or cut: ``heard_ms`` of it was heard. A
        turn not reported yet reports that figure; one reported already (as not final) is followed by it, and the
        metrics count it now or when the turn is reported."""
        ledger = self.playing.pop(response_id, None)
        if ledger is None or ledger.heard_pending_s is None:
            return
        told, ledger.heard_pending_s = ledger.heard_pending_s, None
        ledger.add("audio_heard_s", heard_ms / 1000.0 - told)
        if not ledger.reported:
            return
        # the turn's report took all of it as heard: what the client did not play of it is wasted now
        late_waste = waste(ledger.counters, cut=heard_ms / 1000.0 < ledger.counters.get("audio_sent_s", 0.0))
        self.session_cost.add("wasted_tokens", late_waste["tokens"])
        self.session_cost.add("wasted_audio_s", late_waste["audio_s"])
        if self.metrics is not None:
            self.metrics.observe_heard(heard_ms / 1000.0)
            self.metrics.observe_waste(late_waste)
        if self.heard is not None:
            self.heard({"item_id": ledger.item_id, "response_id": response_id,
                        "audio_heard_s": round(ledger.counters["audio_heard_s"], 3)})

    def close(self) -> None:
        """The session ends: replies still waiting for their first delta to leave are reported as they stand, and
        a reply never told played out counts as heard what its close said."""
        self.session_cost.add("listened_s", max(0.0, self.stream_ms()) / 1000.0)  # the audio the VAD heard
        while self.unsent:
            self._report(*self.unsent.pop(next(iter(self.unsent))))
        for response_id, ledger in list(self.playing.items()):
            self.on_reply_heard(response_id, 1000.0 * (ledger.heard_pending_s or 0.0))

    def _report(self, status: str, ledger: TurnLedger) -> None:
        ledger.reported = True
        summary = ledger.summary()
        self.report(status, summary)
        # a reply still played at its close wastes what its playback's end says (on_reply_heard)
        cut = "barge_in" in ledger.marks and ledger.heard_pending_s is None
        speech = ledger.marks.get("speech_start"), ledger.marks.get("speech_end")
        speech_s = (speech[1].stream_ms - speech[0].stream_ms) / 1000.0 if speech[0] is not None \
            and speech[1] is not None and speech[0].stream_ms is not None and speech[1].stream_ms is not None \
            else None
        fields = cost_fields(ledger.cost, ledger.counters, speech_s, cut=cut)
        self.session_cost.count(fields)
        if self.report_cost is not None:
            self.report_cost({"item_id": ledger.item_id, "response_id": ledger.response_id, "status": status,
                              **fields})
        if self.metrics is not None:
            self.metrics.observe_turn(status, summary, heard=ledger.heard_pending_s is None)
            self.metrics.observe_waste(fields["waste"])
        export_turn(ledger, status, summary)


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)
