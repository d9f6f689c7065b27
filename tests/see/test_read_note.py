"""A note that changed while the user spoke costs the reply nothing at the silence: the reply quotes the note whose
message the model has already read (unless it is too old, or the newest says the same), a request to read quotes
the newest, and the age the turn's ledger reports is that of the note the reply quotes."""

from __future__ import annotations

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.protocol.session_config import DEFAULT_INSTRUCTIONS
from bargein.see.scene import SceneNote
from bargein.see.shared import Seeing
from bargein.see.vision import VisionSettings
from bargein.session.camera_warms import READ_NOTE_MAX_AGE_S, READ_NOTE_MAX_LAG_S, quotes_read_note
from bargein.session.core import vocabulary as v
from bargein.session.eyes import STALE_NOTE_S
from bargein.session.realtime_session import RealtimeSession
from bargein.values import ChatMessage
from tests.see.test_note_age import Clock, frame_of
from tests.see.test_note_warming import warm_turn
from tests.session.test_prompt_warming import PrefillingModel


def note(text: str, at_ms: float) -> SceneNote:
    return SceneNote((text,), 0, "even light", (), None, at_ms)


def camera_session() -> tuple[RealtimeSession, PrefillingModel, Clock, list[tuple[str, str, int]]]:
    llm, clock, progress = PrefillingModel(), Clock(), []
    session = RealtimeSession(Engines(FakeVad(), FakeRecognizer(("hello",)), llm, FakeSynthesizer(),
                                      see=Seeing(VisionSettings("notes"))))
    session.eyes._clock = clock
    session.eyes._progress = lambda *report: progress.append(report)
    return session, llm, clock, progress


def asked(session: RealtimeSession, words: str) -> list[ChatMessage]:
    return [*session.conversation.chat_messages(session.config.instructions), ChatMessage("user", words)]


def exit_then_gate(session: RealtimeSession, clock: Clock, after_s: float) -> None:
    """EXIT 12 noted (and read: the session's first note), the turn's speech started, GATE 7 noted ``after_s``
    later."""
    session.eyes._noted(note("EXIT 12", 0.0), frame_of(1, 0.0), clock.now)
    session.eyes.on_action(v.SpeechStarted("item_1", 0.0))
    clock.now += after_s
    session.eyes._noted(note("GATE 7", 1000.0 * after_s), frame_of(2, 1000.0 * after_s), clock.now)


def test_the_read_note_is_quoted_only_where_it_differs_from_the_newest_and_is_young_enough() -> None:
    for behind in (False, True):
        assert quotes_read_note("GATE 7", "EXIT 12", 0.8, 0.1, reader_behind=behind)
        assert quotes_read_note("GATE 7", "EXIT 12", READ_NOTE_MAX_AGE_S, 0.1, reader_behind=behind)
        assert not quotes_read_note("GATE 7", "EXIT 12", READ_NOTE_MAX_AGE_S + 0.1, 0.1,
                                    reader_behind=behind)  # too old: the newest, paid for
        assert not quotes_read_note("EXIT 12", "EXIT 12", 0.8, 0.1, reader_behind=behind)  # the same words
        assert not quotes_read_note("GATE 7", None, None, 0.1, reader_behind=behind)  # nothing read after this history


def test_where_the_reader_lags_the_read_note_is_quoted_if_it_is_not_much_older_than_the_newest() -> None:
    """A lagging scene reader (a new scene in every frame) makes every note older than the bound by the silence: the
    read one is quoted where it was in view at most :data:`READ_NOTE_MAX_LAG_S` before the newest one; a reader that
    keeps up (the newest note's scene still in view) has the newest quoted."""
    assert quotes_read_note("GATE 7", "EXIT 12", 1.2 + READ_NOTE_MAX_LAG_S, 1.2, reader_behind=True)
    assert not quotes_read_note("GATE 7", "EXIT 12", 1.2 + READ_NOTE_MAX_LAG_S, 1.2, reader_behind=False)
    assert not quotes_read_note("GATE 7", "EXIT 12", 1.3 + READ_NOTE_MAX_LAG_S, 1.2, reader_behind=True)
    assert not quotes_read_note("EXIT 12", "EXIT 12", 2.0, 1.9, reader_behind=True)


async def test_a_note_new_since_the_last_warm_is_not_read_at_the_silence_and_the_age_is_the_quoted_ones() -> None:
    session, llm, clock, progress = camera_session()
    eyes = session.eyes
    eyes._noted(note("EXIT 12", 0.0), frame_of(1, 0.0), clock.now)
    eyes.on_action(v.SpeechStarted("item_1", 0.0))
    warm_turn(session, "which exit")  # the core's warm reads EXIT 12 with the words so far
    warmed = llm.prefilled[-1][0]
    clock.now += 0.6
    eyes._noted(note("GATE 7", 600.0), frame_of(2, 600.0), clock.now)  # the camera moved on after that warm
    clock.now += 0.4
    eyes.on_action(v.SilenceBegan("item_1", 1000.0))
    guessed = session.replies.with_memory(asked(session, "which exit is it"))  # the head start at the silence
    assert "EXIT 12" in guessed[-2].content and guessed[:-1] == warmed[:-1]  # only the words are new to the model
    clock.now += 0.3
    eyes.on_action(v.CommitBuffer("item_1", 0.0, 1000.0))
    answered = eyes.prompt("resp_1", asked(session, "which exit is it"))
    assert answered == guessed
    assert progress == [("resp_1", "scene_note_age_ms", 1300),  # EXIT 12's frame, not GATE 7's, 1.3 s before
                        ("resp_1", "scene_newest_age_ms", 700)]  # what the newest note's age would have been
    assert "GATE 7" in eyes.context(asked(session, "and now"))[-2].content  # the next turn reads the newest
    await session.close()


async def test_a_read_note_past_the_bound_gives_way_to_the_newest() -> None:
    session, llm, clock, progress = camera_session()
    eyes = session.eyes
    eyes._noted(note("EXIT 12", 0.0), frame_of(1, 0.0), clock.now)
    eyes.on_action(v.SpeechStarted("item_1", 0.0))  # the turn's start warms EXIT 12
    assert "EXIT 12" in llm.prefilled[-1][0][-2].content
    clock.now += READ_NOTE_MAX_LAG_S + 0.5  # the camera showed EXIT 12 that long before GATE 7
    eyes._noted(note("GATE 7", 1750.0), frame_of(2, 1750.0), clock.now)
    clock.now += READ_NOTE_MAX_AGE_S  # the read note is older than the bound at the silence, and than GATE 7 by more
    eyes.on_action(v.SilenceBegan("item_1", 3250.0))
    eyes.on_action(v.CommitBuffer("item_1", 0.0, 3250.0))
    assert "GATE 7" in eyes.prompt("resp_1", asked(session, "which exit is it"))[-2].content
    assert progress == [("resp_1", "scene_note_age_ms", round(1000 * READ_NOTE_MAX_AGE_S))]
    await session.close()


async def test_a_request_to_read_quotes_the_newest_note_and_reports_its_age() -> None:
    """A quoted reading needs no model, so the newest note costs it nothing."""
    session, _llm, clock, progress = camera_session()
    eyes = session.eyes
    exit_then_gate(session, clock, 0.5)
    clock.now += 0.2
    eyes.on_action(v.SilenceBegan("item_1", 700.0))
    eyes.on_action(v.CommitBuffer("item_1", 0.0, 700.0))
    question = asked(session, "what does it say?")
    assert eyes.quote(question, DEFAULT_INSTRUCTIONS) == 'It says: "GATE 7".'
    eyes.prompt("resp_1", question)
    assert progress == [("resp_1", "scene_note_age_ms", 200)]
    await session.close()


async def test_no_warm_since_the_history_changed_quotes_the_newest() -> None:
    session, llm, clock, _progress = camera_session()
    eyes = session.eyes
    eyes._noted(note("EXIT 12", 0.0), frame_of(1, 0.0), clock.now)
    eyes.on_action(v.SpeechStarted("item_1", 0.0))
    assert "EXIT 12" in llm.prefilled[-1][0][-2].content
    eyes.on_action(v.CommitBuffer("item_0", 0.0, 100.0))  # an earlier turn joins the history: nothing read after it
    eyes._noted(note("GATE 7", 500.0), frame_of(2, 500.0), clock.now)
    eyes.on_action(v.SilenceBegan("item_1", 700.0))
    assert "GATE 7" in session.replies.with_memory(asked(session, "which exit"))[-2].content
    await session.close()


async def test_with_a_model_that_cannot_read_ahead_nothing_counts_as_read_and_the_reply_quotes_the_newest() -> None:
    from bargein.engines.fakes import FakeLanguageModel

    session = RealtimeSession(Engines(FakeVad(), FakeRecognizer(("hello",)), FakeLanguageModel(), FakeSynthesizer(),
                                      see=Seeing(VisionSettings("notes"))))
    eyes = session.eyes
    eyes._noted(note("EXIT 12", 0.0), frame_of(1, 0.0), eyes._clock())
    eyes.on_action(v.SpeechStarted("item_1", 0.0))
    warm_turn(session, "which exit")  # the core's warm reaches no model
    eyes._noted(note("GATE 7", 500.0), frame_of(2, 500.0), eyes._clock())
    eyes.on_action(v.SilenceBegan("item_1", 700.0))
    assert "GATE 7" in session.replies.with_memory(asked(session, "which exit"))[-2].content
    await session.close()


async def test_a_warm_skipped_while_the_model_is_busy_leaves_what_the_model_read() -> None:
    """The speculator skips a warm while the model is busy: the note that warm would have read was never read, so
    quoting it would save the silence nothing; the note read before it still saves its facts."""
    session, llm, clock, _progress = camera_session()
    eyes = session.eyes
    exit_then_gate(session, clock, 0.5)  # EXIT 12, the first note, read as it came
    warms = len(llm.prefilled)
    llm.queue_depth = 1  # another session's reply is being written
    warm_turn(session, "which exit")  # the core's warm of GATE 7 and the words: skipped
    assert len(llm.prefilled) == warms
    llm.queue_depth = 0
    clock.now += 0.5
    eyes._noted(note("PLATFORM 4", 1000.0), frame_of(3, 1000.0), clock.now)
    clock.now += 0.2
    eyes.on_action(v.SilenceBegan("item_1", 1200.0))
    quoted = session.replies.with_memory(asked(session, "which exit"))[-2].content
    assert "EXIT 12" in quoted  # read, 1.2 s old; GATE 7 never was
    await session.close()


def lagging_turn(*, behind: bool) -> tuple[RealtimeSession, list[ChatMessage], list[ChatMessage]]:
    """EXIT 12 read as it came; GATE 7 noted a second later; the silence a second after that, with a newer scene
    than GATE 7's waiting to be read (``behind``) or GATE 7's scene still in view. The warmed prompt and the head
    start's."""
    session, llm, clock, _progress = camera_session()
    eyes = session.eyes
    eyes.offer(frame_of(1, 0.0))
    eyes._noted(note("EXIT 12", 0.0), eyes.sampler.newest, clock.now)  # read as it comes
    warmed = llm.prefilled[-1][0]
    eyes.on_action(v.SpeechStarted("item_1", 0.0))
    clock.now += 1.0
    eyes.offer(frame_of(2, 1000.0))
    eyes._noted(note("GATE 7", 1000.0), eyes.sampler.newest, clock.now)
    if behind:
        eyes.offer(frame_of(3, 1500.0))  # the camera moved on again: not read yet
    clock.now += 1.0  # EXIT 12 last shown 2 s ago (past the 1.5 s bound), GATE 7 1 s ago
    eyes.on_action(v.SilenceBegan("item_1", 2000.0))
    return session, warmed, session.replies.with_memory(asked(session, "which exit is it"))


async def test_a_read_note_older_than_the_bound_is_quoted_where_the_reader_lags_and_the_newest_is_not_much_younger(
        ) -> None:
    session, warmed, guessed = lagging_turn(behind=True)
    assert "EXIT 12" in guessed[-2].content and guessed[:-1] == warmed[:-1]  # only the words are new to the model
    progress: list[tuple[str, str, int]] = []
    session.eyes._progress = lambda *report: progress.append(report)
    session.eyes.on_action(v.CommitBuffer("item_1", 0.0, 2000.0))
    session.eyes.prompt("resp_1", asked(session, "which exit is it"))
    assert progress == [("resp_1", "scene_note_age_ms", 2000), ("resp_1", "scene_newest_age_ms", 1000)]
    await session.close()
    session, warmed, guessed = lagging_turn(behind=False)  # the reader keeps up: the newest
    assert "GATE 7" in guessed[-2].content
    await session.close()


async def test_a_read_note_grown_stale_is_not_quoted_however_close_the_newest() -> None:
    """The camera stopped: both notes are older than the stale mark, a second apart; the read one's message would
    now say "from a while ago", which the model never read, so the newest is quoted."""
    session, _llm, clock, _progress = camera_session()
    eyes = session.eyes
    exit_then_gate(session, clock, 1.0)
    clock.now += STALE_NOTE_S + 1.0
    eyes.on_action(v.SilenceBegan("item_1", 12000.0))
    assert "GATE 7" in session.replies.with_memory(asked(session, "which exit"))[-2].content
    await session.close()


async def test_the_first_note_warms_nothing_between_a_turns_silence_and_its_reply_nor_after_the_session_closed() -> (
        None):
    session, llm, _clock, _progress = camera_session()
    eyes = session.eyes
    eyes.on_action(v.SpeechStarted("item_1", 0.0))
    eyes.on_action(v.SilenceBegan("item_1", 900.0))
    eyes._noted(note("EXIT 12", 0.0), frame_of(1, 0.0), eyes._clock())  # the turn's critical path
    assert llm.prefilled == []
    await session.close()
    closed, llm = camera_session()[:2]
    await closed.close()
    closed.eyes._noted(note("EXIT 12", 0.0), frame_of(1, 0.0), closed.eyes._clock())  # a read that was running
    assert llm.prefilled == []


def test_the_quoted_and_the_newest_note_are_one_age_where_the_reply_quotes_the_newest() -> None:
    """Where the pin is the newest note, its two ages at the commit are one figure (read from the clock once), so the
    ledger reports no ``scene_newest_age_ms`` beside it (a clock that moves between two reads made them differ)."""
    from bargein.session.note_pins import NotePins

    now = [10.0]

    def ticking() -> float:
        now[0] += 0.0007  # every read of the clock moves it on, as a real one does
        return now[0]

    shown = note("EXIT 12", 0.0)
    pins = NotePins(lambda: (shown, ticking() - 9.0), lambda seen, age: seen.text[0], ticking)
    pins.pin()
    quoted, newest = pins.ages_now()
    assert quoted is not None and quoted == newest
