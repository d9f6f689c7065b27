"""Semantic endpointing on scripted timelines: the end-of-turn score and the speculative words decide how long the
silence must last; server_vad keeps its plain silence."""

from __future__ import annotations

from bargein.session import core as dx
from bargein.session.core.endpointing import SEMANTIC_PRESETS, TurnEvidence, endpoint_silence_ms
from bargein.values import Transcript
from tests.support.timelines import Listening, of

SEMANTIC = dx.TurnSettings(endpointing=dx.Endpointing(eagerness="auto"))
# end-of-turn probabilities and words recorded by bench/quality/endpoint_quality.py on Kokoro clips (voice heart)
COMPLETE = (0.9897, "Set an alarm for 7.30.")
"""'Set an alarm for seven thirty.' said whole, at its first silence."""
PAUSED = (0.6788, "Set an alarm for.")
"""'Set an alarm for... seven thirty.' at the hesitation: Smart Turn is unsure, the words lead on."""
UNSURE = (0.1605, "How long does it take to?")


def hear(t: Listening, item_id: str, recorded: tuple[float, str]) -> None:
    """The shell's answers to SilenceBegan and ScoreTurnEnd: the end-of-turn score, then the speculative words."""
    began = of(t.actions, dx.SilenceBegan)[-1]
    assert of(t.actions, dx.ScoreTurnEnd)[-1] == dx.ScoreTurnEnd(item_id, began.at_ms), "semantic_vad scores at once"
    t.feed(dx.TurnEndScored(item_id, began.at_ms, recorded[0]))
    t.feed(dx.GuessTranscribed(item_id, Transcript(recorded[1])))


def test_semantic_endpoint_commits_early_on_a_complete_utterance() -> None:
    t = Listening(SEMANTIC)
    t.speech(1600)
    t.silence(32)
    hear(t, "item_1", COMPLETE)
    assert of(t.silence(96), dx.AwaitClassification), "finished by sound and words: 100 ms of silence ends it"


def test_semantic_endpoint_waits_through_a_pause_in_an_unfinished_utterance() -> None:
    for recorded in (PAUSED, UNSURE):
        t = Listening(SEMANTIC)
        t.speech(1280)
        t.silence(32)
        hear(t, "item_1", recorded)
        assert not of(t.silence(1200), dx.CommitBuffer), f"{recorded[1]!r} goes on: no cut-off in 1.2 s"
        t.speech(800)  # "... seven thirty."
        t.silence(32)
        hear(t, "item_1", COMPLETE)
        commit = of(t.silence(96), dx.CommitBuffer)
        assert [c.item_id for c in commit] == ["item_1"], "the whole utterance is one turn"


def test_semantic_endpoint_waits_until_both_witnesses_have_answered() -> None:
    t = Listening(SEMANTIC)
    t.speech(1280)
    t.silence(32)
    began = of(t.actions, dx.SilenceBegan)[-1]
    t.feed(dx.TurnEndScored("item_1", began.at_ms, COMPLETE[0]))
    assert not of(t.silence(640), dx.CommitBuffer), "no words yet: the sound alone does not end the turn"
    t.feed(dx.PartialTranscript("item_1", COMPLETE[1]))
    assert not of(t.silence(32), dx.CommitBuffer), "a partial may predate the silence: not the words of it"
    commit = of(t.feed(dx.GuessTranscribed("item_1", Transcript(COMPLETE[1]))), dx.CommitBuffer)
    assert commit and commit[0].end_ms == t.now_ms, "the silence is long enough already: it ends at the answer"


def test_a_score_for_an_earlier_silence_does_not_count() -> None:
    t = Listening(SEMANTIC)
    t.speech(640)
    t.silence(64)
    stale = of(t.actions, dx.SilenceBegan)[-1]
    t.speech(320)
    t.silence(32)
    t.feed(dx.TurnEndScored("item_1", stale.at_ms, 0.99))  # late answer about the first pause
    t.feed(dx.GuessTranscribed("item_1", Transcript("Turn off the lights.")))
    assert not of(t.silence(640), dx.CommitBuffer)


def test_server_vad_keeps_plain_silence_and_asks_for_no_score() -> None:
    t = Listening()
    t.speech(640)
    assert of(t.silence(32), dx.SilenceBegan)
    assert of(t.silence(480), dx.CommitBuffer) and not of(t.actions, dx.ScoreTurnEnd)


def test_endpoint_silence_policy() -> None:
    finished = TurnEvidence(0.0, 0.99, "What time is it?")
    leads_on = TurnEvidence(0.0, 0.99, "I want to book a table for.")
    assert endpoint_silence_ms(500, eagerness=None, evidence=finished, confirm=False) == 500
    assert endpoint_silence_ms(500, eagerness="auto", evidence=finished, confirm=False) == 100
    assert endpoint_silence_ms(500, eagerness="auto", evidence=leads_on, confirm=False) == 1500
    assert endpoint_silence_ms(500, eagerness="auto", evidence=TurnEvidence(), confirm=False) == 1500
    assert endpoint_silence_ms(500, eagerness="low", evidence=finished, confirm=False) == 300
    assert endpoint_silence_ms(500, eagerness="high", evidence=leads_on, confirm=False) == 1200
    assert endpoint_silence_ms(500, eagerness=None, evidence=None, confirm=True) == 1000
    unsure = TurnEvidence(0.0, 0.7, "Could you turn the volume")
    doubtful = TurnEvidence(0.0, 0.3, "Could you turn the volume")
    assert endpoint_silence_ms(500, eagerness="high", evidence=unsure, confirm=False) == 500, "the middle wait"
    assert endpoint_silence_ms(500, eagerness="high", evidence=doubtful, confirm=False) == 1200
    assert endpoint_silence_ms(500, eagerness="auto", evidence=unsure, confirm=False) == 1500
    assert endpoint_silence_ms(500, eagerness="low", evidence=unsure, confirm=False) == 1000


def test_graded_wait_orders_the_silences() -> None:
    for name, preset in SEMANTIC_PRESETS.items():
        assert preset.low <= preset.high and preset.short_ms <= preset.middle_ms <= preset.long_ms, name
        assert preset.silence_ms(preset.high, "What time is it?") == preset.short_ms
        assert preset.silence_ms(preset.low, "What time is it?") in (preset.middle_ms, preset.short_ms)
        assert preset.silence_ms(0.0, "What time is it?") == preset.long_ms
        assert preset.silence_ms(1.0, "a table for") == preset.long_ms, "words that lead on always wait long"
        assert preset.silence_ms(None, "What time is it?") == preset.long_ms
        assert preset.silence_ms(1.0, None) == preset.long_ms
