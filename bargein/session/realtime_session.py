"""One Realtime conversation: the composition root and the client's event dispatch.

Client events come in through :meth:`RealtimeSession.handle_message` and become machine events; the
duplex machine decides; :class:`~bargein.session.executor.ActionExecutor` carries out its actions and
server events are queued on :attr:`outbound`. Observers (the turn ledger, benches) watch the machine's
events and actions and what leaves the socket. Nothing a client sends escapes as an exception: every
problem becomes an ``error`` event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from bargein.audio.codecs import AudioFormatError, decode_base64
from bargein.engines.base import Engines
from bargein.engines.speak.voices import check_voice
from bargein.languages import unsupported_language
from bargein.metrics.prometheus import ServerMetrics
from bargein.protocol import client_events as ce
from bargein.protocol.errors import EngineFailure, ProtocolError
from bargein.protocol.server_events import error_event, event, new_id
from bargein.protocol.session_config import SemanticVad, ServerVad, SessionConfig
from bargein.session.audio_input import AudioInput
from bargein.session.client_items import ClientItems
from bargein.session.core import vocabulary as v
from bargein.session.core.endpointing import DEFAULT_TIERS
from bargein.session.core.machine import DuplexMachine
from bargein.session.core.settings import TurnSettings, plain_silence_after, settings_from_config
from bargein.session.executor import ActionExecutor
from bargein.session.eyes import SessionEyes
from bargein.session.history import Conversation, Item, response_input_items
from bargein.session.observers import SessionObserver
from bargein.session.outbound import MAX_OUTBOUND_BYTES, Outbound, Outgoing
from bargein.session.reply_pipeline import ReplyPipeline
from bargein.session.reply_runner import ReplyRunner
from bargein.session.segment_tracker import SegmentTracker
from bargein.session.speculation import Speculator
from bargein.session.timers import Timers
from bargein.session.tool_use import check_params
from bargein.session.transcription import Transcriber
from bargein.session.turn_ledger import TurnLedgers
from bargein.tools.registry import ToolRegistry
from bargein.values import Float32Audio, Transcript
from bargein.weights import WeightError

log = logging.getLogger(__name__)
FRAMES_PER_TURN = 64
"""VAD frames (about 2 s of audio) an append hands the machine before yielding the event loop."""


class RealtimeSession:
    """The parts that serve one client, wired together, and the dispatch of its events."""

    def __init__(self, engines: Engines, *, config: SessionConfig | None = None,
                 output_lead_ms: float = 1000.0, metrics: ServerMetrics | None = None,
                 listen: bool = True, observers: Iterable[SessionObserver] = (),
                 builtin_tools: ToolRegistry | None = None, outbound_bytes: int = MAX_OUTBOUND_BYTES,
                 semantic_default: bool = False, tiered_default: bool = True, text_end_default: bool = True) -> None:
        self.listen = listen
        self.tiered_default = tiered_default
        """``server_vad`` follows the tiered endpoint when there is an end-of-turn model (off: plain silence)."""
        estimates = text_end_default and engines.llm.capabilities.text_end
        self.tiers = DEFAULT_TIERS if estimates else replace(DEFAULT_TIERS, text_end_below=None)
        """The tiered endpoint's preset: with the language model's end-of-sentence estimate where the model has one
        (``LLMCapabilities.text_end``) unless told not to; without, no tier waits for one."""
        self.languages: frozenset[str] | None = engines.asr.capabilities.languages
        """What the recogniser can transcribe (None: it cannot tell); a session asking for more gets an error."""
        self.synthesiser = engines.tts
        """Whose voices a session or a response may name (:func:`~bargein.engines.speak.voices.check_voice`)."""
        self.semantic_endpoint = engines.turn is not None
        self.config = default_endpoint(config or SessionConfig(), semantic=self.semantic_endpoint,
                                       prefer_semantic=semantic_default)
        self.outbound = Outbound(max_bytes=outbound_bytes)
        self.conversation = Conversation()
        self.message_guard: Callable[[ce.ClientEvent, SessionConfig], None] | None = None
        """Sees each client event before it is handled, may refuse it with a ProtocolError (client-secret locks)."""
        self._audio_refused = False
        """A media transport's audio is being refused (the input buffer is full): told once, not every frame."""
        detection = self.config.audio.input.turn_detection
        self.plain_silence = isinstance(detection, ServerVad) and detection.silence_duration_ms != 500
        """The client set server_vad's silence itself: plain silence, never the tiered default endpoint (a start
        config, as a client secret's, is plain when its silence is not 500 ms; a ``session.update`` says it)."""
        self.machine = DuplexMachine(new_id, self._settings(self.config))
        self.audio_in = AudioInput(engines.vad, self.config.input_format)
        self.audio_in.set_noise_reduction(self.config.audio.input.noise_reduction is not None)
        tell = self.outbound.put  # the ledger's follow-ups: the final heard audio, and what the turn cost
        self.ledgers = TurnLedgers(lambda: self.stream_ms, self._report_turn, metrics=metrics,
                                   heard=lambda fields: tell(Outgoing(event("bargein.turn.heard", **fields))),
                                   cost=lambda fields: tell(Outgoing(event("bargein.turn.cost", **fields))))
        emit = self.outbound.put
        self.eyes = SessionEyes(engines.see, config=lambda: self.config, progress=self._reply_progress, emit=emit)
        self.observers: list[SessionObserver] = [self.ledgers, self.eyes, *observers]
        speculator = Speculator(engines.asr, engines.llm, engines.tts, hints=self._transcription_hints)
        self.speculation = speculator.counts
        self.transcriber = Transcriber(engines.asr, emit, self._transcribed, self._transcription_hints,
                                       logprobs=lambda: "item.input_audio_transcription.logprobs"
                                       in (self.config.include or ()), present=self.conversation.holds)
        tracker = SegmentTracker(engines.asr, self.audio_in.buffer, speculator, feed=self.feed, emit=emit,
                                 hints=self._transcription_hints, turn_model=engines.turn)
        self.replies = ReplyRunner(
            ReplyPipeline(engines.llm, engines.tts), outbound=self.outbound, conversation=self.conversation,
            feed=self.feed, config=lambda: self.config, wait_for_words=self.transcriber.wait_all,
            take_prefetch=speculator.take_reply, progress=self._reply_progress, closed=self._reply_closed,
            output_lead_ms=output_lead_ms, builtins=builtin_tools, heard=self._reply_heard, see=self.eyes)
        self.timers = Timers(self.feed, lambda: self.stream_ms)
        self.items = ClientItems(self.conversation, emit, self.transcriber, self.audio_in,
                                 answered=lambda call_id: self.replies.pending.answer(call_id))
        self.tracker = tracker
        self.executor = ActionExecutor(
            emit=emit, config=lambda: self.config, conversation=self.conversation, buffer=self.audio_in.buffer,
            tracker=tracker, speculator=speculator, transcriber=self.transcriber, replies=self.replies,
            timers=self.timers, playing_to_end=self.machine.closed_playback.playing_to_end)
        self.eyes.rewarm = self.executor.warm_ahead  # the camera message, read before the next turn's words
        self.eyes.model_reads_warms = lambda: speculator.warm_runs_now

    @property
    def stream_ms(self) -> float:
        """Stream time: the position of the newest input sample, in ms since the session began."""
        return self.audio_in.stream_ms

    @property
    def replying(self) -> bool:
        """A reply is in progress (the machine's active reply, paused or not)."""
        return self.machine.active_response_id is not None

    @property
    def owes_reply(self) -> bool:
        """A reply is in progress, or one will start unasked: a committed turn is being judged or waits its answer
        (what a graceful drain waits for; :attr:`~bargein.session.core.machine.DuplexMachine.owes_reply`)."""
        return self.machine.owes_reply

    def observe(self, observer: SessionObserver) -> None:
        """Add an observer of the machine's events and actions and of what is sent."""
        self.observers.append(observer)

    # -- inbound ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Greet the client with ``session.created``."""
        self.outbound.put(Outgoing(event("session.created", session=self.config.wire())))

    async def handle_message(self, raw: str | bytes) -> None:
        """Process one client message; problems become ``error`` events, never exceptions."""
        message: ce.ClientEvent | None = None
        try:
            message = ce.parse_client_event(raw)
            if self.message_guard is not None:
                self.message_guard(message, self.config)
            await self._dispatch(message)
        except ProtocolError as error:
            self.outbound.put(Outgoing(error_event(error)))
        except Exception as error:  # a bug or an engine failure must not end the session
            log.exception("unexpected failure handling a client event")
            self.outbound.put(Outgoing(error_event(ProtocolError(  # naming the event, so the client knows which
                f"internal error: {type(error).__name__}", code="server_error", type="server_error",
                event_id=message.event_id if message is not None else None))))

    async def _dispatch(self, message: ce.ClientEvent) -> None:
        match message:
            case ce.InputAudioBufferAppend():
                await self._append(message)
            case ce.SessionUpdate():
                self._update_session(message)
            case ce.InputAudioBufferCommit():
                await self._hear(self.audio_in.held())  # the commit takes every sample appended before it
                self.feed(v.ClientCommit(self.audio_in.buffer.duration_ms, message.event_id))
            case ce.InputAudioBufferClear():
                await self._hear(self.audio_in.held())  # cleared with the rest, not heard after the clear
                self.feed(v.ClientClear())
            case ce.ConversationItemCreate():
                await self.eyes.take_item(message, self.stream_ms)  # a bad image is refused before the item is added
                self.items.create(message)
            case ce.CameraFrame():
                await self.eyes.take_frame(message, self.stream_ms)
            case ce.ConversationItemTruncate():
                clamped = self.conversation.truncate(message.item_id, message.content_index,
                                                     message.audio_end_ms, event_id=message.event_id)
                self.feed(v.ClosedReplyTruncated(message.item_id, clamped))  # a closed reply it still played
                self.outbound.put(Outgoing(event("conversation.item.truncated", item_id=message.item_id,
                                                 content_index=message.content_index, audio_end_ms=int(clamped))))
                self.replies.truncated(message.item_id)  # the machine ends a reply playing out (response.done)
            case ce.ConversationItemDelete():
                deleted = self.conversation.get(message.item_id, event_id=message.event_id)
                self.conversation.delete(message.item_id, event_id=message.event_id)
                if deleted.type == "function_call" and deleted.call is not None:  # no output can name it now
                    self.replies.pending.answer(deleted.call.call_id)
                self.outbound.put(Outgoing(event("conversation.item.deleted", item_id=message.item_id)))
            case ce.ConversationItemRetrieve():
                item = self.conversation.get(message.item_id, event_id=message.event_id)
                self.outbound.put(Outgoing(event("conversation.item.retrieved", item=item.wire())))
            case ce.ResponseCreate():
                if self.config.type == "transcription":
                    raise ProtocolError("a transcription session transcribes only; it creates no responses",
                                        code="invalid_value", param="type", event_id=message.event_id)
                check_params(message.response, message.event_id)
                own = message.response.audio if message.response is not None else None
                check_voice(own.output.voice if own is not None and own.output is not None else None,
                            self.synthesiser, param="response.audio.output.voice", event_id=message.event_id)
                if message.response is not None and message.response.input is not None:
                    response_input_items(message.response.input, self.conversation, event_id=message.event_id)
                self.feed(v.ClientResponseCreate(message.event_id, message.response))
            case ce.ResponseCancel():
                self.feed(v.ClientResponseCancel(message.response_id, message.event_id))

    async def _append(self, message: ce.InputAudioBufferAppend) -> None:
        try:
            payload = decode_base64(message.audio)
            self.audio_in.check_room(len(payload), event_id=message.event_id)
            slices = self.audio_in.decode_slices(payload)
        except AudioFormatError as error:
            raise ProtocolError(str(error), code="invalid_audio", param="audio", event_id=message.event_id) from None
        async for audio in slices:  # a long append (minutes of audio) lets other sessions run between slices
            await self._hear(audio)
        self.feed(v.AudioAppended(self.stream_ms))

    async def append_audio(self, samples: Float32Audio, rate: int | None = None) -> None:
        """Input audio from a media transport (a WebRTC track), as float samples at the input format's rate (or at the
        listening rate, ``rate``, :meth:`AudioInput.listen`): heard as an ``input_audio_buffer.append`` of them would
        be, without the base64 and JSON (a full buffer is refused with the same error)."""
        wire = self.audio_in.wire_format
        in_wire_samples = len(samples) if rate is None else len(samples) * wire.rate // rate
        try:
            self.audio_in.check_room(in_wire_samples * wire.bytes_per_sample, event_id=None)
        except ProtocolError as error:
            if not self._audio_refused:  # once while it stays full: a track brings 50 frames a second
                self.outbound.put(Outgoing(error_event(error)))
            self._audio_refused = True
            return
        self._audio_refused = False
        await self._hear(self.audio_in.listen(samples, rate))
        self.feed(v.AudioAppended(self.stream_ms))

    async def _hear(self, audio: Float32Audio) -> None:
        """Buffer 16 kHz audio and feed its VAD frames; if the VAD fails, it stays buffered and turns go manual."""
        try:
            frames = await self.audio_in.hear(audio, onset_probe=self.machine.wants_onset_probe
                                              and self.executor.output_hold.stops_audio)  # where a hold is heard
        except Exception as error:  # only the VAD raises in there, after the audio is buffered
            self._lose_vad(error)
            return
        for index, frame in enumerate(frames):
            self.feed(frame)
            if index % FRAMES_PER_TURN == FRAMES_PER_TURN - 1:
                await asyncio.sleep(0)

    def _lose_vad(self, error: Exception) -> None:
        """The VAD failed: go on with manual turns, as if the client had set ``turn_detection`` to null."""
        log.warning("voice activity detection failed (%s): manual turns", error)
        reason = error.message if isinstance(error, EngineFailure) else \
            f"voice activity detection failed ({type(error).__name__})"  # the details are in the log
        self.audio_in.vad_running = False
        self.config = self.config.updated({"audio": {"input": {"turn_detection": None}}})
        self.feed(v.SettingsChanged(self._settings(self.config)))
        self.outbound.put(Outgoing(error_event(ProtocolError(
            f"{reason}; turn detection is off: commit the input buffer and send response.create yourself, "
            "or set turn_detection again to retry", code="turn_detection_unavailable", type="server_error"))))
        self.outbound.put(Outgoing(event("session.updated", session=self.config.wire())))

    def _settings(self, config: SessionConfig) -> TurnSettings:
        """The machine's settings: server_vad follows the tiered endpoint unless the client set its silence,
        the server has no end-of-turn model, or the server chose plain silence."""
        tiered = self.semantic_endpoint and self.tiered_default and not self.plain_silence
        return settings_from_config(config, listen=self.listen, tiers=self.tiers if tiered else None)

    def _update_session(self, message: ce.SessionUpdate) -> None:
        try:
            config = self.config.updated(message.session)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ProtocolError(f"invalid session.update: session.{where}: {first['msg']}",
                                code="invalid_value", param=f"session.{where}", event_id=message.event_id) from None
        if isinstance(config.audio.input.turn_detection, SemanticVad) and not self.semantic_endpoint:
            raise ProtocolError("semantic_vad needs the end-of-turn model, which this server has not loaded; "
                                "use server_vad", code="invalid_value",
                                param="session.audio.input.turn_detection.type", event_id=message.event_id)
        if config.audio.output.voice != self.config.audio.output.voice:
            check_voice(config.audio.output.voice, self.synthesiser, param="session.audio.output.voice",
                        event_id=message.event_id)
        transcription = config.audio.input.transcription
        refusal = unsupported_language(transcription.language if transcription else None,
                                       self.languages)
        if refusal is not None:  # honoured or refused, never silently heard as English
            raise ProtocolError(f"invalid session.update: {refusal}", code="unsupported_language",
                                param="session.audio.input.transcription.language", event_id=message.event_id)
        try:
            self.audio_in.set_noise_reduction(config.audio.input.noise_reduction is not None)
        except WeightError as error:
            raise ProtocolError(f"noise_reduction needs the bargein[noise] extra on the server: {error}",
                                code="invalid_value", param="session.audio.input.noise_reduction",
                                event_id=message.event_id) from None
        self.audio_in.set_format(config.input_format)  # the last check has passed: nothing refused changes it
        self.config = config
        self.plain_silence = plain_silence_after(message.session, self.plain_silence)
        if config.audio.input.turn_detection is not None:
            self.audio_in.vad_running = True  # after a VAD failure, setting turn detection again retries it
        self.feed(v.SettingsChanged(self._settings(config)))
        self.outbound.put(Outgoing(event("session.updated", session=config.wire())))

    # -- the machine --------------------------------------------------------------------------------

    def feed(self, machine_event: v.Event) -> None:
        """Give the machine an event and carry out what it decides, telling the observers both."""
        self.machine.feed(machine_event)
        for observer in self.observers:
            observer.on_event(machine_event)
        for action in self.machine.take_actions():
            for observer in self.observers:
                observer.on_action(action)
            self.executor.run(action)

    def _transcribed(self, item: Item, transcript: Transcript | None, primed: Transcript | None,
                     pending: bool) -> None:
        self.feed(v.SegmentTranscribed(item.id, transcript, primed, pending))

    def _transcription_hints(self) -> tuple[str | None, str | None]:
        settings = self.config.audio.input.transcription
        return (settings.language, settings.prompt) if settings is not None else (None, None)

    def _reply_progress(self, response_id: str, stage: str, count: int) -> None:
        for observer in self.observers:
            observer.on_reply_progress(response_id, stage, count)

    def _reply_closed(self, response_id: str, status: str, sent_ms: float, heard_ms: float, output_queued: bool,
                      playing: bool) -> None:
        for observer in self.observers:
            observer.on_reply_closed(response_id, status, sent_ms, heard_ms, output_queued=output_queued,
                                     playing=playing)

    def _reply_heard(self, response_id: str, heard_ms: float) -> None:
        for observer in self.observers:
            observer.on_reply_heard(response_id, heard_ms)

    def _report_turn(self, status: str, summary: dict[str, Any]) -> None:
        self.outbound.put(Outgoing(event("bargein.turn.metrics", status=status, **summary)))

    # -- outbound -----------------------------------------------------------------------------------

    def on_sent(self, item: Outgoing) -> None:
        """The transport wrote ``item``: a reply's output delta advances the playback estimate; observers hear."""
        if not item.is_output or item.response_id is None:
            return
        self.replies.on_sent(item)
        for observer in self.observers:
            observer.on_sent(item)

    async def close(self) -> None:
        """Cancel every task and release the VAD stream."""
        self.timers.close()
        self.tracker.close()
        tasks: list[asyncio.Task[Any]] = [*self.replies.close(), *self.transcriber.tasks()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.ledgers.close()  # after the replies' own ends, which may still hold a report back
        self.outbound.close()
        self.audio_in.close()
        self.eyes.close()


def default_endpoint(config: SessionConfig, *, semantic: bool, prefer_semantic: bool) -> SessionConfig:
    """A new session's turn detection: semantic VAD when the server prefers it, has an end-of-turn model and
    the config still has the plain ``server_vad`` default, else as given (plain silence without a model)."""
    detection = config.audio.input.turn_detection
    if semantic and prefer_semantic and detection == ServerVad():
        return config.updated({"audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}})
    if not semantic and isinstance(detection, SemanticVad):
        return config.updated({"audio": {"input": {"turn_detection": {"type": "server_vad"}}}})
    return config
