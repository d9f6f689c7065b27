"""A turn's speculative recognition, adopted at the endpoint, is the turn's final: nothing may take it away
from the transcriber (else the turn never gets a verdict and the session never answers again), and a reply
that fails while paused keeps only what was heard."""

from __future__ import annotations

import asyncio
import itertools

import numpy as np

from bargein.engines.base import SpeechRecognizer
from bargein.engines.stage_calls import StageFailed
from bargein.protocol.session_config import SessionConfig
from bargein.session import core as dx
from bargein.session.core.vocabulary import AudioPiece
from bargein.session.history import Conversation, Item, Part
from bargein.session.outbound import Outbound
from bargein.session.reply_runner import ReplyRunner
from bargein.session.speculation import MAX_GUESSES, Speculator
from bargein.session.transcription import Transcriber
from bargein.values import Transcript, WordTiming
from tests.support.timelines import of

AUDIO = np.zeros(16_000, np.float32)


class HeldRecogniser(SpeechRecognizer):
    """Answers every recognition once released (a backlogged shared recogniser)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls = 0

    async def transcribe(self, audio: object, *, language: str | None = None,
                         prompt: str | None = None) -> Transcript:
        self.calls += 1
        await self.release.wait()
        return Transcript("What is the weather like today?")


def _transcriber(asr: HeldRecogniser, done: list[tuple[str, Transcript | None]]) -> Transcriber:
    return Transcriber(asr, emit=lambda out: None, hints=lambda: (None, None),  # type: ignore[arg-type]
                       on_done=lambda item, transcript, primed, pending: done.append((item.id, transcript)))


def test_later_guesses_do_not_evict_the_one_a_committed_turn_waits_for() -> None:
    async def scenario() -> None:
        asr, done = HeldRecogniser(), []
        speculator = Speculator(asr=asr, llm=object())  # type: ignore[arg-type]
        transcriber = _transcriber(asr, done)
        speculator.recognise("item_a", AUDIO)
        guessed = speculator.take_recognition("item_a")
        assert guessed is not None
        transcriber.start(Item("item_a", "user", [Part("input_audio")]), AUDIO, content_index=0, guessed=guessed)
        for n in range(MAX_GUESSES):  # later pauses guess while the recogniser is backlogged
            speculator.recognise(f"item_{n}", AUDIO)
        await asyncio.sleep(0)
        assert not guessed.cancelled()
        asr.release.set()
        await transcriber.wait_all()
        assert done == [("item_a", Transcript("What is the weather like today?"))]
        assert asr.calls == 1 + MAX_GUESSES, "the adopted guess stands: no second recognition of the turn"
    asyncio.run(scenario())


async def _adopting(asr: HeldRecogniser,
                    done: list[tuple[str, Transcript | None]]) -> tuple[Transcriber, asyncio.Task[Transcript]]:
    """A transcriber that has adopted a guess still running, as at an endpoint that came before the words."""
    transcriber = _transcriber(asr, done)
    guessed = asyncio.create_task(asr.transcribe(AUDIO))
    transcriber.start(Item("item_a", "user", [Part("input_audio")]), AUDIO, content_index=0, guessed=guessed)
    await asyncio.sleep(0)
    return transcriber, guessed


def test_a_guess_cancelled_under_the_transcriber_is_recognised_again() -> None:
    async def scenario() -> None:
        asr, done = HeldRecogniser(), []
        transcriber, guessed = await _adopting(asr, done)
        guessed.cancel()
        await asyncio.sleep(0)
        asr.release.set()
        await transcriber.wait_all()
        assert done == [("item_a", Transcript("What is the weather like today?"))]
    asyncio.run(scenario())


def test_the_transcriber_itself_still_stops_when_cancelled() -> None:
    async def scenario() -> None:
        asr, done = HeldRecogniser(), []
        transcriber, guessed = await _adopting(asr, done)
        for task in transcriber.tasks():
            task.cancel()
        await transcriber.wait_all()
        assert done == [] and asr.calls == 1
        guessed.cancel()
    asyncio.run(scenario())


def test_closing_the_session_stops_the_recognition_a_transcriber_adopted() -> None:
    """The session closes the speculator before it cancels its transcriptions: the adopted guess goes too."""
    async def scenario() -> None:
        asr, done = HeldRecogniser(), []
        speculator = Speculator(asr=asr, llm=object())  # type: ignore[arg-type]
        speculator.recognise("item_a", AUDIO)
        guessed = speculator.take_recognition("item_a")
        transcriber = _transcriber(asr, done)
        transcriber.start(Item("item_a", "user", [Part("input_audio")]), AUDIO, content_index=0, guessed=guessed)
        speculator.close()
        for task in transcriber.tasks():
            task.cancel()
        await asyncio.sleep(0.01)
        assert guessed is not None and guessed.cancelled() and done == []
    asyncio.run(scenario())


def test_a_session_whose_guesses_piled_up_still_answers_its_next_turn() -> None:
    """The machine, the speculator and the transcriber together: turn A's verdict arrives, so turn B is
    answered (A used to stay awaiting its verdict for good)."""
    async def scenario() -> None:
        counter = itertools.count(1)
        machine = dx.DuplexMachine(lambda prefix: f"{prefix}_{next(counter)}", dx.TurnSettings())
        actions: list[dx.Action] = []
        now = [0.0]

        def frames(probability: float, ms: float) -> None:
            for _ in range(round(ms / 32)):
                machine.feed(dx.VadFrame(now[0], now[0] + 32, probability, -20.0 if probability > 0.5 else -70.0))
                now[0] += 32
                actions.extend(machine.take_actions())

        def verdict(item: Item, transcript: Transcript | None, primed: Transcript | None, pending: bool) -> None:
            machine.feed(dx.SegmentTranscribed(item.id, transcript, primed, pending))
            actions.extend(machine.take_actions())

        asr = HeldRecogniser()
        speculator = Speculator(asr=asr, llm=object())  # type: ignore[arg-type]
        transcriber = Transcriber(asr, emit=lambda out: None, on_done=verdict,  # type: ignore[arg-type]
                                  hints=lambda: (None, None))
        frames(0.9, 640)
        frames(0.05, 544)
        item_a = of(actions, dx.AwaitClassification)[0].item_id
        speculator.recognise(item_a, AUDIO)
        transcriber.start(Item(item_a, "user", [Part("input_audio")]), AUDIO, content_index=0,
                          guessed=speculator.take_recognition(item_a))
        for n in range(MAX_GUESSES):
            speculator.recognise(f"item_other_{n}", AUDIO)
        await asyncio.sleep(0)
        asr.release.set()
        await transcriber.wait_all()
        answered = of(actions, dx.StartReply)
        assert answered, "turn A got its verdict and its answer"
        machine.feed(dx.ReplyFinished(answered[0].response_id))
        actions.extend(machine.take_actions())
        frames(0.9, 640)
        frames(0.05, 544)
        item_b = of(actions, dx.AwaitClassification)[-1].item_id
        verdict(Item(item_b, "user", []), Transcript("Can you book a table for two tonight?"), None, False)
        assert len(of(actions, dx.StartReply)) == 2, "turn B is answered too"
    asyncio.run(scenario())


class NeverPipeline:
    async def run(self, plan: object, sink: object, cancel: object) -> None:
        await asyncio.Event().wait()


def _paused_runner(closed: list[tuple[object, ...]]) -> ReplyRunner:
    async def no_words() -> None:
        return None

    runner = ReplyRunner(NeverPipeline(), outbound=Outbound(), conversation=Conversation(),  # type: ignore[arg-type]
                         feed=lambda e: None, config=lambda: SessionConfig(), wait_for_words=no_words,
                         take_prefetch=lambda m, o: None, progress=lambda *a: None,
                         closed=lambda *a: closed.append(a))
    runner.start("resp_1", "client", None)
    for word in ("one", "two", "three"):
        runner.forward_text("resp_1", word + " ")
        runner.forward("resp_1", AudioPiece(b"\0\0" * 24_000, 1000.0, [WordTiming(word, 100.0, 900.0)]))
    runner.pause("resp_1", "item_user")  # none of it had reached the client
    return runner


def test_a_reply_that_fails_while_paused_keeps_only_what_was_heard() -> None:
    async def scenario() -> None:
        cancelled: list[tuple[object, ...]] = []
        failed: list[tuple[object, ...]] = []
        by_cancel, by_failure = _paused_runner(cancelled), _paused_runner(failed)
        by_cancel.cancel("resp_1", "turn_detected")
        by_failure.finish("resp_1", "failed")
        for task in [*by_cancel.tasks, *by_failure.tasks]:
            task.cancel()
        assert failed[0][1] == "failed"
        assert failed[0][3] == cancelled[0][3] < 1000, "heard up to the pause, as a cancelled reply"
        item = next(i for i in by_failure.conversation if i.role == "assistant")
        assert "three" not in item.heard_text()
    asyncio.run(scenario())


class FailingGuessRecogniser(SpeechRecognizer):
    """Every recognition but the first (the turn's guess at its pause) hears ``text``; the guess fails."""

    def __init__(self, text: str, error: Exception | None = None) -> None:
        self.text = text
        self.error = error or RuntimeError("the recogniser's worker died")
        self.heard: list[int] = []

    async def transcribe(self, audio: object, *, language: str | None = None,
                         prompt: str | None = None) -> Transcript:
        self.heard.append(len(audio))  # type: ignore[arg-type]
        if len(self.heard) == 1:
            raise self.error
        return Transcript(self.text)


def test_a_failed_guess_is_not_the_turns_failure_the_whole_item_is_recognised_again() -> None:
    """The guess made at the turn's first silence failed (an engine error): at the commit the item's
    whole audio is recognised, and its transcript completes; no ``transcription.failed`` goes out."""
    async def scenario() -> None:
        asr = FailingGuessRecogniser("What is the weather like today?")
        sent: list[str] = []
        done: list[tuple[str, Transcript | None]] = []
        speculator = Speculator(asr=asr, llm=object())  # type: ignore[arg-type]
        transcriber = Transcriber(asr, emit=lambda out: sent.append(out.event["type"]),  # type: ignore[arg-type]
                                  hints=lambda: (None, None),
                                  on_done=lambda item, transcript, primed, pending: done.append((item.id, transcript)))
        speculator.recognise("item_a", AUDIO[:8000])
        guessed = speculator.take_recognition("item_a")
        await asyncio.sleep(0)
        assert guessed is not None and guessed.done() and guessed.exception() is not None
        item = Item("item_a", "user", [Part("input_audio")])
        transcriber.start(item, AUDIO, content_index=0, guessed=guessed)
        await transcriber.wait_all()
        assert asr.heard == [8000, len(AUDIO)], "recognised again, the whole item"
        assert done == [("item_a", Transcript("What is the weather like today?"))]
        assert item.parts[0].text == "What is the weather like today?" and not item.unheard
        assert "conversation.item.input_audio_transcription.failed" not in sent
        assert "conversation.item.input_audio_transcription.completed" in sent
    asyncio.run(scenario())


def test_the_item_fails_only_when_its_own_recognition_fails_too() -> None:
    async def scenario() -> None:
        asr = FailingGuessRecogniser("unused")
        sent: list[str] = []
        done: list[tuple[str, Transcript | None]] = []
        transcriber = Transcriber(asr, emit=lambda out: sent.append(out.event["type"]),  # type: ignore[arg-type]
                                  hints=lambda: (None, None),
                                  on_done=lambda item, transcript, primed, pending: done.append((item.id, transcript)))
        item = Item("item_a", "user", [Part("input_audio")])
        transcriber.start(item, AUDIO, content_index=0)  # no guess: the only recognition fails
        await transcriber.wait_all()
        assert done == [("item_a", None)] and item.unheard
        assert sent == ["conversation.item.input_audio_transcription.failed"]
    asyncio.run(scenario())


def test_a_guess_that_missed_its_deadline_fails_the_item_without_a_second_wait() -> None:
    """The user has already waited the stage's whole deadline for the guess: recognising again would double
    it before they hear that they were not understood."""
    async def scenario() -> None:
        missed = StageFailed("speech recognition failed", detail="TimeoutError")
        missed.__cause__ = TimeoutError()
        asr = FailingGuessRecogniser("unused", error=missed)
        sent: list[str] = []
        speculator = Speculator(asr=asr, llm=object())  # type: ignore[arg-type]
        transcriber = Transcriber(asr, emit=lambda out: sent.append(out.event["type"]),  # type: ignore[arg-type]
                                  hints=lambda: (None, None), on_done=lambda item, transcript, primed, pending: None)
        speculator.recognise("item_a", AUDIO[:8000])
        guessed = speculator.take_recognition("item_a")
        await asyncio.sleep(0)
        item = Item("item_a", "user", [Part("input_audio")])
        transcriber.start(item, AUDIO, content_index=0, guessed=guessed)
        await transcriber.wait_all()
        assert asr.heard == [8000], "not recognised a second time"
        assert sent == ["conversation.item.input_audio_transcription.failed"] and item.unheard
    asyncio.run(scenario())
