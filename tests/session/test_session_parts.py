"""Unit tests of the shell's parts, without a wall clock: resume arithmetic, playback, segments, transcription."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import numpy as np
import pytest

from bargein.audio.codecs import AudioFormat
from bargein.engines.base import SpeechRecognizer
from bargein.protocol.session_config import SessionConfig
from bargein.session.core import vocabulary as v
from bargein.session.core.listening.segment_book import MAX_OPEN_SEGMENTS, SegmentBook
from bargein.session.core.machine import DuplexMachine
from bargein.session.core.settings import settings_from_config
from bargein.session.history import Item, Part
from bargein.session.input_buffer import InputBuffer
from bargein.session.outbound import Outgoing
from bargein.session.playback import Pacer, PlaybackEstimate
from bargein.session.resumption import RESEND_PIECE_MS, resumption
from bargein.session.segment_tracker import SegmentTracker
from bargein.session.speculation import Speculator
from bargein.session.transcription import Transcriber
from bargein.session.turn_ledger import TurnLedgers
from bargein.values import Transcript, WordTiming
from tests.metrics.test_metrics import FakeClock

PCM24 = AudioFormat("audio/pcm", 24_000)


# -- resuming a paused reply ------------------------------------------------------------------------


def test_the_cut_falls_on_a_whole_sample_and_the_tail_is_re_cut_into_pieces() -> None:
    forwarded = bytes(range(256)) * 300  # 76 800 bytes: 1.6 s of 24 kHz pcm16
    words = [WordTiming("one", 100.0, 300.0), WordTiming("two", 700.0, 900.0), WordTiming("three", 1050.0, 1300.0)]
    cut = resumption(forwarded, 700.02, PCM24, words)
    assert cut.cut_byte == 700 * 48 and cut.cut_ms == 700.0
    assert [w.word for w in cut.kept_words] == ["one"]
    assert b"".join(p.data for p in cut.pieces) == forwarded[cut.cut_byte:]
    assert [p.duration_ms for p in cut.pieces] == [RESEND_PIECE_MS] * 4 + [100.0]
    # each tail word moves with its piece: "two" starts the first piece, "three" is 150 ms into the second
    assert [(w.word, w.start_ms) for p in cut.pieces for w in p.words] == [("two", 0.0), ("three", 150.0)]


def test_a_cut_past_what_was_sent_resumes_at_the_end_with_nothing_to_resend() -> None:
    cut = resumption(bytes(4800), 5000.0, PCM24, [])
    assert cut.cut_byte == 4800 and cut.cut_ms == 100.0 and cut.pieces == []


def test_an_odd_byte_cut_rounds_to_the_sample_for_one_byte_formats() -> None:
    mulaw = AudioFormat("audio/pcmu", 8000)
    cut = resumption(bytes(8000), 12.4, mulaw, [])
    assert cut.cut_byte == 99 and cut.cut_ms == pytest.approx(12.375)


# -- what the client has played -----------------------------------------------------------------------


def test_the_playback_estimate_never_runs_ahead_of_real_time_or_of_what_was_sent() -> None:
    clock = FakeClock()
    estimate = PlaybackEstimate(clock=clock)
    assert estimate.heard_ms() == 0.0
    estimate.on_sent(200.0)
    estimate.on_sent(200.0)
    clock.now += 0.15
    assert estimate.heard_ms() == pytest.approx(150.0)
    clock.now += 1.0
    assert estimate.heard_ms() == 400.0, "never past what was sent"


def test_a_gap_in_sending_stalls_the_estimate() -> None:
    clock = FakeClock()
    estimate = PlaybackEstimate(clock=clock)
    estimate.on_sent(200.0)
    clock.now += 0.5  # the TTS fell behind: the client played 200 ms, then waited 300 ms
    estimate.on_sent(200.0)
    clock.now += 0.1
    assert estimate.heard_ms() == pytest.approx(300.0)


def test_the_pacer_keeps_the_reply_at_most_its_lead_ahead() -> None:
    clock = FakeClock()
    pacer = Pacer(lead_ms=1000.0, clock=clock)
    assert pacer.delay_s(800.0) == 0.0
    assert pacer.delay_s(1500.0) == pytest.approx(0.5)
    clock.now += 0.5
    assert pacer.delay_s(1500.0) == 0.0


# -- segments -----------------------------------------------------------------------------------------


def test_a_segment_is_judged_against_the_floor_from_before_it_began() -> None:
    book = SegmentBook()
    for _ in range(200):
        book.frame(None, 0.02, -60.0, 32.0)  # the room
    floor = book.noise_floor.level_db
    book.begin("item_1", threshold=0.5, during_reply=False)
    for _ in range(20):
        book.frame("item_1", 0.9, -25.0, 32.0)
    for _ in range(200):
        book.frame(None, 0.02, -30.0, 32.0)  # a louder room afterwards does not move the segment's floor
    segment = book.get("item_1")
    assert segment is not None and segment.floor_db == floor and segment.stats.speech_ms == 640.0
    verdict = book.judge("item_1", Transcript("What time is it?"), during_reply=False)
    assert verdict.decision == "query" and verdict.features["level_above_floor_db"] == pytest.approx(-25.0 - floor,
                                                                                                        abs=0.1)
    assert book.get("item_1") is None, "a judged segment is forgotten"


def test_the_segment_book_is_bounded() -> None:
    book = SegmentBook()
    for index in range(MAX_OPEN_SEGMENTS + 10):
        book.begin(f"item_{index}", threshold=0.5, during_reply=False)
    assert book.get("item_0") is None and book.get(f"item_{MAX_OPEN_SEGMENTS + 9}") is not None


class ScriptedRecognizer(SpeechRecognizer):
    """Answers every recognition with the next scripted text."""

    def __init__(self, *texts: str, fail: bool = False) -> None:
        self.texts = list(texts)
        self.fail = fail
        self.hints: list[tuple[str | None, str | None]] = []

    async def transcribe(self, audio: Any, *, language: str | None = None, prompt: str | None = None) -> Transcript:
        self.hints.append((language, prompt))
        if self.fail:
            raise RuntimeError("no recogniser today")
        return Transcript(self.texts.pop(0) if len(self.texts) > 1 else self.texts[0])


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


class _Loop:
    """A session's machine (its settings from ``detection``) with the tracker carrying out its recognitions: VAD
    frames in stream time go to the machine, what it asks of the tracker is done, what the tracker feeds back goes
    to the machine (and is kept in ``fed``); ``warmed`` keeps the prompts the machine has warmed."""

    def __init__(self, asr: Any, buffer: InputBuffer, *, emit: Any = lambda _o: None,
                 hints: Any = lambda: (None, None), detection: dict[str, Any] | None = None) -> None:
        config = SessionConfig()
        if detection is not None:
            config = config.updated({"audio": {"input": {"turn_detection": detection}}})
        counter = itertools.count(1)
        self.machine = DuplexMachine(lambda prefix: f"{prefix}_{next(counter)}", settings_from_config(config))
        self.fed: list[v.Event] = []
        self.warmed: list[str] = []
        self.tracker = SegmentTracker(asr, buffer, Speculator(asr, None, enabled=False),  # type: ignore[arg-type]
                                      feed=self.feed, emit=emit, hints=hints)
        self.now_ms = 0.0

    def feed(self, event: v.Event) -> None:
        if not isinstance(event, v.VadFrame):
            self.fed.append(event)
        self.machine.feed(event)
        for action in self.machine.take_actions():
            match action:
                case v.RecognisePartial():
                    self.tracker.recognise_partial(action)
                case v.ReportPartial(item_id, text):
                    self.tracker.report_partial(item_id, text)
                case v.WarmPrompt(_, text):
                    self.warmed.append(text)

    async def frames(self, probability: float, until_ms: float) -> None:
        while self.now_ms < until_ms:
            self.feed(v.VadFrame(self.now_ms, self.now_ms + 32.0, probability))
            self.now_ms += 32.0
        await _settle()


async def test_partials_feed_the_machine_send_only_what_extends_the_transcript_and_use_the_hints() -> None:
    sent: list[Outgoing] = []
    asr = ScriptedRecognizer("what", "what time", "what time")
    buffer = InputBuffer()
    buffer.append(np.zeros(16_000 * 4, np.float32))
    loop = _Loop(asr, buffer, emit=sent.append, hints=lambda: ("es", "hola"))
    for at_ms in (1000.0, 2000.0, 3000.0):  # a partial is due each second of speech
        await loop.frames(0.9, at_ms + 96.0)
    fed = loop.fed
    assert fed == [v.PartialTranscript("item_1", "what"), v.PartialTranscript("item_1", "what time"),
                   v.PartialTranscript("item_1", "what time")]
    assert [o.event["delta"] for o in sent] == ["what", " time"]
    assert asr.hints == [("es", "hola")] * 3, "partials recognise in the session's language, with its prompt"
    await loop.frames(0.05, 4000.0)  # the endpoint
    assert loop.machine.turn is None
    await loop.frames(0.9, 4032.0)
    assert len(fed) == 3, "no partials once the segment ended"


class GatedRecognizer(ScriptedRecognizer):
    """A scripted recogniser whose partials (speculation disabled, so every call is one) wait for ``gate``."""

    def __init__(self, *texts: str) -> None:
        super().__init__(*texts)
        self.gate = asyncio.Event()
        self.calls = 0

    async def transcribe(self, audio: Any, *, language: str | None = None, prompt: str | None = None) -> Transcript:
        self.calls += 1
        await self.gate.wait()
        return await super().transcribe(audio, language=language, prompt=prompt)


async def test_no_new_partial_in_a_silence_but_the_one_running_when_it_began_still_warms_the_prompt() -> None:
    asr = GatedRecognizer("what time", "what time is it")
    buffer = InputBuffer()
    buffer.append(np.zeros(16_000 * 6, np.float32))
    loop = _Loop(asr, buffer, detection={"type": "server_vad", "silence_duration_ms": 3000})  # a long pause
    await loop.frames(0.9, 1000.0)
    assert asr.calls == 1, "a partial is due after a second of speech"
    await loop.frames(0.05, 1200.0)  # the silence begins
    asr.gate.set()
    await _settle()
    fed, warmed = loop.fed, loop.warmed
    assert fed == [v.PartialTranscript("item_1", "what time")] and warmed == ["what time"], \
        "the partial running when the silence began is reported and warms the prompt"
    for at_ms in (2300.0, 3400.0):
        await loop.frames(0.1, at_ms)
    assert asr.calls == 1, "the guess hears the silence's audio: no new partial competes with it"
    await loop.frames(0.9, 4500.0)  # the speech resumes
    assert asr.calls == 2 and fed[-1] == v.PartialTranscript("item_1", "what time is it"), \
        "partials again once speech resumes"


async def test_a_guess_at_the_pause_is_fed_to_the_machine() -> None:
    fed: list[v.Event] = []
    asr = ScriptedRecognizer("what time is it")
    buffer = InputBuffer()
    buffer.append(np.zeros(16_000, np.float32))
    speculator = Speculator(asr, None)  # type: ignore[arg-type]
    tracker = SegmentTracker(asr, buffer, speculator, feed=fed.append, emit=lambda _o: None)
    tracker.silence_began(v.SilenceBegan("item_1", 800.0))  # a turn spoken from 100 ms (less the padding: 0)
    await _settle()
    assert fed[-1] == v.GuessTranscribed("item_1", Transcript("what time is it"), at_ms=800.0)
    assert speculator.counts.asr_started == 1
    tracker.close()


# -- transcription ------------------------------------------------------------------------------------


async def test_transcription_fills_the_item_reports_it_and_tells_its_listener() -> None:
    sent: list[Outgoing] = []
    done: list[tuple[str, Transcript | None]] = []
    transcriber = Transcriber(ScriptedRecognizer(" hello there "), sent.append,
                              lambda item, t, _primed, _pending: done.append((item.id, t)), lambda: ("en", None))
    item = Item("item_1", "user", [Part("input_audio")])
    transcriber.start(item, np.zeros(8000, np.float32), content_index=0)
    await transcriber.wait_all()
    assert item.parts[0].text == "hello there"
    assert [o.event["type"] for o in sent] == ["conversation.item.input_audio_transcription.completed",
                                               "conversation.item.done"]
    assert sent[0].event["usage"]["seconds"] == 0.5
    assert done == [("item_1", Transcript(" hello there "))]
    assert transcriber.tasks() == []


async def test_a_failed_transcription_is_an_event_and_a_none_result() -> None:
    sent: list[Outgoing] = []
    done: list[tuple[str, Transcript | None]] = []
    transcriber = Transcriber(ScriptedRecognizer("x", fail=True), sent.append,
                              lambda item, t, _primed, _pending: done.append((item.id, t)), lambda: (None, None))
    item = Item("item_1", "user", [Part("input_audio")])
    assert await transcriber.recognise(item, np.zeros(8000, np.float32), 0) is None
    assert sent[0].event["type"] == "conversation.item.input_audio_transcription.failed"
    assert sent[0].event["error"]["code"] == "asr_error"
    assert done == [("item_1", None)]


# -- the input buffer ---------------------------------------------------------------------------------


def test_the_input_buffer_keeps_stream_time_through_trims_and_takes() -> None:
    buffer = InputBuffer()
    buffer.append(np.arange(16_000, dtype=np.float32) / 16_000)  # 1 s, each sample saying where it is
    buffer.trim_before(250.0)
    assert buffer.start_sample == 4000 and buffer.duration_ms == 750.0
    assert buffer.peek(500.0, 500.0 + 1 / 16).tolist() == pytest.approx([0.5], abs=1e-4)  # held as int16
    clip = buffer.take(None, 750.0)
    assert clip[0] == pytest.approx(0.25, abs=1e-4) and len(clip) == 8000
    assert buffer.start_sample == 12_000 and buffer.duration_ms == 250.0
    buffer.clear()
    assert buffer.duration_ms == 0.0 and buffer.end_sample == 16_000


# -- the turn ledger, as an observer ------------------------------------------------------------------


def test_the_turn_ledger_follows_the_actions_and_reports_when_the_reply_closes() -> None:
    stream = {"ms": 0.0}
    reports: list[tuple[str, dict[str, Any]]] = []
    ledgers = TurnLedgers(lambda: stream["ms"], lambda status, summary: reports.append((status, summary)))
    stream["ms"] = 1500.0
    ledgers.on_action(v.SpeechStarted("item_1", 320.0))
    ledgers.on_action(v.SpeechStopped("item_1", 1000.0))
    ledgers.on_action(v.CommitBuffer("item_1", 20.0, 1500.0))
    ledgers.on_event(v.SegmentTranscribed("item_1", Transcript("hi")))
    ledgers.on_action(v.StartReply("resp_1", "turn_detected"))
    ledgers.on_reply_progress("resp_1", "llm_first_token", 0)
    ledgers.on_reply_progress("resp_1", "tokens", 7)
    ledgers.on_sent(Outgoing({"type": "response.output_audio.delta"}, response_id="resp_1", audio_ms=200.0))
    stream["ms"] = 4000.0
    ledgers.on_action(v.SpeechStarted("item_2", 3900.0))
    ledgers.on_action(v.PauseReply("resp_1", "item_2"))
    ledgers.on_reply_closed("resp_1", "cancelled", 2000.0, 1200.0)
    ((status, summary),) = reports
    assert status == "cancelled" and summary["item_id"] == "item_1" and summary["response_id"] == "resp_1"
    assert summary["speech_start_ms"] == 320.0 and summary["speech_end_ms"] == 1000.0
    assert summary["tokens"] == 7 and summary["audio_sent_s"] == 2.0 and summary["audio_heard_s"] == 1.2
    assert summary["barge_in_detect_ms"] == 100.0
    ledger = ledgers.for_reply("resp_1")
    assert ledger is not None and set(ledger.marks) >= {"commit", "asr_final", "reply_start", "llm_first_token",
                                                         "first_delta_sent", "barge_in", "response_done"}
