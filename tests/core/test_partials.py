"""The machine decides when the turn being spoken is recognised before its endpoint (``RecognisePartial``), what of
its words the client hears (``ReportPartial``) and when they warm the reply's prompt (``WarmPrompt``), and whether
its silence is worth a speculative guess. Scripted timelines: stream time is the only clock."""

from __future__ import annotations

from dataclasses import replace

from bargein.session import core as dx
from bargein.session.core.partials import MAX_GUESS_MS, PARTIAL_WINDOW_MS
from bargein.session.core.settings import PARTIAL_EVERY_MS
from bargein.values import Transcript
from tests.support.timelines import Listening, Timeline, of

PARTIALS = dx.TurnSettings(listening=dx.Listening(classify=False),
                           speculation=dx.Speculation(partial_every_ms=PARTIAL_EVERY_MS))
"""A session's settings as far as partials go (the listening classifier off, as in the turn-taking timelines)."""


def test_a_partial_is_due_each_second_of_speech_and_never_two_at_once() -> None:
    t = Timeline(PARTIALS)
    t.silence(512)
    asked = of(t.speech(1024), dx.RecognisePartial)
    assert asked == [dx.RecognisePartial("item_1", 512.0 - 300.0, 1536.0, PARTIAL_WINDOW_MS)], \
        "a second after the onset, from the onset less the padding, at most the last 10 s"
    assert not of(t.speech(2048), dx.RecognisePartial), "one still running holds the next back"
    again = of(t.feed(dx.PartialTranscript("item_1", "what time")), dx.RecognisePartial)
    assert again == [] and of(t.speech(32), dx.RecognisePartial)[0].at_ms == 3616.0, \
        "overdue: the next follows at the first frame after the last came back"


def test_no_partial_in_a_silence_and_again_once_the_speech_resumes() -> None:
    t = Timeline(replace(PARTIALS, endpointing=dx.Endpointing(silence_duration_ms=3000)))  # a long pause
    t.speech(1024)
    t.feed(dx.PartialTranscript("item_1", "what"))
    pause = t.silence(1600)
    assert of(pause, dx.SilenceBegan) and not of(pause, dx.RecognisePartial), "the guess hears the silence"
    assert not of(t.actions, dx.CommitBuffer)
    resumed = t.speech(64)
    assert of(resumed, dx.SpeechResumed) and of(resumed, dx.RecognisePartial), "overdue once the speech resumes"


def test_none_once_the_turn_ended_and_its_late_words_are_not_reported() -> None:
    t = Timeline(PARTIALS)
    asked = of(t.speech(1024), dx.RecognisePartial)[0]
    assert of(t.silence(544), dx.CommitBuffer)
    assert t.feed(dx.PartialTranscript(asked.item_id, "what time")) == [], "the turn was committed: no delta now"
    assert not of(t.silence(2048), dx.RecognisePartial)


def test_the_words_of_the_turn_still_spoken_are_reported_and_a_whole_turn_s_warm_the_prompt() -> None:
    t = Timeline(PARTIALS)
    t.speech(1024)
    said = t.feed(dx.PartialTranscript("item_1", "what time"))
    assert said == [dx.ReportPartial("item_1", "what time"), dx.WarmPrompt("item_1", "what time")]
    t.speech(1024)
    said = t.feed(dx.PartialTranscript("item_1", "is it ten", whole=False))
    assert said == [dx.ReportPartial("item_1", "is it ten")], "only the last 10 s: not the reply's prompt"
    assert t.feed(dx.PartialTranscript("item_1", "")) == [], "a partial that heard nothing (or failed)"


def test_the_plain_guess_is_reported_as_a_partial_the_primed_one_is_not() -> None:
    t = Timeline(PARTIALS)
    t.speech(640)
    began = of(t.silence(64), dx.SilenceBegan)[0]
    plain = t.feed(dx.GuessTranscribed("item_1", Transcript(" what time is it "), at_ms=began.at_ms))
    assert plain[0] == dx.ReportPartial("item_1", "what time is it") and not of(plain, dx.WarmPrompt), \
        "the prefetch reads its prompt itself"
    primed = t.feed(dx.GuessTranscribed("item_1", None, Transcript("Stop."), began.at_ms))
    assert not of(primed, dx.ReportPartial)


def test_no_warming_over_a_reply_still_playing_and_over_a_paused_one_it_warms() -> None:
    settings = dx.TurnSettings(speculation=dx.Speculation(partial_every_ms=PARTIAL_EVERY_MS),
                               interruption=dx.Interruption(enabled=False))
    playing = Listening(settings)
    playing.agent_speaking()
    item = of(playing.frames(0.9, 1024, energy_db=-25.0), dx.SpeechStarted)[0].item_id
    assert playing.machine.reply is not None and not playing.machine.reply.paused
    assert playing.feed(dx.PartialTranscript(item, "what time")) == [dx.ReportPartial(item, "what time")], \
        "its end is not known: a reply to these words may never be asked"
    paused = Listening(dx.TurnSettings(speculation=dx.Speculation(partial_every_ms=PARTIAL_EVERY_MS)))
    paused.agent_speaking()
    item = of(paused.frames(0.9, 1024, energy_db=-25.0), dx.PauseReply)[0].item_id
    assert of(paused.feed(dx.PartialTranscript(item, "what time")), dx.WarmPrompt) == [dx.WarmPrompt(item, "what time")]


def test_no_warming_where_no_reply_would_follow() -> None:
    t = Timeline(replace(PARTIALS, speculation=dx.Speculation(partial_every_ms=PARTIAL_EVERY_MS,
                                                              prefetch_reply=False)))  # no reply is prefetched
    t.speech(1024)
    assert t.feed(dx.PartialTranscript("item_1", "what time")) == [dx.ReportPartial("item_1", "what time")]
    t = Timeline(dx.TurnSettings(create_response=False, listening=dx.Listening(classify=False),
                                 speculation=dx.Speculation(partial_every_ms=PARTIAL_EVERY_MS)))
    t.speech(1024)
    assert not of(t.feed(dx.PartialTranscript("item_1", "what time")), dx.WarmPrompt), "the client answers it"


def test_a_turn_too_long_for_a_guess_gets_none_at_its_silence() -> None:
    t = Timeline(PARTIALS)
    t.speech(1024)
    short = of(t.silence(64), dx.SilenceBegan)[0]
    assert short.guess and short.start_ms == 0.0
    t.speech(MAX_GUESS_MS)
    long = of(t.silence(64), dx.SilenceBegan)[-1]
    assert not long.guess, "recognised once, in slices, when it is committed"


def test_a_bare_machine_asks_for_no_partials() -> None:
    t = Timeline()
    t.speech(3072)
    assert not of(t.actions, dx.RecognisePartial)
    assert t.feed(dx.PartialTranscript("item_1", "what time")) == []
