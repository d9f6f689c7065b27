"""The tiered default endpoint: 500 ms of silence unless Smart Turn and the speculative words agree.

Pure timelines with end-of-turn probabilities and Whisper tiny.en words recorded by bench/quality/endpoint_quality.py
at the first silence of real clips, then the session: the default server_vad follows the tiers where the
end-of-turn model is loaded, a client's own ``silence_duration_ms`` means plain silence, and the speech
made privately before an early commit reaches the client only after it.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from bargein.audio.codecs import float_to_int16
from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.fakes import FakeEndOfTurn, FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.session import core as dx
from bargein.session import realtime_session
from bargein.session.core.endpointing import DEFAULT_TIERS, leads_on, reads_finished, trails_off
from bargein.session.core.settings import plain_silence_after
from bargein.session.outbound import Outbound, Outgoing
from bargein.values import Transcript, WordTiming
from tests.session.test_speculative_speech import LoggedSynthesizer
from tests.support.realtime_client import EventLog, collect, openai_client, stream_realtime
from tests.support.server import free_port, running_server
from tests.support.session_harness import Harness
from tests.support.timelines import Listening, of
from tests.support.tones import quiet, stream, tone

TIERED = dx.TurnSettings(endpointing=dx.Endpointing(tiers=DEFAULT_TIERS))
# (Smart Turn probability, Whisper tiny.en words) at the first silence, recorded on the endpoint set
REAL_COMPLETE = (0.966, "And Mr. John Dashwood had then leisure to consider how much there might be "
                        "prudently in his power to do for them.")
"""LibriVox 0870 said whole (real speech, a held-out clip)."""
REAL_PAUSED = (0.1605, "And Mr. John Dashwood had then")
"""The same sentence with a pause spliced in after "then": the sound and the words both say unfinished."""
LEADS_ON = (0.7722, "I want a book a table for.")
"""Kokoro at the hesitation of "I want to book a table for... four people.": the words lead on."""
UNSURE_FINISHED = (0.06, "He was not an ill-disposed young man.")
"""LibriVox 0880 said whole: the words read finished, the sound says not: neither tier, plain silence."""


def hear(t: Listening, recorded: tuple[float, str]) -> list[dx.Action]:
    """The shell's two answers to the last SilenceBegan, once the machine has asked for the score; the actions
    they caused."""
    began = of(t.actions, dx.SilenceBegan)[-1]
    while not of(t.actions, dx.ScoreTurnEnd) or of(t.actions, dx.ScoreTurnEnd)[-1].at_ms != began.at_ms:
        assert t.now_ms - began.at_ms < DEFAULT_TIERS.score_after_ms, "asked once the silence lasted long enough"
        t.silence(32)
    return (t.feed(dx.TurnEndScored(began.item_id, began.at_ms, recorded[0]))
            + t.feed(dx.GuessTranscribed(began.item_id, Transcript(recorded[1]))))


def silence_until_commit(t: Listening, limit_ms: float = 3000) -> float | None:
    """Silence frame by frame until the turn is committed; the silence it took (ms), or None."""
    began = of(t.actions, dx.SilenceBegan)[-1].at_ms
    if of(t.actions, dx.CommitBuffer):
        return of(t.actions, dx.CommitBuffer)[-1].end_ms - began  # type: ignore[operator, no-any-return]
    while t.now_ms - began < limit_ms:
        if commit := of(t.silence(32), dx.CommitBuffer):
            return commit[0].end_ms - began  # type: ignore[no-any-return]
    return None


def test_the_tiers_by_recorded_evidence() -> None:
    assert DEFAULT_TIERS.silence_ms(*REAL_COMPLETE) == DEFAULT_TIERS.short_ms < 500
    assert DEFAULT_TIERS.silence_ms(*REAL_PAUSED) == DEFAULT_TIERS.long_ms > 500
    assert DEFAULT_TIERS.silence_ms(*LEADS_ON) == DEFAULT_TIERS.long_ms
    assert DEFAULT_TIERS.silence_ms(*UNSURE_FINISHED) == 500
    assert DEFAULT_TIERS.silence_ms(None, REAL_COMPLETE[1]) == 500, "no score yet: plain silence, not longer"
    assert DEFAULT_TIERS.silence_ms(REAL_COMPLETE[0], None) == DEFAULT_TIERS.long_ms, \
        "no words yet: they may lead on (issue 43), so the long tier, which their arrival re-checks"
    assert DEFAULT_TIERS.silence_ms(0.99, "Yes.") == 500, "a short answer is not held back, nor rushed"
    assert DEFAULT_TIERS.silence_ms(0.99, "I want to book a table for four.") == DEFAULT_TIERS.short_ms
    assert DEFAULT_TIERS.silence_ms(0.99, "I want to book a table for.") == DEFAULT_TIERS.long_ms


def test_what_reads_finished() -> None:
    assert trails_off("And Mr. John Dashwood had then") and trails_off("I want a book a table for...")
    assert not trails_off("What time is it?") and not trails_off('He said "stop."')
    assert reads_finished("Can you call the dentist tomorrow?", 4)
    assert not reads_finished("Call the dentist.", 4), "too few words to be sure"
    assert not reads_finished("Can you remind me to?", 4), "ends on a word that leads on"


def test_the_sound_is_scored_once_the_silence_has_lasted_long_enough_to_matter() -> None:
    t = Listening(TIERED)
    t.speech(1600)
    after = DEFAULT_TIERS.score_after_ms
    assert 0 < after < DEFAULT_TIERS.short_ms
    began = of(t.silence(after - 32), dx.SilenceBegan)[0]
    assert not of(t.actions, dx.ScoreTurnEnd), "a pause the speech resumes from is not scored"
    t.speech(320)
    assert not of(t.actions, dx.ScoreTurnEnd)
    again = of(t.silence(after), dx.SilenceBegan)[0]
    asked = of(t.actions, dx.ScoreTurnEnd)
    assert asked == [dx.ScoreTurnEnd(again.item_id, again.at_ms, optional=True)], \
        "once, for the silence's start, not its end; the tiers can do without it (plain silence)"
    assert again.at_ms > began.at_ms and t.now_ms - again.at_ms == after
    t.silence(320)
    assert len(of(t.actions, dx.ScoreTurnEnd)) == 1


def test_a_complete_utterance_is_committed_after_the_short_silence() -> None:
    t = Listening(TIERED)
    t.speech(2400)
    t.silence(32)
    hear(t, REAL_COMPLETE)
    assert silence_until_commit(t) == pytest.approx(DEFAULT_TIERS.short_ms, abs=32)


def test_evidence_that_comes_late_ends_an_already_long_silence_at_once() -> None:
    t = Listening(TIERED)
    t.speech(2400)
    t.silence(320)  # recognition took 300 ms: the short silence has passed meanwhile
    commit = of(hear(t, REAL_COMPLETE), dx.CommitBuffer)
    assert commit and commit[0].end_ms == t.now_ms


def test_an_incomplete_utterance_waits_past_the_plain_silence_for_the_rest() -> None:
    for paused in (REAL_PAUSED, LEADS_ON):
        t = Listening(TIERED)
        t.speech(1600)
        t.silence(32)
        hear(t, paused)
        assert not of(t.silence(1200), dx.CommitBuffer), f"{paused[1]!r} goes on: no cut-off at 500 ms"
        t.speech(1200)
        t.silence(32)
        hear(t, REAL_COMPLETE)
        commit = silence_until_commit(t)
        assert commit is not None and commit < 500 and len(of(t.actions, dx.CommitBuffer)) == 1


def test_without_agreement_the_turn_waits_the_plain_silence() -> None:
    t = Listening(TIERED)
    t.speech(1600)
    t.silence(32)
    hear(t, UNSURE_FINISHED)
    assert silence_until_commit(t) == pytest.approx(500, abs=32)


def test_without_its_words_the_turn_waits_the_long_tier_at_most() -> None:
    t = Listening(TIERED)
    t.speech(1600)
    t.silence(32)
    assert silence_until_commit(t) == pytest.approx(DEFAULT_TIERS.long_ms, abs=32), \
        "a guess that never comes back: the long tier, not an answer to words that may lead on"


def test_words_that_lead_on_wait_the_long_tier_however_sure_the_sound_is() -> None:
    for words in ("I need a table for", "Can you remind me to.", "I'd like the table to be.", "Tell me about,",
                  "Can you please"):
        t = Listening(TIERED)
        t.speech(1600)
        t.silence(32)
        hear(t, (0.99, words))
        assert not of(t.silence(1200), dx.CommitBuffer), f"{words!r}: no cut-off however sure Smart Turn is"
        assert silence_until_commit(t) == pytest.approx(DEFAULT_TIERS.long_ms, abs=32)


def test_a_sure_score_before_the_words_does_not_end_the_turn_until_they_read_finished() -> None:
    t = Listening(TIERED)
    t.speech(1600)
    began = of(t.silence(32), dx.SilenceBegan)[0]
    t.silence(DEFAULT_TIERS.score_after_ms)
    t.feed(dx.TurnEndScored(began.item_id, began.at_ms, 0.99))
    assert not of(t.silence(640), dx.CommitBuffer), "the guess is late: no answer at the plain 500 ms"
    t.speech(320)  # "... four people tonight": the words came back leading on, and the user went on
    t.silence(32)
    hear(t, REAL_COMPLETE)
    assert silence_until_commit(t) == pytest.approx(DEFAULT_TIERS.short_ms, abs=32)
    assert len(of(t.actions, dx.CommitBuffer)) == 1


TIDIED = (0.19, Transcript("My flight leads.", words=(
    WordTiming("My", 0, 300, 0.93), WordTiming("flight", 300, 700, 0.88), WordTiming("leads.", 1080, 1640, 0.12))))
"""Whisper tiny.en at the hesitation of "My flight leaves at... ten in the morning." (eSpeak NG, issue 43's training
split): the word that leads on is gone, and the recogniser doubts the word it wrote in its place."""
SURE = (0.19, Transcript("My flight leads.", words=(
    WordTiming("My", 0, 300, 0.93), WordTiming("flight", 300, 700, 0.88), WordTiming("leads.", 1080, 1640, 0.95))))


def test_a_last_word_the_recogniser_doubts_waits_the_long_tier() -> None:
    assert DEFAULT_TIERS.silence_ms(0.19, "My flight leads.", 0.12) == DEFAULT_TIERS.long_ms
    assert DEFAULT_TIERS.silence_ms(0.19, "My flight leads.", 0.95) == 500, "a sure word: the words as they read"
    assert DEFAULT_TIERS.silence_ms(0.99, "Can you tell me the weather for Friday?", 0.96) == DEFAULT_TIERS.short_ms
    assert DEFAULT_TIERS.silence_ms(0.99, "Can you tell me the weather for Friday?", None) == DEFAULT_TIERS.short_ms
    assert DEFAULT_TIERS.silence_ms(0.98, "Write a note about the budget meeting.", 0.27) == DEFAULT_TIERS.short_ms, \
        "Smart Turn and the words agree the turn is finished: a doubted word does not overrule both"
    assert DEFAULT_TIERS.silence_ms(None, "My flight leads.", 0.12) == DEFAULT_TIERS.long_ms, "no score: plain, doubted"
    for recorded, wanted in ((TIDIED, DEFAULT_TIERS.long_ms), (SURE, 500)):
        t = Listening(TIERED)
        t.speech(1600)
        began = of(t.silence(32), dx.SilenceBegan)[0]
        t.silence(DEFAULT_TIERS.score_after_ms)
        t.feed(dx.TurnEndScored(began.item_id, began.at_ms, recorded[0]))
        t.feed(dx.GuessTranscribed(began.item_id, recorded[1]))
        assert silence_until_commit(t) == pytest.approx(wanted, abs=32), recorded[1].words[-1]


def test_what_leads_on() -> None:
    for words in ("a table for", "a table for.", "remind me to", "can you please", "the table to be.",
                  "I was thinking that maybe we could.", "I need a table for,", "I need a table..."):
        assert leads_on(words), words
    for words in ("Repeat that.", "Why?", "Turn it on.", "Yes, I can.", "Do you know where it is?",
                  "Two coffees, please.", "Could you speak slower please?", "A table for four."):
        assert not leads_on(words), words


@pytest.mark.parametrize(("words", "leads"), [
    ("Tell me a joke about.", True), ("Is there a pharmacy near", True), ("Walk towards.", True),
    ("Send it via.", True), ("What is it about?", True),  # a stranded preposition, as "what is it for?" already
    ("Come over.", False), ("See you after.", False), ("Look around.", False), ("Turn the lights off.", False),
])
def test_prepositions_lead_on_as_a_class_but_not_particles(words: str, leads: bool) -> None:
    assert leads_on(words) is leads


@pytest.mark.parametrize(("words", "leads"), [
    ("Could you please?", True), ("Can you please?", True), ("can you please.", True),
    ("Would you, please?", False), ("Could you speak slower please?", False), ("Thank you, please.", False),
])
def test_a_please_right_after_you_leads_on_whatever_the_mark(words: str, leads: bool) -> None:
    assert leads_on(words) is leads


def test_only_a_clients_own_silence_means_plain_silence() -> None:
    server_vad = {"audio": {"input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 500}}}}
    assert plain_silence_after(server_vad, False)
    assert plain_silence_after({"instructions": "be brief"}, True), "turn detection untouched: unchanged"
    assert plain_silence_after({"audio": {"input": {"turn_detection": {"threshold": 0.6}}}}, True)
    assert not plain_silence_after({"audio": {"input": {"turn_detection": {"type": "server_vad"}}}}, False)
    assert not plain_silence_after({"audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}}, True)
    assert not plain_silence_after({"audio": {"input": {"turn_detection": None}}}, True)


# -- the session ---------------------------------------------------------------------------------------


def session(log: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch, probability: float,
            words: str = "Can you call the dentist tomorrow?", *, tiered: bool = True) -> Harness:
    class LoggedOutbound(Outbound):
        def put(self, item: Outgoing) -> None:
            log.append(("event", item.event["type"]))
            super().put(item)

    monkeypatch.setattr(realtime_session, "Outbound", LoggedOutbound)
    engines = Engines(FakeVad(), FakeRecognizer((words,)), FakeLanguageModel(filler="Sure. I will do that."),
                      LoggedSynthesizer(log), FakeEndOfTurn((probability,)))
    return Harness(engines, tiered_default=tiered)


# two bursts of speech 350 ms apart: one turn under plain 500 ms silence, two if the first pause ends the turn
TWO_BURSTS = np.concatenate([quiet(0.3), tone(0.8), quiet(0.35), tone(0.8, 220.0), quiet(1.5)])


async def test_the_default_session_commits_early_and_speaks_only_after_the_commit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[tuple[str, str]] = []
    h = session(log, monkeypatch, 0.99)
    created = (await h.drain(until="session.created"))[-1]
    assert created["session"]["audio"]["input"]["turn_detection"]["type"] == "server_vad"
    await stream(h, TWO_BURSTS)
    await h.drain(until="response.done")
    assert h.types().count("input_audio_buffer.committed") >= 2, "finished by sound and words: a short pause ends it"
    first_commit = log.index(("event", "input_audio_buffer.committed"))
    assert ("event", "response.output_audio.delta") not in log[:first_commit], "no speech before the commit"
    assert h.session.speculation.tts_started >= 1
    await h.session.close()


async def test_a_clients_own_silence_is_plain_silence(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[tuple[str, str]] = []
    h = session(log, monkeypatch, 0.99)
    await h.send(type="session.update", session={"audio": {"input": {"turn_detection": {
        "type": "server_vad", "silence_duration_ms": 500}}}})
    await stream(h, TWO_BURSTS)
    await h.drain(until="response.done")
    assert h.types().count("input_audio_buffer.committed") == 1, "500 ms asked: the 350 ms pause is no end"
    await h.session.close()


async def test_a_server_that_chose_plain_silence_never_scores_a_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[tuple[str, str]] = []
    h = session(log, monkeypatch, 0.99, tiered=False)
    await stream(h, TWO_BURSTS)
    await h.drain(until="response.done")
    assert h.types().count("input_audio_buffer.committed") == 1, "plain 500 ms: the 350 ms pause is no end"
    turn_model = h.session.tracker.turn_model
    assert isinstance(turn_model, FakeEndOfTurn) and turn_model.calls == 0, "Smart Turn never ran"
    await h.session.close()


def test_the_serve_command_can_choose_plain_silence() -> None:
    from bargein.cli import _parser

    assert _parser().parse_args(["serve", "--plain-silence"]).tiered_endpoint is False
    assert _parser().parse_args(["serve"]).tiered_endpoint is None, "unset: the setting's default (tiered) holds"
    assert Settings.model_fields["tiered_endpoint"].default is True
    assert not Settings(tiered_endpoint=False).tiered_endpoint


@pytest.mark.parametrize("tiered", [True, False])
async def test_the_server_passes_its_choice_to_every_session(tiered: bool) -> None:
    turn_model = FakeEndOfTurn((0.99,))
    engines = Engines(FakeVad(), FakeRecognizer(("Can you call the dentist tomorrow?",)), FakeLanguageModel(),
                      FakeSynthesizer(), turn_model)
    with running_server(engines, Settings(port=free_port(), tiered_endpoint=tiered)) as host:
        async with openai_client(host).realtime.connect(model="bargein") as connection:
            log = EventLog()
            reader = asyncio.create_task(collect(connection, log))
            await log.wait_for(lambda e: e["type"] == "session.created")
            after_warm_up = turn_model.calls
            await stream_realtime(connection, float_to_int16(TWO_BURSTS).tobytes())
            await log.wait_for(lambda e: e["type"] == "input_audio_buffer.committed")
            reader.cancel()
    scored = turn_model.calls - after_warm_up
    assert (scored > 0) == tiered, f"{scored} pauses scored on a server with tiered_endpoint={tiered}"


async def test_on_a_plain_silence_server_a_client_can_still_ask_for_semantic_vad(
        monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[tuple[str, str]] = []
    h = session(log, monkeypatch, 0.99, tiered=False)
    await h.send(type="session.update", session={"audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}})
    await stream(h, TWO_BURSTS)
    await h.drain(until="response.done")
    turn_model = h.session.tracker.turn_model
    assert isinstance(turn_model, FakeEndOfTurn) and turn_model.calls >= 1, "semantic_vad scores its pauses"
    await h.session.close()


async def test_an_unfinished_sound_keeps_the_default_session_listening(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[tuple[str, str]] = []
    h = session(log, monkeypatch, 0.2, words="Can you call the dentist")
    # a 700 ms pause: plain silence would cut here; sound and words both say the user goes on
    await stream(h, np.concatenate([quiet(0.3), tone(0.8), quiet(0.7), tone(0.8, 220.0), quiet(2.2)]))
    await h.drain(until="response.done")
    assert h.types().count("input_audio_buffer.committed") == 1
    assert h.session.speculation.tts_used <= 1, "the speech made at the first pause was not what was used"
    commit = log.index(("event", "input_audio_buffer.committed"))
    assert ("event", "response.output_audio.delta") not in log[:commit]
    await h.session.close()
