"""How much of a reply the ledger says the user heard: what the client played, to its end or to its truncate, counted
once, reported after the playback ends and told to the client."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.metrics.prometheus import ServerMetrics
from bargein.session.core import closed_playback
from bargein.session.core import vocabulary as v
from bargein.session.turn_ledger import TurnLedgers
from tests.metrics.test_turn_ledger import TALK, _one_typed_turn, delta, sample, turn_metrics, with_metrics
from tests.support.session_harness import Harness, say_tone


async def test_audio_heard_of_a_completed_reply_is_what_the_client_played() -> None:
    filler = "and then it goes on for a good while longer so that there is plenty to interrupt."
    h = Harness(Engines(FakeVad(), FakeRecognizer(("stop",)), FakeLanguageModel(filler=filler), FakeSynthesizer()))
    metrics = with_metrics(h)
    h.session.replies.output_lead_ms = 60_000.0  # the whole reply is sent at once: the client has it all to play
    h.no_play_out_wait()  # closed while the client still plays it
    await h.send(type="conversation.item.create", item=TALK)
    await h.send(type="response.create")
    await h.drain(until="bargein.turn.metrics")
    (summary,) = turn_metrics(h)
    done = next(e for e in h.events if e["type"] == "response.done")["response"]
    await say_tone(h, 0.3, 0.0)  # the user talks over it at once
    await h.drain(until="input_audio_buffer.speech_started")
    item = h.session.conversation.get(done["output"][0]["id"])
    assert item.heard_ms is not None and item.heard_ms < item.audio_ms - 1000.0, "the client had played it all"
    assert sample(metrics, "bargein_audio_seconds_total", kind="heard") == pytest.approx(item.heard_ms / 1000,
                                                                                          abs=0.05), summary
    await h.session.close()


async def test_audio_heard_of_a_reply_played_to_its_end_is_all_of_it_counted_once() -> None:
    """Nobody cuts in: once the client has had time to play the whole reply it is counted heard in full, and the
    session's close counts it no second time."""
    h = Harness(Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer(ms_per_char=20)))
    metrics = with_metrics(h)
    summary = await _one_typed_turn(h, {})
    assert summary["audio_sent_s"] > 0 and summary["audio_heard_s"] == summary["audio_sent_s"]
    for _ in range(300):
        if sample(metrics, "bargein_audio_seconds_total", kind="heard") > 0:
            break
        await asyncio.sleep(0.01)
    assert sample(metrics, "bargein_audio_seconds_total", kind="heard") == pytest.approx(summary["audio_sent_s"])
    await h.session.close()
    assert sample(metrics, "bargein_audio_seconds_total", kind="heard") == pytest.approx(summary["audio_sent_s"])


async def test_audio_heard_of_a_completed_reply_the_client_truncated_is_its_cursor_counted_once() -> None:
    """The client stops playing a finished reply and truncates it at its cursor: that is what was heard; the user
    speaking afterwards and the session's close count nothing more."""
    filler = "and then it goes on for a good while longer so that there is plenty to interrupt."
    h = Harness(Engines(FakeVad(), FakeRecognizer(("stop",)), FakeLanguageModel(filler=filler), FakeSynthesizer()))
    metrics = with_metrics(h)
    h.session.replies.output_lead_ms = 60_000.0
    h.no_play_out_wait()  # closed while the client still plays it
    await h.send(type="conversation.item.create", item=TALK)
    await h.send(type="response.create")
    await h.drain(until="bargein.turn.metrics")
    done = next(e for e in h.events if e["type"] == "response.done")["response"]
    await h.send(type="conversation.item.truncate", item_id=done["output"][0]["id"], content_index=0,
                 audio_end_ms=500)
    await h.drain(until="conversation.item.truncated")
    assert sample(metrics, "bargein_audio_seconds_total", kind="heard") == pytest.approx(0.5)
    await say_tone(h, 0.3, 0.0)
    await h.drain(until="input_audio_buffer.speech_started")
    await h.session.close()
    assert sample(metrics, "bargein_audio_seconds_total", kind="heard") == pytest.approx(0.5)


async def test_a_truncate_after_the_user_spoke_over_a_finished_reply_is_what_counts_as_heard(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The usual order of an OpenAI client: ``speech_started`` (the server cuts its estimate), then the client
    stops its playback and truncates at its cursor: the cursor is what was heard, in the history and the metric.
    With no truncate, the server's estimate counts once the grace period is over."""
    filler = "and then it goes on for a good while longer so that there is plenty to interrupt."
    for truncate in (True, False):
        monkeypatch.setattr(closed_playback, "CUT_GRACE_MS", 5000.0 if truncate else 50.0)
        h = Harness(Engines(FakeVad(), FakeRecognizer(("stop",)), FakeLanguageModel(filler=filler),
                            FakeSynthesizer()))
        metrics = with_metrics(h)
        h.session.replies.output_lead_ms = 60_000.0
        h.no_play_out_wait()  # closed while the client still plays it
        await h.send(type="conversation.item.create", item=TALK)
        await h.send(type="response.create")
        await h.drain(until="bargein.turn.metrics")
        done = next(e for e in h.events if e["type"] == "response.done")["response"]
        await say_tone(h, 0.3, 0.0)
        await h.drain(until="input_audio_buffer.speech_started")
        item = h.session.conversation.get(done["output"][0]["id"])
        assert item.heard_ms is not None and item.heard_ms < item.audio_ms - 1000.0, "cut by the estimate"
        if truncate:
            await h.send(type="conversation.item.truncate", item_id=done["output"][0]["id"], content_index=0,
                         audio_end_ms=50)
            await h.drain(until="conversation.item.truncated")
            expected = 0.05
        else:
            await asyncio.sleep(0.2)
            expected = item.heard_ms / 1000
        assert sample(metrics, "bargein_audio_seconds_total", kind="heard") == pytest.approx(expected, abs=1e-3)
        await h.session.close()
        assert sample(metrics, "bargein_audio_seconds_total", kind="heard") == pytest.approx(expected, abs=1e-3)


def test_heard_audio_told_after_the_report_reaches_the_metrics_once() -> None:
    """A reply closed while the client plays it: its turn is reported with the audio it will play (all of it), the
    metrics count none of it until the playback ends, then what was played, once."""
    metrics = ServerMetrics()
    ledgers = TurnLedgers(lambda: 0.0, lambda status, summary: None, metrics=metrics)
    ledgers.on_action(v.StartReply("resp_1", "client"))
    ledgers.on_sent(delta("resp_1"))
    ledgers.on_reply_closed("resp_1", "completed", 3000.0, 3000.0, playing=True)
    assert sample(metrics, "bargein_turns_total", status="completed") == 1.0
    assert sample(metrics, "bargein_audio_seconds_total", kind="sent") == 3.0
    assert sample(metrics, "bargein_audio_seconds_total", kind="heard") == 0.0
    ledgers.on_reply_heard("resp_1", 1200.0)
    ledgers.on_reply_heard("resp_1", 3000.0)
    ledgers.close()
    assert sample(metrics, "bargein_audio_seconds_total", kind="heard") == 1.2


def test_a_turn_reported_while_its_reply_still_plays_is_followed_by_its_final_heard_figure() -> None:
    """The client still plays the reply at its close: the turn's report says its heard audio is not final yet, and
    once the playback ends the client is told the final figure, once."""
    reports: list[dict[str, Any]] = []
    followups: list[dict[str, Any]] = []
    ledgers = TurnLedgers(lambda: 0.0, lambda status, summary: reports.append(summary), heard=followups.append)
    ledgers.on_action(v.StartReply("resp_1", "client"))
    ledgers.on_sent(delta("resp_1"))
    ledgers.on_reply_closed("resp_1", "completed", 3000.0, 3000.0, playing=True)
    (report,) = reports
    assert report["audio_heard_s"] == 3.0 and report["audio_heard_final"] is False
    assert followups == []
    ledgers.on_reply_heard("resp_1", 1200.0)
    ledgers.on_reply_heard("resp_1", 3000.0)
    ledgers.close()
    assert followups == [{"item_id": None, "response_id": "resp_1", "audio_heard_s": 1.2}]


def test_a_turn_reported_after_its_playback_ended_is_final_with_no_follow_up() -> None:
    """A reply that closed with none of its output sent, played out before its first delta's report: the report
    holds the final figure already, and nothing follows it."""
    reports: list[dict[str, Any]] = []
    followups: list[dict[str, Any]] = []
    ledgers = TurnLedgers(lambda: 0.0, lambda status, summary: reports.append(summary), heard=followups.append)
    ledgers.on_action(v.StartReply("resp_1", "client"))
    ledgers.on_reply_closed("resp_1", "completed", 3000.0, 3000.0, output_queued=True, playing=True)
    ledgers.on_reply_heard("resp_1", 3000.0)
    ledgers.on_sent(delta("resp_1"))
    (report,) = reports
    assert report["audio_heard_s"] == 3.0 and report["audio_heard_final"] is True
    assert followups == []


async def test_the_client_is_told_the_heard_audio_of_a_finished_reply_cut_while_it_played(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``bargein.turn.metrics`` goes out at ``response.done`` with all the reply as heard; the user then speaks over
    it: once the cut is final, ``bargein.turn.heard`` tells the client what it really played."""
    monkeypatch.setattr(closed_playback, "CUT_GRACE_MS", 50.0)
    filler = "and then it goes on for a good while longer so that there is plenty to interrupt."
    h = Harness(Engines(FakeVad(), FakeRecognizer(("stop",)), FakeLanguageModel(filler=filler), FakeSynthesizer()))
    h.session.replies.output_lead_ms = 60_000.0
    h.no_play_out_wait()  # closed while the client still plays it
    await h.send(type="conversation.item.create", item=TALK)
    await h.send(type="response.create")
    await h.drain(until="bargein.turn.metrics")
    (summary,) = turn_metrics(h)
    assert summary["audio_heard_final"] is False and summary["audio_heard_s"] == summary["audio_sent_s"]
    await say_tone(h, 0.3, 0.0)
    await h.drain(until="bargein.turn.heard")
    (heard,) = [e for e in h.events if e["type"] == "bargein.turn.heard"]
    done = next(e for e in h.events if e["type"] == "response.done")["response"]
    item = h.session.conversation.get(done["output"][0]["id"])
    assert heard["response_id"] == summary["response_id"]
    assert item.heard_ms is not None and heard["audio_heard_s"] == pytest.approx(item.heard_ms / 1000, abs=1e-3)
    assert heard["audio_heard_s"] < summary["audio_heard_s"] - 0.5
    await h.session.close()
