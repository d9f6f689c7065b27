"""What the per-turn ledger says about turns that are not the plain case: a reply that is not the spoken turn's,
a reply closed before its audio left, a cancelled reply's tokens, tool rounds, text-only and cut replies."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from bargein.audio.codecs import AudioFormat
from bargein.engines.base import Engines, LanguageModel, LLMCapabilities
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.metrics.prometheus import ServerMetrics
from bargein.protocol.client_events import ResponseParams
from bargein.session.core import vocabulary as v
from bargein.session.outbound import Outgoing
from bargein.session.response_events import ReplyState, assistant_item
from bargein.session.turn_ledger import TurnLedgers
from bargein.values import CancelToken, ChatMessage, GenerationOptions, ReplyPiece, ToolCall, Transcript
from tests.session.test_reply_history import WEATHER
from tests.support.session_harness import CountingLanguageModel, Harness, SilentRecognizer, say_tone

TALK = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "talk"}]}


def turn_metrics(h: Harness) -> list[dict[str, Any]]:
    """Every ``bargein.turn.metrics`` event the client received, in order."""
    return [e for e in h.events if e["type"] == "bargein.turn.metrics"]


def with_metrics(h: Harness) -> ServerMetrics:
    """Feed the session's finished turns to a fresh Prometheus registry too."""
    metrics = ServerMetrics()
    h.session.ledgers.metrics = metrics
    return metrics


def sample(metrics: ServerMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def recorder() -> tuple[TurnLedgers, list[dict[str, Any]]]:
    reports: list[dict[str, Any]] = []
    return TurnLedgers(lambda: 0.0, lambda status, summary: reports.append({"status": status, **summary})), reports


def delta(response_id: str) -> Outgoing:
    return Outgoing({"type": "response.output_audio.delta"}, response_id=response_id, audio_ms=40.0)


async def test_a_typed_reply_after_a_noise_segment_is_not_measured_from_that_noise() -> None:
    """A cough is committed, judged noise and deleted; the reply the client then asks for by text answers no spoken
    turn, so it has no speech end, endpoint or first audio (it was measured from the cough's end: the time the
    user took to type counted as first audio)."""
    h = Harness(Engines(FakeVad(), SilentRecognizer(), FakeLanguageModel(), FakeSynthesizer()))
    await say_tone(h, 0.5, 0.8)
    await h.drain(until="conversation.item.deleted")
    noise = h.events[-1]["item_id"]
    await h.send(type="conversation.item.create", item=TALK)
    await h.send(type="response.create")
    await h.drain(until="bargein.turn.metrics")
    (summary,) = turn_metrics(h)
    assert summary["item_id"] != noise and summary["item_id"] is None
    assert summary["speech_end_ms"] is None and summary["endpoint_ms"] is None and summary["first_audio_ms"] is None
    await h.session.close()


async def test_a_typed_reply_while_the_user_speaks_leaves_the_spoken_turn_to_its_own_reply() -> None:
    """The client asks for a reply by text while the user is still speaking: that reply does not answer the turn
    being spoken, whose own reply (after its endpoint) keeps the turn's speech end and first audio."""
    h = Harness(Engines(FakeVad(), FakeRecognizer(("hello",)), FakeLanguageModel(), FakeSynthesizer()))
    await say_tone(h, 1.0, 0.0)  # no endpoint yet
    await h.drain(until="input_audio_buffer.speech_started")
    spoken = h.events[-1]["item_id"]
    await h.send(type="conversation.item.create", item=TALK)
    await h.send(type="response.create")
    await h.drain(until="bargein.turn.metrics")
    await say_tone(h, 0.0, 0.8)  # the endpoint: the turn is committed and answered
    await h.drain(until="bargein.turn.metrics")
    typed, answer = turn_metrics(h)
    assert typed["item_id"] is None and typed["speech_start_ms"] is None
    assert answer["item_id"] == spoken
    assert answer["speech_end_ms"] is not None and answer["endpoint_ms"] is not None
    assert answer["first_audio_ms"] is not None and answer["first_audio_ms"] >= answer["endpoint_ms"]
    await h.session.close()


def test_an_out_of_band_or_idle_reply_does_not_take_the_committed_turn() -> None:
    """Between a turn's commit and its answer (the verdict is pending) the client runs an out-of-band reply, and
    later the idle prompt speaks: neither is the turn's reply; the endpoint's reply is."""
    ledgers, _ = recorder()
    ledgers.on_action(v.SpeechStarted("item_1", 100.0))
    ledgers.on_action(v.SpeechStopped("item_1", 900.0))
    ledgers.on_action(v.CommitBuffer("item_1", 0.0, 1400.0))
    ledgers.on_action(v.StartReply("resp_oob", "client", ResponseParams(conversation="none")))
    ledgers.on_action(v.StartReply("resp_context", "client", ResponseParams(input=[])))
    ledgers.on_action(v.StartReply("resp_1", "turn_detected"))
    ledgers.on_action(v.StartReply("resp_idle", "idle_timeout"))
    owners = {rid: ledger.item_id for rid in ("resp_oob", "resp_context", "resp_1", "resp_idle")
              if (ledger := ledgers.for_reply(rid)) is not None}
    assert owners == {"resp_oob": None, "resp_context": None, "resp_1": "item_1", "resp_idle": None}


async def test_a_reply_closed_before_its_audio_left_is_reported_with_its_first_delta() -> None:
    """A client that reads late: the whole reply is queued and its response.done too before any delta is written.
    The turn is reported once its first delta leaves, with that delta's time (it went out with none)."""
    h = Harness(Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer()))
    await h.send(type="conversation.item.create", item=TALK)
    await h.send(type="response.create")
    for _ in range(1000):  # nothing is read meanwhile
        if not h.session.replies.live:  # closed: its response.done is queued behind all of its audio
            break
        await asyncio.sleep(0.01)
    assert not h.session.replies.live
    await h.drain(until="bargein.turn.metrics")
    (summary,) = turn_metrics(h)
    kinds = h.types()
    assert kinds.index("response.output_audio.delta") < kinds.index("response.done") < kinds.index(
        "bargein.turn.metrics")
    assert summary["audio_sent_s"] > 0
    assert summary["first_delta_sent_ms"] is not None and summary["first_delta_sent_ms"] >= 0
    await h.session.close()


def test_a_waiting_report_goes_out_when_a_later_reply_s_audio_leaves_and_not_before() -> None:
    """Replies run one at a time and the queue is FIFO: a later reply's delta leaving means an earlier reply's
    deltas are gone (sent or purged); a delta of an earlier reply still leaving says nothing of a later one."""
    ledgers, reports = recorder()
    ledgers.on_action(v.StartReply("resp_1", "client"))
    ledgers.on_sent(delta("resp_1"))
    ledgers.on_reply_closed("resp_1", "completed", 2000.0, 2000.0)  # its tail is still queued
    ledgers.on_action(v.StartReply("resp_2", "client"))
    ledgers.on_reply_closed("resp_2", "completed", 400.0, 400.0)  # queued behind resp_1's tail
    ledgers.on_sent(delta("resp_1"))
    assert [r["response_id"] for r in reports] == ["resp_1"]
    ledgers.on_action(v.StartReply("resp_3", "client"))
    ledgers.on_sent(delta("resp_3"))  # resp_2's deltas never left (so it has no first delta)
    assert [r["response_id"] for r in reports] == ["resp_1", "resp_2"]
    assert reports[1]["first_delta_sent_ms"] is None


def test_a_report_still_waiting_when_the_session_ends_goes_out_then() -> None:
    ledgers, reports = recorder()
    ledgers.on_action(v.StartReply("resp_1", "client"))
    ledgers.on_reply_closed("resp_1", "completed", 400.0, 400.0)  # none of its audio left yet
    assert reports == []
    ledgers.close()
    assert [r["response_id"] for r in reports] == ["resp_1"] and reports[0]["first_delta_sent_ms"] is None


def test_a_reply_whose_audio_was_purged_is_reported_at_once() -> None:
    """A cancelled reply's queued deltas are purged before its response.done: ``sent_ms`` is what left."""
    ledgers, reports = recorder()
    ledgers.on_action(v.StartReply("resp_1", "client"))
    ledgers.on_reply_closed("resp_1", "cancelled", 0.0, 0.0)
    assert [r["status"] for r in reports] == ["cancelled"]


async def test_a_cancelled_reply_s_tokens_are_counted_in_the_metrics() -> None:
    """The pipeline counts a reply's tokens when it stops, which for a cancelled reply is after its response.done
    (and its turn report): they still reach ``bargein_llm_tokens``, which counted none of them."""
    h = Harness(Engines(FakeVad(), FakeRecognizer(), CountingLanguageModel(), FakeSynthesizer()))
    metrics = with_metrics(h)
    await h.send(type="session.update", session={"output_modalities": ["text"]})
    await h.send(type="conversation.item.create", item=TALK)
    await h.send(type="response.create")
    for _ in range(4):
        await h.drain(until="response.output_text.delta")
    await h.send(type="response.cancel")
    await h.drain(until="bargein.turn.metrics")
    await asyncio.wait_for(asyncio.gather(*h.session.replies.tasks), 10)
    written = len([e for e in h.events if e["type"] == "response.output_text.delta"])
    assert sample(metrics, "bargein_turns_total", status="cancelled") == 1.0
    assert sample(metrics, "bargein_llm_tokens_total") >= written >= 4
    await h.session.close()


class CallsATool(LanguageModel):
    """Answers every prompt with one call of ``get_weather`` and no words."""

    capabilities = LLMCapabilities(tools=True)

    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        return
        yield ""

    async def stream_reply(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                           options: GenerationOptions | None = None) -> AsyncIterator[ReplyPiece]:
        await asyncio.sleep(0.01)
        yield ToolCall("get_weather", "call_1", '{"city": "Paris"}')


async def _one_typed_turn(h: Harness, session: dict[str, Any]) -> dict[str, Any]:
    """``session`` set, the user types "talk" and asks for a reply: its turn's metrics, once they come."""
    await h.send(type="session.update", session=session)
    await h.send(type="conversation.item.create", item=TALK)
    await h.send(type="response.create")
    await h.drain(until="bargein.turn.metrics")
    (summary,) = turn_metrics(h)
    return summary


async def test_a_tool_call_round_has_an_llm_first_token() -> None:
    h = Harness(Engines(FakeVad(), FakeRecognizer(), CallsATool(), FakeSynthesizer()))
    summary = await _one_typed_turn(h, {"tools": [WEATHER]})
    assert "response.function_call_arguments.done" in h.types()
    assert summary["llm_first_token_ms"] is not None
    await h.session.close()


async def test_a_text_only_reply_has_a_first_delta_sent() -> None:
    h = Harness(Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer()))
    summary = await _one_typed_turn(h, {"output_modalities": ["text"]})
    assert "response.output_text.delta" in h.types()
    assert summary["first_delta_sent_ms"] is not None
    await h.session.close()


def test_only_a_text_only_reply_s_text_counts_as_its_first_delta() -> None:
    """A spoken reply's transcript delta leaving is not its first delta (its audio's is); a text-only reply's text
    delta is."""
    ledgers, _ = recorder()
    sent: list[Outgoing] = []
    for response_id, audio in (("resp_audio", True), ("resp_text", False)):
        ledgers.on_action(v.StartReply(response_id, "client"))
        state = ReplyState(response_id, assistant_item(f"item_{response_id}", audio=audio), audio,
                           AudioFormat("audio/pcm", 24_000), "alloy")
        state.text_delta(sent.append, "Hello")
    for item in sent:
        ledgers.on_sent(item)
    spoken, text = ledgers.for_reply("resp_audio"), ledgers.for_reply("resp_text")
    assert spoken is not None and "first_delta_sent" not in spoken.marks
    assert text is not None and "first_delta_sent" in text.marks


async def test_a_reply_live_at_close_with_unsent_audio_is_still_counted() -> None:
    """The client hung up with a reply's audio queued and none sent: closing the session ends the reply, and its
    turn is still reported to the metrics."""
    llm = FakeLanguageModel(filler=" ".join(["word"] * 200), token_delay_s=0.02)
    h = Harness(Engines(FakeVad(), FakeRecognizer(), llm, FakeSynthesizer()))
    metrics = ServerMetrics()
    h.session.ledgers.metrics = metrics
    await h.send(type="conversation.item.create", item=TALK)
    await h.send(type="response.create")
    for _ in range(500):  # the client reads nothing (it hung up): audio is queued, none sent
        live = list(h.session.replies.live.values())
        if live and live[0].state.item.audio_ms > 0:
            break
        await asyncio.sleep(0.01)
    assert h.session.replies.live and list(h.session.replies.live.values())[0].state.item.audio_ms > 0
    await h.session.close()
    assert not h.session.ledgers.unsent, f"left unreported: {list(h.session.ledgers.unsent)}"
    total = sum(metrics.registry.get_sample_value("bargein_turns_total", {"status": s}) or 0.0
                for s in ("completed", "cancelled", "failed"))
    assert total == 1.0


def test_a_turn_answered_after_a_cough_judged_meanwhile_keeps_its_ledger() -> None:
    """Machine order when a cough starts before turn A's verdict: A commits; B starts; A is judged a query (the reply
    waits: B is in progress); B commits, is judged noise and discarded; then A's reply starts."""
    ledgers = TurnLedgers(lambda: 0.0, lambda status, summary: None)
    ledgers.on_action(v.SpeechStarted("item_A", 100.0))
    ledgers.on_action(v.SpeechStopped("item_A", 900.0))
    ledgers.on_action(v.CommitBuffer("item_A", 0.0, 1400.0))
    ledgers.on_action(v.SpeechStarted("item_B", 1500.0))
    ledgers.on_action(v.SpeechStopped("item_B", 1700.0))
    ledgers.on_action(v.CommitBuffer("item_B", 1200.0, 2200.0))
    ledgers.on_action(v.DiscardSegment("item_B"))
    ledgers.on_action(v.StartReply("resp_1", "turn_detected"))
    ledger = ledgers.for_reply("resp_1")
    assert ledger is not None and ledger.item_id == "item_A"


def test_the_guess_and_the_score_reported_are_those_of_the_silence_the_turn_ended_in() -> None:
    """A turn pauses, goes on and ends: its report has the guess and the end-of-turn score of the last silence (a
    late score of the first one, or a score after the commit, changes nothing)."""
    stream = [0.0]
    ledgers = TurnLedgers(lambda: stream[0], lambda status, summary: None)
    now = [10.0]
    ledgers.on_action(v.SpeechStarted("item_1", 100.0))
    ledger = ledgers.get("item_1")
    assert ledger is not None
    ledger.clock = lambda: now[0]
    ledgers.on_action(v.SilenceBegan("item_1", 700.0))
    ledgers.on_event(v.GuessTranscribed("item_1", Transcript("I want to book"), at_ms=700.0))
    ledgers.on_event(v.TurnEndScored("item_1", 700.0, 0.2))
    ledgers.on_action(v.SilenceBegan("item_1", 1500.0))  # the user went on, then fell silent again
    ledgers.on_event(v.TurnEndScored("item_1", 700.0, 0.9))  # the first silence's score, late: no longer counts
    stream[0], now[0] = 1600.0, 10.1
    ledgers.on_action(v.SpeechStopped("item_1", 1500.0))  # the last speech sample arrived 100 ms ago: 10.0
    now[0] = 10.25
    ledgers.on_event(v.GuessTranscribed("item_1", Transcript("I want to book a table."), at_ms=1500.0))
    ledgers.on_event(v.TurnEndScored("item_1", 1500.0, 0.95))
    now[0] = 10.375
    ledgers.on_event(v.TextEndEstimate("item_1", "I want to book a table.", 0.3))
    ledgers.on_action(v.CommitBuffer("item_1", 0.0, 1500.0))
    now[0] = 10.6
    ledgers.on_event(v.TurnEndScored("item_1", 1500.0, 0.1))  # after the commit: the endpoint did not hear it
    ledgers.on_event(v.TextEndEstimate("item_1", "I want to book a table.", 0.01))  # nor this
    summary = ledger.summary()
    assert summary["guess_ms"] == 250.0
    assert summary["turn_end_probability"] == 0.95
    assert summary["text_end_ms"] == 375.0 and summary["text_end_probability"] == 0.3


def test_a_turn_committed_while_the_user_speaks_reports_no_guess_or_score() -> None:
    """The user paused, then spoke on until the client committed: the pause's guess and score were of a silence the
    user talked past, so the report has neither."""
    ledgers = TurnLedgers(lambda: 0.0, lambda status, summary: None)
    ledgers.on_action(v.SpeechStarted("item_1", 100.0))
    ledgers.on_action(v.SilenceBegan("item_1", 700.0))
    ledgers.on_event(v.GuessTranscribed("item_1", Transcript("I want to book"), at_ms=700.0))
    ledgers.on_event(v.TurnEndScored("item_1", 700.0, 0.2))
    ledgers.on_action(v.SpeechResumed("item_1"))
    ledgers.on_action(v.SpeechStopped("item_1", 1500.0))
    ledgers.on_action(v.CommitBuffer("item_1", 0.0, 1500.0))
    ledger = ledgers.get("item_1")
    assert ledger is not None
    summary = ledger.summary()
    assert summary["guess_ms"] is None and summary["turn_end_probability"] is None
    assert summary["text_end_ms"] is None and summary["text_end_probability"] is None


def test_a_reply_s_onset_holds_are_counted_by_outcome_in_its_ledger_and_the_metrics() -> None:
    """Two half-hop holds of one reply: the first released (the reply played on after a hiccup), the second
    confirmed by the barge-in; another reply's hold is not this one's."""
    ledgers, reports = recorder()
    metrics = ServerMetrics()
    ledgers.on_action(v.StartReply("resp_1", "client"))
    ledgers.on_action(v.HoldReplyOutput("resp_1", 1000.0))
    ledgers.on_action(v.ReleaseReplyOutput("resp_1"))
    ledgers.on_action(v.HoldReplyOutput("resp_1", 2000.0))
    ledgers.on_action(v.HoldReplyOutput("resp_gone", 2100.0))
    ledgers.on_reply_closed("resp_1", "cancelled", 0.0, 0.0)
    (report,) = reports
    assert (report["onset_holds"], report["onset_holds_released"]) == (2, 1)
    metrics.observe_turn(report["status"], report)
    assert sample(metrics, "bargein_onset_holds_total", outcome="confirmed") == 1
    assert sample(metrics, "bargein_onset_holds_total", outcome="released") == 1
