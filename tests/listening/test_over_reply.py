"""Recognising a turn heard over the agent's reply: the machine asks for it, the shell primes the recogniser."""

from __future__ import annotations

import asyncio

import numpy as np

from bargein.engines.base import SpeechRecognizer
from bargein.session import core as dx
from bargein.session.core.listening.decide import decide_over_reply, primed_features, spotted_command
from bargein.session.core.listening.over_reply import PROMPTS, loud_stretch, prompt_for, vocabulary_prompt
from bargein.session.history import Item, Part
from bargein.session.transcription import Transcriber
from bargein.values import Transcript
from tests.support.timelines import Timeline, of

FRAME_MS = 32.0


class PromptRecorder(SpeechRecognizer):
    """A recogniser that remembers the prompt of every call."""

    def __init__(self) -> None:
        self.prompts: list[str | None] = []

    async def transcribe(self, audio: object, *, language: str | None = None,
                         prompt: str | None = None) -> Transcript:
        self.prompts.append(prompt)
        return Transcript("primed" if prompt and PROMPTS["en"] in prompt else "plain")


def test_a_turn_over_the_reply_asks_for_its_loud_stretch_to_be_recognised_primed() -> None:
    t = Timeline(dx.TurnSettings())
    t.frames(0.9, 640, energy_db=-25.0)
    first = of(t.frames(0.05, 544, energy_db=-70.0), dx.CommitBuffer)[0]
    assert first.listen_span is None  # the agent was silent: nothing to tell apart
    t.feed(dx.SegmentTranscribed(first.item_id, Transcript("Tell me a story.", avg_logprob=-0.2)))
    response_id = of(t.actions, dx.StartReply)[0].response_id
    t.feed(dx.ReplyAudio(response_id, "chunk"))
    onset = t.now_ms
    # a talker 15 dB under the user around the user's 320 ms "Stop."
    t.frames(0.9, 640, energy_db=-40.0)
    t.frames(0.9, 320, energy_db=-25.0)
    t.frames(0.9, 640, energy_db=-40.0)
    over = of(t.frames(0.05, 544, energy_db=-70.0), dx.CommitBuffer)[0]
    assert over.listen_span is not None
    start, end = over.listen_span
    assert onset + 640 - 150 - 64 <= start <= onset + 640 - 150 + 32
    assert onset + 960 + 150 - 32 <= end <= onset + 960 + 150 + 64
    decided = t.feed(dx.SegmentTranscribed(over.item_id, Transcript("Next week the council.", avg_logprob=-0.5),
                                           primed=Transcript("Stop.", avg_logprob=-0.9)))
    assert of(decided, dx.CancelReply)  # the primed recognition heard the command
    report = of(decided, dx.ReportSegment)[0].verdict.features
    assert report["primed_transcript"] == "Stop." and report["command"] == "stop"


def _over_a_talker(talker_ms: int = 640, talker_db: float = -40.0, *, commit: bool = True) -> tuple[Timeline, str]:
    """The user asks at -25 dBFS, the reply plays, then a talker and the user's 320 ms word in one segment
    (committed, or still open with ``commit`` False)."""
    t = Timeline(dx.TurnSettings())
    t.frames(0.9, 640, energy_db=-25.0)
    first = of(t.frames(0.05, 544, energy_db=-70.0), dx.CommitBuffer)[0]
    t.feed(dx.SegmentTranscribed(first.item_id, Transcript("Tell me a story.", avg_logprob=-0.2)))
    t.feed(dx.ReplyAudio(of(t.actions, dx.StartReply)[0].response_id, "chunk"))
    t.frames(0.9, talker_ms, energy_db=talker_db)
    t.frames(0.9, 320, energy_db=-25.0)
    if not commit:
        return t, of(t.actions, dx.SpeechStarted)[-1].item_id
    return t, of(t.frames(0.05, 544, energy_db=-70.0), dx.CommitBuffer)[0].item_id


def test_a_command_in_the_plain_transcript_cuts_without_waiting_for_the_primed_one() -> None:
    t, item_id = _over_a_talker(talker_ms=320)  # under 500 ms of the room's speech: not mixed with the room
    cut = t.feed(dx.SegmentTranscribed(item_id, Transcript("Stop.", avg_logprob=-0.8), primed_pending=True))
    assert of(cut, dx.CancelReply) and of(cut, dx.ReportSegment)[0].verdict.features["command"] == "stop"
    # the primed recognition arriving later changes nothing: the segment is decided
    assert t.feed(dx.SegmentTranscribed(item_id, Transcript("Stop."), primed=Transcript("Okay."))) == []


def test_anything_else_waits_for_the_primed_recognition() -> None:
    t, item_id = _over_a_talker()
    plain = Transcript("the council met on Tuesday", avg_logprob=-0.9)
    assert t.feed(dx.SegmentTranscribed(item_id, plain, primed_pending=True)) == []
    decided = t.feed(dx.SegmentTranscribed(item_id, plain, primed=Transcript("Okay.", avg_logprob=-0.3)))
    assert of(decided, dx.ResumeReply) and not of(decided, dx.CancelReply)
    assert of(decided, dx.ReportSegment)[0].verdict.reasons[0].startswith("primed: backchannel")


def test_no_span_without_the_classifier() -> None:
    t = Timeline()
    t.speech(640)
    response_id = of(t.silence(544), dx.StartReply)[0].response_id
    t.feed(dx.ReplyAudio(response_id, "chunk"))
    t.speech(320)
    assert of(t.silence(544), dx.CommitBuffer)[0].listen_span is None


def test_the_vocabulary_prompt_holds_commands_and_acknowledgements_alike() -> None:
    english = vocabulary_prompt("en-US")
    assert english is not None and english == PROMPTS["en"]
    words = {w.strip(".?").lower() for w in english.split(". ")}
    assert {"stop", "wait"} <= words and {"uh-huh", "okay", "yeah"} <= words
    assert vocabulary_prompt(None) == english  # an English-first server
    assert prompt_for("en", "Names: Jarvis.") == f"{english} Names: Jarvis."
    assert prompt_for("xx", None) is None


def test_the_shell_recognises_the_stretch_a_second_time_primed_and_keeps_the_plain_text() -> None:
    async def run() -> tuple[list[str | None], list[tuple[Transcript | None, Transcript | None, bool]], list[str]]:
        asr = PromptRecorder()
        done: list[tuple[Transcript | None, Transcript | None, bool]] = []
        transcriber = Transcriber(asr, lambda _e: None,  # type: ignore[arg-type]
                                  lambda _i, t, p, pending: done.append((t, p, pending)), lambda: ("en", "Jarvis."))
        items = [Item(f"item_{n}", "user", [Part("input_audio")]) for n in range(3)]
        audio = np.zeros(16_000, np.float32)
        await transcriber.recognise(items[0], audio, 0)
        await transcriber.recognise(items[1], audio, 0, primed=audio[:8000])
        await transcriber.recognise(items[2], audio, 0, primed=audio[:800])  # too short to hold a word
        return asr.prompts, done, [item.parts[0].text or "" for item in items]

    prompts, done, texts = asyncio.run(run())
    assert prompts == ["Jarvis.", "Jarvis.", f"{PROMPTS['en']} Jarvis.", "Jarvis."]
    # told once without a primed one; with one, first "pending", then again with it
    assert [(p is not None, pending) for _, p, pending in done] == [(False, False), (False, True), (True, False),
                                                                    (False, False)]
    assert texts == ["plain", "plain", "plain"]


def test_the_loud_stretch_is_the_user_not_the_talker_around_them() -> None:
    # a talker at -40 dBFS, the user's "Sure." at -24 for 10 frames, then the talker again
    levels = [-40.0] * 20 + [-24.0] * 10 + [-41.0] * 25
    first, last = loud_stretch(levels, FRAME_MS) or (0, 0)
    assert 18 <= first <= 20 and 30 <= last <= 32
    # "No, stop.": two loud runs 200 ms apart are one utterance
    levels = [-40.0] * 10 + [-24.0] * 6 + [-45.0] * 6 + [-25.0] * 8 + [-40.0] * 10
    first, last = loud_stretch(levels, FRAME_MS) or (0, 0)
    assert first <= 10 and last >= 30
    assert loud_stretch([-24.0] * 12, FRAME_MS) is None  # all of it is the user
    assert loud_stretch([], FRAME_MS) is None


def _heard(transcript: str, logprob: float, **more: object) -> dict[str, object]:
    """Decision fields of a segment over a reply: 900 ms of speech, 20 dB above the floor."""
    return {"transcript": transcript, "avg_logprob": logprob, "no_speech_prob": 0.2, "speech_ms": 900.0,
            "mean_probability": 0.7, "level_above_floor_db": 20.0, "words": len(transcript.split()), **more}


def _primed(transcript: str, logprob: float) -> dict[str, object]:
    return primed_features(_heard("", 0.0), Transcript(transcript, avg_logprob=logprob), 22.0, 1.0)


def test_recorded_over_a_talker_the_primed_stretch_decides_what_the_plain_one_cannot() -> None:
    # recorded on the training families (bench.quality.over_reply_probe, Whisper tiny.en): the whole segment is
    # the newsreader's words, the loud stretch primed with the vocabulary is the user's
    talker_no = _heard("Meanwhile the weather's gonna be a bit different.", -1.25)
    decision, why = decide_over_reply(talker_no, _primed("No.", -0.35))
    assert decision == "query" and why[0].startswith("primed:")
    phone_okay = _heard("and remember and what way in the third year.", -1.06)
    decision, why = decide_over_reply(phone_okay, _primed("Okay.", -0.25))
    assert decision == "noise" and "backchannel" in why[0]
    # a command in either recognition wins over a keep in the other
    assert decide_over_reply(_heard("Stop.", -0.8), _primed("Okay.", -0.3))[0] == "query"
    # nothing decided by rule in either: the model judges the plain recognition, as without a second one
    plain = _heard("The boat will be great.", -0.7)
    assert decide_over_reply(plain, _primed("The boat.", -0.6)) == decide_over_reply(plain)


def test_the_primed_stretch_is_judged_at_the_user_s_level_not_the_room_s() -> None:
    second = primed_features(_heard("words of the room", -0.5, user_transcript="room", room_words=3,
                                    below_user_db=9.0), Transcript("Stop.", avg_logprob=-0.4), 24.0, 0.5)
    assert second["user_transcript"] == "Stop." and second["below_user_db"] == 0.5
    assert second["user_level_above_floor_db"] == 24.0 and "room_words" not in second
    assert spotted_command(second) == "stop"


def _asked_with_a_varying_voice() -> Timeline:
    """The user's request alternates -18 and -34 dBFS (its speech's mean power -20.9, its loud stretch -18),
    and the reply it gets plays."""
    t = Timeline(dx.TurnSettings())
    for _ in range(2):
        t.frames(0.9, 160, energy_db=-18.0)
        t.frames(0.9, 160, energy_db=-34.0)
    first = of(t.frames(0.05, 544, energy_db=-70.0), dx.CommitBuffer)[0]
    t.feed(dx.SegmentTranscribed(first.item_id, Transcript("Tell me a story.", avg_logprob=-0.2)))
    t.feed(dx.ReplyAudio(of(t.actions, dx.StartReply)[0].response_id, "chunk"))
    return t


def test_the_loud_stretch_is_held_against_the_user_s_own_loud_stretches() -> None:
    # a talker's steady phrase at -25 dBFS: 4.1 dB under the user's speech as a whole, but 7 dB under the loud
    # stretches of the user's own turns, which is what its own loud stretch is (like with like)
    t = _asked_with_a_varying_voice()
    t.frames(0.9, 800, energy_db=-25.0)
    item_id = of(t.frames(0.05, 544, energy_db=-70.0), dx.CommitBuffer)[0].item_id
    judged = t.feed(dx.SegmentTranscribed(item_id, Transcript("the council met on Tuesday", avg_logprob=-0.4),
                                          primed=Transcript("Why?", avg_logprob=-0.3)))
    verdict = of(judged, dx.ReportSegment)[0].verdict
    assert verdict.features["loud_below_user_db"] == 7.0
    assert verdict.decision == "noise" and "quieter than the user's own turns" in verdict.reasons[0]
    assert not of(judged, dx.CancelReply)


def test_a_command_cuts_early_only_when_its_loud_stretch_is_as_loud_as_the_user_s() -> None:
    for level_db, cuts in ((-23.0, False), (-19.0, True)):  # 5 and 1 dB under the user's loud stretches
        t = _asked_with_a_varying_voice()
        t.frames(0.9, 320, energy_db=level_db)
        began = of(t.frames(0.05, 64, energy_db=-70.0), dx.SilenceBegan)[0]
        guessed = t.feed(dx.GuessTranscribed(began.item_id, Transcript("Why?", avg_logprob=-0.3), at_ms=began.at_ms))
        assert bool(of(guessed, dx.CancelReply)) is cuts


def test_one_loud_transient_in_the_user_s_turn_does_not_set_how_loud_the_user_is() -> None:
    for spike_probability in (0.1, 0.9):  # the VAD may or may not call the bump speech
        t = Timeline(dx.TurnSettings())
        for _ in range(10):
            t.frames(0.9, 64, energy_db=-18.0)
            t.frames(0.9, 64, energy_db=-24.0)
        t.frames(spike_probability, 32, energy_db=-3.0)  # a cup set down next to the microphone
        t.frames(0.9, 64, energy_db=-18.0)
        first = of(t.frames(0.05, 544, energy_db=-70.0), dx.CommitBuffer)[0]
        t.feed(dx.SegmentTranscribed(first.item_id, Transcript("Tell me a story.", avg_logprob=-0.2)))
        assert t.machine.segments.user_loud_level_db is not None
        assert abs(t.machine.segments.user_loud_level_db + 20.1) < 0.5  # the voice's loud stretch, not the bump
        t.feed(dx.ReplyAudio(of(t.actions, dx.StartReply)[0].response_id, "chunk"))
        t.frames(0.9, 640, energy_db=-32.0)  # the room's talker, then the user's own "Stop." at their own level
        t.frames(0.9, 320, energy_db=-18.0)
        item_id = of(t.frames(0.05, 544, energy_db=-70.0), dx.CommitBuffer)[0].item_id
        plain = Transcript("the council met on Tuesday", avg_logprob=-0.9)
        judged = t.feed(dx.SegmentTranscribed(item_id, plain, primed=Transcript("Stop.", avg_logprob=-0.8)))
        assert of(judged, dx.CancelReply), of(judged, dx.ReportSegment)[0].verdict.reasons
