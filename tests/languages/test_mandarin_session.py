"""Mandarin in the session: the language table in the classifier, heard text by character, refusals."""

from __future__ import annotations

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.languages import MANDARIN, spoken_units
from bargein.session.core.listening.classifier import classify
from bargein.session.core.listening.segment_stats import SegmentStats
from bargein.session.history import heard_prefix
from bargein.values import Transcript, WordTiming
from tests.support.session_harness import Harness


def _stats(speech_ms: float) -> SegmentStats:
    stats = SegmentStats()
    for _ in range(int(speech_ms / 32)):
        stats.add(0.95, -20.0, 32.0)
    return stats


def _zh(text: str, logprob: float = -0.3, no_speech: float = 0.1) -> Transcript:
    return Transcript(text, language="zh", avg_logprob=logprob, no_speech_prob=no_speech)


def test_a_mandarin_command_cuts_the_reply_however_unsure_the_recogniser_is() -> None:
    for text, logprob in (("停", -1.25), ("停一下。", -0.6), ("等一下", -0.9), ("别说了！", -0.4), ("不对。", -1.2)):
        verdict = classify(_stats(500), _zh(text, logprob), during_reply=True, noise_floor_db=-60)
        assert verdict.decision == "query", (text, verdict.reasons)
    # below the floor it is more likely a backchannel misheard (嗯 came out as 停 at -2.2)
    assert classify(_stats(300), _zh("停", -2.2), during_reply=True, noise_floor_db=-60).decision == "noise"


def test_a_mandarin_backchannel_over_the_reply_is_noise_and_alone_it_may_answer() -> None:
    for text in ("嗯", "嗯嗯。", "对对", "好的。", "是的", "哦"):
        verdict = classify(_stats(500), _zh(text), during_reply=True, noise_floor_db=-60)
        assert verdict.decision == "noise", text
        assert any("backchannel" in reason for reason in verdict.reasons), verdict.reasons
    assert classify(_stats(500), _zh("好的。"), during_reply=False, noise_floor_db=-60).decision == "query"


def test_a_mandarin_question_is_a_query_and_its_characters_are_its_words() -> None:
    verdict = classify(_stats(1500), _zh("中国有多少个省？", -0.4), during_reply=True, noise_floor_db=-60)
    assert verdict.decision == "query"
    assert verdict.features["words"] == 7
    # English is untouched by the table: "嗯" heard as English is judged by the English rules only
    english = classify(_stats(500), Transcript("Stop.", avg_logprob=-0.2), during_reply=True, noise_floor_db=-60)
    assert english.decision == "query"


def test_heard_chinese_is_cut_by_character_and_keeps_no_spaces() -> None:
    full = "你好，世界。今天很好。"
    units = spoken_units(full)
    words = [WordTiming(unit, 100.0 * i, 100.0 * (i + 1)) for i, unit in enumerate(units)]
    assert heard_prefix(full, words, 240, 1000) == "你好，"  # a character counts once half of it played
    assert heard_prefix(full, words, 440, 1000) == "你好，世界。"
    assert heard_prefix(full, [], 500, 1000) == "你好，世界"  # proportional, between any two characters
    assert heard_prefix("one two three four", [], 500, 1000) == "one two"


async def test_a_language_the_recogniser_cannot_honour_is_refused_with_an_error() -> None:
    h = Harness(Engines(FakeVad(), FakeRecognizer(("hello",), languages=frozenset({"en"})), FakeLanguageModel(),
                        FakeSynthesizer()))
    await h.send(type="session.update", session={"type": "realtime", "audio": {"input": {
        "transcription": {"language": "zh"}}}})
    events = await h.drain(until="error")
    error = events[-1]["error"]
    assert error["code"] == "unsupported_language"
    assert error["param"] == "session.audio.input.transcription.language"
    assert "--asr-model base" in error["message"]
    assert h.session.config.language is None  # the update was not applied
    await h.send(type="session.update", session={"type": "realtime", "audio": {"input": {
        "transcription": {"language": "en"}}}})
    updated = (await h.drain(until="session.updated"))[-1]["session"]
    assert updated["audio"]["input"]["transcription"]["language"] == "en"
    await h.session.close()


async def test_a_mandarin_session_gets_mandarin_instructions() -> None:
    h = Harness(Engines(FakeVad(), FakeRecognizer(("你好",), languages=frozenset({"en", "zh"})),
                        FakeLanguageModel(), FakeSynthesizer()))
    await h.send(type="session.update", session={"type": "realtime", "audio": {"input": {
        "transcription": {"language": "zh"}}}})
    updated = (await h.drain(until="session.updated"))[-1]["session"]
    assert updated["instructions"] == MANDARIN.instructions
    await h.session.close()


async def test_english_stays_on_the_english_model_and_mandarin_goes_to_the_multilingual_one() -> None:
    import numpy as np

    from bargein.engines.transcribe.by_language import RecognizerRouter

    english = FakeRecognizer(("hello",), languages=frozenset({"en"}))
    multilingual = FakeRecognizer(("你好",), languages=frozenset({"en", "zh", "fr"}))
    router = RecognizerRouter(english, multilingual)
    assert router.languages == frozenset({"en", "zh", "fr"})
    speech = (0.2 * np.sin(np.arange(16_000) / 5)).astype(np.float32)
    assert (await router.transcribe(speech, language="zh-CN")).text == "你好"
    assert (await router.transcribe(speech, language="en")).text == "hello"
    assert (await router.transcribe(speech)).language == "en"  # unset: English on an English-first server
    assert (english.calls, multilingual.calls) == (2, 1)
    detecting = RecognizerRouter(english, multilingual, unset=None)
    assert detecting.recognizer_for(None) is multilingual
