"""The language model's end-of-sentence estimate in the tiered endpoint (issue 43): asked with the pause's speculative
reply, it turns the plain silence into the long one when it reads the words as leading on, and only for the guess it
was read for; an estimate not back yet, or for older words, leaves the tiers as they are. Pure timelines."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bargein.session import core as dx
from bargein.session.core.endpointing import DEFAULT_TIERS, TurnEvidence
from bargein.values import Transcript
from tests.support.timelines import Listening, of

TIERED = dx.TurnSettings(endpointing=dx.Endpointing(tiers=DEFAULT_TIERS))
TIDIED = (0.82, "Can you tell me?")
"""Whisper tiny.en at the hesitation of "Can you tell me the ... weather for Friday?" (issue 43's training split,
eSpeak NG): the words read as a finished question, Smart Turn is unsure, and the model puts 0.0004 on an end."""
LEADS_ON = 0.0004
ENDS = 0.6


def paused_at_guess(words: str = TIDIED[1], probability: float = TIDIED[0]) -> tuple[Listening, str, list[dx.Action]]:
    """A turn at its first silence, scored and guessed; the timeline, the turn's item and the guess's actions."""
    t = Listening(TIERED)
    t.frames(0.9, 1600, energy_db=-25.0)  # a voice clear of the room's: the guess reads as a query
    began = of(t.silence(32), dx.SilenceBegan)[0]
    t.silence(DEFAULT_TIERS.score_after_ms)
    t.feed(dx.TurnEndScored(began.item_id, began.at_ms, probability))
    return t, began.item_id, t.feed(dx.GuessTranscribed(began.item_id, Transcript(words)))


def silence_until_commit(t: Listening, began_ms: float, limit_ms: float = 3000) -> float | None:
    """Silence frame by frame until the turn is committed; the silence it took (ms), or None."""
    while t.now_ms - began_ms < limit_ms:
        if commit := of(t.silence(32), dx.CommitBuffer):
            return commit[0].end_ms - began_ms  # type: ignore[no-any-return]
    return None


def test_with_the_plain_tier_only_the_estimate_turns_only_the_plain_silence_into_the_long_one() -> None:
    tiers = replace(DEFAULT_TIERS, text_end_short=False)  # the rule before the every-tier one (an option)
    assert tiers.silence_ms(*TIDIED) == 500
    assert tiers.silence_ms(*TIDIED, None, LEADS_ON) == tiers.long_ms
    assert tiers.silence_ms(*TIDIED, None, ENDS) == 500
    assert tiers.silence_ms(*TIDIED, None, tiers.text_end_below) == 500, "at the threshold: not under it"
    assert tiers.silence_ms(None, TIDIED[1], None, LEADS_ON) == tiers.long_ms, "no score yet: plain, then long"
    assert tiers.silence_ms(0.99, "Can you tell me the weather for Friday?", None, LEADS_ON) == tiers.short_ms, \
        "Smart Turn and the words agree the turn is finished: the estimate does not overrule both"
    assert tiers.silence_ms(0.99, "I need a table for", None, ENDS) == tiers.long_ms, "words that lead on still do"
    assert replace(tiers, text_end_below=None).silence_ms(*TIDIED, None, LEADS_ON) == 500, "switched off"


def test_the_evidence_keeps_an_estimate_only_for_its_own_words() -> None:
    evidence = TurnEvidence()
    evidence.silence(1000.0)
    evidence.take(dx.GuessTranscribed("item", Transcript(" Can you tell me? ")))
    evidence.take(dx.TextEndEstimate("item", "Can you", LEADS_ON))
    assert evidence.text_end is None, "an estimate for other words"
    evidence.take(dx.TextEndEstimate("item", "Can you tell me?", LEADS_ON))
    assert evidence.text_end == LEADS_ON
    evidence.take(dx.GuessTranscribed("item", Transcript(" Can you tell me? "), primed=Transcript("Can you")))
    assert evidence.text_end == LEADS_ON, "the same words again (with the loud stretch's, over a reply): it holds"
    evidence.take(dx.GuessTranscribed("item", Transcript("Can you tell me the weather?")))
    assert evidence.text_end is None, "newer words: the estimate was for the older ones"
    evidence.take(dx.TextEndEstimate("item", "Can you tell me the weather?", ENDS))
    evidence.silence(3000.0)
    assert evidence.text_end is None, "a new silence: nothing said about the last one counts"


def test_the_tiered_endpoint_asks_for_the_estimate_with_the_speculative_reply() -> None:
    _, item_id, actions = paused_at_guess()
    assert of(actions, dx.PrefetchReply) == [dx.PrefetchReply(item_id, TIDIED[1], estimate_end=True)]
    plain = Listening(dx.TurnSettings())
    plain.frames(0.9, 1600, energy_db=-25.0)
    plain.silence(32)
    began = of(plain.actions, dx.SilenceBegan)[0]
    prefetch = of(plain.feed(dx.GuessTranscribed(began.item_id, Transcript(TIDIED[1]))), dx.PrefetchReply)
    assert prefetch and not prefetch[0].estimate_end, "plain server_vad does not weigh it: nobody asks"


@pytest.mark.parametrize(("estimate", "wanted"), [
    (LEADS_ON, DEFAULT_TIERS.long_ms),  # read as leading on: the rest of the sentence is waited for
    (ENDS, 500),  # read as finished: the plain silence
    (None, 500),  # never back (a remote model, or it failed): the tiers as they were
])
def test_an_estimate_back_in_time_sets_the_wait(estimate: float | None, wanted: int) -> None:
    t, item_id, _ = paused_at_guess()
    began = of(t.actions, dx.SilenceBegan)[0].at_ms
    t.silence(96)
    if estimate is not None:
        assert not of(t.feed(dx.TextEndEstimate(item_id, TIDIED[1], estimate)), dx.CommitBuffer)
    assert silence_until_commit(t, began) == pytest.approx(wanted, abs=32)


def test_an_estimate_for_an_older_guess_or_too_late_changes_nothing() -> None:
    t, item_id, _ = paused_at_guess()
    began = of(t.actions, dx.SilenceBegan)[0].at_ms
    t.feed(dx.TextEndEstimate(item_id, "Can you", LEADS_ON))
    t.feed(dx.TextEndEstimate("another turn", TIDIED[1], LEADS_ON))
    assert silence_until_commit(t, began) == pytest.approx(500, abs=32)
    assert not of(t.feed(dx.TextEndEstimate(item_id, TIDIED[1], LEADS_ON)), dx.CommitBuffer), \
        "the turn was committed before it came: nothing to change"
