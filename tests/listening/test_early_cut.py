"""Cutting the reply at the first pause: the machine asks for both recognitions urgently and cuts on a command
either one holds; the shell recognises the loud stretch primed at the pause and reuses it at the commit."""

from __future__ import annotations

import asyncio

import numpy as np

from bargein.engines.base import SpeechRecognizer
from bargein.engines.fair import urgent
from bargein.engines.fakes import FakeLanguageModel
from bargein.session import core as dx
from bargein.session.core.endpointing import TurnEvidence
from bargein.session.core.listening.over_reply import PROMPTS
from bargein.session.history import Item, Part
from bargein.session.input_buffer import InputBuffer
from bargein.session.segment_tracker import SegmentTracker
from bargein.session.speculation import Speculator
from bargein.session.transcription import Transcriber
from bargein.values import Transcript
from tests.listening.test_over_reply import _over_a_talker
from tests.support.timelines import Timeline, of

TALKER = Transcript("the council met on Tuesday", avg_logprob=-0.9)


def _paused_by_a_stop(talker_ms: int = 640) -> tuple[Timeline, dx.SilenceBegan]:
    """A talker, then the user's louder "Stop." over the paused reply, up to its first pause."""
    t, _ = _over_a_talker(talker_ms, commit=False)
    return t, of(t.frames(0.05, 64, energy_db=-70.0), dx.SilenceBegan)[0]


def test_in_a_segment_mixed_with_the_room_only_the_loud_stretch_s_command_cuts_early() -> None:
    t, began = _paused_by_a_stop()  # 640 ms of the talker: the whole segment's words may be the room's
    plain = t.feed(dx.GuessTranscribed(began.item_id, Transcript("Stop.", avg_logprob=-0.8)))
    assert not of(plain, dx.CancelReply)  # (its answer may be prepared: the verdict decides whether it is used)
    assert of(t.feed(dx.GuessTranscribed(began.item_id, TALKER, Transcript("Stop."))), dx.CancelReply)


def test_the_first_pause_over_a_paused_reply_asks_for_both_recognitions_urgently() -> None:
    t = Timeline(dx.TurnSettings())
    t.frames(0.9, 640, energy_db=-25.0)
    alone = of(t.frames(0.05, 64, energy_db=-70.0), dx.SilenceBegan)[0]
    assert alone.listen_span is None and not alone.urgent  # no reply waits: speculation as before
    assert not of(t.frames(0.05, 480, energy_db=-70.0), dx.CommitBuffer)[0].urgent
    t, began = _paused_by_a_stop()
    assert began.urgent and began.listen_span is not None
    start, end = began.listen_span
    assert start < began.at_ms - 320 < end  # the loud stretch so far: the "Stop.", with its margins
    commit = of(t.frames(0.05, 480, energy_db=-70.0), dx.CommitBuffer)[0]
    assert commit.urgent and commit.listen_span is not None  # the paused reply still waits for the verdict


def test_a_command_only_the_primed_guess_heard_cuts_at_the_first_pause() -> None:
    t, began = _paused_by_a_stop()
    assert not of(t.feed(dx.GuessTranscribed(began.item_id, TALKER)), dx.CancelReply)  # the talker's words
    cut = t.feed(dx.GuessTranscribed(began.item_id, TALKER, Transcript("Stop.", avg_logprob=-0.9)))
    assert of(cut, dx.CancelReply) == [dx.CancelReply(of(t.actions, dx.StartReply)[0].response_id, "turn_detected")]


def test_a_command_in_the_plain_guess_cuts_before_the_primed_one_comes() -> None:
    t, began = _paused_by_a_stop(talker_ms=320)  # not mixed with the room: the whole segment's command counts
    assert of(t.feed(dx.GuessTranscribed(began.item_id, Transcript("Stop.", avg_logprob=-0.8))), dx.CancelReply)
    assert t.feed(dx.GuessTranscribed(began.item_id, Transcript("Stop."), Transcript("Stop."))) == []  # once


def test_the_room_s_talker_saying_why_before_the_user_speaks_does_not_cut_early() -> None:
    t = Timeline(dx.TurnSettings())
    t.frames(0.9, 640, energy_db=-25.0)  # the user's own request: the session learns how loud the user is
    first = of(t.frames(0.05, 544, energy_db=-70.0), dx.CommitBuffer)[0]
    t.feed(dx.SegmentTranscribed(first.item_id, Transcript("Tell me a story.", avg_logprob=-0.2)))
    t.feed(dx.ReplyAudio(of(t.actions, dx.StartReply)[0].response_id, "chunk"))
    t.frames(0.9, 640, energy_db=-31.0)  # a talker 6 dB under the user pauses the reply
    began = of(t.frames(0.05, 64, energy_db=-70.0), dx.SilenceBegan)[0]
    why = Transcript("Why don't you go?", avg_logprob=-0.3)
    assert not of(t.feed(dx.GuessTranscribed(began.item_id, why, at_ms=began.at_ms)), dx.CancelReply)
    # the endpoint's verdict on the whole segment still decides as before
    assert of(t.frames(0.05, 480, energy_db=-70.0), dx.CommitBuffer)


def test_without_a_command_rule_the_first_pause_cuts_nothing_and_the_endpoint_decides() -> None:
    t, began = _paused_by_a_stop()
    # an acknowledgement either way, and a sentence the fitted model alone would judge: no cut yet
    assert t.feed(dx.GuessTranscribed(began.item_id, TALKER, Transcript("Okay.", avg_logprob=-0.3))) == []
    sentence = Transcript("Tell me about the weather tomorrow in Paris.", avg_logprob=-0.3)
    assert not of(t.feed(dx.GuessTranscribed(began.item_id, sentence, sentence)), dx.CancelReply)
    assert of(t.frames(0.05, 480, energy_db=-70.0), dx.CommitBuffer)


def test_the_end_of_the_user_s_loud_stretch_is_a_pause_when_the_room_talks_on() -> None:
    t, _ = _over_a_talker(commit=False)
    before = t.now_ms
    went_on = t.frames(0.9, 640, energy_db=-40.0)  # the talker goes on: no silence
    faded = of(went_on, dx.VoiceEnded)
    assert len(faded) == 1 and not of(went_on, dx.SilenceBegan), "once, some frames after the loud stretch ended"
    start, end = faded[0].listen_span  # the "Stop." with its margins (clipped to the audio heard so far)
    assert before < faded[0].at_ms <= before + 6 * 32 and start < before - 320 and before <= end
    cut = t.feed(dx.GuessTranscribed(faded[0].item_id, None, Transcript("Stop.", avg_logprob=-0.9),
                                     at_ms=faded[0].at_ms))  # only the loud stretch was recognised
    assert of(cut, dx.CancelReply)
    # a segment that is one loud stretch (no room talking after it) gets only its VAD pause
    t2 = Timeline(dx.TurnSettings())
    t2.frames(0.9, 640, energy_db=-25.0)
    ended = t2.frames(0.05, 544, energy_db=-70.0)
    assert len(of(ended, dx.SilenceBegan)) == 1 and not of(ended, dx.VoiceEnded)


class Recorder(SpeechRecognizer):
    """A recogniser that answers by prompt and remembers each call's prompt and urgency, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []

    async def transcribe(self, audio: object, *, language: str | None = None,
                         prompt: str | None = None) -> Transcript:
        primed = bool(prompt and PROMPTS["en"] in prompt)
        self.calls.append(("primed" if primed else "plain", urgent()))
        return Transcript("Stop." if primed else "The council.")


def test_the_shell_guesses_both_ways_at_the_pause_and_the_commit_reuses_them() -> None:
    async def run() -> tuple[list[tuple[str, bool]], list[dx.Event], list[tuple[str, str | None]]]:
        asr = Recorder()
        buffer = InputBuffer()
        buffer.append(np.zeros(32_000, np.float32))
        speculator = Speculator(asr, FakeLanguageModel(), hints=lambda: ("en", None))  # type: ignore[arg-type]
        fed: list[dx.Event] = []
        tracker = SegmentTracker(asr, buffer, speculator, feed=fed.append, emit=lambda _o: None,  # type: ignore[arg-type]
                                 hints=lambda: ("en", None))
        tracker.silence_began(dx.SilenceBegan("item_1", 1200.0, (650.0, 1300.0), urgent=True, start_ms=200.0))
        await asyncio.sleep(0.05)
        decided: list[tuple[str, str | None]] = []
        transcriber = Transcriber(asr, lambda _e: None,  # type: ignore[arg-type]
                                  lambda _i, t, p, _pending: decided.append(
                                      (t.text if t else "", p.text if p else None)), lambda: ("en", None))
        item = Item("item_1", "user", [Part("input_audio")])
        tracker.voice_ended("item_1", 1400.0, (660.0, 1310.0))  # the same stretch: not recognised again
        await asyncio.sleep(0.05)
        transcriber.start(item, buffer.peek(200.0, 1800.0), content_index=0,
                          guessed=speculator.take_recognition("item_1"), primed=buffer.peek(650.0, 1300.0),
                          primed_guess=speculator.take_primed("item_1", (640.0, 1320.0)), urgent=True)
        await transcriber.wait_all()
        return asr.calls, fed, decided

    calls, fed, decided = asyncio.run(run())
    assert calls == [("plain", True), ("primed", True)]  # at the pause, the plain one first; none at the commit
    guesses = [e for e in fed if isinstance(e, dx.GuessTranscribed)]
    assert [(g.transcript.text, g.primed.text if g.primed else None) for g in guesses] == [
        ("The council.", None), ("The council.", "Stop.")]
    assert decided == [("The council.", None), ("The council.", "Stop.")]


def test_speech_going_on_drops_the_plain_guess_but_the_loud_stretch_s_runs_on_and_stands() -> None:
    async def run() -> tuple[bool, bool, bool, bool, bool]:
        asr = Recorder()
        speculator = Speculator(asr, FakeLanguageModel(), hints=lambda: ("en", None))  # type: ignore[arg-type]
        plain = speculator.recognise("item_1", np.zeros(16_000, np.float32), urgent=True)
        started = speculator.recognise_primed("item_1", (100.0, 600.0), np.zeros(8_000, np.float32), PROMPTS["en"])
        assert plain is not None and started is not None and started[1]
        speculator.drop("item_1")
        await asyncio.sleep(0)
        again = speculator.recognise_primed("item_1", (110.0, 590.0), np.zeros(8_000, np.float32), PROMPTS["en"])
        other = speculator.recognise_primed("item_1", (100.0, 900.0), np.zeros(12_800, np.float32), PROMPTS["en"])
        assert again is not None and other is not None
        await asyncio.gather(started[0], other[0])
        return (plain.cancelled(), started[0].cancelled(), again == (started[0], False), other[1],
                speculator.take_primed("item_1", (100.0, 600.0)) is None)

    # a new stretch is recognised anew; the commit takes only a recognition of its own stretch
    assert asyncio.run(run()) == (True, False, True, True, True)


def test_a_stop_guessed_at_the_first_pause_cuts_even_after_the_user_or_the_room_went_on() -> None:
    t, began = _paused_by_a_stop()
    t.frames(0.9, 320, energy_db=-40.0)  # the talker goes on: the same segment
    cut = t.feed(dx.GuessTranscribed(began.item_id, None, Transcript("Stop.", avg_logprob=-0.8), at_ms=began.at_ms))
    assert of(cut, dx.CancelReply)


def test_a_guess_made_at_an_earlier_silence_says_nothing_about_the_newer_one() -> None:
    evidence = TurnEvidence()
    evidence.silence(1000.0)
    evidence.silence(1600.0)
    evidence.take(dx.GuessTranscribed("item_1", Transcript("Turn off"), at_ms=1000.0))
    assert evidence.words is None
    evidence.take(dx.GuessTranscribed("item_1", Transcript("Turn off the lights."), at_ms=1600.0))
    assert evidence.words == "Turn off the lights."


def test_a_segment_that_cut_the_reply_at_its_first_pause_is_answered_even_when_judged_noise() -> None:
    t, began = _paused_by_a_stop()
    assert of(t.feed(dx.GuessTranscribed(began.item_id, TALKER, Transcript("Stop."))), dx.CancelReply)
    t.frames(0.05, 480, energy_db=-70.0)  # the endpoint: the segment is committed and waits for its verdict
    answered = t.feed(dx.SegmentClassified(began.item_id, "noise", None))
    assert of(answered, dx.StartReply), "the reply is gone: the user's segment is answered, not dropped"
    assert not of(answered, dx.DiscardSegment)
