"""One Realtime conversation: the imperative shell around the pure duplex machine.

Client events come in through :meth:`RealtimeSession.handle_message`; the machine decides; this
shell carries out its actions with the engines and queues server events on :attr:`outbound`.
Nothing a client sends escapes as an exception: every problem becomes an ``error`` event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from pydantic import ValidationError

from bargein.audio.codecs import AudioFormatError, decode_base64
from bargein.engines.base import Engines
from bargein.metrics.prometheus import ServerMetrics
from bargein.metrics.tracing import export_turn
from bargein.protocol import client_events as ce
from bargein.protocol.errors import ProtocolError
from bargein.protocol.server_events import error_event, event, new_id
from bargein.protocol.session_config import SemanticVad, ServerVad, SessionConfig
from bargein.session import duplex as dx
from bargein.session.endpointing import EAGERNESS_SILENCE_MS
from bargein.session.history import Conversation, Item, Part
from bargein.session.ledger import TurnLedger
from bargein.session.listener import Listener
from bargein.session.outbound import Outbound, Outgoing
from bargein.session.replies import Replies
from bargein.session.reply_events import ReplyState
from bargein.session.responder import Responder
from bargein.session.segments import Segments
from bargein.session.speculation import Speculator
from bargein.session.transcription import Transcriber

log = logging.getLogger(__name__)
MAX_LEDGERS = 64
"""Turn ledgers kept per session (the newest); older turns live on only in the metrics."""


def turn_settings(config: SessionConfig, *, listen: bool = True) -> dx.TurnSettings | None:
    """The machine's view of the session's ``turn_detection``."""
    detection = config.audio.input.turn_detection
    if isinstance(detection, ServerVad):
        return dx.TurnSettings(detection.threshold, detection.prefix_padding_ms, detection.silence_duration_ms,
                               detection.create_response, detection.interrupt_response,
                               detection.idle_timeout_ms, listen=listen)
    if isinstance(detection, SemanticVad):
        return dx.TurnSettings(silence_duration_ms=EAGERNESS_SILENCE_MS[detection.eagerness],
                               create_response=detection.create_response,
                               interrupt_response=detection.interrupt_response, eagerness=detection.eagerness,
                               listen=listen)
    return None


class RealtimeSession:
    """The conversation state, the machine, and the tasks that serve one client."""

    def __init__(self, engines: Engines, *, config: SessionConfig | None = None,
                 output_lead_ms: float = 1000.0, metrics: ServerMetrics | None = None,
                 listen: bool = True) -> None:
        self.engines = engines
        self.listen = listen
        self.metrics = metrics
        self.config = config or SessionConfig()
        self.outbound = Outbound()
        self.conversation = Conversation()
        self.machine = dx.DuplexMachine(new_id, turn_settings(self.config, listen=listen))
        self.listener = Listener(engines.vad, self.config.input_format)
        self.segments = Segments(self, Speculator(engines.asr, engines.llm))
        self.transcriber = Transcriber(engines.asr, self.conversation, self._emit, self.segments.transcribed)
        self.transcriber.hints = self.segments.speculator.hints = self._transcription_hints
        self.replies = Replies(self, Responder(engines.llm, engines.tts), output_lead_ms=output_lead_ms,
                               on_closed=self._reply_closed)
        self.replies.prefetch_for = self.segments.speculator.take_reply
        self._pause_timers: dict[str, asyncio.TimerHandle] = {}
        self.ledgers: dict[str, TurnLedger] = {}
        self.current_ledger: TurnLedger | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self.dropped_audio_chunks = 0

    # -- inbound ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Greet the client with ``session.created``."""
        self._emit(Outgoing(event("session.created", session=self.config.wire())))

    async def handle_message(self, raw: str | bytes) -> None:
        """Process one client message; problems become ``error`` events, never exceptions."""
        try:
            await self._dispatch(ce.parse_client_event(raw))
        except ProtocolError as error:
            self._emit(Outgoing(error_event(error)))
        except Exception as error:  # a bug or an engine failure must not end the session
            log.exception("unexpected failure handling a client event")
            self._emit(Outgoing(error_event(ProtocolError(
                f"internal error: {type(error).__name__}", code="server_error", type="server_error"))))

    async def _dispatch(self, message: ce.ClientEvent) -> None:
        match message:
            case ce.InputAudioBufferAppend():
                await self._append(message)
            case ce.SessionUpdate():
                self._update_session(message)
            case ce.InputAudioBufferCommit():
                self.feed(dx.ClientCommit(self.listener.buffer.duration_ms, message.event_id))
            case ce.InputAudioBufferClear():
                self.feed(dx.ClientClear())
            case ce.ConversationItemCreate():
                self._create_item(message)
            case ce.ConversationItemTruncate():
                clamped = self.conversation.truncate(message.item_id, message.content_index,
                                                     message.audio_end_ms, event_id=message.event_id)
                self._emit(Outgoing(event("conversation.item.truncated", item_id=message.item_id,
                                          content_index=message.content_index, audio_end_ms=int(clamped))))
            case ce.ConversationItemDelete():
                self.conversation.delete(message.item_id, event_id=message.event_id)
                self._emit(Outgoing(event("conversation.item.deleted", item_id=message.item_id)))
            case ce.ResponseCreate():
                self.replies.pending_params = message.response
                self.feed(dx.ClientResponseCreate(message.event_id))
            case ce.ResponseCancel():
                self.feed(dx.ClientResponseCancel(message.response_id, message.event_id))

    async def _append(self, message: ce.InputAudioBufferAppend) -> None:
        try:
            payload = decode_base64(message.audio)
            self.listener.check_room(len(payload), event_id=message.event_id)
            audio = self.listener.decode(payload)
        except AudioFormatError as error:
            raise ProtocolError(str(error), code="invalid_audio", param="audio", event_id=message.event_id) from None
        for frame in await self.listener.hear(audio):
            self.feed(frame)
            self.segments.frame(frame)
        if self.machine.phase is not dx.Phase.USER_SPEAKING and self.machine.settings is not None:
            keep = max(self.machine.settings.prefix_padding_ms, 500)
            self.listener.buffer.trim_before(self.listener.stream_ms - keep)

    def _update_session(self, message: ce.SessionUpdate) -> None:
        try:
            config = self.config.updated(message.session)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ProtocolError(f"invalid session.update: session.{where}: {first['msg']}",
                                code="invalid_value", param=f"session.{where}", event_id=message.event_id) from None
        self.config = config
        self.listener.set_format(config.input_format)
        self.feed(dx.SettingsChanged(turn_settings(config, listen=self.listen)))
        self._emit(Outgoing(event("session.updated", session=config.wire())))

    def _create_item(self, message: ce.ConversationItemCreate) -> None:
        spec = message.item
        parts: list[Part] = []
        audio_clips = []
        for content in spec.content:
            if isinstance(content, ce.InputText):
                parts.append(Part("input_text", content.text))
            elif isinstance(content, ce.InputImage):
                if not content.image_url.startswith("data:image/"):
                    raise ProtocolError("input_image.image_url must be a data:image/... URL", code="invalid_value",
                                        param="item.content.image_url", event_id=message.event_id)
                parts.append(Part("input_image", image_url=content.image_url, detail=content.detail))
            elif isinstance(content, ce.InputAudio):
                parts.append(Part("input_audio", content.transcript or ""))
                if content.audio and not content.transcript:
                    audio_clips.append((len(parts) - 1, self._decode_item_audio(content.audio, message.event_id)))
            else:
                parts.append(Part("output_text" if spec.role == "assistant" else "input_text", content.text))
        item = Item(spec.id or new_id("item"), spec.role, parts)
        previous = self.conversation.add(item, previous_item_id=message.previous_item_id,
                                         event_id=message.event_id)
        self._emit(Outgoing(event("conversation.item.added", previous_item_id=previous, item=item.wire())))
        if not audio_clips:
            self._emit(Outgoing(event("conversation.item.done", previous_item_id=previous, item=item.wire())))
        if item.role == "user" and any(p.type == "input_text" for p in item.parts):
            self.segments.typed(item)
        for index, clip in audio_clips:
            self.transcriber.start(item, clip, content_index=index)

    def _decode_item_audio(self, audio: str, event_id: str | None) -> Any:
        try:
            payload = decode_base64(audio)
            return self.listener.decode_clip(payload)
        except AudioFormatError as error:
            raise ProtocolError(str(error), code="invalid_audio", param="item.content.audio",
                                event_id=event_id) from None

    # -- the machine and its actions ----------------------------------------------------------------

    def feed(self, machine_event: dx.Event) -> None:
        self.machine.feed(machine_event)
        for action in self.machine.take_actions():
            self._act(action)

    def _act(self, action: dx.Action) -> None:
        match action:
            case dx.SpeechStarted(item_id, start_ms):
                self.current_ledger = TurnLedger(item_id=item_id)
                self.ledgers[item_id] = self.current_ledger
                self.current_ledger.mark("speech_start", stream_ms=start_ms)
                self.segments.started(item_id, start_ms)
                self.replies.cut_playing()
                self._emit(Outgoing(event("input_audio_buffer.speech_started", audio_start_ms=int(start_ms),
                                          item_id=item_id)))
            case dx.SpeechStopped(item_id, end_ms):
                self.segments.stopped(item_id)
                if ledger := self.ledgers.get(item_id):
                    # the last speech sample arrived (stream_now - end) ago for a client streaming in real time
                    lag_s = max(0.0, self.listener.stream_ms - end_ms) / 1000.0
                    ledger.mark("speech_end", stream_ms=end_ms, wall_s=ledger.clock() - lag_s)
                self._emit(Outgoing(event("input_audio_buffer.speech_stopped", audio_end_ms=int(end_ms),
                                          item_id=item_id)))
            case dx.CommitBuffer(item_id, start_ms, end_ms):
                self._commit(item_id, start_ms, end_ms)
            case dx.ClearBuffer():
                self.listener.buffer.clear()
                self._emit(Outgoing(event("input_audio_buffer.cleared")))
            case dx.StartReply(response_id, trigger):
                ledger = self.current_ledger
                if ledger is None or ledger.response_id is not None:
                    # a reply to typed input or a second reply to one turn gets a ledger of its own
                    ledger = self.ledgers[response_id] = TurnLedger()
                ledger.response_id = response_id
                ledger.mark("reply_start")
                self.replies.start(response_id, trigger)
            case dx.CancelReply(response_id, reason):
                if reason == "turn_detected":
                    self._mark_barge_in(response_id)
                self.replies.cancel(response_id, reason)
            case dx.ForwardAudio(response_id, payload):
                self.replies.forward(response_id, payload)
            case dx.DropAudio():
                self.dropped_audio_chunks += 1
            case dx.CompleteReply(response_id, status):
                self.replies.finish(response_id, status)
            case dx.ArmIdleTimer(delay_ms):
                self._arm_idle_timer(delay_ms)
            case dx.DisarmIdleTimer():
                if self._idle_timer is not None:
                    self._idle_timer.cancel()
                    self._idle_timer = None
            case dx.IdleTimeout(item_id, start_ms, end_ms):
                self._emit(Outgoing(event("input_audio_buffer.timeout_triggered", item_id=item_id,
                                          audio_start_ms=int(start_ms), audio_end_ms=int(end_ms))))
            case dx.Reject(error):
                self._emit(Outgoing(error_event(error)))
            case dx.SilenceBegan(item_id, at_ms):
                self.segments.silence_began(item_id, at_ms)
            case dx.SpeechResumed(item_id):
                self.segments.speech_resumed(item_id)
            case dx.PauseReply(response_id, item_id):
                self._mark_barge_in(response_id)
                self.replies.pause(response_id, item_id)
            case dx.HoldAudio(response_id, payload):
                self.replies.hold(response_id, payload)
            case dx.ResumeReply(response_id):
                self._disarm_pause_timer(response_id)
                self.replies.resume(response_id)
            case dx.ArmPauseTimer(response_id, delay_ms):
                self._disarm_pause_timer(response_id)
                self._pause_timers[response_id] = asyncio.get_running_loop().call_later(
                    delay_ms / 1000, lambda: self.feed(dx.PauseTimerFired(response_id)))
            case dx.AwaitClassification(item_id):
                self.segments.await_classification(item_id)
            case dx.DiscardSegment(item_id):
                self.segments.discard(item_id)
            case dx.ModeChanged(mode, reason):
                self._emit(Outgoing(event("bargein.turn.mode", mode=mode, reason=reason)))

    def _commit(self, item_id: str, start_ms: float | None, end_ms: float | None) -> None:
        audio = self.listener.buffer.take(start_ms, end_ms)
        ledger = self.ledgers.setdefault(item_id, TurnLedger(item_id=item_id))
        self.current_ledger = ledger
        ledger.mark("commit", stream_ms=self.listener.stream_ms)
        item = Item(item_id, "user", [Part("input_audio")], audio_ms=1000.0 * len(audio) / 16_000)
        previous = self.conversation.add(item)
        self._emit(Outgoing(event("input_audio_buffer.committed", previous_item_id=previous, item_id=item_id)))
        self._emit(Outgoing(event("conversation.item.added", previous_item_id=previous, item=item.wire())))
        self.transcriber.start(item, audio, content_index=0, ledger=ledger,
                               guessed=self.segments.speculator.take_recognition(item_id))

    def _transcription_hints(self) -> tuple[str | None, str | None]:
        settings = self.config.audio.input.transcription
        return (settings.language, settings.prompt) if settings is not None else (None, None)

    def _mark_barge_in(self, response_id: str) -> None:
        """The reply stopped for the current speech: how far into that speech (stream ms) it stopped."""
        ledger = self.ledger_for(response_id)
        if ledger is None or "barge_in" in ledger.marks or self.current_ledger is None:
            return
        onset = self.current_ledger.marks["speech_start"].stream_ms or 0.0
        ledger.mark("barge_in", stream_ms=onset)
        ledger.add("barge_in_detect_ms", self.listener.stream_ms - onset)

    def _disarm_pause_timer(self, response_id: str) -> None:
        if (timer := self._pause_timers.pop(response_id, None)) is not None:
            timer.cancel()

    def _reply_closed(self, reply: ReplyState, status: str) -> None:
        self._disarm_pause_timer(reply.response_id)
        ledger = self.ledger_for(reply.response_id) or TurnLedger(response_id=reply.response_id)
        ledger.mark("response_done")
        ledger.add("audio_sent_s", reply.item.audio_ms / 1000.0)
        heard = reply.item.audio_ms if reply.item.heard_ms is None else reply.item.heard_ms
        ledger.add("audio_heard_s", heard / 1000.0)
        summary = ledger.summary()
        self._emit(Outgoing(event("bargein.turn.metrics", status=status, **summary)))
        if self.metrics is not None:
            self.metrics.observe_turn(status, summary)
        export_turn(ledger, status, summary)
        while len(self.ledgers) > MAX_LEDGERS:
            self.ledgers.pop(next(iter(self.ledgers)))

    def ledger_for(self, response_id: str) -> TurnLedger | None:
        return next((ledger for ledger in reversed(self.ledgers.values()) if ledger.response_id == response_id),
                    None)

    def _arm_idle_timer(self, delay_ms: int) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        loop = asyncio.get_running_loop()
        self._idle_timer = loop.call_later(
            delay_ms / 1000, lambda: self.feed(dx.IdleTimerFired(self.listener.stream_ms)))

    # -- outbound -----------------------------------------------------------------------------------

    def _emit(self, item: Outgoing) -> None:
        self.outbound.put(item)

    def on_sent(self, item: Outgoing) -> None:
        """The transport wrote ``item`` to the socket: playback and ledger bookkeeping."""
        if not item.is_data or item.response_id is None:
            return
        self.replies.on_sent(item)
        if (ledger := self.ledger_for(item.response_id)) is not None:
            ledger.mark("first_delta_sent")

    async def close(self) -> None:
        """Cancel every task and release the VAD stream."""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        for timer in self._pause_timers.values():
            timer.cancel()
        self.segments.close()
        tasks: list[asyncio.Task[Any]] = [*self.replies.close(), *self.transcriber.tasks()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.outbound.close()
        self.listener.close()
