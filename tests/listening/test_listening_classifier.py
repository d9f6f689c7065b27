"""The listening classifier's rules, and speculation's bookkeeping."""

from __future__ import annotations

import asyncio

import numpy as np

from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer
from bargein.session.core.listening.classifier import classify
from bargein.session.core.listening.segment_stats import NoiseFloor, SegmentStats
from bargein.session.speculation import Speculator
from bargein.values import CancelToken, ChatMessage, GenerationOptions, Transcript


def speech_stats(speech_ms: float, level_db: float = -20.0) -> SegmentStats:
    stats = SegmentStats()
    for _ in range(int(speech_ms / 32)):
        stats.add(0.95, level_db, 32.0)
    for _ in range(10):
        stats.add(0.05, -60.0, 32.0)
    return stats


def test_clear_speech_with_words_is_a_query() -> None:
    verdict = classify(speech_stats(900), Transcript("what is the weather like", avg_logprob=-0.3),
                       during_reply=False, noise_floor_db=-60)
    assert verdict.decision == "query"
    assert verdict.features["words"] == 5 and verdict.features["level_above_floor_db"] == 40.0


def test_no_words_too_short_or_too_faint_is_noise() -> None:
    empty = classify(speech_stats(900), Transcript(""), during_reply=False, noise_floor_db=-60)
    assert empty.decision == "noise" and "no words recognised" in empty.reasons
    short = classify(speech_stats(96), Transcript("hey"), during_reply=False, noise_floor_db=-60)
    assert short.decision == "noise" and short.reasons[0].startswith("too short")
    faint = classify(speech_stats(900, level_db=-58), Transcript("far away talk"), during_reply=False,
                     noise_floor_db=-60)
    assert faint.decision == "noise" and faint.reasons[0].startswith("too faint")


def test_backchannels_are_noise_only_while_the_agent_speaks() -> None:
    for text in ("Uh-huh.", "mm-hmm", "Yeah.", "okay"):
        during = classify(speech_stats(500), Transcript(text), during_reply=True, noise_floor_db=-60)
        assert during.decision == "noise", text
    after = classify(speech_stats(500), Transcript("Yeah."), during_reply=False, noise_floor_db=-60)
    assert after.decision == "query"
    longer = classify(speech_stats(900), Transcript("yeah but what about tomorrow"), during_reply=True,
                      noise_floor_db=-60)
    assert longer.decision == "query"


def test_whisper_hallucinations_on_non_speech_are_noise() -> None:
    invented = classify(speech_stats(700), Transcript("Thank you.", no_speech_prob=0.5, avg_logprob=-0.9),
                        during_reply=False, noise_floor_db=-60)
    assert invented.decision == "noise"
    meant = classify(speech_stats(700), Transcript("Thank you.", no_speech_prob=0.01, avg_logprob=-0.2),
                     during_reply=False, noise_floor_db=-60)
    assert meant.decision == "query"


def test_vocal_sounds_are_noise_whether_or_not_the_agent_speaks() -> None:
    # what Whisper writes for a laugh, a throat clearing, a hum, a click of the tongue, or a sound it describes
    for text in ("Ha ha ha.", "Hahaha", "Ka-ha-ha", "Ahem.", "Hm.", "T'T'H'H'H", "(laughs)", "[Music]", "*cough*"):
        for during in (False, True):
            verdict = classify(speech_stats(700), Transcript(text, avg_logprob=-0.3), during_reply=during,
                               noise_floor_db=-60)
            assert verdict.decision == "noise", (text, during)
    # a laugh inside speech, and words that only look like laughter, are still speech
    for text in ("Haha, that is funny, tell me another one", "Ohio", "The hash of it"):
        assert classify(speech_stats(900), Transcript(text), during_reply=False, noise_floor_db=-60).decision \
            == "query", text


def test_a_lone_word_that_is_never_an_utterance_is_noise() -> None:
    for text in ("You.", "Um.", "the"):
        verdict = classify(speech_stats(400), Transcript(text, avg_logprob=-0.3), during_reply=False,
                           noise_floor_db=-60)
        assert verdict.decision == "noise" and "never a whole utterance" in verdict.reasons[-1], text
    assert classify(speech_stats(900), Transcript("you first"), during_reply=False,
                    noise_floor_db=-60).decision == "query"


def test_a_short_unsure_fragment_is_noise_but_a_short_clear_command_is_a_query() -> None:
    # a sneeze heard as "A chew." and a sigh heard as "Few." (avg log-probability near -0.8)
    for text, logprob in (("A chew.", -0.72), ("Few.", -0.8)):
        verdict = classify(speech_stats(480), Transcript(text, avg_logprob=logprob), during_reply=True,
                           noise_floor_db=-60)
        alone = classify(speech_stats(480), Transcript(text, avg_logprob=logprob), during_reply=False,
                         noise_floor_db=-60)
        assert alone.decision == "noise" and alone.reasons[0].startswith("a short fragment"), text
    for text, logprob in (("Stop.", -0.25), ("Why?", -0.3), ("Louder.", -0.5)):
        for during in (False, True):
            verdict = classify(speech_stats(400), Transcript(text, avg_logprob=logprob), during_reply=during,
                               noise_floor_db=-60)
            assert verdict.decision == "query", (text, during)
    # the same doubt over a longer turn is just a hard-to-hear query
    longer = classify(speech_stats(1400), Transcript("A chew the fat", avg_logprob=-0.72), during_reply=True,
                      noise_floor_db=-60)
    assert longer.decision == "query"


def test_a_lone_backchannel_may_answer_the_agent_unless_the_recogniser_barely_heard_it() -> None:
    for text in ("Yeah.", "Mm-hmm.", "Okay."):
        verdict = classify(speech_stats(450), Transcript(text, avg_logprob=-0.55), during_reply=False,
                           noise_floor_db=-60)
        assert verdict.decision == "query", text
    mumble = classify(speech_stats(450), Transcript("Right.", avg_logprob=-1.2), during_reply=False,
                      noise_floor_db=-60)
    assert mumble.decision == "noise"


def test_speech_at_five_db_snr_is_loud_enough() -> None:
    # speech 5 dB above a pink bed measures about 5.5 dB above the floor; the room itself about 0 dB
    at_5db = classify(speech_stats(1500, level_db=-34.5), Transcript("what time is it in Tokyo"),
                      during_reply=False, noise_floor_db=-40)
    assert at_5db.decision == "query"
    room = classify(speech_stats(1500, level_db=-38.5), Transcript("what time is it in Tokyo"),
                    during_reply=False, noise_floor_db=-40)
    assert room.decision == "noise" and room.reasons[0].startswith("too faint")


def test_words_in_any_script_are_words() -> None:
    # a multilingual recogniser writes Chinese or Russian; that is speech, not "no words"
    for text in ("为什么天空是蓝色的？", "Привет, как дела?"):
        verdict = classify(speech_stats(900), Transcript(text, avg_logprob=-0.3), during_reply=False,
                           noise_floor_db=-60)
        assert verdict.decision == "query", (text, verdict.reasons)


def test_the_noise_floor_follows_background_frames_only() -> None:
    floor = NoiseFloor(level_db=-70)
    for _ in range(200):
        floor.observe(0.05, -45.0)
        floor.observe(0.95, -10.0)
    assert -46 < floor.level_db < -44


async def test_a_discarded_guess_never_becomes_a_reply() -> None:
    speculator = Speculator(FakeRecognizer(("what time is it",)), FakeLanguageModel(token_delay_s=0.01))
    audio = (0.2 * np.sin(np.arange(16_000) / 3)).astype(np.float32)
    task = speculator.recognise("item_1", audio)
    assert task is not None and (await task).text == "what time is it"
    messages = [ChatMessage("user", "what time is it")]
    speculator.prefetch("item_1", messages, GenerationOptions())
    speculator.drop("item_1")  # the user went on speaking
    assert speculator.take_reply(messages, GenerationOptions()) is None
    assert speculator.counts.asr_discarded == 1 and speculator.counts.llm_discarded == 1
    assert speculator.counts.waste == 1.0


async def test_a_confirmed_guess_hands_its_tokens_to_the_reply() -> None:
    llm = FakeLanguageModel(token_delay_s=0.005)
    speculator = Speculator(FakeRecognizer(("hello",)), llm)
    audio = (0.2 * np.sin(np.arange(16_000) / 3)).astype(np.float32)
    task = speculator.recognise("item_1", audio)
    assert task is not None
    await task
    messages = [ChatMessage("user", "hello")]
    speculator.prefetch("item_1", messages, GenerationOptions())
    await asyncio.sleep(0.03)
    assert speculator.take_recognition("item_1") is task
    # a reply for other messages does not get it
    assert speculator.take_reply([ChatMessage("user", "something else")], GenerationOptions()) is None
    assert speculator.counts.llm_discarded == 1
    # nor does one for the same messages with other options (the tools or the token limit changed meanwhile)
    speculator.recognise("item_2", audio)
    speculator.prefetch("item_2", messages, GenerationOptions())
    assert speculator.take_reply(messages, GenerationOptions(max_tokens=32)) is None
    assert speculator.counts.llm_discarded == 2
    speculator.recognise("item_3", audio)
    speculator.prefetch("item_3", messages, GenerationOptions())
    prefetched = speculator.take_reply(messages, GenerationOptions())
    assert prefetched is not None
    tokens = [token async for token in prefetched.adopt(CancelToken())]
    assert "".join(tokens) == "You said: hello."
    assert len(llm.seen) == 3 and speculator.counts.llm_used == 1


def test_a_short_interruption_needs_a_command_or_a_question_word() -> None:
    # over a reply a short unsure word that is no command is the interruption model's call (training/fit_listening.py
    # fits it to miss few commands, so a groan heard as "Us." now cuts: see docs/turn_quality.md)
    groan = classify(speech_stats(320), Transcript("Us.", avg_logprob=-0.45), during_reply=True, noise_floor_db=-60)
    assert "interruption model" in groan.reasons[0]
    for command in ("Stop.", "Wait.", "Louder.", "What?"):
        verdict = classify(speech_stats(448), Transcript(command, avg_logprob=-0.5), during_reply=True,
                           noise_floor_db=-60)
        assert verdict.decision == "query", command
    # the same groan while the agent is silent is a (doubtful) turn of its own, not an interruption
    alone = classify(speech_stats(448), Transcript("Us.", avg_logprob=-0.45), during_reply=False, noise_floor_db=-60)
    assert alone.decision == "query"


def test_more_words_than_the_sound_can_hold_is_noise() -> None:
    verdict = classify(speech_stats(288), Transcript("I was sick.", avg_logprob=-0.5), during_reply=False,
                       noise_floor_db=-60)
    assert verdict.decision == "noise" and verdict.reasons[0].startswith("more words")
    quick = classify(speech_stats(672), Transcript("Repeat that.", avg_logprob=-0.15), during_reply=False,
                     noise_floor_db=-60)
    assert quick.decision == "query"
