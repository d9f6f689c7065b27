"""The language model's end-of-sentence estimate at the short tier too (issue 43): where Smart Turn and the words
agree a turn is finished, the short silence waits for the estimate asked with the pause's speculative reply (no
longer than the plain silence), ends the turn when it comes back finished, and waits the long silence when it reads
the words as leading on. Without an estimate coming (none asked, the option off, or one reported lost) the short
silence is what it always was. Pure timelines."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bargein.session import core as dx
from bargein.session.core.endpointing import DEFAULT_TIERS, TieredPreset, TurnEvidence
from bargein.values import Transcript
from tests.support.timelines import Listening, of

AGREED = (0.99, "How many calories are in?")
"""Issue 43's fourth set: Smart Turn (0.95-0.99) and the words agreed "How many calories are in ... a banana?" was
finished at its pause; the 0.5B model put under 0.025 on an end there."""
LEADS_ON = 0.002
ENDS = 0.9
SHORT, PLAIN, LONG = DEFAULT_TIERS.short_ms, DEFAULT_TIERS.middle_ms, DEFAULT_TIERS.long_ms


def guessed(tiers: TieredPreset = DEFAULT_TIERS) -> tuple[Listening, str, float, list[dx.Action]]:
    """A turn 128 ms into its first silence, scored finished and guessed; the timeline, its item, where the silence
    began and the guess's actions."""
    t = Listening(dx.TurnSettings(endpointing=dx.Endpointing(tiers=tiers)))
    t.frames(0.9, 1600, energy_db=-25.0)  # a voice clear of the room's: the guess reads as a query
    began = of(t.silence(32), dx.SilenceBegan)[0]
    t.silence(tiers.score_after_ms)
    t.feed(dx.TurnEndScored(began.item_id, began.at_ms, AGREED[0]))
    return t, began.item_id, began.at_ms, t.feed(dx.GuessTranscribed(began.item_id, Transcript(AGREED[1])))


def silence_until_commit(t: Listening, began_ms: float, limit_ms: float = 3000) -> float | None:
    """Silence frame by frame until the turn is committed; the silence it took (ms), or None."""
    while t.now_ms - began_ms < limit_ms:
        if commit := of(t.silence(32), dx.CommitBuffer):
            return commit[0].end_ms - began_ms  # type: ignore[no-any-return]
    return None


def silence_to(t: Listening, began_ms: float, until_ms: float) -> list[dx.Action]:
    """Silence frame by frame up to ``until_ms`` into it; the actions on the way."""
    actions: list[dx.Action] = []
    while t.now_ms - began_ms < until_ms:
        actions += t.silence(32)
    return actions


def test_the_tiers_read_a_pending_estimate_as_the_plain_silence_and_a_low_one_as_the_long() -> None:
    tiers = DEFAULT_TIERS
    assert tiers.silence_ms(*AGREED) == SHORT, "nothing asked: the short silence"
    assert tiers.silence_ms(*AGREED, text_end_pending=True) == PLAIN
    assert tiers.silence_ms(*AGREED, None, ENDS, text_end_pending=True) == SHORT, "back: no longer pending"
    assert tiers.silence_ms(*AGREED, None, LEADS_ON) == LONG
    assert tiers.silence_ms(0.5, AGREED[1], text_end_pending=True) == PLAIN, "the plain silence does not wait"
    assert tiers.silence_ms(0.99, "I need a table for", text_end_pending=True) == LONG
    off = replace(tiers, text_end_short=False)
    assert off.silence_ms(*AGREED, None, LEADS_ON, text_end_pending=True) == SHORT, "plain tier only: as before"
    none = replace(tiers, text_end_below=None)
    assert none.silence_ms(*AGREED, None, LEADS_ON, text_end_pending=True) == SHORT, "no estimate weighed"


def test_the_short_tier_waits_for_the_estimate_asked_with_the_speculative_reply() -> None:
    t, item_id, began, actions = guessed()
    assert of(actions, dx.PrefetchReply) == [dx.PrefetchReply(item_id, AGREED[1], estimate_end=True)]
    assert not of(silence_to(t, began, 448), dx.CommitBuffer), "past the short silence: the estimate is coming"
    committed = of(t.feed(dx.TextEndEstimate(item_id, AGREED[1], ENDS)), dx.CommitBuffer)
    assert committed and committed[0].end_ms - began == pytest.approx(448, abs=32), "ends as it comes back"


def test_an_estimate_back_before_the_short_silence_leaves_it() -> None:
    t, item_id, began, _ = guessed()
    assert not of(t.feed(dx.TextEndEstimate(item_id, AGREED[1], ENDS)), dx.CommitBuffer)
    assert silence_until_commit(t, began) == pytest.approx(SHORT, abs=32)


def test_an_estimate_that_the_words_lead_on_turns_the_short_silence_into_the_long_one() -> None:
    t, item_id, began, _ = guessed()
    silence_to(t, began, 288)
    assert not of(t.feed(dx.TextEndEstimate(item_id, AGREED[1], LEADS_ON)), dx.CommitBuffer)
    assert silence_until_commit(t, began) == pytest.approx(LONG, abs=32)


def test_an_estimate_that_never_comes_holds_the_turn_no_longer_than_the_plain_silence() -> None:
    t, _, began, _ = guessed()
    assert silence_until_commit(t, began) == pytest.approx(PLAIN, abs=32)


def test_an_estimate_reported_lost_ends_the_wait_at_once() -> None:
    t, item_id, began, _ = guessed()
    silence_to(t, began, 288)
    committed = of(t.feed(dx.TextEndEstimate(item_id, AGREED[1], None)), dx.CommitBuffer)
    assert committed and committed[0].end_ms - began == pytest.approx(288, abs=32), "it failed: no wait for it"


def test_an_estimate_for_other_words_does_not_end_the_wait() -> None:
    t, item_id, began, _ = guessed()
    silence_to(t, began, 288)
    assert not of(t.feed(dx.TextEndEstimate(item_id, "How many", None)), dx.CommitBuffer)
    assert not of(t.feed(dx.TextEndEstimate("another turn", AGREED[1], ENDS)), dx.CommitBuffer)
    assert silence_until_commit(t, began) == pytest.approx(PLAIN, abs=32)


@pytest.mark.parametrize("tiers", [replace(DEFAULT_TIERS, text_end_below=None),  # no capability, --no-text-end
                                   replace(DEFAULT_TIERS, text_end_short=False)])  # the plain tier only
def test_without_the_estimate_at_the_short_tier_it_ends_after_the_short_silence(tiers: TieredPreset) -> None:
    t, item_id, began, actions = guessed(tiers)
    assert of(actions, dx.PrefetchReply)[0].estimate_end is (tiers.text_end_below is not None)
    assert silence_until_commit(t, began) == pytest.approx(SHORT, abs=32)
    assert not of(t.feed(dx.TextEndEstimate(item_id, AGREED[1], LEADS_ON)), dx.CommitBuffer), "too late to count"


def test_the_evidence_awaits_an_estimate_only_for_its_own_words_and_silence() -> None:
    evidence = TurnEvidence()
    evidence.silence(1000.0)
    evidence.ask_text_end("How many calories are in?")
    assert not evidence.text_end_pending, "asked before any guess of this silence"
    evidence.take(dx.GuessTranscribed("item", Transcript(" How many calories are in? ")))
    evidence.ask_text_end("How many calories are in?")
    assert evidence.text_end_pending
    evidence.take(dx.TextEndEstimate("item", "How many calories are in?", None))
    assert not evidence.text_end_pending and evidence.text_end is None, "lost: not awaited, nothing known"
    evidence.ask_text_end("How many calories are in?")
    evidence.take(dx.GuessTranscribed("item", Transcript("How many calories are in a banana?")))
    assert not evidence.text_end_pending, "newer words: the estimate asked was for the older ones"
    evidence.ask_text_end("How many calories are in a banana?")
    evidence.silence(3000.0)
    assert not evidence.text_end_pending, "a new silence: nothing asked about the last one is awaited"
