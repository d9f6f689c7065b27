"""Carries out the duplex machine's actions: the only place an action turns into I/O.

One ``match`` over the whole action vocabulary (``assert_never`` makes mypy check it is exhaustive).
Each case calls the one shell part that owns the job; none of them decides anything about the turn.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection
from functools import partial
from typing import assert_never

from bargein.protocol.server_events import error_event, event
from bargein.protocol.session_config import SessionConfig
from bargein.session.core import vocabulary as v
from bargein.session.core.listening.classifier import segment_event_fields
from bargein.session.history import Conversation, Item, Part
from bargein.session.input_buffer import InputBuffer
from bargein.session.outbound import Outgoing
from bargein.session.output_hold import OutputHold
from bargein.session.reply_pipeline import generation_options
from bargein.session.reply_runner import ReplyRunner
from bargein.session.segment_tracker import SegmentTracker
from bargein.session.speculation import Speculator
from bargein.session.timers import Timers
from bargein.session.tool_use import ToolSetup, ungrounded_call
from bargein.session.transcription import Transcriber
from bargein.values import LISTEN_SAMPLE_RATE, ChatMessage, GenerationOptions

SAMPLES_PER_MS = LISTEN_SAMPLE_RATE / 1000


class ActionExecutor:
    """Runs each action with the session's parts."""

    def __init__(self, *, emit: Callable[[Outgoing], None], config: Callable[[], SessionConfig],
                 conversation: Conversation, buffer: InputBuffer, tracker: SegmentTracker, speculator: Speculator,
                 transcriber: Transcriber, replies: ReplyRunner, timers: Timers,
                 playing_to_end: Callable[[], Collection[str]]) -> None:
        self.emit = emit
        self.config = config
        self.conversation = conversation
        self.buffer = buffer
        self.tracker = tracker
        self.speculator = speculator
        self.transcriber = transcriber
        self.replies = replies
        self.timers = timers
        self.playing_to_end = playing_to_end
        """The machine's closed replies the client may still play to their end: the idle timer waits for those."""
        self.dropped_audio_chunks = 0
        self.output_hold = OutputHold()
        """Carries out the provisional holds of a reply's audio (a transport that plays the audio itself replaces
        it: WebRTC's reply track)."""

    def run(self, action: v.Action) -> None:
        """Carry out one action."""
        match action:
            case v.SpeechStarted(item_id, start_ms, cuts_playing, told):
                if told:
                    self._speech_started(item_id, start_ms, cuts_playing=cuts_playing)
            case v.SpeechAnnounced(item_id, start_ms, cuts_playing):
                self._speech_started(item_id, start_ms, cuts_playing=cuts_playing)
            case v.SpeechStopped(item_id, end_ms, told):
                self.tracker.drop_score(item_id)
                if told:
                    self._send("input_audio_buffer.speech_stopped", audio_end_ms=int(end_ms), item_id=item_id)
            case v.SilenceBegan():
                self.tracker.silence_began(action)
            case v.ScoreTurnEnd():
                self.tracker.score(action)
            case v.VoiceEnded(item_id, at_ms, listen_span):
                self.tracker.voice_ended(item_id, at_ms, listen_span)
            case v.SpeechResumed(item_id):
                self.speculator.drop(item_id)  # whatever was guessed for this turn is waste
                self.tracker.drop_score(item_id)
            case v.SegmentAbandoned(item_id):
                self.speculator.abandon(item_id)
                self.tracker.drop_score(item_id)
            case v.RecognisePartial():
                self.tracker.recognise_partial(action)
            case v.ReportPartial(item_id, text):
                self.tracker.report_partial(item_id, text)
            case v.WarmPrompt(_, text):
                self.speculator.warm(*self._prompt(self.config(), text))
            case v.CommitBuffer(item_id, start_ms, end_ms, _, listen_span, urgent):
                self._commit(item_id, start_ms, end_ms, listen_span, urgent=urgent)
            case v.ClearBuffer():
                self.buffer.clear()
                self._send("input_audio_buffer.cleared")
            case v.TrimBuffer(before_ms):
                self.buffer.trim_before(before_ms)
            case v.AwaitClassification():
                pass  # the verdict follows the item's transcript, which every commit starts
            case v.ReportSegment(item_id, verdict, what):
                self._send("bargein.listen.segment", **segment_event_fields(item_id, verdict, what))
            case v.DiscardSegment(item_id):
                with contextlib.suppress(Exception):
                    self.conversation.delete(item_id)
                    self._send("conversation.item.deleted", item_id=item_id)
            case v.PrefetchReply(item_id, text, estimate_end):
                config = self.config()
                tools = self.replies.default_tools()
                messages, options = self._prompt(config, text, tools)
                estimate = self.speculator.prefetch(
                    item_id, messages, options, config.audio.output.voice, config.audio.output.speed,
                    drops_call=partial(ungrounded_call, messages=messages, options=options,
                                       server_side=tools.server_side), estimate_end=estimate_end)
                if estimate_end:  # fed back however it goes: the short silence waits for it
                    self.tracker.follow_text_end(item_id, text, estimate)
            case v.StartReply(response_id, trigger, params):
                self.replies.start(response_id, trigger, params)
            case v.GenerateReply():
                self.replies.generate(action)
            case v.CancelReply(response_id, reason):
                self.replies.cancel(response_id, reason)
                self.timers.disarm_reply(response_id)
            case v.CompleteReply(response_id, status):
                self.replies.finish(response_id, status)
                self.timers.disarm_reply(response_id)
            case v.ForwardAudio(response_id, payload):
                self.replies.forward(response_id, payload)
            case v.ForwardText(response_id, text):
                self.replies.forward_text(response_id, text)
            case v.HoldAudio(response_id, payload):
                self.replies.hold(response_id, payload)
            case v.HoldText(response_id, text):
                self.replies.hold(response_id, text)
            case v.DropAudio():
                self.dropped_audio_chunks += 1
            case v.DropText():
                pass
            case v.PauseReply(response_id, item_id):
                self.replies.pause(response_id, item_id)
            case v.HoldReplyOutput(response_id):
                self.output_hold.hold(response_id)
            case v.ReleaseReplyOutput(response_id):
                self.output_hold.release(response_id)
            case v.ResumeReply(response_id):
                self.timers.disarm_pause(response_id)
                self.replies.resume(response_id)
            case v.ArmPauseTimer(response_id, delay_ms):
                self.timers.arm_pause(response_id, delay_ms)
            case v.ArmPlayOutTimer(response_id, delay_ms, arm):
                self.timers.arm_play_out(response_id, delay_ms, arm)
            case v.ArmClosedPlaybackTimer(response_id, delay_ms, arm):
                self.timers.arm_closed_playback(response_id, delay_ms, arm)
            case v.ReplyHeard(response_id, heard_ms):
                self.timers.disarm_closed_playback(response_id)
                self.replies.playing.played(response_id, heard_ms)
            case v.ArmIdleTimer(delay_ms):  # counted from when the client has played the agent's last sample
                left_ms = self.replies.playing.left_ms(self.playing_to_end())
                self.timers.arm_idle(delay_ms + round(max(0.0, left_ms)))
            case v.DisarmIdleTimer():
                self.timers.disarm_idle()
            case v.IdleTimeout(item_id, start_ms, end_ms):
                self._send("input_audio_buffer.timeout_triggered", item_id=item_id, audio_start_ms=int(start_ms),
                           audio_end_ms=int(end_ms))
            case v.Reject(error):
                self.emit(Outgoing(error_event(error)))
            case v.ModeChanged(mode, reason):
                self._send("bargein.turn.mode", mode=mode, reason=reason)
            case _:
                assert_never(action)

    def warm_ahead(self, text: str = "") -> None:
        """Have the model evaluate the conversation so far and what opens the next user message (long-term memory's
        newly given notes, before the user speaks; the camera message, when a reply completes, at a turn's speech
        start and as the session's first note comes, :class:`~bargein.session.camera_warms.CameraWarms`), then
        ``text``: a cache hint off the turn's path, no turn decision."""
        self.speculator.warm(*self._prompt(self.config(), text))

    def _prompt(self, config: SessionConfig, text: str,
                tools: ToolSetup | None = None) -> tuple[list[ChatMessage], GenerationOptions]:
        """The messages and options of a reply to the user's ``text`` (a speculative one must match it exactly),
        offering ``tools`` (by default the replies' default tools)."""
        history = self.replies.history_as_if_cut()  # a reply paused by this turn is cut where it paused
        messages = self.replies.with_memory(
            [*self.conversation.chat_messages(config.instructions, history), ChatMessage("user", text)])
        max_tokens = config.max_output_tokens
        return messages, generation_options(None if max_tokens == "inf" else max_tokens,
                                            tools or self.replies.default_tools(), config.truncation_options())

    def _speech_started(self, item_id: str, start_ms: float, *, cuts_playing: bool) -> None:
        """Tell the client the user began speaking; a finished reply it still plays is cut there."""
        if cuts_playing:
            self.replies.cut_playing()
        self._send("input_audio_buffer.speech_started", audio_start_ms=int(start_ms), item_id=item_id)

    def _send(self, kind: str, **fields: object) -> None:
        self.emit(Outgoing(event(kind, **fields)))

    def _commit(self, item_id: str, start_ms: float | None, end_ms: float | None,
                listen_span: tuple[float, float] | None = None, *, urgent: bool = False) -> None:
        if start_ms is not None:  # audio before the buffer's start was committed or cleared already
            start_ms = max(start_ms, self.buffer.start_sample / SAMPLES_PER_MS)
        audio = self.buffer.take(start_ms, end_ms)
        item = Item(item_id, "user", [Part("input_audio")], audio_ms=1000.0 * len(audio) / 16_000)
        previous = self.conversation.add(item)
        self._send("input_audio_buffer.committed", previous_item_id=previous, item_id=item_id)
        self._send("conversation.item.added", previous_item_id=previous, item=item.wire())
        primed = None
        if listen_span is not None and start_ms is not None:  # the user's own voice, for the listening decision
            first, last = (round((edge - start_ms) * SAMPLES_PER_MS) for edge in listen_span)
            primed = audio[max(0, first):max(0, last)]
        self.transcriber.start(item, audio, content_index=0, guessed=self.speculator.take_recognition(item_id),
                               primed=primed, urgent=urgent,
                               primed_guess=self.speculator.take_primed(item_id, listen_span) if listen_span else None)
